package ike_test

// Remote access against strongSwan 5.9.8 (RFC 7296 section 3.15):
// configuration payloads and virtual IPs, both roles.
//
//  1. Namespaces "ss" (charon, 192.0.2.1) and "sl" (sluice's ike.Endpoint,
//     192.0.2.2), joined by a veth, as in strongswan_test.go.
//  2. Road warriors: charon holds one connection per road warrior, each
//     with its own identity and vips = 0.0.0.0 (or ::), all from one
//     address, and initiates them; sluice answers with a pool. charon
//     must list the address sluice assigned, and sluice's Child SA must
//     have its TSi narrowed to it.
//  3. Gateway: charon answers with pools = rw4 (its own pool) and
//     remote_ts = dynamic; sluice initiates with Peer.VIPs = 0.0.0.0 and
//     must get an address of charon's pool as its TSi.
//
// Traffic through such tunnels is e2e's (e2e/roadwarrior_test.go): here
// there is no data plane.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/ike/ippool"
	"github.com/sluicegw/sluice/internal/lab"
)

var raTS = []netip.Prefix{slSite, netip.MustParsePrefix("fd00:2::/64")}

// raConn is one of charon's connections.
type raConn struct{ Name, ID string }

// raBed is charon and sluice's Endpoint for a remote-access test.
type raBed struct {
	ctx         context.Context
	loaded      time.Time // when charon's connections were loaded
	c           *lab.Charon
	ep          *ike.Endpoint
	peer        *ike.Peer
	mu          sync.Mutex
	established []*ike.ChildSA
	deleted     []*ike.ChildSA
}

// raOptions shape one bed.
type raOptions struct {
	conns int // charon's connections (road warriors); 1 when 0
	// charon's swanctl.conf: vips, remote_ts and local_ts of its children,
	// start_action, and its own pool (addrs and dns).
	vips, remoteTS, localTS, start string
	poolAddrs, poolDNS             string
	// sluice's peer: Pools (responder) or VIPs (initiator).
	pools  []*ippool.Pool
	slVIPs []netip.Addr
	// timeout bounds the whole test.
	timeout time.Duration
}

