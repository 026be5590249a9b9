// Package sad is the security association database of the gateway: route-
// based tunnels, each with one outbound SA and up to four inbound SAs, the
// inbound lookup by SPI, and the route table that maps inner destinations to
// tunnels.
//
// The database is a snapshot (DB) that never changes once published; a
// change builds a new snapshot and swaps it in atomically, so the data path
// reads it without locks. SAs that leave the database are handed to the
// store's Retire function, which must destroy their keys only once no
// data-path goroutine can still use them (the data plane does this with a
// quiescent-state protocol), so an in-flight batch never touches a freed key
// (DESIGN.md decision 6).
package sad

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/spd"
)

// MaxInbound is the number of inbound SAs a tunnel holds at once: the
// current one plus those of rekeys still draining.
const MaxInbound = 4

// SA is an SA in the database: the runtime, its key and its name.
type SA struct {
	Name   string
	SA     *esp.SA
	Key    *cryptodev.Key
	Tunnel *Tunnel
	// Engine is the name of the engine whose queues must carry the SA's
	// crypto.
	Engine string
	// State is the health of the SA's durable sequence-number state, or
	// nil when it keeps none.
	State *StateHealth
	// Def identifies the definition the SA was built from (its builder
	// chooses it; the gateway uses a digest of the configuration's SA), so
	// that a reload can tell a running SA that is what the file says from
	// one that is not. sad only carries it.
	Def [32]byte
	// TS are the traffic selectors the SA carries (RFC 4301 section 5.2,
	// RFC 7296 section 2.9): the negotiated ones of an IKE child, or a
	// static tunnel's routed remote prefixes. The data plane drops a
	// packet it decrypted with the SA whose inner addresses, protocol or
	// ports fall outside them, and a packet it would seal with it that
	// does. Set before the SA is installed and never changed; nil checks
	// nothing (a tunnel of policy-based mode, which its policies check).
	TS *spd.SATS
	// Retired, if set, is called once, after the data plane has let go of
	// the SA for good (no packet can use it any more) and destroyed its
	// key (End). The gateway records the SA's final sequence state there.
	Retired func()

	endOnce sync.Once
}

// End finishes an SA that no packet can use any more: one the data plane
// has retired, or one that was made and never installed. It destroys the
// key and calls Retired, once.
func (s *SA) End() {
	s.Key.Destroy()
	if s.Retired != nil {
		s.endOnce.Do(s.Retired)
	}
}

// StateHealth says whether an SA's durable sequence-number reservations
// (esp.Config.SeqReserve) are being recorded. The goroutine that records
// them writes it; anyone may read it.
type StateHealth struct {
	Failing   atomic.Bool            // the last reservation could not be recorded: the SA drops its packets
	Failures  atomic.Uint64          // reservations that could not be recorded
	LastError atomic.Pointer[string] // the error of the last failure, or nil
}

// Tunnel is a route-based tunnel. Its fields other than the SAs are fixed;
// the outbound SA is switched atomically on rekey.
type Tunnel struct {
	Name     string
	Index    int // position in the database, stable for the tunnel's life
	Local    netip.Addr
	Peer     netip.Addr
	Encap    esp.Encap
	PeerPort uint16
	Remote   []netip.Prefix
	MTU      int // plaintext MTU of the tunnel
	// TS are the traffic selectors of the tunnel's SAs that come without
	// their own (SA.TS): a static tunnel's routed remote prefixes. The
	// store gives them to each such SA as it is added.
	TS *spd.SATS
	// Owner is the data-plane worker that owns the tunnel's SA state
	// (sequence numbers, replay windows): every packet of the tunnel is
	// handed to it (DESIGN.md decision 4).
	Owner int

	out atomic.Pointer[SA]
	in  [MaxInbound]atomic.Pointer[SA]
}

// Out returns the current outbound SA, or nil.
func (t *Tunnel) Out() *SA { return t.out.Load() }

