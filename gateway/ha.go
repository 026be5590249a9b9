package gateway

// ha.go is the gateway's side of a hot-standby pair ([ha], package ha).
//
// Each [[ha.group]] has one owner at a time. Its tunnels and IKE
// connections (those whose local address is one of the group's virtual
// addresses) are installed on both members, but their SAs are leased
// (esp.Lease): on the standby they are fenced and carry nothing; on the
// owner every sequence-number bound they go past was first recorded by
// the standby (ha.Member.Reserve), asked for half a step ahead so that the
// data path does not wait. IKE SAs of the group are replicated as
// snapshots (ike.Config.OnSnapshot) before any of their messages leave.
//
// A takeover (Acquire, not planned) resumes the group's SAs above the
// replicated bounds under the block of AEAD IV epochs the member gave the
// acquisition (esp.SA.Resume; an SA installed while this member owns the
// group starts under it too, or, if its key may be installed again, under
// a block of its own: ha.Member.NewIVEpoch), adopts the
// IKE SAs with their SPIs and message IDs (ike.Endpoint.Adopt, whose Child
// SAs come back through the ike.Controller into ikeDataPlane.Install and
// start at their bounds), then moves the virtual addresses here and
// announces them (ha/vip), and runs the hook. A planned handover
// (Release on one member, Acquire planned on the other) does the same with
// exact sequence state.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/ha/vip"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/pktio/udp"
)

// haState is the gateway's HA state; all of it is nil or empty without
// [ha].
type haState struct {
	m   *ha.Member
	cfg *config.HA

	// vipMu serialises what changes the virtual addresses on this host:
	// Acquire, Release and a reload that changes a group's addresses
	// (reloadHA). It is taken before mu, and after Gateway.mu.
	vipMu sync.Mutex

	mu     sync.Mutex
	groups map[string]*haGroup // by name
	// byAddr maps each virtual address to its group; a reload replaces
	// the map (copy on write), so that groupOf reads it without a lock.
	byAddr atomic.Pointer[map[netip.Addr]*haGroup]
	sas    map[*esp.SA]*haSA // the leased SAs, live
	wg     sync.WaitGroup    // announcements, hooks and the recorder
	stop   chan struct{}

	// toRecord are the bounds a standby took and has yet to write in its
	// state directory (Record), the highest per SA; recordNow wakes the
	// recorder.
	toRecord  map[*esp.SA]uint64
	recordNow chan struct{}
}

// haGroup is one [[ha.group]] and this member's role in it.
type haGroup struct {
	cfg config.HAGroup // as at start: its name and preference stay
	// addrs are its virtual addresses now (a reload may change them),
	// under haState.mu.
	addrs  []config.HAAddress
	owned  bool
	fenced bool
	// pending is the state of the last Acquire, for the SAs that come
	// after it (Child SAs of adopted IKE SAs); resume is where they
	// start (pending's Seq in a handover, its Bounds in a takeover).
	pending *ha.State
	resume  map[ha.Key]uint64
	// ivEpoch is the first AEAD IV epoch of the last Acquire's block
	// (ha.Handler.Acquire), for the SAs installed while owned.
	ivEpoch uint32
}

// The member's blocks of IV epochs are the SAs' (esp.IVBlock).
const _ = uint(esp.IVBlock-ha.IVBlockEpochs) + uint(ha.IVBlockEpochs-esp.IVBlock)

// haSA is a leased SA: its group and its key in the replicated state.
type haSA struct {
	group   *haGroup
	key     ha.Key
	lease   *esp.Lease
	durable bool // it records bounds in the state directory too (a static SA)
}

// haKey names an SA in the replicated state: its direction, SPI and the
// peer's outer address (outbound SPIs are the peers' choice, so two peers
// may pick the same one).
func haKey(dir esp.Direction, spi uint32, peer netip.Addr) ha.Key {
	d := "out"
	if dir == esp.Inbound {
		d = "in"
	}
	return ha.Key(fmt.Sprintf("%s/%08x/%s", d, spi, peer.Unmap()))
}

// haIKEKey names an IKE SA in the replicated state.
func haIKEKey(spii, spir uint64) string { return fmt.Sprintf("%016x%016x", spii, spir) }

