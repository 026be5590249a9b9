package ike

import (
	"context"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"sync"
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

// TestVIPNotAsked: a connection with pools requires a virtual IP (as
// strongSwan's does): an initiator that sends no CFG_REQUEST gets
// FAILED_CP_REQUIRED (RFC 7296 section 3.10.1) in place of the Child SA,
// and no address is leased.
func TestVIPNotAsked(t *testing.T) {
	pool := mustPool(t, "rw", "10.3.0.0/24")
	a, b := raPeers(t, nil, pool)
	a.LocalTS = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}
	p := newPair(t, a, b, nil)
	_, err := p.a.Initiate(ctx(t), "to-b")
	if err == nil || !strings.Contains(err.Error(), "FAILED_CP_REQUIRED") {
		t.Fatalf("Initiate: %v, want FAILED_CP_REQUIRED", err)
	}
	if s := p.b.Stats(); s.VIPAssigned != 0 || s.ChildSAEstablished != 0 {
		t.Fatalf("responder stats %+v", s)
	}
	poolStats(t, pool, 0, 0)
}

// TestVIPNoPoolsNotAsked: without pools nothing is required; the Child
// SA is negotiated from the selectors as for a site-to-site peer.
func TestVIPNoPoolsNotAsked(t *testing.T) {
	a, b := raPeers(t, nil)
	a.LocalTS = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}
	p := newPair(t, a, b, nil)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.VIPs) != 0 || ca.LocalTS[0].Start != netip.MustParseAddr("10.1.0.0") {
		t.Fatalf("VIPs %v, TSi %v", ca.VIPs, ca.LocalTS)
	}
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

// hostileCP is what the hostile responder of TestVIPHostileReply puts
// in its IKE_AUTH response, by the name of its peer ("hostilecp-..."):
// the CFG_REPLY's attributes and the TSi, in place of its own.
var hostileCP sync.Map // string -> hostileReply

type hostileReply struct {
	attrs []ConfigAttr
	tsi   []Selector
}

// hostileCPTask rewrites the responder's CFG_REPLY and TSi as hostileCP
// says, once the initiator is authenticated (after the configuration and
// Child SA tasks built them).
type hostileCPTask struct{}

func init() {
	registerTask(IKE_AUTH, orderChild+1, func(sa *ikeSA) task {
		if sa.initiator {
			return nil
		}
		return hostileCPTask{}
	})
}

func (hostileCPTask) build(x *exchange) taskStatus {
	if !x.setup.peerAuthed {
		return taskMore
	}
	if x.sa.peer == nil || !strings.HasPrefix(x.sa.peer.Name, "hostilecp-") {
		return taskDone
	}
	v, ok := hostileCP.Load(x.sa.peer.Name)
	if !ok {
		return taskDone
	}
	h := v.(hostileReply)
	for _, p := range x.out {
		switch p := p.(type) {
		case *CP:
			p.Attrs = h.attrs
		case *TS:
			if !p.Responder {
				p.Selectors = h.tsi
			}
		}
	}
	return taskDone
}

func (hostileCPTask) process(*exchange) taskStatus { return taskMore }

// vip4 and vip6 are INTERNAL_IP4_ADDRESS and INTERNAL_IP6_ADDRESS
// attributes carrying s, whatever it is (0.0.0.0 and :: too).
func vip4(s string) ConfigAttr {
	return ConfigAttr{Type: AttrInternalIP4Address, Value: netip.MustParseAddr(s).AsSlice()}
}

func vip6(s string) ConfigAttr {
	return ConfigAttr{Type: AttrInternalIP6Address, Value: append(netip.MustParseAddr(s).AsSlice(), 128)}
}