func newRABed(t *testing.T, o raOptions) *raBed {
	t.Helper()
	lab.RequireCharon(t)
	if o.conns == 0 {
		o.conns = 1
	}
	if o.timeout == 0 {
		o.timeout = 90 * time.Second
	}
	if o.start == "" {
		o.start = "none"
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ssNS, err := l.NewNetns(ctx, "ss")
	if err != nil {
		t.Fatal(err)
	}
	slNS, err := l.NewNetns(ctx, "sl")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(ssNS, "wan0", slNS, "wan0"); err != nil {
		t.Fatal(err)
	}
	if err := ssNS.AddAddr("wan0", ssWAN); err != nil {
		t.Fatal(err)
	}
	if err := slNS.AddAddr("wan0", slWAN); err != nil {
		t.Fatal(err)
	}
	if o.localTS != "" {
		// charon as the gateway needs an address in its local selector.
		if err := ssNS.AddAddr("lo", netip.PrefixFrom(ssSite.Addr().Next(), 32)); err != nil {
			t.Fatal(err)
		}
	}

	psk := make([]byte, 16)
	rand.Read(psk)
	pskHex := hex.EncodeToString(psk)
	c := l.NewCharon(ssNS, dir)
	lab.LogOnFailure(t, "charon log", c.Log(), 80)
	render(t, "testdata/strongswan/strongswan.conf.tmpl", c.Conf(), map[string]string{"Vici": c.Vici(), "Log": c.Log()})
	var conns []raConn
	for i := 1; i <= o.conns; i++ {
		conns = append(conns, raConn{Name: fmt.Sprintf("rw%d", i), ID: fmt.Sprintf("rw%d@ra.sluice", i)})
	}
	if o.slVIPs != nil {
		conns = []raConn{{Name: "gw", ID: ssIDStr}}
	}
	swconf := filepath.Join(dir, "swanctl.conf")
	render(t, "testdata/strongswan/swanctl-rw.conf.tmpl", swconf, map[string]any{
		"Conns": conns, "Local": ssWAN.Addr().String(), "Remote": slWAN.Addr().String(), "RemoteID": slIDStr,
		"IKE": "aes128gcm16-prfsha256-x25519", "ESP": "aes128gcm16", "PSK": pskHex,
		"VIPs": o.vips, "Pools": map[bool]string{true: "rw4"}[o.poolAddrs != ""], "LocalTS": o.localTS, "RemoteTS": o.remoteTS,
		"Start": o.start, "PoolAddrs": o.poolAddrs, "PoolDNS": o.poolDNS,
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}

	var udp []*net.UDPConn
	for _, port := range []uint16{500, 4500} {
		uc, err := slNS.ListenUDP(netip.AddrPortFrom(slWAN.Addr(), port))
		if err != nil {
			t.Fatal(err)
		}
		udp = append(udp, uc)
	}
	tr, err := ike.NewUDPTransport(udp...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, "aes128gcm16-prfsha256-x25519")
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, "aes128gcm16")
	if err != nil {
		t.Fatal(err)
	}
	peer := &ike.Peer{Name: "rw", Local: slWAN.Addr(), LocalID: ike.ParseIdentity(slIDStr), PSK: []byte(pskHex),
		IKE: ikeP, ESP: espP, LocalTS: raTS, RemoteTS: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		Pools: o.pools}
	if o.slVIPs != nil {
		peer.Name, peer.Remote, peer.RemoteID = "gw", ssWAN.Addr(), ike.ParseIdentity(ssIDStr)
		peer.LocalTS, peer.VIPs, peer.RemoteTS = nil, o.slVIPs, []netip.Prefix{ssSite}
	}
	b := &raBed{ctx: ctx, c: c, peer: peer}
	cfg := ike.Config{Peers: []*ike.Peer{peer}, RetransmitTimeout: time.Second, RetransmitTries: 5,
		// Every road warrior comes from one address.
		MaxHalfOpen: 4 * o.conns, CookieThreshold: 4 * o.conns, BlockThreshold: 4 * o.conns,
		OnChildSA: func(c *ike.ChildSA) { b.mu.Lock(); b.established = append(b.established, c); b.mu.Unlock() },
		OnDelete:  func(c *ike.ChildSA) { b.mu.Lock(); b.deleted = append(b.deleted, c); b.mu.Unlock() },
	}
	if b.ep, err = ike.NewEndpoint(cfg, tr); err != nil {
		t.Fatal(err)
	}
	ep := b.ep
	t.Cleanup(func() { ep.Close() })
	tr.Serve(b.ep)
	b.loaded = time.Now()
	if err := c.Load(ctx, swconf, len(conns)); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitChildren waits until sluice has reported n Child SAs.
func (b *raBed) waitChildren(t *testing.T, n int, within time.Duration) []*ike.ChildSA {
	t.Helper()
	var out []*ike.ChildSA
	err := lab.WaitFor(b.ctx, fmt.Sprintf("sluice to report %d Child SAs", n), within, 20*time.Millisecond, func() (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.established) >= n {
			out = slices.Clone(b.established)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
	}
	return out
}

// vipRE finds the virtual IPs swanctl --list-sas shows after an IKE SA's
// local endpoint: "local  'id' @ 192.0.2.1[4500] [10.3.0.1 fd00:3::1]".
var vipRE = regexp.MustCompile(`local\s+'([^']*)' @ \S+ \[([0-9a-f.: ]+)\]`)

// charonVIPs returns the virtual IPs charon holds, by identity.
func (b *raBed) charonVIPs(t *testing.T) map[string][]netip.Addr {
	t.Helper()
	out, err := b.c.Swanctl(b.ctx, "--list-sas")
	if err != nil {
		t.Fatal(err)
	}
	vips := map[string][]netip.Addr{}
	for _, m := range vipRE.FindAllStringSubmatch(out, -1) {
		for _, s := range strings.Fields(m[2]) {
			vips[m[1]] = append(vips[m[1]], netip.MustParseAddr(s))
		}
	}
	return vips
}

// TestStrongSwanRoadWarrior: charon as a road warrior with vips = 0.0.0.0,
// with vips = ::, and with both, against sluice with pools: it gets the
// first address of each pool, sluice's Child SA narrows TSi to it, the
// lease goes offline when charon leaves and is its again when it comes
// back.
func TestStrongSwanRoadWarrior(t *testing.T) {
	for _, c := range []struct {
		name, vips, remoteTS string
		want                 []string
	}{
		{"ipv4", "0.0.0.0", "10.2.0.0/24", []string{"10.3.0.1"}},
		{"ipv6", "::", "fd00:2::/64", []string{"fd00:3::1"}},
		{"dual", "0.0.0.0,::", "10.2.0.0/24,fd00:2::/64", []string{"10.3.0.1", "fd00:3::1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p4 := mustRAPool(t, "rw4", "10.3.0.0/24", "10.3.0.53")
			p6 := mustRAPool(t, "rw6", "fd00:3::/112", "fd00:3::53")
			b := newRABed(t, raOptions{vips: c.vips, remoteTS: c.remoteTS, pools: []*ippool.Pool{p4, p6}})
			start := time.Now()
			if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--ike", "rw1", "--timeout", "20"); err != nil {
				t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
			}
			child := b.waitChildren(t, 1, 10*time.Second)[0]
			var want []netip.Addr
			var sels []string
			for _, w := range c.want {
				a := netip.MustParseAddr(w)
				want = append(want, a)
				sels = append(sels, netip.PrefixFrom(a, a.BitLen()).String())
			}
			t.Logf("road warrior up in %v: VIPs %v, sluice's TS %v === %v", time.Since(start).Round(time.Millisecond), child.VIPs, child.LocalTS, child.RemoteTS)
			if got := b.charonVIPs(t)["rw1@ra.sluice"]; !slices.Equal(got, want) {
				t.Errorf("charon holds virtual IPs %v, want %v", got, want)
			}
			if !slices.Equal(child.VIPs, want) || fmt.Sprint(child.RemoteTS) != fmt.Sprint(selectorsOf(t, sels)) {
				t.Errorf("sluice's Child SA: VIPs %v, TSi %v; want %v", child.VIPs, child.RemoteTS, sels)
			}
			// charon has no DNS handler loaded here: it logs that it
			// processed the attributes (their values are TestCPRequestReply's).
			data, _ := b.c.LogTail(400)
			for _, w := range want {
				attr := map[bool]string{true: "INTERNAL_IP4_DNS", false: "INTERNAL_IP6_DNS"}[w.Is4()]
				if !strings.Contains(data, "processing "+attr+" attribute") {
					t.Errorf("charon did not receive %s", attr)
				}
			}
			online := func(p *ippool.Pool) int { return p.Stats().Online }
			if online(p4)+online(p6) != len(want) {
				t.Errorf("pools: %+v %+v", p4.Stats(), p6.Stats())
			}

			// charon leaves: the leases go offline; it comes back to them.
			if out, err := b.c.Swanctl(b.ctx, "--terminate", "--ike", "rw1", "--timeout", "10"); err != nil {
				t.Fatalf("charon terminating: %v\n%s", err, out)
			}
			err := lab.WaitFor(b.ctx, "the leases to go offline", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
				return p4.Stats().Offline+p6.Stats().Offline == len(want), nil
			})
			if err != nil {
				t.Fatalf("%v: %+v %+v", err, p4.Stats(), p6.Stats())
			}
			if _, err := p4.Acquire("another road warrior", netip.Addr{}); err != nil {
				t.Fatal(err)
			}
			if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--ike", "rw1", "--timeout", "20"); err != nil {
				t.Fatalf("charon initiating again: %v\n%s", err, out)
			}
			b.waitChildren(t, 2, 10*time.Second)
			if got := b.charonVIPs(t)["rw1@ra.sluice"]; !slices.Equal(got, want) {
				t.Errorf("back with virtual IPs %v, want %v again", got, want)
			}
		})
	}
}

