package ike

// A sluice responder and a sluice initiator opposite a peer written out
// in the test, which sends what a sluice would not: KE payloads of the
// wrong method, malformed ML-KEM data, an error instead of KEr, a choice
// of ADDKE without N(INTERMEDIATE_EXCHANGE_SUPPORTED). Each is refused
// (a responder with a Notify), the IKE SA ends, nothing panics.

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

const pqProps = "aes256gcm16-prfsha384-x25519-ke1_mlkem768"

// capture is a Transport that hands every datagram to a channel.
type capture chan []byte

func (c capture) Send(_, _ netip.AddrPort, pkt []byte) error {
	select {
	case c <- append([]byte(nil), pkt...):
	default:
	}
	return nil
}

func (c capture) next(t *testing.T, what string) *Message {
	t.Helper()
	select {
	case b := <-c:
		m, err := ParseMessage(b)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s", what)
	}
	return nil
}

// rawOf returns the wire form of m's payloads as m was parsed from (the
// tests re-encode the plaintext messages they build).
func encode(t *testing.T, m *Message) []byte {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// handPeer is the keys of the peer the test plays.
type handPeer struct {
	suite         Suite
	spii, spir    uint64
	out, in       *skCrypto
	keys          *Keys
	ni, nr        []byte
	local, remote netip.AddrPort // the endpoint under test's
}

func (h *handPeer) derive(t *testing.T, initiator bool, gir []byte) {
	t.Helper()
	k, err := DeriveIKEKeys(h.suite, h.ni, h.nr, gir, h.spii, h.spir)
	if err != nil {
		t.Fatal(err)
	}
	h.keys = k
	ei, ai, er, ar := k.Ei, k.Ai, k.Er, k.Ar
	if !initiator {
		ei, ai, er, ar = er, ar, ei, ai
	}
	h.out, _ = newSKCrypto(h.suite, ei, ai)
	h.in, _ = newSKCrypto(h.suite, er, ar)
}

func (h *handPeer) open(t *testing.T, raw []byte) []Payload {
	t.Helper()
	m, err := ParseMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := h.in.open(raw, m)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return inner
}

// TestAddKEResponderRefuses: a sluice responder given a bad KE payload in
// IKE_INTERMEDIATE answers INVALID_SYNTAX and forgets the IKE SA.
func TestAddKEResponderRefuses(t *testing.T) {
	good, _ := NewDH(MLKEM768)
	ek := good.Public()
	for name, inner := range map[string][]Payload{
		"IKE_AUTH":      nil, // IKE_AUTH at once, without IKE_INTERMEDIATE
		"no KE":         {&Nonce{Data: make([]byte, 32)}},
		"ML-KEM-1024":   {&KE{Group: MLKEM1024, Data: make([]byte, 1568)}},
		"x25519":        {&KE{Group: DHCurve25519, Data: make([]byte, 32)}},
		"short key":     {&KE{Group: MLKEM768, Data: ek[:1183]}},
		"modulus check": {&KE{Group: MLKEM768, Data: append([]byte{0xff, 0xff}, ek[2:]...)}},
		"two KE":        {&KE{Group: MLKEM768, Data: ek}, &KE{Group: MLKEM768, Data: ek}},
	} {
		t.Run(name, func(t *testing.T) {
			_, pb := peers(t, pqProps, "aes128gcm16", pqProps, "aes128gcm16")
			c := make(capture, 16)
			e, err := NewEndpoint(Config{Peers: []*Peer{pb}}, c)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			h := &handPeer{spii: 0x1111, ni: randomNonce(), local: netip.AddrPortFrom(addrB, 500), remote: netip.AddrPortFrom(addrA, 500)}
			dh, _ := NewDH(DHCurve25519)
			req := &Message{Header: Header{SPIi: h.spii, Exchange: IKE_SA_INIT, Flags: FlagInitiator}, Payloads: []Payload{
				&SA{Proposals: pb.IKE}, &KE{Group: DHCurve25519, Data: dh.Public()}, &Nonce{Data: h.ni},
				&Notify{NType: IntermediateExchangeSupported}}}
			e.Receive(h.local, h.remote, encode(t, req))
			resp := c.next(t, "IKE_SA_INIT response")
			sap, _ := find[*SA](resp.Payloads, nil)
			ke, _ := find[*KE](resp.Payloads, nil)
			nr, _ := find[*Nonce](resp.Payloads, nil)
			if sap == nil || ke == nil || nr == nil || findNotify(resp.Payloads, IntermediateExchangeSupported) == nil {
				t.Fatalf("IKE_SA_INIT response %+v", resp.Payloads)
			}
			h.suite, err = checkChosen(pb.IKE, sap.Proposals[0], false)
			if err != nil || h.suite.AddKE[0] != MLKEM768 {
				t.Fatalf("chose %+v: %v", h.suite, err)
			}
			gir, _ := dh.Shared(ke.Data)
			h.spir, h.nr = resp.Header.SPIr, nr.Data
			h.derive(t, true, gir)
			exch := IKE_INTERMEDIATE
			if name == "IKE_AUTH" {
				exch, inner = IKE_AUTH, []Payload{&ID{IDType: IDFQDN, Data: []byte("a.example.net")}, &Auth{Method: AuthPSK, Data: make([]byte, 48)}}
			}
			raw, err := h.out.seal(Header{SPIi: h.spii, SPIr: h.spir, Exchange: exch, Flags: FlagInitiator, MessageID: 1}, nil, inner)
			if err != nil {
				t.Fatal(err)
			}
			e.Receive(h.local, h.remote, raw)
			var b []byte
			select {
			case b = <-c:
			case <-time.After(5 * time.Second):
				t.Fatal("no answer to the bad IKE_INTERMEDIATE")
			}
			got := h.open(t, b)
			if len(got) != 1 || findNotify(got, InvalidSyntax) == nil {
				t.Fatalf("answer %+v, want INVALID_SYNTAX", got)
			}
			waitFor(t, func() bool { return len(e.IKESAs()) == 0 })
			if s := e.Stats(); s.AddKEFailed != 1 || s.IKESAEstablished != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestAddKEWithoutAnnouncement: ADDKE without N(INTERMEDIATE_EXCHANGE_
// SUPPORTED) in IKE_SA_INIT (RFC 9370 section 2.2.1 asks for it) is no
// choice: a responder answers NO_PROPOSAL_CHOSEN.
func TestAddKEWithoutAnnouncement(t *testing.T) {
	_, pb := peers(t, pqProps, "aes128gcm16", pqProps, "aes128gcm16")
	c := make(capture, 16)
	e, err := NewEndpoint(Config{Peers: []*Peer{pb}}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Receive(netip.AddrPortFrom(addrB, 500), netip.AddrPortFrom(addrA, 500), initRequest(t, 0x2222, DHCurve25519, pb.IKE))
	resp := c.next(t, "IKE_SA_INIT response")
	if findNotify(resp.Payloads, NoProposalChosen) == nil {
		t.Fatalf("answer %+v, want NO_PROPOSAL_CHOSEN", resp.Payloads)
	}
}

// TestAddKEInitiatorRefuses: a sluice initiator whose responder answers
// IKE_INTERMEDIATE with a bad KEr or an error, or chooses ADDKE without
// announcing IKE_INTERMEDIATE, gives the IKE SA up with an error.
func TestAddKEInitiatorRefuses(t *testing.T) {
	for _, name := range []string{"no announcement", "short ciphertext", "ML-KEM-1024", "no KE", "INVALID_SYNTAX"} {
		t.Run(name, func(t *testing.T) {
			pa, _ := peers(t, pqProps, "aes128gcm16", pqProps, "aes128gcm16")
			c := make(capture, 16)
			e, err := NewEndpoint(Config{Peers: []*Peer{pa}, RetransmitTimeout: time.Second, RetransmitTries: 2}, c)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { _, err := e.Initiate(ctx, "to-b"); errc <- err }()
			req := c.next(t, "IKE_SA_INIT request")
			if findNotify(req.Payloads, IntermediateExchangeSupported) == nil {
				t.Fatal("no N(INTERMEDIATE_EXCHANGE_SUPPORTED) with ADDKE proposals")
			}
			sap, _ := find[*SA](req.Payloads, nil)
			kei, _ := find[*KE](req.Payloads, nil)
			ni, _ := find[*Nonce](req.Payloads, nil)
			h := &handPeer{spii: req.Header.SPIi, spir: 0x3333, ni: ni.Data, nr: randomNonce(),
				local: netip.AddrPortFrom(addrA, 500), remote: netip.AddrPortFrom(addrB, 500)}
			var ok bool
			h.suite, _, ok = selectProposal(pa.IKE, sap.Proposals, false)
			if !ok {
				t.Fatal("no proposal")
			}
			dh, _ := NewDH(DHCurve25519)
			ps := []Payload{&SA{Proposals: []Proposal{{Num: 1, Protocol: ProtoIKE, Transforms: h.suite.transforms()}}},
				&KE{Group: DHCurve25519, Data: dh.Public()}, &Nonce{Data: h.nr}}
			if name != "no announcement" {
				ps = append(ps, &Notify{NType: IntermediateExchangeSupported})
			}
			e.Receive(h.local, h.remote, encode(t, &Message{Header: Header{SPIi: h.spii, SPIr: h.spir, Exchange: IKE_SA_INIT, Flags: FlagResponse}, Payloads: ps}))
			if name != "no announcement" {
				gir, _ := dh.Shared(kei.Data)
				h.derive(t, false, gir)
				var b []byte
				select {
				case b = <-c:
				case <-time.After(5 * time.Second):
					t.Fatal("no IKE_INTERMEDIATE request")
				}
				m, _ := ParseMessage(b)
				if m.Header.Exchange != IKE_INTERMEDIATE || m.Header.MessageID != 1 {
					t.Fatalf("request %v id %d", m.Header.Exchange, m.Header.MessageID)
				}
				h.open(t, b)
				bad := map[string][]Payload{
					"short ciphertext": {&KE{Group: MLKEM768, Data: make([]byte, 100)}},
					"ML-KEM-1024":      {&KE{Group: MLKEM1024, Data: make([]byte, 1568)}},
					"no KE":            nil,
					"INVALID_SYNTAX":   {&Notify{NType: InvalidSyntax}},
				}[name]
				raw, err := h.out.seal(Header{SPIi: h.spii, SPIr: h.spir, Exchange: IKE_INTERMEDIATE, Flags: FlagResponse, MessageID: 1}, nil, bad)
				if err != nil {
					t.Fatal(err)
				}
				e.Receive(h.local, h.remote, raw)
			}
			select {
			case err := <-errc:
				if err == nil || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Initiate: %v", err)
				}
				t.Logf("Initiate: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("Initiate did not fail")
			}
			waitFor(t, func() bool { return len(e.IKESAs()) == 0 })
			if s := e.Stats(); (name != "no announcement") != (s.AddKEFailed == 1) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestAddKERetransmit loses the first IKE_INTERMEDIATE request fragment
// and the first response: the initiator retransmits under the keys of
// the round, the responder (whose keys for the next message have already
// changed) answers the repeated request from its cache, and the IKE SA
// comes up with mirrored keys.
func TestAddKERetransmit(t *testing.T) {
	pa, pb := peers(t, pqProps, "aes128gcm16", pqProps, "aes128gcm16")
	p := newPair(t, pa, pb, func(a, b *Config) { a.RetransmitTimeout = 50 * time.Millisecond })
	var reqDropped, respDropped bool
	p.net.drop = func(n int, from, to netip.AddrPort, pkt []byte) bool {
		h, err := ParseHeader(pkt)
		if err != nil || h.Exchange != IKE_INTERMEDIATE {
			return false
		}
		if !h.IsResponse() && !reqDropped {
			reqDropped = true
			return true
		}
		if h.IsResponse() && !respDropped {
			respDropped = true
			return true
		}
		return false
	}
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	sa, sb := p.a.Stats(), p.b.Stats()
	if !reqDropped || !respDropped || sa.TxRetransmits < 2 || sb.RxRetransmits < 1 || sa.IKEIntermediateInitiated != 1 || sb.IKEIntermediateAnswered != 1 {
		t.Fatalf("stats %+v / %+v", sa, sb)
	}
}