// Inbound returns the tunnel's inbound SAs.
func (t *Tunnel) Inbound() []*SA {
	var out []*SA
	for i := range t.in {
		if s := t.in[i].Load(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// DB is one immutable snapshot of the database.
type DB struct {
	gen     uint64
	tunnels []*Tunnel
	byName  map[string]*Tunnel
	inbound map[uint32]*SA
	routes  routeTable
}

// Generation numbers snapshots; a new snapshot has a larger one.
func (db *DB) Generation() uint64 { return db.gen }

// Tunnels lists the tunnels in index order.
func (db *DB) Tunnels() []*Tunnel { return db.tunnels }

// Tunnel finds a tunnel by name.
func (db *DB) Tunnel(name string) *Tunnel { return db.byName[name] }

// Inbound finds the inbound SA for spi. Inbound SPIs are chosen by this
// gateway and unique within it, so the SPI alone names the SA (RFC 4301
// section 4.1); the caller checks the SA's tunnel against the packet.
func (db *DB) Inbound(spi uint32) *SA { return db.inbound[spi] }

// Route returns the tunnel whose remote prefixes hold dst most specifically,
// or nil.
func (db *DB) Route(dst netip.Addr) *Tunnel { return db.routes.lookup(dst) }

// InboundSAs lists every inbound SA, sorted by SPI.
func (db *DB) InboundSAs() []*SA {
	out := make([]*SA, 0, len(db.inbound))
	for _, s := range db.inbound {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SA.SPI() < out[j].SA.SPI() })
	return out
}

// routeTable is a longest-prefix-match table: one map per prefix length in
// use, tried from the longest.
type routeTable struct {
	v4, v6 []routeLevel
}

type routeLevel struct {
	bits int
	m    map[netip.Prefix]*Tunnel
}

func (rt *routeTable) add(p netip.Prefix, t *Tunnel) {
	levels := &rt.v4
	if p.Addr().Is6() {
		levels = &rt.v6
	}
	p = p.Masked()
	for i := range *levels {
		if (*levels)[i].bits == p.Bits() {
			(*levels)[i].m[p] = t
			return
		}
	}
	*levels = append(*levels, routeLevel{bits: p.Bits(), m: map[netip.Prefix]*Tunnel{p: t}})
	sort.Slice(*levels, func(i, j int) bool { return (*levels)[i].bits > (*levels)[j].bits })
}

func (rt *routeTable) lookup(dst netip.Addr) *Tunnel {
	levels := rt.v4
	if dst.Is6() {
		levels = rt.v6
	}
	for i := range levels {
		p, err := dst.Prefix(levels[i].bits)
		if err != nil {
			continue
		}
		if t, ok := levels[i].m[p]; ok {
			return t
		}
	}
	return nil
}

// TunnelSpec describes a tunnel to add.
type TunnelSpec struct {
	Name     string
	Local    netip.Addr
	Peer     netip.Addr
	Encap    esp.Encap
	PeerPort uint16
	Remote   []netip.Prefix
	MTU      int
	// TS becomes Tunnel.TS: the selectors of SAs added without their own.
	TS    *spd.SATS
	Owner int
	Out   *SA
	In    []*SA
}

// Store holds the current snapshot and serialises changes.
type Store struct {
	mu     sync.Mutex // serialises writers
	cur    atomic.Pointer[DB]
	gen    uint64
	retire func(gen uint64, sas []*SA)
}

// NewStore returns an empty store. SAs removed from it are passed to retire
// with the generation of the first snapshot that no longer holds them;
// retire must destroy their keys once no goroutine can use them. A nil
// retire destroys them at once, which is right only when nothing else runs.
func NewStore(retire func(gen uint64, sas []*SA)) *Store {
	if retire == nil {
		retire = func(_ uint64, sas []*SA) {
			for _, s := range sas {
				s.Key.Destroy()
			}
		}
	}
	s := &Store{retire: retire}
	s.cur.Store(&DB{byName: map[string]*Tunnel{}, inbound: map[uint32]*SA{}})
	return s
}

// Load returns the current snapshot. It is safe for concurrent use and
// does not allocate.
func (s *Store) Load() *DB { return s.cur.Load() }

// clone copies the snapshot for a writer. s.mu must be held.
func (s *Store) cloneLocked() *DB {
	old := s.cur.Load()
	s.gen++
	db := &DB{gen: s.gen, tunnels: append([]*Tunnel(nil), old.tunnels...),
		byName: make(map[string]*Tunnel, len(old.byName)), inbound: make(map[uint32]*SA, len(old.inbound))}
	for k, v := range old.byName {
		db.byName[k] = v
	}
	for k, v := range old.inbound {
		db.inbound[k] = v
	}
	return db
}

// publishLocked rebuilds the routes and swaps db in.
func (s *Store) publishLocked(db *DB) {
	for i, t := range db.tunnels {
		t.Index = i
		for _, p := range t.Remote {
			db.routes.add(p, t)
		}
	}
	s.cur.Store(db)
}

// update runs fn on a copy of the current snapshot and, if fn succeeds,
// publishes the copy and retires the SAs fn removed. Writers are
// serialised; readers keep the snapshot they loaded.
func (s *Store) update(fn func(db *DB) (dead []*SA, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	db := s.cloneLocked()
	dead, err := fn(db)
	if err != nil {
		return err
	}
	s.publishLocked(db)
	if len(dead) > 0 {
		s.retire(db.gen, dead)
	}
	return nil
}

func (db *DB) tunnelNamed(name string) (*Tunnel, error) {
	if t := db.byName[name]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("sad: no tunnel %q", name)
}

// AddTunnel adds a tunnel with its SAs.
func (s *Store) AddTunnel(spec TunnelSpec) (*Tunnel, error) {
	var t *Tunnel
	err := s.update(func(db *DB) ([]*SA, error) {
		if _, dup := db.byName[spec.Name]; dup {
			return nil, fmt.Errorf("sad: tunnel %q exists", spec.Name)
		}
		if len(spec.In) > MaxInbound {
			return nil, fmt.Errorf("sad: tunnel %q: at most %d inbound SAs", spec.Name, MaxInbound)
		}
		for _, p := range spec.Remote {
			for _, o := range db.tunnels {
				if containsOverlap(o.Remote, p) {
					return nil, fmt.Errorf("sad: tunnel %q: remote prefix %v overlaps tunnel %q", spec.Name, p, o.Name)
				}
			}
		}
		for _, in := range spec.In {
			if _, dup := db.inbound[in.SA.SPI()]; dup {
				return nil, fmt.Errorf("sad: tunnel %q: inbound SPI %#x in use", spec.Name, in.SA.SPI())
			}
		}
		t = &Tunnel{Name: spec.Name, Local: spec.Local, Peer: spec.Peer, Encap: spec.Encap, PeerPort: spec.PeerPort,
			Remote: spec.Remote, MTU: spec.MTU, TS: spec.TS, Owner: spec.Owner}
		for i, in := range spec.In {
			t.adopt(in)
			t.in[i].Store(in)
			db.inbound[in.SA.SPI()] = in
		}
		if spec.Out != nil {
			t.adopt(spec.Out)
			t.out.Store(spec.Out)
		}
		db.tunnels = append(db.tunnels, t)
		db.byName[t.Name] = t
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// adopt makes s an SA of t, with t's selectors unless it has its own. It
// runs before s is published.
func (t *Tunnel) adopt(s *SA) {
	s.Tunnel = t
	if s.TS == nil {
		s.TS = t.TS
	}
}

func containsOverlap(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q.Overlaps(p) {
			return true
		}
	}
	return false
}

// RemoveTunnel removes a tunnel and reclaims its SAs once no data-path
// goroutine can hold them.
func (s *Store) RemoveTunnel(name string) error {
	return s.update(func(db *DB) ([]*SA, error) {
		t, err := db.tunnelNamed(name)
		if err != nil {
			return nil, err
		}
		delete(db.byName, name)
		tunnels := db.tunnels[:0:0]
		for _, x := range db.tunnels {
			if x != t {
				tunnels = append(tunnels, x)
			}
		}
		db.tunnels = tunnels
		var dead []*SA
		for i := range t.in {
			if in := t.in[i].Swap(nil); in != nil {
				delete(db.inbound, in.SA.SPI())
				dead = append(dead, in)
			}
		}
		if out := t.out.Swap(nil); out != nil {
			dead = append(dead, out)
		}
		return dead, nil
	})
}

// AddInbound adds an inbound SA to a tunnel: the first step of a rekey.
func (s *Store) AddInbound(tunnel string, in *SA) error {
	return s.update(func(db *DB) ([]*SA, error) {
		t, err := db.tunnelNamed(tunnel)
		if err != nil {
			return nil, err
		}
		if _, dup := db.inbound[in.SA.SPI()]; dup {
			return nil, fmt.Errorf("sad: inbound SPI %#x in use", in.SA.SPI())
		}
		for i := range t.in {
			if t.in[i].Load() == nil {
				t.adopt(in)
				t.in[i].Store(in)
				db.inbound[in.SA.SPI()] = in
				return nil, nil
			}
		}
		return nil, fmt.Errorf("sad: tunnel %q already has %d inbound SAs; remove one first", tunnel, MaxInbound)
	})
}

// SwitchOutbound makes out the tunnel's outbound SA and retires the old
// one: the second step of a rekey. Packets already handed to the old SA
// finish with it.
func (s *Store) SwitchOutbound(tunnel string, out *SA) error {
	return s.update(func(db *DB) ([]*SA, error) {
		t, err := db.tunnelNamed(tunnel)
		if err != nil {
			return nil, err
		}
		t.adopt(out)
		if old := t.out.Swap(out); old != nil {
			return []*SA{old}, nil
		}
		return nil, nil
	})
}

// RemoveInbound removes an inbound SA by SPI: the last step of a rekey,
// once the peer has switched and the old SA has drained.
func (s *Store) RemoveInbound(spi uint32) error {
	return s.update(func(db *DB) ([]*SA, error) {
		in := db.inbound[spi]
		if in == nil {
			return nil, fmt.Errorf("sad: no inbound SA with SPI %#x", spi)
		}
		delete(db.inbound, spi)
		t := in.Tunnel
		for i := range t.in {
			if t.in[i].Load() == in {
				t.in[i].Store(nil)
			}
		}
		return []*SA{in}, nil
	})
}

// Close retires every SA.
func (s *Store) Close() {
	s.mu.Lock()
	names := make([]string, 0)
	for n := range s.cur.Load().byName {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		s.RemoveTunnel(n)
	}
}
