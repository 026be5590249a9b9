// Package ippool hands out virtual IP addresses to remote-access peers
// (RFC 7296 section 3.15.4) from pools named as swanctl names them
// (`[[pool]]` with `name`, `addrs` and `dns`), with the lease semantics
// of strongSwan's in-memory pools:
//
//   - addrs is a prefix ("10.3.0.0/24", "fd00:3::/112") or a range
//     ("10.3.0.10-10.3.0.200"), IPv4 or IPv6. A prefix of more than two
//     addresses gives neither its first (network) nor its last
//     (broadcast) address; a range gives all of its addresses. A pool
//     holds at most 2^31 addresses: a larger prefix is cut to its first
//     2^31 (strongSwan does the same); a larger range is an error.
//   - A lease ties an address to an identity. It is online while an IKE
//     SA holds it and offline after: an identity that comes back gets the
//     address of its lease again, online (a second IKE SA shares it, and
//     the lease goes offline when the last lets go) or offline.
//   - A new identity gets an address never handed out before while there
//     is one; then it takes over the offline lease of another identity;
//     when every address has an online lease the pool is exhausted
//     (ErrExhausted; the responder answers INTERNAL_ADDRESS_FAILURE).
//   - A request for one address (vips = 10.3.0.9) gets it if no identity
//     holds a lease for it.
//
// A Pool is safe for concurrent use; each call takes its mutex once. A
// lease costs an entry in two maps (by address and by identity) and no
// other allocation; taking and releasing a lease that exists allocates
// nothing.
package ippool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// ErrExhausted is returned by Acquire when every address of the pools has
// an online lease.
var ErrExhausted = errors.New("ippool: no address left")

// maxSize is the most addresses a pool holds (strongSwan's limit too).
const maxSize = 1 << 31

// Config describes a pool: swanctl's name, addrs and dns.
type Config struct {
	Name string
	// Addrs is a prefix ("10.3.0.0/24") or a range
	// ("10.3.0.10-10.3.0.200") of one family.
	Addrs string
	// DNS are the name servers announced with an address of this pool.
	DNS []netip.Addr
}

// Pool is one pool of virtual IP addresses.
type Pool struct {
	name string
	six  bool // its family, which Reconfigure keeps

	mu     sync.Mutex
	base   netip.Addr // the address at offset 0
	size   uint32     // offsets 0..size-1
	dns    []netip.Addr
	next   uint32            // offsets from next on were never handed out
	byAddr map[uint32]lease  // by offset
	byID   map[string]uint32 // an identity's lease
	online int               // leases with holders
	// orphans are the online leases of addresses a Reconfigure took out
	// of the pool, until their holders let go (or the pool takes the
	// address back).
	orphans map[netip.Addr]lease
	offline int // leases without
}

// lease is an address's identity and how many IKE SAs hold it (0:
// offline).
type lease struct {
	id      string
	holders uint32
}

// New returns the pool c describes.
func New(c Config) (*Pool, error) {
	s := strings.TrimSpace(c.Addrs)
	if from, to, ok := strings.Cut(s, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(from))
		if err != nil {
			return nil, fmt.Errorf("ippool: pool %q: range %q: %v", c.Name, s, err)
		}
		b, err := netip.ParseAddr(strings.TrimSpace(to))
		if err != nil {
			return nil, fmt.Errorf("ippool: pool %q: range %q: %v", c.Name, s, err)
		}
		return NewRange(c.Name, a, b, c.DNS)
	}
	pre, err := netip.ParsePrefix(s)
	if err != nil {
		return nil, fmt.Errorf("ippool: pool %q: addrs %q is neither a prefix nor a range (from-to): %v", c.Name, s, err)
	}
	pre = pre.Masked()
	host := pre.Addr().BitLen() - pre.Bits()
	size := uint64(1) << min(host, 31)
	first := pre.Addr()
	if size > 2 {
		// Neither the network's first address nor its last.
		first, size = first.Next(), size-2
	}
	p := &Pool{name: c.Name, base: first, size: uint32(size)}
	return NewRange(c.Name, first, p.addr(uint32(size-1)), c.DNS)
}