// groupOf returns the group whose virtual address is local, or nil.
func (s *haState) groupOf(local netip.Addr) *haGroup {
	m := s.byAddr.Load()
	if m == nil {
		return nil
	}
	return (*m)[local.Unmap()]
}

// addresses returns grp's virtual addresses now.
func (s *haState) addresses(grp *haGroup) []config.HAAddress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(grp.addrs)
}

// indexLocked rebuilds byAddr from the groups' addresses. s.mu is held.
func (s *haState) indexLocked() {
	m := map[netip.Addr]*haGroup{}
	for _, grp := range s.groups {
		for _, a := range grp.addrs {
			m[a.Prefix.Addr().Unmap()] = grp
		}
	}
	s.byAddr.Store(&m)
}

// initHA reads [ha] before anything is installed, so that the group SAs
// are leased from the first.
func (g *Gateway) initHA(cfg *config.Gateway) {
	if cfg.HA == nil {
		return
	}
	s := &g.ha
	s.cfg = cfg.HA
	s.groups, s.sas = map[string]*haGroup{}, map[*esp.SA]*haSA{}
	s.stop = make(chan struct{})
	s.toRecord, s.recordNow = map[*esp.SA]uint64{}, make(chan struct{}, 1)
	s.wg.Add(1)
	go g.recorder()
	for _, gc := range cfg.HA.Groups {
		s.groups[gc.Name] = &haGroup{cfg: gc, addrs: slices.Clone(gc.Addresses)}
	}
	s.mu.Lock()
	s.indexLocked()
	s.mu.Unlock()
}

// startHA starts the member, once the SAD, the data plane and IKE are up:
// from here on it may call Acquire.
func (g *Gateway) startHA(cfg *config.Gateway) error {
	c := cfg.HA
	if c == nil {
		return nil
	}
	tlsCfg, err := ha.TLSConfig(c.Cert, c.Key, c.CA, c.PeerName)
	if err != nil {
		return fmt.Errorf("%s: ha: %w", cfg.FieldPos("ha.cert"), err)
	}
	mc := ha.Config{Name: c.Name, PeerName: c.PeerName, Listen: c.Listen, Peer: c.Peer, TLS: tlsCfg,
		Interval: c.Interval, Misses: c.Misses, Witness: c.Witness, Preempt: c.Preempt, Logger: g.Logger("ha")}
	for _, gc := range c.Groups {
		mc.Groups = append(mc.Groups, ha.Group{Name: gc.Name, Preference: gc.Preference})
	}
	// A member that died (kill -9, a crash) left its virtual addresses on
	// the interfaces; until it owns a group again it must not answer for
	// them, as keepalived does at its start.
	for _, gc := range c.Groups {
		for _, a := range gc.Addresses {
			if err := vip.Remove(a); err != nil {
				g.Logger("ha").Warn("a virtual address left by an earlier run could not be removed", "group", gc.Name, "address", a.String(), "err", err)
			}
		}
	}
	m, err := ha.Start(mc, haHandler{g})
	if err != nil {
		return fmt.Errorf("%s: ha: %w", cfg.FieldPos("ha.listen"), err)
	}
	g.ha.mu.Lock()
	g.ha.m = m
	g.ha.mu.Unlock()
	return nil
}

// closeHA stops the member (no callback runs after it) and gives up the
// virtual addresses this member holds, so that a restart on this box
// does not answer for them before it owns them again.
func (g *Gateway) closeHA() {
	s := &g.ha
	if s.cfg == nil {
		return
	}
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	if m != nil {
		m.Close()
	}
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, grp := range s.groups {
		if grp.owned {
			for _, a := range grp.addrs {
				vip.Remove(a)
			}
		}
	}
}