// TestVIPHostileReply: a responder that assigns what it likes (two IPv4
// addresses, a family not asked for, loopback, link-local, multicast,
// unspecified, broadcast, IPv4-mapped, an address outside the TSi it
// narrowed to) gets one address per family asked for, inside that TSi;
// each of the rest is refused, counted and named with its reason in a
// WARN line, and the Child SA carries only what was taken.
func TestVIPHostileReply(t *testing.T) {
	sel := func(p string) Selector { return SelectorFromPrefix(netip.MustParsePrefix(p)) }
	for _, c := range []struct {
		name    string
		asked   []netip.Addr
		attrs   []ConfigAttr
		tsi     []Selector
		want    []netip.Addr
		refused []string // "address: reason" in the WARN line
	}{
		{"ipv4-asked", []netip.Addr{netip.IPv4Unspecified()},
			[]ConfigAttr{vip4("10.9.9.9"), vip4("127.0.0.1"), vip6("fe80::1"), vip4("224.0.0.1"), vip4("0.0.0.0"),
				vip4("255.255.255.255"), vip6("fd00:3::1"), vip6("::ffff:10.3.0.7"), vip4("169.254.1.1"), vip4("10.3.0.1"), vip4("10.3.0.2")},
			[]Selector{sel("10.3.0.0/24")},
			[]netip.Addr{netip.MustParseAddr("10.3.0.1")},
			[]string{"10.9.9.9: outside the Child SA's TSi (10.3.0.0/24)", "127.0.0.1: a loopback address", "fe80::1: a link-local address",
				"224.0.0.1: a multicast address", "0.0.0.0: the unspecified address", "255.255.255.255: the broadcast address",
				"fd00:3::1: of a family not asked for", "::ffff:10.3.0.7: an IPv4-mapped IPv6 address", "169.254.1.1: a link-local address",
				"10.3.0.2: a second address of its family"}},
		{"dual-stack", []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()},
			[]ConfigAttr{vip6("::1"), vip6("ff02::1"), vip6("::"), vip6("fd00:9::1"), vip6("fd00:3::1"), vip6("fd00:3::2"), vip4("10.3.0.1")},
			[]Selector{sel("10.3.0.0/24"), sel("fd00:3::/112")},
			[]netip.Addr{netip.MustParseAddr("fd00:3::1"), netip.MustParseAddr("10.3.0.1")},
			[]string{"::1: a loopback address", "ff02::1: a multicast address", "::: the unspecified address",
				"fd00:9::1: outside the Child SA's TSi (10.3.0.0/24 fd00:3::/112)", "fd00:3::2: a second address of its family"}},
		// Nothing usable: the Child SA comes up without a virtual IP
		// (as with no CFG_REPLY), and nothing goes on the TUN device.
		{"none-usable", []netip.Addr{netip.IPv4Unspecified()},
			[]ConfigAttr{vip4("127.0.0.1")}, []Selector{sel("10.3.0.0/24")}, nil,
			[]string{"127.0.0.1: a loopback address"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p4 := mustPool(t, "rw4", "10.3.0.0/24")
			p6 := mustPool(t, "rw6", "fd00:3::/112")
			a, b := raPeers(t, c.asked, p4, p6)
			b.Name = "hostilecp-" + c.name
			hostileCP.Store(b.Name, hostileReply{attrs: c.attrs, tsi: c.tsi})
			t.Cleanup(func() { hostileCP.Delete(b.Name) })
			p, log := debugPair(t, a, b, slog.LevelInfo)
			ca, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ca.VIPs, c.want) {
				t.Errorf("VIPs %v, want %v", ca.VIPs, c.want)
			}
			if s := p.a.Stats(); s.VIPRefused != uint64(len(c.refused)) {
				t.Errorf("VIPRefused %d, want %d", s.VIPRefused, len(c.refused))
			}
			lines := log.lines("level=WARN", "side=a", "virtual IPs the responder assigned refused")
			if len(lines) != 1 {
				t.Fatalf("WARN lines %q\n%s", lines, log.String())
			}
			for _, r := range c.refused {
				if !strings.Contains(lines[0], r) {
					t.Errorf("the WARN line does not say %q: %s", r, lines[0])
				}
			}
			// A rekey's Child SA carries what was taken, no more.
			fresh, err := p.a.Rekey(ctx(t), ca)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fresh.VIPs, c.want) {
				t.Errorf("rekeyed VIPs %v, want %v", fresh.VIPs, c.want)
			}
		})
	}
}

// TestAcceptVIPs covers acceptVIPs' rules one at a time.
func TestAcceptVIPs(t *testing.T) {
	any4 := []netip.Addr{netip.IPv4Unspecified()}
	ts := []Selector{SelectorFromPrefix(netip.MustParsePrefix("10.3.0.0/24"))}
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, c := range []struct {
		assigned, asked []netip.Addr
		tsi             []Selector
		want            []netip.Addr
		refused         int
	}{
		{addrs("10.3.0.1"), any4, ts, addrs("10.3.0.1"), 0},
		{addrs("10.3.0.1"), addrs("10.3.0.9"), ts, addrs("10.3.0.1"), 0}, // another than asked: the responder decides
		{addrs("10.3.0.1"), any4, nil, nil, 1},                           // no TSi: no Child SA
		{addrs("10.3.0.1"), addrs("::"), ts, nil, 1},
		{addrs("10.3.0.255", "10.3.0.1"), any4, ts, addrs("10.3.0.255"), 1},
		{nil, any4, ts, nil, 0},
	} {
		got, refused := acceptVIPs(c.assigned, c.asked, c.tsi)
		if !reflect.DeepEqual(got, c.want) || len(refused) != c.refused {
			t.Errorf("acceptVIPs(%v, %v, %v) = %v, %v; want %v and %d refused", c.assigned, c.asked, c.tsi, got, refused, c.want, c.refused)
		}
	}
}