// NewRange returns the pool of the addresses first to last, both
// included, announcing the name servers dns.
func NewRange(name string, first, last netip.Addr, dns []netip.Addr) (*Pool, error) {
	first, last = first.Unmap(), last.Unmap()
	if !first.IsValid() || !last.IsValid() || first.Is4() != last.Is4() || first.Zone() != "" || last.Zone() != "" {
		return nil, fmt.Errorf("ippool: pool %q: range %v-%v mixes families", name, first, last)
	}
	if last.Less(first) {
		return nil, fmt.Errorf("ippool: pool %q: range %v-%v ends before it starts", name, first, last)
	}
	d := diff(last, first)
	if d >= maxSize {
		return nil, fmt.Errorf("ippool: pool %q: range %v-%v holds more than 2^31 addresses", name, first, last)
	}
	for _, a := range dns {
		if !a.IsValid() {
			return nil, fmt.Errorf("ippool: pool %q: an invalid DNS address", name)
		}
	}
	return &Pool{name: name, six: first.Is6(), base: first, size: uint32(d) + 1, dns: append([]netip.Addr(nil), dns...),
		byAddr: make(map[uint32]lease), byID: make(map[string]uint32)}, nil
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// Is6 reports whether the pool's addresses are IPv6.
func (p *Pool) Is6() bool { return p.six }

// First is the pool's first address.
func (p *Pool) First() netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base
}

// Last is the pool's last address.
func (p *Pool) Last() netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr(p.size - 1)
}

// Size is the number of addresses the pool hands out.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.size)
}

// DNS are the name servers announced with the pool's addresses. The
// caller must not modify the slice (Reconfigure replaces it, never
// changes it).
func (p *Pool) DNS() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dns
}

// Contains reports whether a is one of the pool's addresses.
func (p *Pool) Contains(a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.offset(a)
	return ok
}

// Stats counts a pool's addresses and leases.
type Stats struct {
	Size    int // addresses
	Online  int // leases held by at least one IKE SA
	Offline int // leases kept for identities that left
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Size: int(p.size), Online: p.online, Offline: p.offline}
}

// Acquire leases an address of the pool to id for one more holder (an
// IKE SA) and returns it. want is the address asked for: the zero Addr or
// an unspecified one for any. It is Acquire over this pool alone; it
// allocates nothing when id has a lease already.
func (p *Pool) Acquire(id string, want netip.Addr) (netip.Addr, error) {
	if !want.IsValid() && p.Is6() {
		want = netip.IPv6Unspecified()
	}
	a, _, err := Acquire([]*Pool{p}, id, want)
	return a, err
}

// Acquire leases an address of one of pools to id, the first pool of
// want's family that can, and returns it and its pool. It looks in three
// rounds, as strongSwan does: an address id has a lease for (or want, if
// no identity has a lease for it) in any pool; then an address never
// handed out; then an offline lease of another identity. With none,
// the error is ErrExhausted. Pools of the other family are skipped (a
// zero want counts as IPv4).
func Acquire(pools []*Pool, id string, want netip.Addr) (netip.Addr, *Pool, error) {
	want = want.Unmap()
	six := want.Is6()
	found := false
	for round := 0; round < 3; round++ {
		for _, p := range pools {
			if p.Is6() != six {
				continue
			}
			found = true
			var a netip.Addr
			switch round {
			case 0:
				a = p.acquireExisting(id, want)
			case 1:
				a = p.acquireNew(id)
			case 2:
				a = p.acquireReassigned(id)
			}
			if a.IsValid() {
				return a, p, nil
			}
		}
	}
	if !found {
		fam := "IPv4"
		if six {
			fam = "IPv6"
		}
		return netip.Addr{}, nil, fmt.Errorf("ippool: no %s pool", fam)
	}
	return netip.Addr{}, nil, ErrExhausted
}

