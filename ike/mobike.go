package ike

// MOBIKE (RFC 4555): an IKE SA and its Child SAs move to new addresses
// of the peer without a new negotiation. This file holds what does not
// depend on how an exchange is put together: reading the MOBIKE notifies
// of a message, the responder's answer to an UPDATE_SA_ADDRESSES, and
// the return routability check.
//
//	Initiator (road warrior)              Responder (sluice)
//	IKE_AUTH: N(MOBIKE_SUPPORTED)   -->
//	                                <--   IKE_AUTH: N(MOBIKE_SUPPORTED)
//	... its address changes; it may probe the new path with an empty
//	INFORMATIONAL first, which is answered where it came from and moves
//	nothing ...
//	INFORMATIONAL from the new address:
//	  N(UPDATE_SA_ADDRESSES), N(NAT_DETECTION_*), [N(COOKIE2)],
//	  [N(NO_NATS_ALLOWED)]          -->   the IKE SA takes the message's
//	                                      addresses (3.5: an authenticated
//	                                      request, newer than the last)
//	                                <--   N(NAT_DETECTION_*), [N(COOKIE2)]
//	                                <--   INFORMATIONAL to the new address:
//	                                      N(COOKIE2 fresh), N(NAT_DETECTION_*)
//	N(COOKIE2 echoed)               -->   return routability proven (3.5):
//	                                      the Child SAs' traffic moves
//	                                      (Config.OnChildAddress)
//
// Section 3.5 leaves open whether the check comes before or after the
// Child SAs move; sluice moves them only after it, so that a forged or
// replayed path never receives the tunnel's traffic.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// cookie2Len is the length of our COOKIE2 data (section 4.2.4 allows 8
// to 64 octets).
const cookie2Len = 16

// mobikeNotifies are the MOBIKE notifies of one message (section 4.2).
type mobikeNotifies struct {
	supported    bool         // MOBIKE_SUPPORTED
	update       bool         // UPDATE_SA_ADDRESSES
	cookie2      []byte       // COOKIE2's data, nil without one
	noNATs       []byte       // NO_NATS_ALLOWED's data, nil without one
	additional   []netip.Addr // ADDITIONAL_IP4/6_ADDRESS, in order
	noAdditional bool         // NO_ADDITIONAL_ADDRESSES
}

// maxAdditional bounds the additional addresses kept of one message.
const maxAdditional = 16

// readMobike collects the MOBIKE notifies of ps. A malformed one (a
// COOKIE2 outside 8 to 64 octets, an address of the wrong length) is an
// error: the caller answers INVALID_SYNTAX. Addresses beyond
// maxAdditional are ignored.
func readMobike(ps []Payload) (mobikeNotifies, error) {
	var m mobikeNotifies
	for _, p := range ps {
		n, ok := p.(*Notify)
		if !ok {
			continue
		}
		switch n.NType {
		case MOBIKESupported:
			m.supported = true
		case UpdateSAAddresses:
			m.update = true
		case Cookie2:
			if len(n.Data) < 8 || len(n.Data) > 64 {
				return m, fmt.Errorf("ike: COOKIE2 of %d octets (RFC 4555 section 4.2.4: 8 to 64)", len(n.Data))
			}
			m.cookie2 = n.Data
		case NoNATsAllowed:
			if len(n.Data) != 2*4+4 && len(n.Data) != 2*16+4 {
				return m, fmt.Errorf("ike: NO_NATS_ALLOWED of %d octets", len(n.Data))
			}
			m.noNATs = n.Data
		case AdditionalIP4Address, AdditionalIP6Address:
			want := 4
			if n.NType == AdditionalIP6Address {
				want = 16
			}
			a, ok := netip.AddrFromSlice(n.Data)
			if !ok || len(n.Data) != want {
				return m, fmt.Errorf("ike: %v with %d octets", n.NType, len(n.Data))
			}
			if len(m.additional) < maxAdditional {
				m.additional = append(m.additional, a)
			}
		case NoAdditionalAddresses:
			m.noAdditional = true
		}
	}
	return m, nil
}

// noNATsData is NO_NATS_ALLOWED's data for a message sent from local to
// remote (section 4.2.5): source address, destination address, source
// port, destination port.
func noNATsData(local, remote netip.AddrPort) []byte {
	b := append(local.Addr().Unmap().AsSlice(), remote.Addr().Unmap().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, local.Port())
	return binary.BigEndian.AppendUint16(b, remote.Port())
}

// noNATsOK reports whether NO_NATS_ALLOWED's data matches the message as
// it arrived: sent from remote to local.
func noNATsOK(data []byte, local, remote netip.AddrPort) bool {
	return bytes.Equal(data, noNATsData(remote, local))
}

// newCookie2 returns a fresh COOKIE2 for a return routability check.
func newCookie2() []byte {
	c := make([]byte, cookie2Len)
	rand.Read(c)
	return c
}

// addrUpdate is what an UPDATE_SA_ADDRESSES request makes of an IKE SA:
// its new addresses (those the request was sent from and to) and what
// NAT detection found on the new path.
type addrUpdate struct {
	local, remote   netip.AddrPort
	ourNAT, peerNAT bool
}

// answerUpdate processes an UPDATE_SA_ADDRESSES request with MOBIKE
// notifies m and payloads ps, which arrived from remote at local, for the
// IKE SA spii/spir (section 3.5). It returns the response's payloads
// (NAT detection for the addresses the request used, COOKIE2 echoed) and
// the update; ok is false when the addresses are refused (a NAT where
// NO_NATS_ALLOWED forbade one: the response is UNEXPECTED_NAT_DETECTED).
// forceEncap fakes our source hash, as in IKE_SA_INIT (Peer.ForceEncap).
func answerUpdate(m mobikeNotifies, ps []Payload, spii, spir uint64, local, remote netip.AddrPort, forceEncap bool) (resp []Payload, u addrUpdate, ok bool) {
	if m.noNATs != nil && !noNATsOK(m.noNATs, local, remote) {
		return []Payload{&Notify{NType: UnexpectedNATDetected}}, u, false
	}
	u = addrUpdate{local: local, remote: remote}
	u.ourNAT, u.peerNAT = natCheck(ps, spii, spir, local, remote)
	resp = natNotifies(spii, spir, local, remote, forceEncap)
	if m.cookie2 != nil {
		resp = append(resp, &Notify{NType: Cookie2, Data: m.cookie2})
	}
	return resp, u, true
}

// routabilityCheck is a return routability check in flight (section
// 3.5): the cookie our INFORMATIONAL request carries to the peer's new
// address, and the update that waits for its echo.
type routabilityCheck struct {
	cookie2 []byte
	update  addrUpdate
}

// newRoutabilityCheck starts the check of update u: it returns the check
// and its request's payloads (a fresh COOKIE2 and NAT detection for the
// new path).
func newRoutabilityCheck(u addrUpdate, spii, spir uint64, forceEncap bool) (*routabilityCheck, []Payload) {
	c := &routabilityCheck{cookie2: newCookie2(), update: u}
	ps := append(natNotifies(spii, spir, u.local, u.remote, forceEncap), &Notify{NType: Cookie2, Data: c.cookie2})
	return c, ps
}

// passed reports whether the response ps echoes the check's cookie.
func (c *routabilityCheck) passed(ps []Payload) bool {
	n := findNotify(ps, Cookie2)
	return n != nil && bytes.Equal(n.Data, c.cookie2)
}