// leaseFor leases cfg, an SA of a group, in the replicated state under
// key: fenced unless this member owns the group, starting at the bound an
// Acquire left for it, and, while this member owns the group, under its
// block of IV epochs, or a fresh block when the SA's keys may be installed
// again (reinstallable: a configured SA, which an earlier instance here
// may have sealed with under the current block). The returned haSA is
// tracked once the SA exists.
func (g *Gateway) leaseFor(cfg *esp.Config, grp *haGroup, key ha.Key, reinstallable bool) *haSA {
	s := &g.ha
	hs := &haSA{group: grp, key: key}
	group := grp.cfg.Name
	s.mu.Lock()
	m, owned := s.m, grp.owned
	s.mu.Unlock()
	var fresh uint32
	haveFresh := false
	if owned && reinstallable && m != nil {
		fresh, haveFresh = m.NewIVEpoch(group)
	}
	var grant func(uint64)
	hs.lease = esp.NewLease(func(upTo uint64) {
		s.mu.Lock()
		m := s.m
		s.mu.Unlock()
		if m == nil { // before the member started: nothing to ask yet
			return
		}
		m.Reserve(group, key, upTo, grant)
	})
	grant = hs.lease.Grant
	s.mu.Lock()
	cfg.Fenced = !grp.owned || grp.fenced
	if grp.owned {
		// Fenced or not: an owner's Fence(false) lets it seal without
		// a Resume.
		cfg.IVEpoch, cfg.FixedIVEpoch = grp.ivEpoch, true
		if haveFresh {
			cfg.IVEpoch = fresh
		}
	}
	if b, ok := grp.resume[key]; ok && b > cfg.Seq {
		cfg.Seq = b
	}
	if grp.pending != nil {
		hs.lease.Grant(grp.pending.Bounds[key]) // what the standby already records
	}
	s.mu.Unlock()
	cfg.Lease = hs.lease
	return hs
}

// track records a leased SA; untrack forgets it when it ends.
func (s *haState) track(rt *esp.SA, hs *haSA) {
	s.mu.Lock()
	s.sas[rt] = hs
	s.mu.Unlock()
}

func (s *haState) untrack(rt *esp.SA) {
	s.mu.Lock()
	hs := s.sas[rt]
	delete(s.sas, rt)
	delete(s.toRecord, rt)
	m := s.m
	s.mu.Unlock()
	if hs != nil && m != nil && hs.group.owned {
		m.Forget(hs.group.cfg.Name, hs.key)
	}
}

// groupSAs returns the live SAs of group.
func (s *haState) groupSAsLocked(grp *haGroup) map[*esp.SA]*haSA {
	out := map[*esp.SA]*haSA{}
	for rt, hs := range s.sas {
		if hs.group == grp {
			out[rt] = hs
		}
	}
	return out
}

// haOwnsLocal reports whether this member may negotiate and carry traffic
// from local: it is no group's, or this member owns its group.
func (g *Gateway) haOwnsLocal(local netip.Addr) bool {
	s := &g.ha
	grp := s.groupOf(local)
	if grp == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return grp.owned && !grp.fenced
}

// haHandler is the gateway as the member's ha.Handler.
type haHandler struct{ g *Gateway }

// Acquire makes this member the group's owner with st, its SAs sealing
// under the block of IV epochs that starts at ivEpoch.
func (h haHandler) Acquire(group string, st *ha.State, planned bool, ivEpoch uint32) error {
	g := h.g
	s := &g.ha
	start := time.Now()
	s.vipMu.Lock()
	defer s.vipMu.Unlock()
	s.mu.Lock()
	grp := s.groups[group]
	if grp == nil {
		s.mu.Unlock()
		return fmt.Errorf("gateway: ha: no group %q here", group)
	}
	if st == nil {
		st = &ha.State{}
	}
	// A takeover resumes above the bounds the standby recorded; a
	// handover at the exact last numbers, with the bounds the releasing
	// member (the standby now) records already granted.
	resume := st.Bounds
	if planned && st.Seq != nil {
		resume = st.Seq
	}
	snaps := st.IKE
	grp.owned, grp.fenced, grp.pending, grp.resume, grp.ivEpoch = true, false, st, resume, ivEpoch
	sas := s.groupSAsLocked(grp)
	addrs := slices.Clone(grp.addrs)
	s.mu.Unlock()

	// The SAs installed here (static tunnels) go on from there.
	var errs []error
	for rt, hs := range sas {
		if err := rt.Resume(resume[hs.key], ivEpoch); err != nil {
			errs = append(errs, fmt.Errorf("SA %s: %w", hs.key, err))
		}
		hs.lease.Grant(st.Bounds[hs.key])
	}
	// The IKE SAs, with their Child SAs (ikeDataPlane.Install installs
	// them, leased at their bounds through pending).
	adopted := 0
	if ep := g.ikeEndpoint(); ep != nil {
		keys := make([]string, 0, len(snaps))
		for k := range snaps {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := ep.Adopt(snaps[k]); err != nil {
				errs = append(errs, fmt.Errorf("IKE SA %s: %w", k, err))
				continue
			}
			adopted++
		}
	}
	installed := time.Since(start)
	// Then the traffic comes here.
	for _, a := range addrs {
		if err := vip.Add(a); err != nil {
			errs = append(errs, err)
		}
	}
	added := time.Since(start)
	g.announce(grp)
	announced := time.Since(start)
	event := "acquire"
	g.runHook(event, group)
	kind := "takeover"
	if planned {
		kind = "handover"
	}
	g.Logger("ha").Info("group acquired", "group", group, "how", kind, "sas", len(sas), "ike_sas", adopted,
		"install", installed.Round(time.Microsecond), "addresses", added.Round(time.Microsecond),
		"announced", announced.Round(time.Microsecond), "total", time.Since(start).Round(time.Microsecond))
	// Connections of the group with no IKE SA to adopt negotiate now
	// (start_action = start), as a lone gateway would at start.
	g.kickGroup(grp)
	// What failed is told, not returned: the group is this member's now
	// (its addresses are here), and an error would make the member give
	// it up while the gateway holds it. An IKE SA not adopted negotiates
	// afresh; an address not added is the operator's to see.
	if err := errors.Join(errs...); err != nil {
		g.Logger("ha").Error("group acquired in part", "group", group, "err", err)
	}
	return nil
}

