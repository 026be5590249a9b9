package e2e_test

// The test bed: two sites, A and B, each a network namespace with a sluice
// gateway daemon in it, joined by a veth (the WAN). Each gateway's TUN
// device carries its site's subnet, so traffic from a process in a site's
// namespace to the other site's subnet goes through the tunnel:
//
//	 site A (netns)                                     site B (netns)
//	 sluice0 10.1.0.1/24, fd00:1::1/64                  sluice0 10.2.0.1/24, fd00:2::1/64
//	 sluice run  wan0 192.0.2.1 | 2001:db8::1 ===== wan0 192.0.2.2 | 2001:db8::2  sluice run
//
// Configurations are written by the tests (gwConfig renders the TOML), the
// daemons are this run's sluice binary (TestMain), and they are driven
// through the sluice command line on their control sockets.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// Bounds of the waits.
const (
	defaultSetup = 2 * time.Minute  // everything a test does, at most
	upWait       = 20 * time.Second // a daemon to come up
	firstPacket  = 10 * time.Second // the first packet through a new tunnel
	cliTimeout   = 15 * time.Second // one sluice client command
	stopWait     = 10 * time.Second // a daemon to exit after SIGTERM
)

// The addresses of the test bed.
var (
	wan4   = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}
	wan6   = [2]netip.Prefix{netip.MustParsePrefix("2001:db8::1/64"), netip.MustParsePrefix("2001:db8::2/64")}
	inner4 = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.1/24"), netip.MustParsePrefix("10.2.0.1/24")}
	inner6 = [2]netip.Prefix{netip.MustParsePrefix("fd00:1::1/64"), netip.MustParsePrefix("fd00:2::1/64")}
)

const (
	tunName = "sluice0"
	wanIf   = "wan0"
)

// testContext is bounded by d and ends with the test.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testbed is one test's lab: namespaces, daemons, files.
type testbed struct {
	t     *testing.T
	ctx   context.Context
	lab   *lab.Lab
	dir   string
	sites [2]*site
}

// site is one side of the test bed.
type site struct {
	tb      *testbed
	name    string // "a" or "b"
	ns      *lab.Netns
	wan     netip.Addr
	cfgPath string
	sock    string
	logPath string
	proc    *lab.Process
	starts  int
}

// newTestbed builds the two namespaces and the WAN between them, with the
// outer addresses wan (wan4 or wan6). Nothing runs in them yet.
func newTestbed(t *testing.T, wan [2]netip.Prefix) *testbed {
	t.Helper()
	lab.Require(t)
	tb := &testbed{t: t, ctx: testContext(t, defaultSetup), lab: lab.NewForTest(t, nil)}
	// Runs before the lab is closed: on failure, show what the daemons
	// said.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, s := range tb.sites {
			if s != nil && s.logPath != "" {
				if data, err := os.ReadFile(s.logPath); err == nil {
					t.Logf("log of gateway %s (%s):\n%s", s.name, s.logPath, lab.Tail(string(data), 60))
				}
			}
		}
	})
	var err error
	if tb.dir, err = tb.lab.Dir(); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		ns, err := tb.lab.NewNetns(tb.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tb.sites[i] = &site{tb: tb, name: name, ns: ns, wan: wan[i].Addr(),
			cfgPath: filepath.Join(tb.dir, "gateway-"+name+".toml"),
			sock:    filepath.Join(tb.dir, name+".sock"),
			logPath: filepath.Join(tb.dir, "gateway-"+name+".log")}
	}
	a, b := tb.sites[0], tb.sites[1]
	if err := tb.lab.Veth(a.ns, wanIf, b.ns, wanIf); err != nil {
		t.Fatal(err)
	}
	for i, s := range tb.sites {
		if err := s.ns.AddAddr(wanIf, wan[i]); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

// writeConfig writes the site's configuration file.
func (s *site) writeConfig(cfg *gwConfig) {
	s.tb.t.Helper()
	s.writeConfigText(cfg.render())
}

func (s *site) writeConfigText(text string) {
	s.tb.t.Helper()
	// Written whole and renamed, so that a reload never reads half a file.
	tmp := s.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		s.tb.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.cfgPath); err != nil {
		s.tb.t.Fatal(err)
	}
}

