package ike

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike/ippool"
)

// raPeers are a road warrior (a, with vips) and its gateway (b, with
// pools), sluice on both sides (RFC 7296 section 3.15.4).
func raPeers(t *testing.T, vips []netip.Addr, pools ...*ippool.Pool) (*Peer, *Peer) {
	t.Helper()
	a, b := peers(t, "aes128gcm16-prfsha256-x25519", "aes128gcm16", "aes128gcm16-prfsha256-x25519", "aes128gcm16")
	a.LocalTS, a.VIPs = nil, vips
	a.RemoteTS = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00:2::/64")}
	b.LocalTS = a.RemoteTS
	b.RemoteTS = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	b.RemoteID = Identity{} // any road warrior
	b.Pools = pools
	return a, b
}

func mustPool(t *testing.T, name, addrs string, dns ...string) *ippool.Pool {
	t.Helper()
	var ds []netip.Addr
	for _, d := range dns {
		ds = append(ds, netip.MustParseAddr(d))
	}
	p, err := ippool.New(ippool.Config{Name: name, Addrs: addrs, DNS: ds})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hostSelectors(as ...string) []Selector {
	var out []Selector
	for _, a := range as {
		ad := netip.MustParseAddr(a)
		out = append(out, SelectorFromPrefix(netip.PrefixFrom(ad, ad.BitLen())))
	}
	return out
}

func poolStats(t *testing.T, p *ippool.Pool, online, offline int) {
	t.Helper()
	if s := p.Stats(); s.Online != online || s.Offline != offline {
		t.Fatalf("pool %s: %+v, want %d online and %d offline", p.Name(), s, online, offline)
	}
}

// TestVIPAssigned: the road warrior asks for an address of each family
// (vips = 0.0.0.0, ::), gets the first of each pool with the pools' DNS
// servers, and the Child SA's TSi is narrowed to them on both sides; the
// lease goes offline with the IKE SA and comes back with the identity.
func TestVIPAssigned(t *testing.T) {
	p4 := mustPool(t, "rw4", "10.3.0.0/24", "10.3.0.53")
	p6 := mustPool(t, "rw6", "fd00:3::/112", "fd00:3::53")
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}, p4, p6)
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	cb := p.respChild(t)
	want := []netip.Addr{netip.MustParseAddr("10.3.0.1"), netip.MustParseAddr("fd00:3::1")}
	if !reflect.DeepEqual(ca.VIPs, want) || !reflect.DeepEqual(cb.VIPs, want) {
		t.Fatalf("virtual IPs: initiator %v, responder %v, want %v", ca.VIPs, cb.VIPs, want)
	}
	if sels := hostSelectors("10.3.0.1", "fd00:3::1"); !reflect.DeepEqual(ca.LocalTS, sels) || !reflect.DeepEqual(cb.RemoteTS, sels) {
		t.Fatalf("TSi: initiator's %v, responder's %v, want %v", ca.LocalTS, cb.RemoteTS, sels)
	}
	poolStats(t, p4, 1, 0)
	poolStats(t, p6, 1, 0)
	if s := p.b.Stats(); s.VIPAssigned != 2 {
		t.Fatalf("VIPAssigned %d", s.VIPAssigned)
	}
	if err := p.a.Delete(ctx(t), ca); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p4.Stats().Offline == 1 && p6.Stats().Offline == 1 })
	poolStats(t, p4, 0, 1)
	// Another road warrior takes a new address; the first comes back to
	// its own.
	if got, _ := p4.Acquire("someone else", netip.Addr{}); got != netip.MustParseAddr("10.3.0.2") {
		t.Fatalf("someone else got %v", got)
	}
	ca, err = p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.VIPs, want) {
		t.Fatalf("came back to %v, want %v", ca.VIPs, want)
	}
}

// TestVIPWanted: a road warrior that asks for one address gets it if it
// is free.
func TestVIPWanted(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, []netip.Addr{netip.MustParseAddr("10.3.0.9")}, pool)
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.LocalTS, hostSelectors("10.3.0.9")) {
		t.Fatalf("TSi %v", ca.LocalTS)
	}
}

// TestVIPExhausted: with every address of the pool online the responder
// answers INTERNAL_ADDRESS_FAILURE in place of the Child SA (section
// 3.15.4); the initiator gives the IKE SA up and no lease is left behind.
func TestVIPExhausted(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.9/32")
	if _, err := pool.Acquire("the one before", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified()}, pool)
	p := newPair(t, a, b, nil)
	_, err := p.a.Initiate(ctx(t), "to-b")
	if err == nil || !strings.Contains(err.Error(), "INTERNAL_ADDRESS_FAILURE") {
		t.Fatalf("Initiate: %v, want INTERNAL_ADDRESS_FAILURE", err)
	}
	if s := p.b.Stats(); s.VIPExhausted != 1 || s.VIPAssigned != 0 {
		t.Fatalf("stats %+v", s)
	}
	poolStats(t, pool, 1, 0)
}

// TestVIPNotAsked: a peer with pools whose initiator asks for no address
// negotiates as without them.
func TestVIPNotAsked(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, nil, pool)
	a.LocalTS = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.VIPs) != 0 || ca.LocalTS[0].Start != netip.MustParseAddr("10.1.0.0") {
		t.Fatalf("VIPs %v, TSi %v", ca.VIPs, ca.LocalTS)
	}
	poolStats(t, pool, 0, 0)
}

// TestVIPSurvivesIKERekey: the lease moves to the IKE SA that replaces
// its holder, and goes offline only when that one goes.
func TestVIPSurvivesIKERekey(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified()}, pool)
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.a.RekeyIKE(c, ca)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return p.b.Stats().IKESARekeyed == uint64(i+1) && len(p.b.IKESAs()) == 1 })
		poolStats(t, pool, 1, 0)
	}
	if err := p.a.Delete(ctx(t), ca); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return pool.Stats().Offline == 1 })
	poolStats(t, pool, 0, 1)
}

// TestVIPKeptByChildRekey: a Child SA made by a rekey carries the IKE
// SA's virtual IPs, on both sides, also after a rekey of the IKE SA (the
// gateway keeps the address on its TUN device by them).
func TestVIPKeptByChildRekey(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified()}, pool)
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.3.0.1")}
	for i, ikeRekey := range []bool{false, true} {
		if ikeRekey {
			if err := p.a.RekeyIKE(ctx(t), ca); err != nil {
				t.Fatal(err)
			}
		}
		fresh, err := p.a.Rekey(ctx(t), ca)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { p.bChildMu.Lock(); defer p.bChildMu.Unlock(); return len(p.bChild) == i+2 })
		cb := p.respChild(t)
		if !reflect.DeepEqual(fresh.VIPs, want) || !reflect.DeepEqual(cb.VIPs, want) {
			t.Fatalf("rekey %d (IKE SA rekeyed: %v): VIPs %v and %v, want %v", i+1, ikeRekey, fresh.VIPs, cb.VIPs, want)
		}
		ca = fresh
	}
}

// TestVIPAskedTwice: two requests for an IPv4 address get one, held
// once, and let go with the IKE SA.
func TestVIPAskedTwice(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, []netip.Addr{netip.IPv4Unspecified(), netip.IPv4Unspecified()}, pool)
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.VIPs, []netip.Addr{netip.MustParseAddr("10.3.0.1")}) {
		t.Fatalf("VIPs %v", ca.VIPs)
	}
	if err := p.a.Delete(ctx(t), ca); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return pool.Stats().Offline == 1 })
	if _, online, _ := pool.Lease(netip.MustParseAddr("10.3.0.1")); online {
		t.Fatal("the lease is still held")
	}
}
