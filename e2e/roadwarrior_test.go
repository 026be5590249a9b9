package e2e_test

// Remote access through real gateways (RFC 7296 section 3.15): a sluice
// gateway with a [[pool]] and strongSwan 5.9.8 as the road warrior
// (vips = 0.0.0.0 or ::), and a sluice gateway with vips opposite
// strongSwan with pools; ping goes through each tunnel both ways, from
// and to the virtual IP.
//
//	 "ss": charon (kernel-libipsec)           "gw": sluice run
//	 wan0 192.0.2.1 ========================= wan0 192.0.2.2
//	 road warrior: its virtual IP from        sluice0 10.2.0.1/24, fd00:2::1/64;
//	 sluice's pool 10.3.0.0/24 (fd00:3::/112)  routes the pool into the tunnel
//
//	 gateway: 10.1.0.1 on lo, pool            sluice0 gets 10.4.0.1/32 from charon,
//	 10.4.0.0/24                               the source of its route to 10.1.0.0/24

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// raBed is charon in "ss" and a sluice gateway in "gw".
type raBed struct {
	t    *testing.T
	ss   *lab.Netns
	ch   *lab.Charon
	gw   *site
	conf string // charon's swanctl.conf
}

// raSetup describes one road-warrior test: charon's side in swanctl's
// terms, sluice's as its configuration file.
type raSetup struct {
	// charon: vips (road warrior) or its own pool (gateway), and its
	// child's selectors; as the gateway, site is its site's address (on
	// lo).
	vips, poolAddrs, localTS, remoteTS string
	site                               netip.Addr
	// rws, when more than 1: that many road warriors (charon's
	// connections rw1..rwN, identities rwN@e2e.sluice), which sluice's
	// connection takes whatever their identity; start is their
	// start_action (default none); setup bounds the whole test (default
	// defaultSetup).
	rws   int
	start string
	setup time.Duration
	// ike is sluice's [ike] section, if any.
	ike *config.FileIKE
	// sluice: its connection, TUN addresses and pools.
	conn  config.FileConnection
	tun   []string
	pools []config.FilePool
}