// Release stops carrying group here and returns its exact state: the SAs
// fenced and their last numbers, the IKE SAs' snapshots (dropped here
// without a word to the peer), the virtual addresses removed.
func (h haHandler) Release(group string) *ha.State {
	g := h.g
	s := &g.ha
	s.vipMu.Lock()
	defer s.vipMu.Unlock()
	s.mu.Lock()
	grp := s.groups[group]
	if grp == nil {
		s.mu.Unlock()
		return nil
	}
	grp.owned, grp.pending, grp.resume = false, nil, nil
	sas := s.groupSAsLocked(grp)
	addrs := slices.Clone(grp.addrs)
	s.mu.Unlock()
	st := &ha.State{Bounds: map[ha.Key]uint64{}, IKE: map[string][]byte{}, Seq: map[ha.Key]uint64{}}
	for rt, hs := range sas {
		rt.Fence(true)
		// The new owner goes on from the exact last number, with one
		// step above it granted: this member, its standby from now
		// on, keeps Bounds as its record.
		seq := rt.Seq()
		st.Seq[hs.key], st.Bounds[hs.key] = seq, seq+rt.LeaseStep()
		if err := rt.Record(st.Bounds[hs.key]); err != nil { // the step granted is this member's record too
			g.Logger("ha").Warn("a released SA's bound not recorded in the state directory", "key", hs.key, "err", err)
		}
	}
	if ep := g.ikeEndpoint(); ep != nil {
		for _, sn := range ep.Snapshots() {
			if g.ha.groupOf(sn.Local.Addr()) == grp {
				st.IKE[haIKEKey(sn.SPIi, sn.SPIr)] = sn.Data
				ep.Release(sn.SPIi, sn.SPIr)
			}
		}
	}
	g.dropGroupChildren(grp)
	for _, a := range addrs {
		if err := vip.Remove(a); err != nil {
			g.Logger("ha").Warn("virtual address not removed", "group", group, "address", a.String(), "err", err)
		}
	}
	g.runHook("release", group)
	g.Logger("ha").Info("group released", "group", group, "sas", len(st.Bounds), "ike_sas", len(st.IKE))
	return st
}

// Record keeps a bound this member took as a standby in its own state
// directory, for the SAs that keep one there (static ones): a member
// started alone after both were lost then starts above what the owner
// used, outbound and inbound. The write happens in the background, after
// the acknowledgement may have left: both members lost within that write
// (milliseconds) is the window it leaves open.
func (h haHandler) Record(group string, k ha.Key, upTo uint64) {
	s := &h.g.ha
	s.mu.Lock()
	defer s.mu.Unlock()
	for rt, hs := range s.sas {
		if hs.key == k && hs.group.cfg.Name == group && hs.durable && upTo > s.toRecord[rt] {
			s.toRecord[rt] = upTo
			select {
			case s.recordNow <- struct{}{}:
			default:
			}
		}
	}
}

