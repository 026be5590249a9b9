package e2e_test

// Configurations applied over the control socket (config.apply, issue
// 19): a gateway started with no tunnel takes them later, and a pair of
// gateways takes its groups' addresses with them.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/internal/lab"
)

// apply sends text to the site's gateway with config.apply, under name.
func (s *site) apply(name, text string) (control.ReloadResult, error) {
	ctx, cancel := context.WithTimeout(s.tb.ctx, cliTimeout)
	defer cancel()
	c, err := control.Dial(ctx, s.sock)
	if err != nil {
		return control.ReloadResult{}, err
	}
	defer c.Close()
	return c.Apply(ctx, control.ApplyArgs{Name: name, Config: text})
}

// mustApply applies text and fails the test if the gateway refuses it.
func (s *site) mustApply(name, text string) control.ReloadResult {
	s.tb.t.Helper()
	r, err := s.apply(name, text)
	if err != nil {
		s.tb.t.Fatalf("gateway %s: config.apply: %v", s.name, err)
	}
	return r
}

// TestApplyBootstrapsEmptyGateway: a gateway started with [tun] and [udp]
// and no tunnel is an IPsec gateway; a configuration with an IKE
// connection applied over the control socket brings the tunnel up (its
// pre-shared key never written to the node's disk nor to the log), and a
// reload, which would re-read the file without it, is then refused.
func TestApplyBootstrapsEmptyGateway(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes128gcm16", true)
	tb := newTestbed(t, wan4)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	b.start(cfgs[1])
	empty := &gwConfig{TUN: cfgs[0].TUN, UDP: cfgs[0].UDP}
	a.start(empty)
	if ts := a.tunnels(); len(ts) != 0 {
		t.Fatalf("an empty gateway has tunnels: %+v", ts)
	}
	full := *cfgs[0]
	full.StateDir = empty.StateDir
	text := full.render()
	r := a.mustApply("fleet/gw-a", text)
	t.Logf("applied: %q", r.Changes)
	a.waitChild(ctx, "net-b", 20*time.Second, nil)
	waitPing(t, ctx, a.ns, inner4[1].Addr())
	mustPing(t, ctx, "applied tunnel A->B", a.ns, inner4[1].Addr(), 10, 10*time.Millisecond)

	// The file on disk has no tunnel: a reload is refused, and says why.
	err := a.reload()
	if err == nil || !strings.Contains(err.Error(), `config.apply of "fleet/gw-a"`) || !strings.Contains(err.Error(), a.cfgPath) {
		t.Fatalf("reload after an apply: %v", err)
	}
	mustPing(t, ctx, "after the refused reload", a.ns, inner4[1].Addr(), 5, 10*time.Millisecond)

	// An error in an applied text names the name, line and field, and
	// the running configuration stays.
	bad := strings.Replace(text, "esp_proposals = \"aes128gcm16\"", "esp_proposals = \"rot13\"", 1)
	if _, err := a.apply("fleet/gw-a", bad); err == nil || !regexp.MustCompile(`^fleet/gw-a:\d+:\d+: connection\[1\]\.children\[1\]\.esp_proposals: `).MatchString(err.Error()) {
		t.Fatalf("a bad apply: %v", err)
	}
	mustPing(t, ctx, "after the refused apply", a.ns, inner4[1].Addr(), 5, 10*time.Millisecond)

	// The key is in no file of a's and in no line of its log.
	psk := cfgs[0].Connections[0].PSK
	for _, f := range []string{a.cfgPath, a.logPath} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToLower(string(data)), strings.ToLower(psk)) {
			t.Errorf("%s holds the pre-shared key", filepath.Base(f))
		}
	}
}