func newRABed(t *testing.T, o raSetup) *raBed {
	t.Helper()
	requireCharon(t)
	setup := defaultSetup
	if o.setup > 0 {
		setup = o.setup
	}
	ctx := testContext(t, setup)
	l := lab.NewForTest(t, nil)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	b := &raBed{t: t}
	if b.ss, err = l.NewNetns(ctx, "ss"); err != nil {
		t.Fatal(err)
	}
	gwNS, err := l.NewNetns(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(b.ss, wanIf, gwNS, wanIf); err != nil {
		t.Fatal(err)
	}
	for i, ns := range []*lab.Netns{b.ss, gwNS} {
		if err := ns.AddAddr(wanIf, ssWAN[i]); err != nil {
			t.Fatal(err)
		}
	}
	if o.site.IsValid() {
		// charon as the gateway: its site's address, the source of its
		// route into the tunnel.
		if err := b.ss.AddAddr("lo", netip.PrefixFrom(o.site, o.site.BitLen())); err != nil {
			t.Fatal(err)
		}
	}

	psk := randomHex(16)
	b.ch = l.NewCharon(b.ss, dir)
	lab.LogOnFailure(t, "strongSwan log", b.ch.Log(), 80)
	renderTemplate(t, "strongswan/strongswan.conf.tmpl", b.ch.Conf(), map[string]string{"Vici": b.ch.Vici(), "Log": b.ch.Log()})
	b.conf = filepath.Join(dir, "swanctl.conf")
	pools := ""
	if o.poolAddrs != "" {
		pools = "rw4"
	}
	start := "none"
	if o.start != "" {
		start = o.start
	}
	conns := []map[string]string{{"Name": "rw", "ID": ssIDs[0]}}
	if o.rws > 1 {
		conns = nil
		for i := 1; i <= o.rws; i++ {
			conns = append(conns, map[string]string{"Name": fmt.Sprintf("rw%d", i), "ID": fmt.Sprintf("rw%d@e2e.sluice", i)})
		}
	}
	renderTemplate(t, "strongswan/swanctl-rw.conf.tmpl", b.conf, map[string]any{
		"Conns": conns, "Local": ssWAN[0].Addr().String(), "Remote": ssWAN[1].Addr().String(),
		"RemoteID": ssIDs[1], "IKE": ssIKE, "ESP": "aes128gcm16", "PSK": psk, "VIPs": o.vips, "Pools": pools,
		"LocalTS": o.localTS, "RemoteTS": o.remoteTS, "Start": start, "PoolAddrs": o.poolAddrs, "PoolDNS": "",
	})
	if err := b.ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if start == "none" {
		// (With start_action = start, charon initiates them as it
		// loads them: the test loads them once sluice runs.)
		if err := b.ch.Load(ctx, b.conf, len(conns)); err != nil {
			t.Fatal(err)
		}
	}

	b.gw = &site{tb: &testbed{t: t, ctx: ctx, lab: l, dir: dir}, name: "gw", ns: gwNS, wan: ssWAN[1].Addr(),
		cfgPath: filepath.Join(dir, "gateway-gw.toml"), sock: filepath.Join(dir, "gw.sock"), logPath: filepath.Join(dir, "gateway-gw.log")}
	lab.LogOnFailure(t, "sluice log", b.gw.logPath, 60)
	c := o.conn
	c.Name, c.LocalAddrs, c.Proposals = "rw", []string{ssWAN[1].Addr().String()}, ssIKE
	c.Local = config.FileAuth{Auth: config.AuthPSK, ID: ssIDs[1]}
	c.Remote = config.FileAuth{Auth: config.AuthPSK, ID: ssIDs[0]}
	c.Children[0].Name, c.Children[0].ESPProposals = "rw", "aes128gcm16"
	f := &config.File{
		Gateway:     config.FileGateway{LogLevel: "debug", StateDir: filepath.Join(dir, "state-gw")},
		TUN:         &config.FileTUN{Name: tunName, Addresses: o.tun},
		UDP:         &config.FileUDP{Listen: netip.AddrPortFrom(ssWAN[1].Addr(), 4500).String()},
		Connections: []config.FileConnection{c},
		Secrets:     []config.FileSecret{{Type: config.SecretIKE, IDs: []string{ssIDs[0], ssIDs[1]}, Secret: "0x" + fmt.Sprintf("%x", psk)}},
		Pools:       o.pools,
		IKE:         o.ike,
	}
	if o.rws > 1 {
		f.Connections[0].Remote.ID = ""
		f.Secrets[0].IDs = []string{ssIDs[1]}
	}
	text, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	captureNS(t, l, []*lab.Netns{b.ss, gwNS}, b.ch.Log(), b.gw.logPath)
	b.gw.writeConfigText(string(text))
	b.gw.run()
	return b
}

// TestStrongSwanRoadWarriorTraffic: strongSwan as a road warrior asks
// sluice for a virtual IP of each family; it gets the pool's first
// address, and ping goes through the tunnel both ways between it and
// sluice's site.
func TestStrongSwanRoadWarriorTraffic(t *testing.T) {
	for _, c := range []struct {
		name, vips, ssRemoteTS string
		pool, dst, vip         string
	}{
		{"ipv4", "0.0.0.0", "10.2.0.0/24", "10.3.0.0/24", "10.2.0.1", "10.3.0.1"},
		{"ipv6", "::", "fd00:2::/64", "fd00:3::/112", "fd00:2::1", "fd00:3::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newRABed(t, raSetup{vips: c.vips, remoteTS: c.ssRemoteTS,
				conn: config.FileConnection{Pools: []string{"rw"},
					Children: []config.FileChild{{LocalTS: []string{"10.2.0.0/24", "fd00:2::/64"}, RemoteTS: []string{c.pool}}}},
				tun:   []string{"10.2.0.1/24", "fd00:2::1/64"},
				pools: []config.FilePool{{Name: "rw", Addrs: c.pool}},
			})
			start := time.Now()
			if out, err := b.ch.Swanctl(b.gw.tb.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
				t.Fatalf("strongSwan initiating: %v\n%s", err, out)
			}
			b.gw.waitChild(b.gw.tb.ctx, "rw", 20*time.Second, nil)
			t.Logf("road warrior up in %v", time.Since(start).Round(time.Millisecond))
			out, err := b.ch.Swanctl(b.gw.tb.ctx, "--list-sas")
			if err != nil || !strings.Contains(out, "["+c.vip+"]") {
				t.Fatalf("strongSwan does not hold %s: %v\n%s", c.vip, err, out)
			}
			dst, vip := netip.MustParseAddr(c.dst), netip.MustParseAddr(c.vip)
			waitPing(t, b.gw.tb.ctx, b.ss, dst)
			mustPing(t, b.gw.tb.ctx, "road warrior -> sluice's site", b.ss, dst, 20, 10*time.Millisecond)
			mustPing(t, b.gw.tb.ctx, "sluice's site -> road warrior's virtual IP", b.gw.ns, vip, 20, 10*time.Millisecond)
		})
	}
}