// recorder writes what Record collected, until closeHA.
func (g *Gateway) recorder() {
	s := &g.ha
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.recordNow:
		}
		s.mu.Lock()
		todo := s.toRecord
		s.toRecord = map[*esp.SA]uint64{}
		s.mu.Unlock()
		for rt, upTo := range todo {
			if err := rt.Record(upTo); err != nil {
				g.Logger("ha").Warn("a standby's bound not recorded in the state directory", "spi", fmt.Sprintf("%08x", rt.SPI()), "err", err)
			}
		}
	}
}

// Fence stops (or lets go on) the group's SAs while this member, its
// owner, is cut off from its standby and the witness.
func (h haHandler) Fence(group string, fenced bool) {
	g := h.g
	s := &g.ha
	s.mu.Lock()
	grp := s.groups[group]
	if grp == nil || grp.fenced == fenced {
		s.mu.Unlock()
		return
	}
	grp.fenced = fenced
	sas := s.groupSAsLocked(grp)
	owned := grp.owned
	s.mu.Unlock()
	for rt := range sas {
		rt.Fence(fenced || !owned)
	}
	event := "unfence"
	if fenced {
		event = "fence"
	}
	g.runHook(event, group)
	g.Logger("ha").Warn("group "+event+"d", "group", group)
}

// Snapshot is the group's whole state for a standby that just joined:
// each SA's granted bound and each IKE SA.
func (h haHandler) Snapshot(group string) *ha.State {
	g := h.g
	s := &g.ha
	s.mu.Lock()
	grp := s.groups[group]
	if grp == nil {
		s.mu.Unlock()
		return nil
	}
	st := &ha.State{Bounds: map[ha.Key]uint64{}, IKE: map[string][]byte{}}
	for _, hs := range s.groupSAsLocked(grp) {
		st.Bounds[hs.key] = hs.lease.Granted()
	}
	s.mu.Unlock()
	if ep := g.ikeEndpoint(); ep != nil {
		for _, sn := range ep.Snapshots() {
			if g.ha.groupOf(sn.Local.Addr()) == grp {
				st.IKE[haIKEKey(sn.SPIi, sn.SPIr)] = sn.Data
			}
		}
	}
	return st
}

// onIKESnapshot is ike.Config.OnSnapshot: an IKE SA of a group this
// member owns goes to the standby. It runs with the endpoint's lock held
// and only enqueues.
func (g *Gateway) onIKESnapshot(sn ike.Snapshot, gone bool) {
	s := &g.ha
	grp := s.groupOf(sn.Local.Addr())
	if grp == nil {
		return
	}
	s.mu.Lock()
	m, owned := s.m, grp.owned
	s.mu.Unlock()
	if m == nil || !owned {
		return
	}
	data := sn.Data
	if gone {
		data = nil
	}
	m.IKEState(grp.cfg.Name, haIKEKey(sn.SPIi, sn.SPIr), data)
}

// announce tells the neighbours where the group's addresses are now: at
// once, and again at 0.1, 0.4, 1 and 2 s, for a lost announcement and for
// a neighbour that ignored it (Linux keeps an entry it changed less than
// its locktime ago, 1 s by default: two takeovers within a second).
func (g *Gateway) announce(grp *haGroup) {
	send := func() {
		for _, a := range g.ha.addresses(grp) {
			if err := vip.Announce(a); err != nil {
				g.Logger("ha").Warn("virtual address not announced", "group", grp.cfg.Name, "address", a.String(), "err", err)
			}
		}
	}
	send()
	s := &g.ha
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		last := time.Duration(0)
		for _, at := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second} {
			d := at - last
			last = at
			select {
			case <-s.stop:
				return
			case <-time.After(d):
			}
			s.mu.Lock()
			owned := grp.owned
			s.mu.Unlock()
			if !owned {
				return
			}
			send()
		}
	}()
}

// runHook runs [ha] hook for event, in the background: a slow hook never
// delays the traffic.
func (g *Gateway) runHook(event, group string) {
	s := &g.ha
	if s.cfg == nil || s.cfg.Hook == "" {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		env := []string{"SLUICE_HA_MEMBER=" + s.cfg.Name}
		if err := vip.RunHook(ctx, s.cfg.Hook, event, group, env, s.cfg.HookTimeout); err != nil {
			g.Logger("ha").Warn("ha hook failed", "event", event, "group", group, "err", err)
		}
	}()
}