// acquireExisting returns the address of id's lease, or want if nobody
// has a lease for it, held once more; the zero Addr if neither.
func (p *Pool) acquireExisting(id string, want netip.Addr) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, wantOK := p.offset(want)
	wantOK = wantOK && !want.IsUnspecified() // 0.0.0.0 and :: ask for any
	off, has := p.byID[id]
	if wantOK && (!has || off != w) {
		if _, taken := p.byAddr[w]; !taken && (!has || p.byAddr[off].holders == 0) {
			// The wanted address is free, and id's own lease (if any)
			// is offline: it moves to the one wanted.
			if has {
				p.dropLocked(off)
			}
			p.takeLocked(w, id)
			return p.addr(w)
		}
	}
	if !has {
		return netip.Addr{}
	}
	p.holdLocked(off)
	return p.addr(off)
}

// acquireNew leases to id an address never handed out, if one is left.
func (p *Pool) acquireNew(id string) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.next < p.size {
		off := p.next
		p.next++
		if _, taken := p.byAddr[off]; !taken { // a wanted address may be ahead of next
			p.takeLocked(off, id)
			return p.addr(off)
		}
	}
	return netip.Addr{}
}

// acquireReassigned gives id the offline lease of another identity, if
// there is one.
func (p *Pool) acquireReassigned(id string) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.offline == 0 {
		return netip.Addr{}
	}
	for off, l := range p.byAddr {
		if l.holders == 0 {
			p.dropLocked(off)
			p.takeLocked(off, id)
			return p.addr(off)
		}
	}
	return netip.Addr{}
}

// ErrTaken is returned by Take when the address has an online lease of
// another identity, or the identity an online lease of another address.
var ErrTaken = errors.New("ippool: address leased to another identity")

// Take leases exactly a to id for one more holder: what a standby does
// for an IKE SA it continues (the address is the peer's already). id's
// lease of a is held once more; a free address, or one with an offline
// lease of another identity (which it loses, as Acquire's third round
// would), becomes id's, and id's offline lease of another address, if
// any, is forgotten. It fails with ErrTaken when a has an online lease of
// another identity or id an online lease of another address, and when a
// is not in the pool.
func (p *Pool) Take(id string, a netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	off, ok := p.offset(a)
	if !ok {
		return fmt.Errorf("ippool: pool %q: %v is not in it", p.name, a)
	}
	if l, ok := p.byAddr[off]; ok {
		if l.id == id {
			p.holdLocked(off)
			return nil
		}
		if l.holders > 0 {
			return fmt.Errorf("ippool: pool %q: %v is leased to %q: %w", p.name, a, l.id, ErrTaken)
		}
	}
	if mine, has := p.byID[id]; has {
		if p.byAddr[mine].holders > 0 {
			return fmt.Errorf("ippool: pool %q: %q holds %v: %w", p.name, id, p.addr(mine), ErrTaken)
		}
		p.dropLocked(mine)
	}
	if _, ok := p.byAddr[off]; ok {
		p.dropLocked(off)
	}
	p.takeLocked(off, id)
	return nil
}

// Release lets go of one holder of id's lease of a; when none is left the
// lease goes offline, kept for id. It reports whether id held a.
func (p *Pool) Release(id string, a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	off, ok := p.offset(a)
	if !ok {
		// Not, or no longer (Reconfigure), in the pool.
		l, ok := p.orphans[a.Unmap()]
		if !ok || l.id != id {
			return false
		}
		if l.holders--; l.holders == 0 {
			delete(p.orphans, a.Unmap())
		} else {
			p.orphans[a.Unmap()] = l
		}
		return true
	}
	l, ok := p.byAddr[off]
	if !ok || l.id != id || l.holders == 0 {
		return false
	}
	l.holders--
	p.byAddr[off] = l
	if l.holders == 0 {
		p.online--
		p.offline++
	}
	return true
}

// Lease returns the identity with a lease for a and whether the lease is
// online.
func (p *Pool) Lease(a netip.Addr) (id string, online, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	off, in := p.offset(a)
	if !in {
		return "", false, false
	}
	l, ok := p.byAddr[off]
	return l.id, l.holders > 0, ok
}