// TestStrongSwanRoadWarriorsTraffic: several road warriors (one charon,
// a connection and identity each) at once through one sluice gateway:
// each gets its own address and its own tunnel (rw/<virtual IP>), and
// pings sluice's site from it; a rekey of one's Child SA and of its IKE
// SA keeps its tunnel's name; one road warrior's end takes its tunnel
// away and leaves the others'.
func TestStrongSwanRoadWarriorsTraffic(t *testing.T) {
	const n = 3
	b := newRABed(t, raSetup{vips: "0.0.0.0", remoteTS: "10.2.0.0/24", rws: n,
		conn: config.FileConnection{Pools: []string{"rw"},
			Children: []config.FileChild{{LocalTS: []string{"10.2.0.0/24"}, RemoteTS: []string{"10.3.0.0/24"}}}},
		tun:   []string{"10.2.0.1/24"},
		pools: []config.FilePool{{Name: "rw", Addrs: "10.3.0.0/24"}},
	})
	ctx := b.gw.tb.ctx
	for i := 1; i <= n; i++ {
		if out, err := b.ch.Swanctl(ctx, "--initiate", "--child", "net", "--ike", fmt.Sprintf("rw%d", i), "--timeout", "20"); err != nil {
			t.Fatalf("road warrior %d initiating: %v\n%s", i, err, out)
		}
	}
	vips := make([]netip.Addr, n)
	for i := range vips {
		vips[i] = netip.AddrFrom4([4]byte{10, 3, 0, byte(i + 1)})
	}
	rwTunnels := waitRoadWarriors(t, b, n, 20*time.Second)
	for _, v := range vips {
		if _, ok := rwTunnels["rw/"+v.String()]; !ok {
			t.Fatalf("no tunnel rw/%v among the road warriors' %v", v, rwTunnels)
		}
	}
	pingRoadWarriors(t, b, vips)
	// sluice ike list names each road warrior by the identity it
	// authenticated with, and the pool's leases.
	checkRoadWarriorIDs(t, b, vips)
	if pools := b.gw.ike().Pools; len(pools) != 1 || pools[0].Name != "rw" || pools[0].Online != n || pools[0].Free != pools[0].Size-n {
		t.Errorf("sluice ike list: pools %+v, want rw with %d online", pools, n)
	}
	if out, err := b.gw.cli("ike", "list"); err != nil || !strings.Contains(out, "rw2@e2e.sluice") || !strings.Contains(out, "REMOTE ID") {
		t.Errorf("sluice ike list does not name the road warriors: %v\n%s", err, out)
	}

	// The first road warrior rekeys its IKE SA, then its Child SA (now
	// made by the new IKE SA): its tunnel keeps its name and carries
	// the new pair.
	first := rwTunnels["rw/"+vips[0].String()]
	for _, args := range [][]string{{"--rekey", "--ike", "rw1"}, {"--rekey", "--ike", "rw1", "--child", "net"}} {
		if out, err := b.ch.Swanctl(ctx, args...); err != nil {
			t.Fatalf("strongSwan %v: %v\n%s", args, err, out)
		}
	}
	err := lab.WaitFor(ctx, "road warrior 1's rekeyed Child SA in its tunnel", 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		got := roadWarriorChildren(b)
		c, ok := got["rw/"+vips[0].String()]
		return ok && c.InSPI != first.InSPI && len(got) == n, fmt.Errorf("road warriors' children: %v", got)
	})
	if err != nil {
		t.Fatal(err)
	}
	pingRoadWarriors(t, b, vips)
	checkRoadWarriorIDs(t, b, vips) // the new IKE SA proved the same identity

	// The second goes: its tunnel with it, the others stay.
	if out, err := b.ch.Swanctl(ctx, "--terminate", "--ike", "rw2", "--timeout", "20"); err != nil {
		t.Fatalf("strongSwan terminating rw2: %v\n%s", err, out)
	}
	gone := "rw/" + vips[1].String()
	err = lab.WaitFor(ctx, "road warrior 2's tunnel to go", 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		for _, tn := range b.gw.tunnels() {
			if tn.Name == gone {
				return false, fmt.Errorf("tunnel %s still there", gone)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := roadWarriorChildren(b); len(got) != n-1 {
		t.Errorf("after rw2 went, sluice lists the road warriors %v", got)
	}
	pingRoadWarriors(t, b, []netip.Addr{vips[0], vips[2]})
}

// checkRoadWarriorIDs wants the road warrior with virtual IP vips[i] (the
// (i+1)th to connect) listed with its identity, rw<i+1>@e2e.sluice.
func checkRoadWarriorIDs(t *testing.T, b *raBed, vips []netip.Addr) {
	t.Helper()
	got := roadWarriorChildren(b)
	for i, v := range vips {
		if c, want := got["rw/"+v.String()], fmt.Sprintf("rw%d@e2e.sluice", i+1); c.RemoteID != want {
			t.Errorf("road warrior %v listed with identity %q, want %q", v, c.RemoteID, want)
		}
	}
}

// roadWarriorChildren is the installed children of sluice's connection
// "rw", by tunnel.
func roadWarriorChildren(b *raBed) map[string]gateway.IKEChildInfo {
	got := map[string]gateway.IKEChildInfo{}
	for _, c := range b.gw.ike().Connections {
		for _, ch := range c.Children {
			if c.Name == "rw" && ch.State == "installed" {
				got[ch.Tunnel] = ch
			}
		}
	}
	return got
}

// waitRoadWarriors waits for n road warriors' children at sluice, each
// in a tunnel of its own that `sluice tunnel list` shows, and returns
// them by tunnel.
func waitRoadWarriors(t *testing.T, b *raBed, n int, d time.Duration) map[string]gateway.IKEChildInfo {
	t.Helper()
	var got map[string]gateway.IKEChildInfo
	err := lab.WaitFor(b.gw.tb.ctx, fmt.Sprintf("%d road warriors' tunnels", n), d, 250*time.Millisecond, func() (bool, error) {
		got = roadWarriorChildren(b)
		return len(got) >= n, fmt.Errorf("%d of them", len(got))
	})
	if err != nil {
		t.Fatal(err)
	}
	tunnels := map[string]bool{}
	for _, tn := range b.gw.tunnels() {
		tunnels[tn.Name] = true
	}
	for name, c := range got {
		if !tunnels[name] || len(c.VIPs) != 1 || name != "rw/"+c.VIPs[0] {
			t.Fatalf("road warrior's child %+v: no tunnel %q of its virtual IP", c, name)
		}
	}
	return got
}

// pingRoadWarriors pings sluice's site from each of vips, road
// warriors' virtual IPs on charon's TUN device.
func pingRoadWarriors(t *testing.T, b *raBed, vips []netip.Addr) {
	t.Helper()
	ctx := b.gw.tb.ctx
	dst := netip.MustParseAddr("10.2.0.1")
	var lost []string
	for _, vip := range vips {
		waitPing(t, ctx, b.ss, dst, "-I", vip.String())
		r, err := ping(ctx, b.ss, dst, 5, 20*time.Millisecond, "-I", vip.String())
		if err != nil {
			t.Fatal(err)
		}
		measuref(t, "road warrior %v -> sluice's site: %v", vip, r)
		if r.Received == 0 {
			lost = append(lost, vip.String())
		}
	}
	if len(lost) > 0 {
		t.Errorf("road warriors %v get no answer through the gateway", lost)
	}
}

// TestStrongSwanRoadWarriorsMany: 200 road warriors (one charon with a
// connection per identity, vips = 0.0.0.0, start_action = start) come up
// at once through one sluice gateway, each in a tunnel of its own; ten
// of them, spread over the pool, ping sluice's site from their virtual
// IPs. It reports the time to bring them up and the gateway's memory.
// SLUICE_E2E_ROAD_WARRIORS sets another number (at most 250: the pool
// is a /24).
func TestStrongSwanRoadWarriorsMany(t *testing.T) {
	n := 200
	if v := os.Getenv("SLUICE_E2E_ROAD_WARRIORS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 250 {
			t.Fatalf("SLUICE_E2E_ROAD_WARRIORS=%q: want 1 to 250", v)
		}
	}
	b := newRABed(t, raSetup{vips: "0.0.0.0", remoteTS: "10.2.0.0/24", rws: n, start: "start", setup: 8 * time.Minute,
		// All of them come from one address at once: more half-open
		// IKE SAs of it than the default 5 (strongSwan's too).
		ike: &config.FileIKE{BlockThreshold: n + 10},
		conn: config.FileConnection{Pools: []string{"rw"},
			Children: []config.FileChild{{LocalTS: []string{"10.2.0.0/24"}, RemoteTS: []string{"10.3.0.0/24"}}}},
		tun:   []string{"10.2.0.1/24"},
		pools: []config.FilePool{{Name: "rw", Addrs: "10.3.0.0/24"}},
	})
	ctx := b.gw.tb.ctx
	rssBefore := processRSS(t, b.gw.proc.Pid())
	start := time.Now()
	if err := b.ch.Load(ctx, b.conf, n); err != nil {
		t.Fatal(err)
	}
	got := waitRoadWarriors(t, b, n, 5*time.Minute)
	measuref(t, "%d road warriors up at sluice in %v (from swanctl --load-all, start_action = start)", n, time.Since(start).Round(time.Millisecond))
	measuref(t, "gateway RSS: %d KiB before, %d KiB with %d road warriors", rssBefore, processRSS(t, b.gw.proc.Pid()), n)
	var vips []netip.Addr
	for name := range got {
		vips = append(vips, netip.MustParseAddr(strings.TrimPrefix(name, "rw/")))
	}
	slices.SortFunc(vips, netip.Addr.Compare)
	var sample []netip.Addr
	for i := range min(10, len(vips)) {
		sample = append(sample, vips[i*len(vips)/min(10, len(vips))])
	}
	pingRoadWarriors(t, b, sample)
}

// processRSS is the resident memory of process pid in KiB (VmRSS).
func processRSS(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return kib
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestSluiceVIPTraffic: sluice asks strongSwan, the gateway with a pool,
// for a virtual IP (vips = 0.0.0.0, or ::): the address goes on sluice's
// TUN device and is the source of what sluice's host sends to
// strongSwan's site, which answers it; it stays through a rekey of the
// Child SA and leaves with the IKE SA.
func TestSluiceVIPTraffic(t *testing.T) {
	for _, c := range []struct {
		name, vips, pool, site, vip string
	}{
		{"ipv4", "0.0.0.0", "10.4.0.0/24", "10.1.0.1/24", "10.4.0.1"},
		{"ipv6", "::", "fd00:4::/112", "fd00:1::1/64", "fd00:4::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			site := netip.MustParsePrefix(c.site)
			b := newRABed(t, raSetup{poolAddrs: c.pool, localTS: site.Masked().String(), remoteTS: "dynamic", site: site.Addr(),
				conn: config.FileConnection{VIPs: []string{c.vips}, RemoteAddrs: []string{ssWAN[0].Addr().String()},
					Children: []config.FileChild{{LocalTS: []string{c.pool}, RemoteTS: []string{site.Masked().String()}, StartAction: "start"}}},
				tun: []string{"192.168.77.1/32"},
			})
			sluiceVIP(t, b, site.Addr(), netip.MustParseAddr(c.vip))
		})
	}
}

// sluiceVIP checks sluice's virtual IP vip and the traffic between it
// and strongSwan's site address dst.
func sluiceVIP(t *testing.T, b *raBed, dst, vip netip.Addr) {
	ctx := b.gw.tb.ctx
	b.gw.waitChild(ctx, "rw", 20*time.Second, nil)
	host := vip.String() + "/" + fmt.Sprint(vip.BitLen())
	err := lab.WaitFor(ctx, "the virtual IP on sluice's TUN device", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		out, err := b.gw.ns.Exec(ctx, "ip", "-o", "addr", "show", "dev", tunName)
		return strings.Contains(string(out), host), err
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := b.gw.ns.Exec(ctx, "ip", "route", "get", dst.String())
	if !strings.Contains(string(out), "src "+vip.String()) {
		t.Errorf("the route to strongSwan's site does not take the virtual IP as its source: %s", out)
	}
	waitPing(t, ctx, b.gw.ns, dst)
	mustPing(t, ctx, "sluice's virtual IP -> strongSwan's site", b.gw.ns, dst, 20, 10*time.Millisecond)
	mustPing(t, ctx, "strongSwan's site -> sluice's virtual IP", b.ss, vip, 20, 10*time.Millisecond, "-I", dst.String())

	// A rekey of the Child SA keeps the address (the new pair carries it
	// before the old one goes); the end of the IKE SA takes it off.
	first := b.gw.waitChild(ctx, "rw", time.Second, nil)
	if out, err := b.ch.Swanctl(ctx, "--rekey", "--child", "net"); err != nil {
		t.Fatalf("strongSwan rekeying: %v\n%s", err, out)
	}
	b.gw.waitChild(ctx, "rw", 20*time.Second, func(c gateway.IKEChildInfo) bool { return c.InSPI != first.InSPI })
	mustPing(t, ctx, "sluice's virtual IP -> strongSwan's site, after a rekey", b.gw.ns, dst, 20, 10*time.Millisecond)
	if out, err := b.gw.cli("ike", "terminate", "rw"); err != nil {
		t.Fatalf("sluice ike terminate: %v\n%s", err, out)
	}
	err = lab.WaitFor(ctx, "the virtual IP to leave sluice's TUN device", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		out, err := b.gw.ns.Exec(ctx, "ip", "-o", "addr", "show", "dev", tunName)
		return !strings.Contains(string(out), host), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := b.gw.ns.Exec(ctx, "ip", "route", "get", dst.String()); strings.Contains(string(out), "src "+vip.String()) {
		t.Errorf("the route to strongSwan's site still takes the virtual IP as its source: %s", out)
	}
}