// HAStatus returns the pair's status, or false without [ha].
func (g *Gateway) HAStatus() (ha.Status, bool) {
	s := &g.ha
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	if m == nil {
		return ha.Status{}, false
	}
	return m.Status(), true
}

// HAHandover hands group ("" for every group this member owns) to the
// standby, with exact state.
func (g *Gateway) HAHandover(ctx context.Context, group string) error {
	s := &g.ha
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	if m == nil {
		return errors.New("gateway: this gateway has no [ha] section")
	}
	return m.Handover(ctx, group)
}

// HAStandbyUp reports whether a standby is connected and in sync for
// some group this member owns: what a handover at shutdown needs.
func (g *Gateway) HAStandbyUp() bool {
	st, ok := g.HAStatus()
	if !ok {
		return false
	}
	for _, gs := range st.Groups {
		if gs.Role == "owner" && gs.Standby != "" && gs.InSync {
			return true
		}
	}
	return false
}

// listenUDP binds a UDP socket to a; with freebind, also while a is not
// (yet) an address of this host.
func listenUDP(a netip.AddrPort, freebind bool) (*net.UDPConn, error) {
	lc := net.ListenConfig{}
	if freebind {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = udp.SetFreeBind(int(fd), a.Addr()) }); err != nil {
				return err
			}
			return serr
		}
	}
	pc, err := lc.ListenPacket(context.Background(), "udp", a.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// reloadHA gives the groups the addresses next's [[ha.group]]s have
// (fixedPartsEqual allows no other change of [ha]): from here on a
// tunnel or connection on an added address is the group's, leased and
// fenced as those at start are, and one on a removed address is this
// member's alone. Of a group this member owns, it adds and announces the
// added addresses and removes the removed ones, as Acquire and Release
// do. g.mu is held.
func (g *Gateway) reloadHA(next *config.Gateway, note func(string, ...any)) error {
	s := &g.ha
	if s.cfg == nil || next.HA == nil {
		return nil
	}
	s.vipMu.Lock()
	defer s.vipMu.Unlock()
	type change struct {
		grp            *haGroup
		owned          bool
		added, removed []config.HAAddress
	}
	var changes []change
	s.mu.Lock()
	for _, gc := range next.HA.Groups {
		grp := s.groups[gc.Name]
		if grp == nil { // fixedPartsEqual refuses new groups
			continue
		}
		c := change{grp: grp, owned: grp.owned}
		for _, a := range gc.Addresses {
			if !slices.Contains(grp.addrs, a) {
				c.added = append(c.added, a)
			}
		}
		for _, a := range grp.addrs {
			if !slices.Contains(gc.Addresses, a) {
				c.removed = append(c.removed, a)
			}
		}
		if len(c.added) > 0 || len(c.removed) > 0 {
			grp.addrs = slices.Clone(gc.Addresses)
			changes = append(changes, c)
		}
	}
	s.cfg = next.HA
	s.indexLocked()
	s.mu.Unlock()
	var errs []error
	for _, c := range changes {
		name := c.grp.cfg.Name
		if c.owned {
			for _, a := range c.removed {
				if err := vip.Remove(a); err != nil {
					errs = append(errs, fmt.Errorf("gateway: ha: group %s: %w", name, err))
				}
			}
			for _, a := range c.added {
				if err := vip.Add(a); err != nil {
					errs = append(errs, fmt.Errorf("gateway: ha: group %s: %w", name, err))
				}
			}
			if len(c.added) > 0 {
				g.announce(c.grp)
			}
		} else {
			// As at start (startHA): an address an earlier run left
			// here (a kill -9) is not this member's to answer for
			// until it owns the group.
			for _, a := range c.added {
				if err := vip.Remove(a); err != nil {
					g.Logger("ha").Warn("a virtual address left by an earlier run could not be removed", "group", name, "address", a.String(), "err", err)
				}
			}
		}
		role := "standby"
		if c.owned {
			role = "owner"
		}
		note("ha group addresses changed", "group", name, "role", role,
			"added", haAddrList(c.added), "removed", haAddrList(c.removed))
	}
	return errors.Join(errs...)
}

// haAddrList formats addresses for a change line: "[a dev x, b dev y]".
func haAddrList(as []config.HAAddress) string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return "[" + strings.Join(out, ", ") + "]"
}