// TestHAApplyGroupAddresses: both members of a pair start with no tunnel
// and a group without addresses; the configuration applied to both then
// gives the group its virtual addresses with the tunnel on them, and an
// IKE connection on another of them. The owner adds and announces the
// addresses and carries the tunnel; the standby, which does not hold the
// addresses, takes the connection on an address it does not have, holds
// the tunnel fenced, and takes over when the owner is killed. Applying
// the group's addresses away removes them from the owner.
func TestHAApplyGroupAddresses(t *testing.T) {
	b := newHABed(t)
	ctx, topo := b.tb.ctx, b.topo
	ca, cert, key := haCreds(t, b)
	haA := haSection(b, topo.A, topo.B, 200, ca, cert, key)
	haB := haSection(b, topo.B, topo.A, 100, ca, cert, key)
	requireHA(t, b, haA)
	addrs := regexp.MustCompile(`(?m)^addresses = .*$`)
	noAddrs := func(s string) string { return addrs.ReplaceAllString(s, "addresses = []") }
	// The bootstrap: [tun], [udp] on every address (the virtual ones
	// come later), [ha] with the group empty.
	boot := func(s *site, ha string) string {
		return fmt.Sprintf("[gateway]\nstate_dir = %q\n\n[tun]\nname = %q\naddresses = [%s]\n\n[udp]\nlisten = \"0.0.0.0:4500\"\n%s",
			filepath.Join(b.tb.dir, "state-"+s.name), tunName, quoteList(b.gwCfg.TUN), noAddrs(ha))
	}
	// The applied configuration: the bootstrap's, the static tunnel, and
	// an IKE connection on a third virtual address of the group that no
	// peer answers (start_action none): the standby must take it too.
	third := "192.0.2.20/24 dev " + lab.HAWANIf
	cfg := *b.gwCfg
	cfg.UDP = netip.MustParseAddrPort("0.0.0.0:4500")
	full := func(s *site, ha string) string {
		cfg.StateDir = filepath.Join(b.tb.dir, "state-"+s.name)
		ha = strings.Replace(ha, "addresses = [", fmt.Sprintf("addresses = [%q, ", third), 1)
		conn := `
[[connection]]
name = "spare"
local_addrs = ["192.0.2.20"]
remote_addrs = ["198.51.100.77"]
encap = true
  [connection.local]
  auth = "psk"
  id = "spare.gw"
  [connection.remote]
  auth = "psk"
  id = "spare.peer"
  [[connection.children]]
  name = "spare-net"
  local_ts = ["10.1.77.0/24"]
  remote_ts = ["10.77.0.0/24"]
  start_action = "none"

[[secret]]
type = "ike"
ids = ["spare.gw", "spare.peer"]
secret = "0x000102030405060708090a0b0c0d0e0f"
`
		return cfg.render() + ha + conn
	}
	// The gateway binds a virtual address it does not hold with
	// IP_FREEBIND; without the sysctl the lab sets, a bind that lacks it
	// fails.
	for _, g := range []*lab.HAGateway{topo.A, topo.B} {
		if _, err := g.NS.Exec(ctx, "sysctl", "-qw", "net.ipv4.ip_nonlocal_bind=0"); err != nil {
			t.Fatal(err)
		}
	}
	b.startPeer()
	b.gwa.writeConfigText(boot(b.gwa, haA))
	b.gwa.run()
	b.gwb.writeConfigText(boot(b.gwb, haB))
	b.gwb.run()
	waitHARoles(t, b, map[*site]string{b.gwa: "owner", b.gwb: "standby"})
	if held, err := topo.VIPHolders(); err != nil || len(held) != 0 {
		t.Fatalf("virtual addresses held before any was configured: %v, %v", held, err)
	}

	// The standby first: it takes the connection on an address it does
	// not hold. The addresses an earlier run of b left on its interfaces
	// (a kill -9) go, as at start: a standby must not answer for them.
	if err := topo.AddVIPs(ctx, topo.B); err != nil {
		t.Fatal(err)
	}
	r := b.gwb.mustApply("fleet/b", full(b.gwb, haB))
	t.Logf("b: %q", r.Changes)
	r = b.gwa.mustApply("fleet/a", full(b.gwa, haA))
	t.Logf("a: %q", r.Changes)
	if err := topo.WaitVIP(ctx, topo.A, upWait); err != nil {
		t.Fatal(err)
	}
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)
	if has, err := topo.B.NS.HasAddr(lab.HAWANIf, topo.WANVIP.Addr()); err != nil || has {
		t.Errorf("the standby holds the virtual address: %v, %v", has, err)
	}
	// The standby's copy of the tunnel is fenced: its outbound SA sent
	// nothing.
	for _, sa := range b.gwb.sas() {
		if sa.Direction == "out" && sa.Packets != 0 {
			t.Errorf("the standby's SA %s sent %d packets", sa.Name, sa.Packets)
		}
	}

	// The owner dies; the standby takes the group with its applied
	// addresses.
	b.gwa.proc.Kill()
	// The killed process leaves the addresses on a's interface; b's
	// announcement moves the wan router's traffic.
	if err := waitNeighbour(ctx, topo, topo.B); err != nil {
		t.Fatal(err)
	}
	// A takeover refuses the peer's numbers up to the replicated bound
	// (at least esp.ReplayReserveMin of them at this rate): a burst
	// passes it before the pings are counted.
	ping(ctx, topo.Host, topo.RemoteAddr, 2*esp.ReplayReserveMin, 5*time.Millisecond)
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)

	// The group's addresses applied away: the owner (b now) removes
	// them, and the tunnel on them is b's alone.
	r = b.gwb.mustApply("fleet/b", boot(b.gwb, haB)+"\n# again empty\n")
	t.Logf("b: %q", r.Changes)
	err := lab.WaitFor(ctx, "b to give up the virtual address", 5*time.Second, 20*time.Millisecond, func() (bool, error) {
		has, err := topo.B.NS.HasAddr(lab.HAWANIf, topo.WANVIP.Addr())
		return !has, err
	})
	if err != nil {
		t.Fatal(err)
	}
}
