package ike

import (
	"net/netip"
	"testing"
)

// ikeSAsOf returns e's IKE SAs with peer, by our SPI.
func ikeSAsOf(e *Endpoint, peer string) []IKESAInfo {
	var out []IKESAInfo
	for _, s := range e.IKESAs() {
		if s.Peer == peer {
			out = append(out, s)
		}
	}
	return out
}

// TestSetPeers: a peer added by SetPeers is initiated to beside the
// existing one, whose IKE and Child SAs stay as they were; a peer taken
// out has its IKE SA deleted, the peer told; a bad peer is refused.
func TestSetPeers(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	before := ikeSAsOf(p.a, "to-b")

	// A second connection between the same hosts, with identities and
	// selectors of its own.
	pa2, pb2 := *pa, *pb
	pa2.Name, pa2.LocalID = "to-b2", ParseIdentity("a2@example.net")
	pa2.LocalTS, pa2.RemoteTS = []netip.Prefix{netip.MustParsePrefix("10.7.0.0/24")}, []netip.Prefix{netip.MustParsePrefix("10.8.0.0/24")}
	pb2.Name, pb2.RemoteID = "to-a2", pa2.LocalID
	pb2.LocalTS, pb2.RemoteTS = pa2.RemoteTS, pa2.LocalTS
	if err := p.b.SetPeers([]*Peer{pb, &pb2}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.SetPeers([]*Peer{pa, &pa2}); err != nil {
		t.Fatal(err)
	}
	c2, err := p.a.Initiate(ctx(t), "to-b2")
	if err != nil {
		t.Fatal(err)
	}
	checkTS(t, c2, "10.7.0.0/24", "10.8.0.0/24")
	after := ikeSAsOf(p.a, "to-b")
	if len(before) != 1 || len(after) != 1 || after[0].SPIi != before[0].SPIi || after[0].SPIr != before[0].SPIr ||
		len(after[0].Children) != 1 || after[0].Children[0] != before[0].Children[0] {
		t.Fatalf("the unchanged peer's SAs changed: before %+v, after %+v", before, after)
	}
	if n := len(p.b.IKESAs()); n != 2 {
		t.Fatalf("b has %d IKE SAs, want 2", n)
	}

	// to-b out of a's configuration: its IKE SA goes, at b too.
	if err := p.a.SetPeers([]*Peer{&pa2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		l := p.b.IKESAs()
		return len(ikeSAsOf(p.a, "to-b")) == 0 && len(l) == 1 && l[0].Peer == "to-a2"
	})
	if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
		t.Fatal("initiated to a peer taken out")
	}
	if l := ikeSAsOf(p.a, "to-b2"); len(l) != 1 || len(l[0].Children) != 1 || l[0].Children[0] != c2 {
		t.Fatalf("to-b2 after to-b went: %+v", l)
	}

	bad := pa2
	bad.Name, bad.PSK = "bad", nil
	if err := p.a.SetPeers([]*Peer{&pa2, &bad}); err == nil {
		t.Fatal("a peer without credentials accepted")
	}
	if l := ikeSAsOf(p.a, "to-b2"); len(l) != 1 {
		t.Fatal("a refused SetPeers changed the SAs")
	}
}

// TestSetPeersPSKRotation: a peer given again with only a new pre-shared
// key keeps its IKE and Child SAs (a key rotation loses nothing); the next
// IKE SA with the peer authenticates with the new key, and a peer changed
// in anything else still loses its SAs.
func TestSetPeersPSKRotation(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	before := ikeSAsOf(p.a, "to-b")

	na, nb := *pa, *pb
	na.PSK, nb.PSK = []byte("rotated secret"), []byte("rotated secret")
	if err := p.b.SetPeers([]*Peer{&nb}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.SetPeers([]*Peer{&na}); err != nil {
		t.Fatal(err)
	}
	// A retired SA is deleted with an exchange: wait until both ends are
	// idle, and count what is left.
	waitFor(t, func() bool { return idle(p.a) && idle(p.b) })
	after := ikeSAsOf(p.a, "to-b")
	if len(before) != 1 || len(after) != 1 || after[0].SPIi != before[0].SPIi || len(after[0].Children) != 1 ||
		after[0].Children[0] != before[0].Children[0] {
		t.Fatalf("a PSK rotation changed the SAs: before %+v, after %+v", before, after)
	}
	if n := len(p.b.IKESAs()); n != 1 {
		t.Fatalf("b has %d IKE SAs after the rotation, want 1", n)
	}

	// Out and in again: a fresh IKE SA, authenticated with the new key.
	if err := p.a.SetPeers(nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(p.a.IKESAs()) == 0 && len(p.b.IKESAs()) == 0 })
	if err := p.a.SetPeers([]*Peer{&na}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatalf("initiating with the rotated key: %v", err)
	}

	// Anything else changed: the SAs go.
	moved := na
	moved.LocalTS = []netip.Prefix{netip.MustParsePrefix("10.1.1.0/24")}
	if err := p.a.SetPeers([]*Peer{&moved}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(ikeSAsOf(p.a, "to-b")) == 0 })
}