// start writes cfg and runs `sluice run` in the site's namespace, and waits
// until its TUN device exists and its control socket answers.
func (s *site) start(cfg *gwConfig) {
	s.tb.t.Helper()
	if cfg.StateDir == "" {
		// Each gateway locks its state directory: give each its own, kept
		// for the test bed's life so that a restarted daemon finds it.
		cfg.StateDir = filepath.Join(s.tb.dir, "state-"+s.name)
	}
	s.writeConfig(cfg)
	s.run()
}

// run starts the daemon on the configuration file as it is.
func (s *site) run() {
	t := s.tb.t
	t.Helper()
	s.starts++
	logPath := s.logPath
	if s.starts > 1 {
		logPath = fmt.Sprintf("%s.%d", s.logPath, s.starts)
		s.logPath = logPath
	}
	argv := []string{sluiceBin, "run", "-c", s.cfgPath, "--socket", s.sock}
	p, err := s.tb.lab.Start(s.ns, "gateway "+s.name, argv, &lab.ProcOptions{LogFile: logPath, StopTimeout: stopWait})
	if err != nil {
		t.Fatal(err)
	}
	s.proc = p
	if err := s.ns.WaitLink(s.tb.ctx, tunName, upWait, p); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitControl(s.tb.ctx, s.sock, upWait, p); err != nil {
		t.Fatal(err)
	}
}

// stop sends the daemon SIGTERM and waits for it to exit. It fails the
// test unless the daemon exits with status 0 within stopWait.
func (s *site) stop() {
	t := s.tb.t
	t.Helper()
	p := s.proc
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to gateway %s: %v", s.name, err)
	}
	select {
	case <-p.Done():
	case <-time.After(stopWait):
		t.Fatalf("gateway %s did not exit within %v of SIGTERM", s.name, stopWait)
	}
	if _, err := p.Exited(); err != nil {
		t.Fatalf("gateway %s after SIGTERM: %v (want exit status 0)\n%s", s.name, err, lab.Tail(p.Output(), 20))
	}
}