// TestStrongSwanRoadWarriorExhausted: a pool of one address, two road
// warriors: the second gets INTERNAL_ADDRESS_FAILURE and no Child SA
// (RFC 7296 section 3.15.4).
func TestStrongSwanRoadWarriorExhausted(t *testing.T) {
	pool := mustRAPool(t, "rw4", "10.3.0.9/32")
	b := newRABed(t, raOptions{conns: 2, vips: "0.0.0.0", remoteTS: "10.2.0.0/24", pools: []*ippool.Pool{pool}})
	if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--ike", "rw1", "--timeout", "20"); err != nil {
		t.Fatalf("charon initiating: %v\n%s", err, out)
	}
	out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--ike", "rw2", "--timeout", "20")
	if err == nil {
		t.Fatalf("the second road warrior got a Child SA from an exhausted pool:\n%s", out)
	}
	log, _ := b.c.LogTail(200)
	if !strings.Contains(log, "INTERNAL_ADDRESS_FAILURE") {
		t.Errorf("charon's log does not show INTERNAL_ADDRESS_FAILURE:\n%s", lab.Tail(log, 30))
	}
	if s := b.ep.Stats(); s.VIPExhausted != 1 || s.VIPAssigned != 1 {
		t.Errorf("stats: assigned %d, exhausted %d", s.VIPAssigned, s.VIPExhausted)
	}
	if got := b.charonVIPs(t); len(got["rw1@ra.sluice"]) != 1 || len(got["rw2@ra.sluice"]) != 0 {
		t.Errorf("charon's virtual IPs: %v", got)
	}
}

// TestStrongSwanRoadWarriorNoVIP: charon without vips against sluice with
// pools: a connection with pools requires a virtual IP (as charon's own
// does), so charon gets FAILED_CP_REQUIRED (RFC 7296 section 3.10.1) and
// no Child SA, and no address is leased.
func TestStrongSwanRoadWarriorNoVIP(t *testing.T) {
	pool := mustRAPool(t, "rw4", "10.3.0.0/24")
	b := newRABed(t, raOptions{remoteTS: "10.2.0.0/24", pools: []*ippool.Pool{pool}})
	out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--ike", "rw1", "--timeout", "20")
	if err == nil {
		t.Fatalf("a road warrior that asked for no virtual IP got a Child SA:\n%s", out)
	}
	log, _ := b.c.LogTail(200)
	if !strings.Contains(log, "FAILED_CP_REQUIRED") {
		t.Errorf("charon's log does not show FAILED_CP_REQUIRED:\n%s", lab.Tail(log, 30))
	}
	if s := b.ep.Stats(); s.VIPAssigned != 0 || s.ChildSAEstablished != 0 {
		t.Errorf("stats: assigned %d, Child SAs %d", s.VIPAssigned, s.ChildSAEstablished)
	}
	if s := pool.Stats(); s.Online+s.Offline != 0 {
		t.Errorf("pool: %+v", s)
	}
}

