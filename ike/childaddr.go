package ike

// Where a Child SA's ESP goes. A Child SA is made at its IKE SA's
// addresses (ChildSA.Local and Remote, which never change: the ChildSA
// is shared with whoever it was reported to). The IKE SA moves without
// new Child SAs: MOBIKE (RFC 4555 section 3.5, task_mobike.go), in
// either role, once the return routability check passed, and a peer
// behind a NAT whose mapping changed (RFC 7296 section 2.23,
// natupdate.go). Each such move of the Child SAs goes through
// moveChildAddrsLocked, which records the new addresses in the Endpoint's
// childEntry and reports the Child SAs that were elsewhere
// (Config.OnChildAddress). So a move is compared with where the Child SA
// is, not where it was made (a move away and back is two moves), a
// snapshot carries where it is (snapshot.go: a standby that adopts it
// sends there), and ChildAddrs reports it.

import "net/netip"

// moveChildAddrsLocked moves sa's Child SAs' ESP to local and remote:
// each that is elsewhere is recorded there and reported through the
// returned callbacks (Config.OnChildAddress, to run without the lock);
// one already there (made on the new path, say by a rekey after the
// move) is not reported again.
func (sa *ikeSA) moveChildAddrsLocked(local, remote netip.AddrPort) []func() {
	e := sa.ep
	f := e.cfg.OnChildAddress
	var after []func()
	for _, c := range sa.children {
		ent := e.children[c.InSPI]
		if ent == nil || ent.c != c {
			continue // not established here: nothing sends on it
		}
		if ent.local == local && ent.remote == remote {
			continue
		}
		ent.local, ent.remote = local, remote
		sa.changedLocked()
		if f != nil {
			after = append(after, func() { f(c, local, remote) })
		}
	}
	return after
}

// ChildAddrs reports the outer addresses (with ESP in UDP, the ports)
// that the Endpoint's Child SA c sends its ESP from and to now: those of
// the last move reported for it through Config.OnChildAddress, else
// those it was made with (c.Local, c.Remote). ok is false when c is not
// one of the Endpoint's established Child SAs. It is safe for
// concurrent use.
func (e *Endpoint) ChildAddrs(c *ChildSA) (local, remote netip.AddrPort, ok bool) {
	e.mu.Lock()
	defer e.unlock()
	ent := e.children[c.InSPI]
	if ent == nil || ent.c != c {
		return netip.AddrPort{}, netip.AddrPort{}, false
	}
	return ent.local, ent.remote, true
}
