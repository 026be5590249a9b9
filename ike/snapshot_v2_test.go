package ike

import (
	"errors"
	"hash/crc32"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/ike/ippool"
)

// standby returns an Endpoint with cfg's settings and the one peer peer
// (on its own network: it sends nowhere), closed at the test's end.
func standby(t *testing.T, cfg Config, peer *Peer) *Endpoint {
	t.Helper()
	cfg.Peers = []*Peer{peer}
	cfg.OnSnapshot, cfg.OnChildSA, cfg.OnDelete = nil, nil, nil
	e, err := NewEndpoint(cfg, memPort{newMemNet(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// adoptedSA returns the one IKE SA e holds.
func adoptedSA(t *testing.T, e *Endpoint) *ikeSA {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.sas) != 1 {
		t.Fatalf("%d IKE SAs, want 1", len(e.sas))
	}
	for _, sa := range e.sas {
		return sa
	}
	return nil
}

// TestAdoptLeasesVIPs: a gateway's snapshot of a road warrior's IKE SA
// carries its virtual IP, its lease and the MOBIKE flag; the standby that
// adopts it leases the same address to the same identity in its own pool
// (so that a new road warrior gets another), its Child SA carries the
// address, and UPDATE_SA_ADDRESSES would be accepted (mobike). An address
// that another identity holds online in the standby's pool, or a pool the
// standby's peer does not have, refuses the adoption without state.
func TestAdoptLeasesVIPs(t *testing.T) {
	vip := netip.MustParseAddr("10.3.0.1")
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified()}, mustPool(t, "rw4", "10.3.0.0/24"))
	var cb Config
	p := newPair(t, a, b, func(_, bc *Config) { cb = *bc })
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.VIPs, []netip.Addr{vip}) {
		t.Fatalf("virtual IPs %v", ca.VIPs)
	}
	waitFor(t, settled(p))
	snaps := p.b.Snapshots()
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	data := snaps[0].Data
	s, err := decodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	id := a.LocalID.String()
	if !reflect.DeepEqual(s.vips, []netip.Addr{vip}) || !reflect.DeepEqual(s.leases, []snapLease{{pool: "rw4", addr: vip, id: id}}) ||
		s.flags&snapMOBIKE == 0 {
		t.Fatalf("snapshot: vips %v, leases %+v, flags %#x", s.vips, s.leases, s.flags)
	}

	// The standby's own pool, empty.
	pool := mustPool(t, "rw4", "10.3.0.0/24")
	pb := *b
	pb.Pools = []*ippool.Pool{pool}
	var children []*ChildSA
	cfg := cb
	e := standby(t, cfg, &pb)
	e.cfg.OnChildSA = func(c *ChildSA) { children = append(children, c) }
	if err := e.Adopt(data); err != nil {
		t.Fatal(err)
	}
	if who, online, ok := pool.Lease(vip); !ok || !online || who != id {
		t.Fatalf("standby's pool: %v leased to %q (online %v, %v), want %q online", vip, who, online, ok, id)
	}
	if got, _ := pool.Acquire("someone else", netip.Addr{}); got != netip.MustParseAddr("10.3.0.2") {
		t.Fatalf("a new road warrior got %v on the standby", got)
	}
	sa := adoptedSA(t, e)
	if !sa.mobike || !reflect.DeepEqual(sa.vips, []netip.Addr{vip}) || len(sa.leases) != 1 {
		t.Fatalf("adopted IKE SA: mobike %v, vips %v, leases %+v", sa.mobike, sa.vips, sa.leases)
	}
	if len(children) != 1 || !reflect.DeepEqual(children[0].VIPs, []netip.Addr{vip}) {
		t.Fatalf("adopted Child SAs %+v", children)
	}
	// The IKE SA's end lets go of the lease (offline, kept for id).
	if err := e.Release(s.spii, s.spir); err != nil {
		t.Fatal(err)
	}
	if who, online, ok := pool.Lease(vip); !ok || online || who != id {
		t.Fatalf("after release: %v leased to %q (online %v, %v)", vip, who, online, ok)
	}

	// The address is someone else's here: refused, nothing changed.
	taken := mustPool(t, "rw4", "10.3.0.0/24")
	if got, _ := taken.Acquire("someone else", netip.Addr{}); got != vip {
		t.Fatalf("someone else got %v", got)
	}
	pb.Pools = []*ippool.Pool{taken}
	e2 := standby(t, cfg, &pb)
	if err := e2.Adopt(data); !errors.Is(err, ippool.ErrTaken) {
		t.Fatalf("adopting an address leased to another: %v, want ErrTaken", err)
	}
	if e2.Stats().Adopted != 0 || len(e2.IKESAs()) != 0 {
		t.Fatal("a refused snapshot left state")
	}
	poolStats(t, taken, 1, 0)
	if who, _, _ := taken.Lease(vip); who != "someone else" {
		t.Fatalf("the address went to %q", who)
	}

	// No pool of that name or with that address.
	pb.Pools = []*ippool.Pool{mustPool(t, "other", "10.9.0.0/24")}
	e3 := standby(t, cfg, &pb)
	if err := e3.Adopt(data); err == nil || !strings.Contains(err.Error(), "does not have") {
		t.Fatalf("adopting without the pool: %v", err)
	}
	if len(e3.IKESAs()) != 0 {
		t.Fatal("a refused snapshot left state")
	}
}

// TestAdoptAddKE: the standby shows the suite of an IKE SA made with an
// additional key exchange (RFC 9370) as the owner does.
func TestAdoptAddKE(t *testing.T) {
	const props = "aes256gcm16-prfsha384-x25519-ke1_mlkem768"
	a, b := peers(t, props, "aes128gcm16", props, "aes128gcm16")
	var ca Config
	p := newPair(t, a, b, func(ac, _ *Config) { ca = *ac })
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(p))
	snaps := p.a.Snapshots()
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	e := standby(t, ca, a)
	if err := e.Adopt(snaps[0].Data); err != nil {
		t.Fatal(err)
	}
	if l := e.IKESAs(); len(l) != 1 || l[0].Suite != props {
		t.Fatalf("adopted IKE SAs %+v, want one of %s", l, props)
	}
}

// reseal gives data version v and a valid checksum.
func reseal(data []byte, v byte) []byte {
	w := &snapWriter{b: append([]byte{v}, data[1:len(data)-6]...)}
	w.u32(tagEnd, crc32.Checksum(w.b, castagnoli))
	return w.b
}

// TestSnapshotVersions: a version 1 snapshot (before virtual IPs, leases,
// MOBIKE and additional key exchanges) still decodes; one of version 1
// with a field of version 2, and one of a version to come, are refused.
func TestSnapshotVersions(t *testing.T) {
	old := snapSeed()
	old.vips, old.leases, old.suite.AddKE = nil, nil, [7]uint16{}
	data := old.encode()
	if data[0] != snapVersion {
		t.Fatalf("written as version %d", data[0])
	}
	got, err := decodeSnapshot(reseal(data, snapVersion1))
	if err != nil {
		t.Fatalf("version 1: %v", err)
	}
	if !reflect.DeepEqual(got, old) {
		t.Fatalf("version 1:\n got %+v\nwant %+v", got, old)
	}
	for _, s := range []*snapIKE{snapSeed()} {
		if _, err := decodeSnapshot(reseal(s.encode(), snapVersion1)); err == nil || !strings.Contains(err.Error(), "version 1 with field") {
			t.Fatalf("version 1 with version 2's fields: %v", err)
		}
	}
	if _, err := decodeSnapshot(reseal(data, snapVersion+1)); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("a version to come: %v", err)
	}
}
