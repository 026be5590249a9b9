package ike

// Following a peer's NAT mapping (RFC 7296 section 2.23). A NAT may
// forget the mapping of a peer behind it (its keepalives came too
// seldom, it restarted) and make a new one, with another port or
// address, for the peer's next packet; our IKE messages and ESP would go
// on to the old one and be lost. So when we are not behind a NAT
// ourselves and NAT detection found one in front of the peer, an IKE
// message from the peer that
//
//   - passed its integrity check (the SK payload opened), and
//   - is new: a request with the next message ID we expect, or the
//     response to our outstanding request, never a retransmission,
//
// and came from another address or port than the IKE SA's, moves the IKE
// SA there (our requests and their retransmissions go there), and each
// of its Child SAs' ESP in UDP (Config.OnChildAddress, as MOBIKE's move
// does; childaddr.go). A replayed message moves nothing, whatever address it is sent
// from: a request's message ID is behind the window and a response
// matches no outstanding request, so both are dropped before this. A
// side behind a NAT does not move (section 2.23: one forged packet of
// the right shape could then redirect it), and an IKE SA that agreed
// MOBIKE moves only by MOBIKE's rules (RFC 4555 section 3.8,
// task_mobike.go).

import "net/netip"

// followPeerLocked is called with an authenticated, new message of the
// peer's that arrived at local from remote (see the top of the file), and
// moves sa there when the rules allow it. It returns the callbacks that
// move the Child SAs.
func (sa *ikeSA) followPeerLocked(local, remote netip.AddrPort) []func() {
	if remote == sa.remote || !sa.natThere || sa.natHere || sa.mobike || sa.state != stateEstablished || sa.removed {
		return nil
	}
	e := sa.ep
	if local != sa.local || remote.Addr().Is4() != sa.remote.Addr().Is4() {
		// Not a NAT's new mapping of the same flow: leave it.
		e.cfg.Log.Debug("ike: authenticated message from another flow: the IKE SA stays", sa.logAttrs("local", local, "from", remote)...)
		return nil
	}
	old := sa.remote
	e.stats.NATPeerMoved++
	e.cfg.Log.Info("ike: the peer's NAT mapping changed: the IKE SA and its Child SAs move to it (RFC 7296 section 2.23)",
		sa.logAttrs("old_remote", old, "new_remote", remote, "children", len(sa.children))...)
	sa.setAddrsLocked(local, remote)
	return sa.moveChildAddrsLocked(local, remote)
}