// cli runs `sluice ARGS --socket SOCK` against the site's daemon and
// returns its standard output; on failure the error carries its standard
// error.
func (s *site) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(s.tb.ctx, cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, append(args, "--socket", s.sock)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("sluice %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// cliJSON runs a sluice command with --json and decodes what it prints.
func (s *site) cliJSON(v any, args ...string) {
	t := s.tb.t
	t.Helper()
	out, err := s.cli(append(args, "--json")...)
	if err != nil {
		t.Fatalf("gateway %s: %v", s.name, err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("gateway %s: sluice %s --json: %v\n%s", s.name, strings.Join(args, " "), err, out)
	}
}

// sas is `sluice sa list --json`.
func (s *site) sas() []gateway.SAInfo {
	s.tb.t.Helper()
	var sas []gateway.SAInfo
	s.cliJSON(&sas, "sa", "list")
	return sas
}

// tunnels is `sluice tunnel list --json`.
func (s *site) tunnels() []gateway.TunnelInfo {
	s.tb.t.Helper()
	var ts []gateway.TunnelInfo
	s.cliJSON(&ts, "tunnel", "list")
	return ts
}

// stats reads the daemon's counters.
func (s *site) stats() gateway.Stats {
	s.tb.t.Helper()
	st, err := lab.ControlStats(s.tb.ctx, s.sock)
	if err != nil {
		s.tb.t.Fatalf("gateway %s: stats: %v", s.name, err)
	}
	return st
}

// reload is `sluice reload`.
func (s *site) reload() error {
	_, err := s.cli("reload")
	return err
}

// mustReload reloads and fails the test if the daemon refuses.
func (s *site) mustReload() {
	s.tb.t.Helper()
	if err := s.reload(); err != nil {
		s.tb.t.Fatalf("gateway %s: %v", s.name, err)
	}
}

// findSA returns the SA with the SPI and direction ("in", "out"), or nil.
func findSA(sas []gateway.SAInfo, spi uint32, dir string) *gateway.SAInfo {
	for i := range sas {
		if sas[i].SPI == spi && sas[i].Direction == dir {
			return &sas[i]
		}
	}
	return nil
}

// mustSA is findSA that fails the test when the SA is not there.
func mustSA(t *testing.T, sas []gateway.SAInfo, spi uint32, dir string) *gateway.SAInfo {
	t.Helper()
	sa := findSA(sas, spi, dir)
	if sa == nil {
		t.Fatalf("no %s SA with SPI 0x%x among %+v", dir, spi, sas)
	}
	return sa
}

// drops adds up the data plane's drops by reason, workers and receivers,
// and the SAs' drops.
func drops(st gateway.Stats) map[string]uint64 {
	m := map[string]uint64{}
	for _, w := range st.Dataplane.Workers {
		for k, v := range w.Drops {
			m[k] += v
		}
	}
	for _, r := range st.Dataplane.Receivers {
		for k, v := range r.Drops {
			m[k] += v
		}
	}
	for _, sa := range st.SAs {
		for k, v := range sa.Drops {
			m["sa:"+k] += v
		}
	}
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}

// dropsSince is what grew from before to now.
func dropsSince(now, before map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range now {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// The configuration.

// gwConfig is a gateway configuration, rendered as the TOML file `sluice
// run -c` reads.
type gwConfig struct {
	LogLevel string
	Workers  int
	StateDir string
	TUN      []netip.Prefix
	UDP      netip.AddrPort // [udp] listen, if valid
	// Link is [udp] link; "" leaves the default (auto: the UDP sockets on a
	// veth, where AF_XDP binds in copy mode only).
	// A test that captures ESP with a packet socket on a gateway's
	// interface sets "socket": AF_XDP's packets pass no packet socket.
	Link     string
	RawESP   netip.Addr // [rawesp] listen, if valid
	Tunnels  []tunnelConfig
	Policies []policyConfig
	SAs      []saConfig
	// Connections are IKE [[connection]]s (ike_test.go), with their
	// [[secret]]s; IKE is the [ike] section, if any.
	Connections []connConfig
	IKE         *config.FileIKE
	TUNName     string // "" is tunName
}

type tunnelConfig struct {
	Name        string
	Local, Peer netip.Addr
	Encap       string // "udp" or "none"
	Remote      []netip.Prefix
	Out         string
	In          []string
	MTU         int
}

type policyConfig struct {
	Name     string
	Src, Dst netip.Prefix
	Proto    string // "" is any
	DPort    string // "" is any
	Action   string
	Tunnel   string
}

type saConfig struct {
	Name         string
	SPI          uint32
	Src, Dst     netip.Addr
	Encap        string
	Alg          string
	EncKey       string // hex
	AuthKey      string // hex
	ReplayWindow int
	Seq          uint64
}

func (c *gwConfig) render() string {
	f := &config.File{
		Gateway: config.FileGateway{LogLevel: cmp.Or(c.LogLevel, "info"), Workers: c.Workers, StateDir: c.StateDir},
		TUN:     &config.FileTUN{Name: cmp.Or(c.TUNName, tunName), Addresses: strs(c.TUN)},
		IKE:     c.IKE,
	}
	if c.UDP.IsValid() {
		f.UDP = &config.FileUDP{Listen: c.UDP.String(), Link: c.Link}
	}
	if c.RawESP.IsValid() {
		f.RawESP = &config.FileRawESP{Listen: c.RawESP.String()}
	}
	for _, tn := range c.Tunnels {
		f.Tunnels = append(f.Tunnels, config.FileTunnel{Name: tn.Name, Local: tn.Local.String(), Peer: tn.Peer.String(),
			Encap: tn.Encap, Remote: strs(tn.Remote), Out: tn.Out, In: tn.In, MTU: tn.MTU})
	}
	for _, p := range c.Policies {
		fp := config.FilePolicy{Name: p.Name, Proto: p.Proto, DPort: p.DPort, Action: p.Action, Tunnel: p.Tunnel}
		if p.Src.IsValid() {
			fp.Src = p.Src.String()
		}
		if p.Dst.IsValid() {
			fp.Dst = p.Dst.String()
		}
		f.Policies = append(f.Policies, fp)
	}
	for _, cc := range c.Connections {
		conn, secrets := cc.file()
		f.Connections = append(f.Connections, conn)
		f.Secrets = append(f.Secrets, secrets...)
	}
	for _, sa := range c.SAs {
		fs := config.FileSA{Name: sa.Name, SPI: sa.SPI, Src: sa.Src.String(), Dst: sa.Dst.String(), Mode: "tunnel",
			Encap: sa.Encap, ESP: sa.Alg, EncKey: sa.EncKey, AuthKey: sa.AuthKey, Seq: int64(sa.Seq)}
		if sa.ReplayWindow > 0 {
			fs.ReplayWindow = new(sa.ReplayWindow)
		}
		f.SAs = append(f.SAs, fs)
	}
	b, err := f.Encode()
	if err != nil {
		panic("e2e: " + err.Error()) // only a string that is not UTF-8, which no test writes
	}
	return "# written by the sluice end-to-end tests\n" + string(b)
}

// strs formats each of xs as a string.
func strs[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

// sa returns an SA keyed from crypto/rand for alg.
func newSA(t *testing.T, name string, spi uint32, src, dst netip.Addr, encap, alg string) saConfig {
	t.Helper()
	a, err := cryptodev.ParseAlg(alg)
	if err != nil {
		t.Fatal(err)
	}
	sa := saConfig{Name: name, SPI: spi, Src: src, Dst: dst, Encap: encap, Alg: alg, EncKey: randomHex(a.EncKeyLen()), ReplayWindow: 1024}
	if n := a.Info().AuthKeyLen; n > 0 {
		sa.AuthKey = randomHex(n)
	}
	return sa
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pairOptions shape the two mirror-image configurations of a test bed with
// one tunnel.
type pairOptions struct {
	wan    [2]netip.Prefix // wan4 or wan6
	encap  string          // "udp" (default) or "none"
	alg    string          // default aes128gcm16
	policy bool            // policy-based: [[policy]] tables instead of routes
}

// The SPIs of the one-tunnel configurations.
const (
	spiAB = 0x1001
	spiBA = 0x2001
)

// pairConfigs returns the configurations of sites A and B: one tunnel
// between them, "to-b" at A and "to-a" at B, its SAs "a-to-b" and "b-to-a"
// keyed from crypto/rand; each TUN carries its site's IPv4 and IPv6
// subnets. In policy mode, each side protects its subnets to the other's
// with a [[policy]], and A discards UDP to port discardPort first.
func pairConfigs(t *testing.T, o pairOptions) [2]*gwConfig {
	t.Helper()
	if o.encap == "" {
		o.encap = "udp"
	}
	if o.alg == "" {
		o.alg = "aes128gcm16"
	}
	a, b := o.wan[0].Addr(), o.wan[1].Addr()
	sas := []saConfig{
		newSA(t, "a-to-b", spiAB, a, b, o.encap, o.alg),
		newSA(t, "b-to-a", spiBA, b, a, o.encap, o.alg),
	}
	names := [2]string{"a", "b"}
	var out [2]*gwConfig
	for i := range 2 {
		j := 1 - i
		c := &gwConfig{TUN: []netip.Prefix{inner4[i], inner6[i]}, SAs: append([]saConfig(nil), sas...)}
		local, peer := o.wan[i].Addr(), o.wan[j].Addr()
		if o.encap == "udp" {
			c.UDP = netip.AddrPortFrom(local, 4500)
		} else {
			c.RawESP = local
		}
		tn := tunnelConfig{Name: "to-" + names[j], Local: local, Peer: peer, Encap: o.encap,
			Out: names[i] + "-to-" + names[j], In: []string{names[j] + "-to-" + names[i]}}
		if o.policy {
			if i == 0 {
				c.Policies = append(c.Policies, policyConfig{Name: "no-discard-port", Dst: inner4[j].Masked(), Proto: "udp", DPort: fmt.Sprint(discardPort), Action: "discard"})
			}
			c.Policies = append(c.Policies,
				policyConfig{Name: "site4", Src: inner4[i].Masked(), Dst: inner4[j].Masked(), Action: "protect", Tunnel: tn.Name},
				policyConfig{Name: "site6", Src: inner6[i].Masked(), Dst: inner6[j].Masked(), Action: "protect", Tunnel: tn.Name})
		} else {
			tn.Remote = []netip.Prefix{inner4[j].Masked(), inner6[j].Masked()}
		}
		c.Tunnels = []tunnelConfig{tn}
		out[i] = c
	}
	return out
}

// discardPort is the UDP port A's discard policy drops.
const discardPort = 5999

// startPair builds a test bed and starts both gateways on cfgs.
func startPair(t *testing.T, wan [2]netip.Prefix, cfgs [2]*gwConfig) *testbed {
	t.Helper()
	tb := newTestbed(t, wan)
	for i, s := range tb.sites {
		s.start(cfgs[i])
	}
	return tb
}
