package ike

import (
	"crypto/x509"
	"testing"
)

// TestSetPeersCRLRotation: a peer given again with only new revocation
// lists, or a new revocation policy, keeps its IKE and Child SAs (the
// lists apply to the next authentication, as in strongSwan); the same
// lists again change nothing, and a peer changed in anything else as well
// is no CRL rotation.
func TestSetPeersCRLRotation(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.CRLs = []*x509.RevocationList{{Raw: []byte("list 1")}}
	p := newPair(t, pa, pb, nil)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	before := ikeSAsOf(p.a, "to-b")

	na := *pa
	na.CRLs = []*x509.RevocationList{{Raw: []byte("list 1")}, {Raw: []byte("list 2")}}
	if !na.RotatesCRLs(pa) {
		t.Fatal("new lists are not a CRL rotation")
	}
	strict := na
	strict.Revocation = RevocationStrict
	if !strict.RotatesCRLs(&na) {
		t.Fatal("a new policy is not a CRL rotation")
	}
	same := *pa
	same.CRLs = []*x509.RevocationList{{Raw: []byte("list 1")}}
	if same.RotatesCRLs(pa) {
		t.Fatal("the same lists are a CRL rotation")
	}
	other := na
	other.PSK = []byte("another")
	if other.RotatesCRLs(pa) {
		t.Fatal("a new key and new lists are a CRL rotation")
	}

	if err := p.a.SetPeers([]*Peer{&na}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return idle(p.a) && idle(p.b) })
	after := ikeSAsOf(p.a, "to-b")
	if len(before) != 1 || len(after) != 1 || after[0].SPIi != before[0].SPIi || len(after[0].Children) != 1 ||
		after[0].Children[0] != before[0].Children[0] {
		t.Fatalf("a CRL reload changed the SAs: before %+v, after %+v", before, after)
	}
	p.a.mu.Lock()
	var on *Peer
	for _, sa := range p.a.sas {
		on = sa.peer
	}
	p.a.mu.Unlock()
	if on != &na {
		t.Fatal("the IKE SA did not go to the reloaded peer")
	}
}
