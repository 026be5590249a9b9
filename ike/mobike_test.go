package ike

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

// TestReadMobike reads the notifies of RFC 4555 section 4.2 and refuses
// malformed ones.
func TestReadMobike(t *testing.T) {
	cookie := bytes.Repeat([]byte{7}, 16)
	m, err := readMobike([]Payload{
		&Notify{NType: UpdateSAAddresses}, &Notify{NType: Cookie2, Data: cookie},
		&Notify{NType: AdditionalIP4Address, Data: []byte{198, 51, 100, 10}},
		&Notify{NType: AdditionalIP6Address, Data: netip.MustParseAddr("2001:db8::10").AsSlice()},
		&Notify{NType: MOBIKESupported}, &Nonce{Data: []byte{1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !m.update || !m.supported || !bytes.Equal(m.cookie2, cookie) || m.noAdditional ||
		len(m.additional) != 2 || m.additional[0] != netip.MustParseAddr("198.51.100.10") || m.additional[1] != netip.MustParseAddr("2001:db8::10") {
		t.Errorf("%+v", m)
	}
	if m, err := readMobike([]Payload{&Notify{NType: NoAdditionalAddresses}}); err != nil || !m.noAdditional || m.update {
		t.Errorf("NO_ADDITIONAL_ADDRESSES: %+v %v", m, err)
	}
	for name, n := range map[string]*Notify{
		"short-cookie2": {NType: Cookie2, Data: make([]byte, 7)},
		"long-cookie2":  {NType: Cookie2, Data: make([]byte, 65)},
		"ip4-length":    {NType: AdditionalIP4Address, Data: make([]byte, 16)},
		"ip6-length":    {NType: AdditionalIP6Address, Data: make([]byte, 4)},
		"no-nats":       {NType: NoNATsAllowed, Data: make([]byte, 5)},
	} {
		if _, err := readMobike([]Payload{n}); err == nil || !strings.HasPrefix(err.Error(), "ike: ") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// TestAnswerUpdate: the responder's answer to UPDATE_SA_ADDRESSES carries
// NAT detection for the addresses the request used (which the initiator's
// natCheck finds unchanged) and the echoed COOKIE2; a NAT under
// NO_NATS_ALLOWED is refused; a return routability check passes only on
// its own cookie.
func TestAnswerUpdate(t *testing.T) {
	const spii, spir = 0x1111, 0x2222
	gw := netip.MustParseAddrPort("203.0.113.1:4500")
	rw := netip.MustParseAddrPort("198.51.100.10:4500")
	cookie := bytes.Repeat([]byte{9}, 12)
	req := append(natNotifies(spii, spir, rw, gw, false), &Notify{NType: UpdateSAAddresses}, &Notify{NType: Cookie2, Data: cookie})
	m, err := readMobike(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, u, ok := answerUpdate(m, req, spii, spir, gw, rw, false)
	if !ok || u.local != gw || u.remote != rw || u.ourNAT || u.peerNAT {
		t.Fatalf("update %+v ok %v", u, ok)
	}
	if n := findNotify(resp, Cookie2); n == nil || !bytes.Equal(n.Data, cookie) {
		t.Errorf("COOKIE2 not echoed: %v", resp)
	}
	if ourNAT, peerNAT := natCheck(resp, spii, spir, rw, gw); ourNAT || peerNAT {
		t.Errorf("the initiator finds a NAT in the answer: %v %v", ourNAT, peerNAT)
	}

	// Through a NAT that rewrote the source: found, and refused when
	// the initiator said NO_NATS_ALLOWED.
	natted := netip.MustParseAddrPort("192.0.2.99:61000")
	if _, u, ok := answerUpdate(m, req, spii, spir, gw, natted, false); !ok || !u.peerNAT || u.ourNAT {
		t.Errorf("behind a NAT: %+v %v", u, ok)
	}
	strict := append(req, &Notify{NType: NoNATsAllowed, Data: noNATsData(rw, gw)})
	m, err = readMobike(strict)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := answerUpdate(m, strict, spii, spir, gw, rw, false); !ok {
		t.Error("NO_NATS_ALLOWED refused without a NAT")
	}
	resp, _, ok = answerUpdate(m, strict, spii, spir, gw, natted, false)
	if ok || len(resp) != 1 || resp[0].(*Notify).NType != UnexpectedNATDetected {
		t.Errorf("NO_NATS_ALLOWED through a NAT: ok %v, %v", ok, resp)
	}

	// The return routability check.
	c, ps := newRoutabilityCheck(u, spii, spir, false)
	n := findNotify(ps, Cookie2)
	if n == nil || len(n.Data) != cookie2Len || findNotify(ps, NATDetectionSourceIP) == nil {
		t.Fatalf("check request %v", ps)
	}
	if c.passed(nil) || c.passed([]Payload{&Notify{NType: Cookie2, Data: cookie}}) {
		t.Error("passed without its cookie")
	}
	if !c.passed([]Payload{&Notify{NType: Cookie2, Data: bytes.Clone(n.Data)}}) {
		t.Error("failed with its cookie")
	}
}