// Reconfigure gives the pool c's addresses and DNS servers in place, so
// that whoever holds the pool (an ike.Peer, the IKE SAs' leases) goes on
// with it: a reload that changes a [[pool]]. The name and the family stay
// (another family is an error: make a new pool). A lease whose address is
// still in the pool is kept, online or offline, for its identity. A lease
// whose address is not: an offline one is forgotten; an online one is
// returned in orphaned and kept aside — the IKE SAs that hold it keep the
// address until they end (Release), and the pool does not hand it out,
// even if a later Reconfigure takes the address back in while they hold
// it (the lease returns then). Addresses are handed out afresh from the
// first, past those leased.
func (p *Pool) Reconfigure(c Config) (orphaned []netip.Addr, err error) {
	c.Name = p.name
	np, err := New(c)
	if err != nil {
		return nil, err
	}
	if np.six != p.six {
		return nil, fmt.Errorf("ippool: pool %q: addrs %q is of the other family", p.name, c.Addrs)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	byAddr, byID := make(map[uint32]lease, len(p.byAddr)), make(map[string]uint32, len(p.byID))
	orphans := map[netip.Addr]lease{}
	for off, l := range p.byAddr {
		a := p.addr(off)
		if noff, ok := np.offset(a); ok {
			byAddr[noff], byID[l.id] = l, noff
			continue
		}
		if l.holders > 0 {
			p.online--
			orphans[a] = l
			orphaned = append(orphaned, a)
		} else {
			p.offline--
		}
	}
	for a, l := range p.orphans {
		noff, ok := np.offset(a)
		_, taken := byAddr[noff]
		_, has := byID[l.id]
		if ok && !taken && !has {
			byAddr[noff], byID[l.id] = l, noff
			p.online++
			continue
		}
		orphans[a] = l
	}
	p.orphans = orphans
	p.base, p.size, p.dns = np.base, np.size, np.dns
	p.byAddr, p.byID, p.next = byAddr, byID, 0
	return orphaned, nil
}

// takeLocked leases the free offset off to id, held once. p.mu is held.
func (p *Pool) takeLocked(off uint32, id string) {
	p.byAddr[off] = lease{id: id, holders: 1}
	p.byID[id] = off
	p.online++
}

// holdLocked holds off's lease once more. p.mu is held.
func (p *Pool) holdLocked(off uint32) {
	l := p.byAddr[off]
	if l.holders == 0 {
		p.offline--
		p.online++
	}
	l.holders++
	p.byAddr[off] = l
}

// dropLocked forgets off's offline lease. p.mu is held.
func (p *Pool) dropLocked(off uint32) {
	l := p.byAddr[off]
	delete(p.byAddr, off)
	delete(p.byID, l.id)
	p.offline--
}

// offset returns a's offset in the pool. p.mu is held (or p is not
// shared yet).
func (p *Pool) offset(a netip.Addr) (uint32, bool) {
	a = a.Unmap()
	if !a.IsValid() || a.Is6() != p.base.Is6() || a.Less(p.base) {
		return 0, false
	}
	d := diff(a, p.base)
	if d >= uint64(p.size) {
		return 0, false
	}
	return uint32(d), true
}

// addr returns the address at offset off. p.mu is held (or p is not
// shared yet).
func (p *Pool) addr(off uint32) netip.Addr {
	if p.base.Is4() {
		b := p.base.As4()
		binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+off)
		return netip.AddrFrom4(b)
	}
	b := p.base.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	n := lo + uint64(off)
	if n < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], n)
	return netip.AddrFrom16(b)
}

// diff returns a-b for a >= b of one family, saturated at 2^64-1.
func diff(a, b netip.Addr) uint64 {
	if a.Is4() {
		x, y := a.As4(), b.As4()
		return uint64(binary.BigEndian.Uint32(x[:]) - binary.BigEndian.Uint32(y[:]))
	}
	x, y := a.As16(), b.As16()
	ahi, alo := binary.BigEndian.Uint64(x[:8]), binary.BigEndian.Uint64(x[8:])
	bhi, blo := binary.BigEndian.Uint64(y[:8]), binary.BigEndian.Uint64(y[8:])
	lo := alo - blo
	if alo < blo {
		ahi--
	}
	if ahi != bhi {
		return ^uint64(0)
	}
	return lo
}