// TestStrongSwanRoadWarriors: many road warriors from one namespace (one
// charon, one connection and identity each, started together with
// start_action = start) against one sluice peer with a pool: each gets an
// address of its own: 200 (20 with -short; RA_ROAD_WARRIORS=n measures
// n).
func TestStrongSwanRoadWarriors(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	if s := os.Getenv("RA_ROAD_WARRIORS"); s != "" {
		// A measurement: how many this machine takes (at most a /20).
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 4000 {
			t.Fatalf("RA_ROAD_WARRIORS=%q: want 1 to 4000", s)
		}
	}
	pool := mustRAPool(t, "rw4", "10.3.0.0/20")
	b := newRABed(t, raOptions{conns: n, vips: "0.0.0.0", remoteTS: "10.2.0.0/24", start: "start", pools: []*ippool.Pool{pool},
		timeout: 4 * time.Minute})
	children := b.waitChildren(t, n, 3*time.Minute)
	took := time.Since(b.loaded)
	seen := map[netip.Addr]bool{}
	for _, c := range children[:n] {
		if len(c.VIPs) != 1 || seen[c.VIPs[0]] || !pool.Contains(c.VIPs[0]) {
			t.Fatalf("Child SA with VIPs %v (seen %d)", c.VIPs, len(seen))
		}
		seen[c.VIPs[0]] = true
	}
	s := b.ep.Stats()
	t.Logf("%d road warriors up in %v (load to the last Child SA); pool %+v; sluice: IKE SAs %d, cookies %d, retransmits rx %d tx %d",
		n, took.Round(time.Millisecond), pool.Stats(), s.IKESAEstablished, s.CookiesSent, s.RxRetransmits, s.TxRetransmits)
	err := lab.WaitFor(b.ctx, "charon to hold every virtual IP", 30*time.Second, 200*time.Millisecond, func() (bool, error) {
		return len(b.charonVIPs(t)) == n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := pool.Stats(); st.Online != n {
		t.Fatalf("pool %+v, want %d online", st, n)
	}
}

// TestStrongSwanVIPInitiator: sluice asks charon, the gateway with a
// pool, for a virtual IP, and takes it as its Child SA's TSi.
func TestStrongSwanVIPInitiator(t *testing.T) {
	b := newRABed(t, raOptions{slVIPs: []netip.Addr{netip.IPv4Unspecified()}, localTS: ssSite.String(), remoteTS: "dynamic",
		poolAddrs: "10.4.0.0/24", poolDNS: "10.4.0.53"})
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	child, err := b.ep.Initiate(ctx, "gw")
	if err != nil {
		t.Fatalf("sluice initiating: %v (stats %+v)", err, b.ep.Stats())
	}
	want := netip.MustParseAddr("10.4.0.1")
	t.Logf("sluice's Child SA: VIPs %v, TS %v === %v", child.VIPs, child.LocalTS, child.RemoteTS)
	if !slices.Equal(child.VIPs, []netip.Addr{want}) || fmt.Sprint(child.LocalTS) != fmt.Sprint(selectorsOf(t, []string{"10.4.0.1/32"})) {
		t.Fatalf("VIPs %v, TSi %v; want %v", child.VIPs, child.LocalTS, want)
	}
	out, err := b.c.Swanctl(b.ctx, "--list-sas")
	if err != nil || !strings.Contains(out, "remote 10.4.0.1/32") {
		t.Fatalf("charon's Child SA does not go to 10.4.0.1/32: %v\n%s", err, out)
	}
	pools, err := b.c.Swanctl(b.ctx, "--list-pools", "--leases")
	if err != nil || !strings.Contains(pools, "10.4.0.1") || !strings.Contains(pools, "online") {
		t.Fatalf("charon's pool: %v\n%s", err, pools)
	}
}

func mustRAPool(t *testing.T, name, addrs string, dns ...string) *ippool.Pool {
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

func selectorsOf(t *testing.T, prefixes []string) []ike.Selector {
	t.Helper()
	var out []ike.Selector
	for _, p := range prefixes {
		out = append(out, ike.SelectorFromPrefix(netip.MustParsePrefix(p)))
	}
	return out
}
