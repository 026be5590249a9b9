package cli

// sluice demo: two gateways, one tunnel between them, traffic through it
// both ways, and the numbers.
//
//  1. Sites: as root, two network namespaces joined by a veth (the WAN,
//     192.0.2.1 and 192.0.2.2), each gateway's TUN device carrying its
//     site's subnet (10.1.0.1/24, 10.2.0.1/24). Without root (or with
//     --in-memory), two data planes in this process joined by in-memory
//     links (internal/lab MemoryPair).
//  2. Keys: one tunnel, ESP in UDP 4500, keyed over IKEv2: each gateway has
//     one [[connection]] with a pre-shared key fresh from crypto/rand, A
//     initiates at start and B responds, and the child is the tunnel. With
//     --static-keys (and always over in-memory links, which have no IKE
//     sockets) the two SAs are [[sa]] tables keyed from crypto/rand
//     instead. Two configurations, each the other's mirror image.
//  3. Gateways: `sluice run` daemons inside the namespaces (this executable),
//     or, when this build has no run command, gateway.Start in this process
//     with its TUN device and sockets created inside the namespaces. Up
//     means: the TUN device exists, the control socket answers, and a probe
//     crosses the tunnel.
//  4. Traffic, from sockets in this process opened inside the namespaces:
//     a UDP flood each way at once for four fifths of --duration (at most
//     demoWindow datagrams in flight each way, so that the generator itself
//     overflows no queue; in namespaces three fifths, then one TCP stream
//     A -> B for the fourth), then back-to-back UDP echo probes
//     A -> B -> A for the last fifth. Lines on stderr say what it is
//     doing meanwhile.
//  5. Counters: the SAs' packet counters, once sender and receiver agree,
//     give the SA-level loss (sealed by one gateway, not opened by the
//     other).
//  6. Everything created is removed, also on failure and on Ctrl-C.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// The demo's network.
var (
	demoWAN   = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}
	demoInner = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.1/24"), netip.MustParsePrefix("10.2.0.1/24")}
)

// Shape of the demo.
const (
	demoWANIf     = "wan0"
	demoTUN       = "sluice0"
	demoWindow    = 24               // datagrams in flight per direction
	demoUpWait    = 15 * time.Second // for a gateway to come up
	demoSAWait    = 3 * time.Second  // for the SA counters to agree
	demoPortTx    = 5001             // flood A -> B: from A's port, to B's
	demoPortRx    = 5002             // flood B -> A
	demoPortPing  = 5003             // A's probe socket
	demoPortEcho  = 7                // B's echo socket
	demoPortTCP   = 5004             // B's TCP stream listener
	exitNoTraffic = 1
)

// gatewayArgv returns the command line of a gateway daemon: this
// executable's `run` with args. Tests replace it (a test binary is not
// sluice).
var gatewayArgv = func(args ...string) ([]string, error) {
	exe, err := os.Executable() // not /proc/self/exe: ip netns exec would be that
	if err != nil {
		return nil, err
	}
	return append([]string{exe}, args...), nil
}

// demoOptions are the demo's flags.
type demoOptions struct {
	duration time.Duration
	json     bool
	engine   string
	alg      string
	inMemory bool   // hidden: in-memory links even as root
	static   bool   // [[sa]] tables keyed from crypto/rand instead of IKE
	gateways string // hidden: "auto", "daemon" or "in-process"
	size     int    // hidden: UDP payload bytes; 0 = the most the tunnel MTU takes
	window   int    // hidden: datagrams in flight per direction
	verbose  bool   // hidden: the lab's steps on stderr
}

func init() { commands = append(commands, newDemoCommand) }

func newDemoCommand(e *env) *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo [--duration 5s] [--json] [--engine soft|sched] [--alg aes128gcm16]",
		Short: "Run two gateways back to back and measure the tunnel between them",
		Long: `Run two gateways with one ESP tunnel between them (ESP in UDP 4500, keyed
over IKEv2 with a pre-shared key fresh from crypto/rand), send UDP traffic
through it both ways and measure it. --static-keys keys the tunnel with two
[[sa]] tables instead (keys from crypto/rand, no IKE).

As root, each site is a network namespace with a gateway daemon (sluice run),
its TUN device holding the site's subnet (10.1.0.1/24 and 10.2.0.1/24), and
the two are joined by a veth (192.0.2.1 and 192.0.2.2). Without root the same
traffic runs over in-memory links between two data planes in this process,
keyed statically (in-memory links carry no IKE).

For four fifths of --duration a flood goes each way at once (at most 24
datagrams in flight each way; in namespaces for three fifths, then one TCP
stream A -> B for the fourth); for the last fifth, UDP echo probes go from A
to B and back, one at a time. Printed: throughput (UDP payload), packet rate
and loss each way, the TCP stream's rate, round-trip latency percentiles,
and the SA counters.
Everything the demo creates is removed at the end, on failure and on Ctrl-C.

"sluice demo tls" runs a TLS gateway instead (see its --help).

Exit status: 0; 1 if no traffic got through or the demo could not run.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 5*time.Second, "how long traffic runs")
	f.BoolVar(&o.json, "json", false, "print one JSON document instead of the text report")
	f.StringVar(&o.engine, "engine", "soft", "crypto engine (registered: "+strings.Join(cryptodev.Engines(), ", ")+")")
	f.StringVar(&o.alg, "alg", "aes128gcm16", "ESP algorithm (strongSwan keyword)")
	f.BoolVar(&o.inMemory, "in-memory", false, "use in-memory links even as root")
	f.BoolVar(&o.static, "static-keys", false, "key the tunnel with [[sa]] tables from crypto/rand instead of IKEv2")
	f.StringVar(&o.gateways, "gateways", "auto", `as root: "daemon" (sluice run), "in-process", or "auto" (daemon if this build has run)`)
	f.IntVar(&o.size, "size", 0, "UDP payload bytes per datagram (0: the most the tunnel MTU takes)")
	f.IntVar(&o.window, "window", demoWindow, "datagrams in flight per direction, at most")
	f.BoolVar(&o.verbose, "verbose", false, "log the lab's steps on stderr")
	for _, h := range []string{"in-memory", "gateways", "size", "window", "verbose"} {
		f.MarkHidden(h)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runDemo(cmd.Context(), e, cmd, o)
	}
	cmd.AddCommand(newDemoTLSCommand(e))
	return cmd
}

// demoSite is one side of the demo, wherever its gateway runs.
type demoSite struct {
	name   string // "A" or "B"
	cfg    *config.Gateway
	addr   netip.Addr
	ns     *lab.Netns // nil in memory
	pid    int        // of the daemon, if one
	listen func(netip.AddrPort) (lab.Conn, error)
	stats  func(context.Context) (gateway.Stats, error)
	tuns   func(context.Context) ([]gateway.TunnelInfo, error)
}

// demoRun is one run of the demo.
type demoRun struct {
	o      *demoOptions
	e      *env
	lab    *lab.Lab
	log    *slog.Logger
	sites  [2]*demoSite
	mode   string // "netns" or "in-memory"
	gws    string // "daemon", "in-process" or "in-memory"
	keying string // "ike" or "static"
}

func runDemo(ctx context.Context, e *env, cmd *cobra.Command, o *demoOptions) (err error) {
	alg, aerr := cryptodev.ParseAlg(o.alg)
	if aerr != nil || alg.IsAsymmetric() {
		return usageErr("--alg %q: not an ESP algorithm (%s)", o.alg, algNames())
	}
	if err := cryptodev.CheckEngine(o.engine); err != nil {
		return usageErr("--engine: %s", strings.TrimPrefix(err.Error(), "cryptodev: "))
	}
	if o.duration < 100*time.Millisecond {
		return usageErr("--duration %v: at least 100ms", o.duration)
	}
	switch o.gateways {
	case "auto", "daemon", "in-process":
	default:
		return usageErr(`--gateways %q: want "auto", "daemon" or "in-process"`, o.gateways)
	}

	r := &demoRun{o: o, e: e, log: slog.New(slog.DiscardHandler)}
	if o.verbose {
		r.log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r.lab = lab.New(&lab.Options{Log: r.log})
	defer func() {
		if cerr := r.lab.Close(); cerr != nil {
			err = errors.Join(err, withCode(exitNoTraffic, fmt.Errorf("demo: cleanup: %w", cerr)))
		}
	}()

	dir, err := r.lab.Dir()
	if err != nil {
		return withCode(exitNoTraffic, fmt.Errorf("demo: %w", err))
	}
	static, err := demoConfigs(alg, o.engine, dir)
	if err != nil {
		return withCode(exitNoTraffic, err)
	}
	r.keying = "static"
	switch {
	case o.inMemory:
		err = r.setupMemory(ctx, static)
	case os.Geteuid() != 0:
		fmt.Fprintln(e.stderr, "sluice demo: not root: running the demo over in-memory links in one process, keyed statically (no IKE)")
		err = r.setupMemory(ctx, static)
	case lab.Available() != nil:
		fmt.Fprintf(e.stderr, "sluice demo: %v: running the demo over in-memory links in one process, keyed statically (no IKE)\n", lab.Available())
		err = r.setupMemory(ctx, static)
	default:
		texts := static
		if !o.static {
			if texts, err = demoIKEConfigs(alg, o.engine, dir); err != nil {
				return withCode(exitNoTraffic, err)
			}
			r.keying = "ike"
		}
		daemon := o.gateways == "daemon"
		if o.gateways == "auto" {
			daemon = hasRunCommand(cmd)
		}
		r.progress("making two sites (network namespaces joined by a veth) and starting their gateways")
		err = r.setupNetns(ctx, texts, daemon)
	}
	if err != nil {
		return r.fail(ctx, err)
	}

	rep, err := r.traffic(ctx)
	if err != nil {
		return r.fail(ctx, err)
	}
	return emitDemoReport(e.stdout, o.json, rep, "demo")
}

// demoReporter is what a demo prints: a table, or JSON with --json.
type demoReporter interface {
	print(w io.Writer)
	// failure says why the run counts as failed, or "".
	failure() string
}

// emitDemoReport writes rep as JSON or as its table and turns its failure
// into the demo's error (exit status exitNoTraffic), named by what.
func emitDemoReport(w io.Writer, asJSON bool, rep demoReporter, what string) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(w)
	}
	if msg := rep.failure(); msg != "" {
		return withCode(exitNoTraffic, errors.New(what+": "+msg))
	}
	return nil
}

// fail turns a setup or traffic error into the demo's error: status 1,
// "interrupted" when ctx ended.
func (r *demoRun) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return withCode(exitNoTraffic, fmt.Errorf("demo: interrupted (%v); everything it created is removed", context.Cause(ctx)))
	}
	return withCode(exitNoTraffic, fmt.Errorf("demo: %w", err))
}

// hasRunCommand reports whether this build has `sluice run` with
// --socket.
func hasRunCommand(cmd *cobra.Command) bool {
	c, _, err := cmd.Root().Find([]string{"run"})
	return err == nil && c != nil && c.Name() == "run" && c.Flags().Lookup("socket") != nil
}

func algNames() string {
	var names []string
	for _, a := range cryptodev.Algs() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// demoConfigs writes the two gateways' configuration files: one tunnel,
// its SAs keyed from crypto/rand, mirror images of each other.
func demoConfigs(alg cryptodev.Alg, engine, dir string) ([2][]byte, error) {
	info := alg.Info()
	key := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	sa := func(name string, spi uint32, src, dst netip.Addr) config.FileSA {
		s := config.FileSA{Name: name, SPI: spi, Src: src.String(), Dst: dst.String(), Mode: "tunnel", Encap: "udp",
			ESP: alg.String(), ReplayWindow: new(1024)}
		if n := alg.EncKeyLen(); n > 0 {
			s.EncKey = key(n)
		}
		if info.AuthKeyLen > 0 {
			s.AuthKey = key(info.AuthKeyLen)
		}
		return s
	}
	// Both files carry both SAs, with the same keys.
	sas := []config.FileSA{
		sa("a-to-b", 0x1001, demoWAN[0].Addr(), demoWAN[1].Addr()),
		sa("b-to-a", 0x2001, demoWAN[1].Addr(), demoWAN[0].Addr()),
	}
	var out [2][]byte
	names := [2]string{"a", "b"}
	for i := range 2 {
		j := 1 - i
		f := demoSiteFile(i, engine, dir)
		f.Tunnels = []config.FileTunnel{{
			Name: "to-" + names[j], Local: demoWAN[i].Addr().String(), Peer: demoWAN[j].Addr().String(),
			Encap: "udp", PeerPort: 4500, Remote: []string{demoInner[j].Masked().String()},
			Out: names[i] + "-to-" + names[j], In: []string{names[j] + "-to-" + names[i]},
		}}
		f.SAs = sas
		b, err := encodeDemo(f, fmt.Sprintf("# sluice demo, site %s: written by `sluice demo` with fresh keys\n", strings.ToUpper(names[i])))
		if err != nil {
			return out, err
		}
		out[i] = b
	}
	return out, nil
}

// demoSiteFile is what both keyings write for site i: [gateway], [tun] and
// [udp]. Each gateway has its state directory (it locks it), in the demo's
// own directory: the keys are new each run, so is the state.
func demoSiteFile(i int, engine, dir string) *config.File {
	return &config.File{
		Gateway: config.FileGateway{Engine: engine, LogLevel: "warn", StateDir: filepath.Join(dir, "state-"+[2]string{"a", "b"}[i])},
		TUN:     &config.FileTUN{Name: demoTUN, Addresses: []string{demoInner[i].String()}},
		UDP:     &config.FileUDP{Listen: netip.AddrPortFrom(demoWAN[i].Addr(), 4500).String()},
	}
}

// encodeDemo encodes f after a comment saying where the file comes from.
func encodeDemo(f *config.File, head string) ([]byte, error) {
	b, err := f.Encode()
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return append([]byte(head+"\n"), b...), nil
}

// demoIKEConfigs writes the two gateways' configuration files keyed over
// IKEv2: one [[connection]] each, with a pre-shared key from crypto/rand
// and the demo's ESP algorithm; A starts the negotiation, B waits for it.
// ESP goes in UDP 4500 (encap = true), as with static keys.
func demoIKEConfigs(alg cryptodev.Alg, engine, dir string) ([2][]byte, error) {
	psk := make([]byte, 32)
	rand.Read(psk)
	ids := [2]string{"a.demo.sluice", "b.demo.sluice"}
	names := [2]string{"a", "b"}
	var out [2][]byte
	for i := range 2 {
		j := 1 - i
		start := config.StartNone
		if i == 0 {
			start = config.StartStart
		}
		f := demoSiteFile(i, engine, dir)
		f.Connections = []config.FileConnection{{
			Name: "to-" + names[j], LocalAddrs: []string{demoWAN[i].Addr().String()}, RemoteAddrs: []string{demoWAN[j].Addr().String()},
			Encap:  true,
			Local:  config.FileAuth{Auth: config.AuthPSK, ID: ids[i]},
			Remote: config.FileAuth{Auth: config.AuthPSK, ID: ids[j]},
			Children: []config.FileChild{{
				Name: "net-" + names[j], LocalTS: []string{demoInner[i].Masked().String()}, RemoteTS: []string{demoInner[j].Masked().String()},
				ESPProposals: alg.String(), StartAction: start,
			}},
		}}
		f.Secrets = []config.FileSecret{{Type: config.SecretIKE, IDs: ids[:], Secret: config.SecretHex(psk)}}
		b, err := encodeDemo(f, fmt.Sprintf("# sluice demo, site %s: written by `sluice demo`, keyed over IKEv2 with a fresh pre-shared key\n", strings.ToUpper(names[i])))
		if err != nil {
			return out, err
		}
		out[i] = b
	}
	return out, nil
}

// parseSites parses the two configurations into the run's sites.
func (r *demoRun) parseSites(texts [2][]byte, files [2]string) error {
	for i, name := range []string{"A", "B"} {
		cfg, err := config.ParseGateway(files[i], texts[i])
		if err != nil {
			return fmt.Errorf("generated configuration of site %s: %w", name, err)
		}
		r.sites[i] = &demoSite{name: name, cfg: cfg, addr: demoInner[i].Addr()}
	}
	return nil
}

// setupMemory starts the two gateways in this process on in-memory links.
func (r *demoRun) setupMemory(ctx context.Context, texts [2][]byte) error {
	r.mode, r.gws = "in-memory", "in-memory"
	if err := r.parseSites(texts, [2]string{"gateway-a.toml", "gateway-b.toml"}); err != nil {
		return err
	}
	ma, mb, err := r.lab.MemoryPair(ctx, r.sites[0].cfg, r.sites[1].cfg)
	if err != nil {
		return err
	}
	for i, m := range []*lab.MemorySite{ma, mb} {
		s := r.sites[i]
		s.listen = func(a netip.AddrPort) (lab.Conn, error) { return m.Host.ListenUDP(a) }
		s.stats = func(context.Context) (gateway.Stats, error) { return m.Stats(), nil }
		s.tuns = func(context.Context) ([]gateway.TunnelInfo, error) { return m.Tunnels(), nil }
	}
	return nil
}

// setupNetns builds the namespaces and starts the gateways in them.
func (r *demoRun) setupNetns(ctx context.Context, texts [2][]byte, daemon bool) error {
	r.mode = "netns"
	if swept, err := lab.Sweep(ctx); len(swept) > 0 || err != nil {
		fmt.Fprintf(r.e.stderr, "sluice demo: removed namespaces left by earlier runs: %s (%v)\n", strings.Join(swept, " "), err)
	}
	dir, err := r.lab.Dir()
	if err != nil {
		return err
	}
	var files [2]string
	for i, n := range []string{"gateway-a.toml", "gateway-b.toml"} {
		files[i] = filepath.Join(dir, n)
		if err := os.WriteFile(files[i], texts[i], 0o600); err != nil {
			return err
		}
	}
	if err := r.parseSites(texts, files); err != nil {
		return err
	}
	for i, suffix := range []string{"a", "b"} {
		ns, err := r.lab.NewNetns(ctx, suffix)
		if err != nil {
			return err
		}
		r.sites[i].ns = ns
	}
	a, b := r.sites[0].ns, r.sites[1].ns
	if err := r.lab.Veth(a, demoWANIf, b, demoWANIf); err != nil {
		return err
	}
	for i, s := range r.sites {
		if err := s.ns.AddAddr(demoWANIf, demoWAN[i]); err != nil {
			return err
		}
		s.listen = func(ap netip.AddrPort) (lab.Conn, error) {
			c, err := s.ns.ListenUDP(ap)
			if err != nil {
				return nil, err
			}
			c.SetReadBuffer(4 << 20) // best effort: room for bursts
			c.SetWriteBuffer(4 << 20)
			return c, nil
		}
	}
	// B first: A initiates IKE as it starts, and B then answers at once.
	for _, s := range []*demoSite{r.sites[1], r.sites[0]} {
		var err error
		if daemon {
			r.gws = "daemon"
			err = r.startDaemon(ctx, s, dir)
		} else {
			r.gws = "in-process"
			err = r.startInProcess(ctx, s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startDaemon runs `sluice run` for the site inside its namespace and
// waits until its TUN device exists and its control socket answers.
func (r *demoRun) startDaemon(ctx context.Context, s *demoSite, dir string) error {
	sock := filepath.Join(dir, "gateway-"+strings.ToLower(s.name)+".sock")
	argv, err := gatewayArgv("run", "-c", s.cfg.File, "--socket", sock)
	if err != nil {
		return err
	}
	p, err := r.lab.Start(s.ns, "gateway "+s.name, argv, &lab.ProcOptions{LogFile: filepath.Join(dir, "gateway-"+strings.ToLower(s.name)+".log")})
	if err != nil {
		return err
	}
	s.pid = p.Pid()
	if err := s.ns.WaitLink(ctx, demoTUN, demoUpWait, p); err != nil {
		return err
	}
	if err := lab.WaitControl(ctx, sock, demoUpWait, p); err != nil {
		return err
	}
	s.stats = func(ctx context.Context) (gateway.Stats, error) { return lab.ControlStats(ctx, sock) }
	s.tuns = func(ctx context.Context) ([]gateway.TunnelInfo, error) { return lab.ControlTunnels(ctx, sock) }
	return nil
}

// startInProcess starts the site's gateway in this process, its TUN device
// and sockets created inside the site's namespace.
func (r *demoRun) startInProcess(ctx context.Context, s *demoSite) error {
	var g *gateway.Gateway
	err := s.ns.Do(func() (err error) {
		g, err = gateway.Start(ctx, s.cfg, r.log.With("gateway", s.name))
		return err
	})
	if err != nil {
		return err
	}
	r.lab.Defer("close gateway "+s.name, g.Close)
	s.stats = func(context.Context) (gateway.Stats, error) { return g.Stats(), nil }
	s.tuns = func(context.Context) ([]gateway.TunnelInfo, error) { return g.Tunnels(), nil }
	return s.ns.WaitLink(ctx, demoTUN, demoUpWait, nil)
}

// traffic runs the floods and the probes and reads the counters.
func (r *demoRun) traffic(ctx context.Context) (*demoReport, error) {
	a, b := r.sites[0], r.sites[1]
	rep := &demoReport{Mode: r.mode, Gateways: r.gws, Keying: r.keying, Engine: r.o.engine, Alg: r.o.alg, Window: r.o.window}
	for _, s := range r.sites {
		if s.ns != nil {
			rep.Namespaces = append(rep.Namespaces, s.ns.Name())
		}
		if s.pid != 0 {
			rep.Pids = append(rep.Pids, s.pid)
		}
	}

	open := func(s *demoSite, port uint16) (lab.Conn, error) {
		c, err := s.listen(netip.AddrPortFrom(s.addr, port))
		if err != nil {
			return nil, err
		}
		r.lab.Defer(fmt.Sprintf("close socket %s:%d", s.addr, port), c.Close)
		return c, nil
	}
	var conns [6]lab.Conn
	for i, sp := range []struct {
		s    *demoSite
		port uint16
	}{{a, demoPortTx}, {b, demoPortTx}, {b, demoPortRx}, {a, demoPortRx}, {a, demoPortPing}, {b, demoPortEcho}} {
		c, err := open(sp.s, sp.port)
		if err != nil {
			return nil, err
		}
		conns[i] = c
	}
	aTx, bSink, bTx, aSink, aPing, bEcho := conns[0], conns[1], conns[2], conns[3], conns[4], conns[5]
	echoAddr := netip.AddrPortFrom(b.addr, demoPortEcho)

	echoCtx, stopEcho := context.WithCancel(ctx)
	echoDone := make(chan struct{})
	go func() { defer close(echoDone); lab.Echo(echoCtx, bEcho) }()
	defer func() { stopEcho(); <-echoDone }()

	// Up: a probe crosses the tunnel and back.
	r.progress("waiting for a first packet through the tunnel%s", map[bool]string{true: " (IKEv2 negotiates it first)", false: ""}[r.keying == "ike"])
	start := time.Now()
	err := lab.WaitFor(ctx, "a first packet through the tunnel A -> B -> A", demoUpWait, 0, func() (bool, error) {
		l, err := lab.Ping(ctx, aPing, echoAddr, lab.PingOptions{Count: 1, Timeout: 200 * time.Millisecond})
		if err != nil {
			return false, err
		}
		return l.Received == 1, errors.New("no answer")
	})
	if err != nil {
		return nil, fmt.Errorf("no traffic got through: %w%s", err, r.counterHint(ctx))
	}
	rep.FirstPacket = seconds(time.Since(start))

	// The largest payload both tunnels and both TUN devices carry whole:
	// a datagram larger than its TUN's MTU is fragmented by the kernel
	// before sluice sees it.
	mtu := 0
	least := func(m int) {
		if m > 0 && (mtu == 0 || m < mtu) {
			mtu = m
		}
	}
	for _, s := range r.sites {
		ts, err := s.tuns(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			least(t.MTU)
		}
		if s.ns != nil {
			m, err := s.ns.LinkMTU(demoTUN)
			if err != nil {
				return nil, err
			}
			least(m)
		}
	}
	rep.PayloadBytes = r.o.size
	if rep.PayloadBytes <= 0 {
		rep.PayloadBytes = mtu - 28 // IPv4 and UDP headers
	}

	// The floods, both ways at once: four fifths of the time, or three
	// where a TCP stream takes the fourth.
	tcpFor := time.Duration(0)
	if a.ns != nil {
		tcpFor = r.o.duration / 5
	}
	floodFor := r.o.duration*4/5 - tcpFor
	r.progress("traffic: UDP both ways for %v%s, then echo probes for %v",
		floodFor, map[bool]string{true: ", a TCP stream for " + tcpFor.String(), false: ""}[tcpFor > 0], r.o.duration-floodFor-tcpFor)
	fo := lab.FloodOptions{Size: rep.PayloadBytes, Duration: floodFor, Window: r.o.window}
	type result struct {
		res lab.FloodResult
		err error
	}
	ab, ba := make(chan result, 1), make(chan result, 1)
	go func() {
		res, err := lab.Flood(ctx, aTx, netip.AddrPortFrom(b.addr, demoPortTx), bSink, fo)
		ab <- result{res, err}
	}()
	go func() {
		res, err := lab.Flood(ctx, bTx, netip.AddrPortFrom(a.addr, demoPortRx), aSink, fo)
		ba <- result{res, err}
	}()
	rab, rba := <-ab, <-ba
	if err := errors.Join(rab.err, rba.err); err != nil {
		return nil, err
	}
	rep.Traffic = []demoDirection{direction("A", "B", rab.res), direction("B", "A", rba.res)}

	if tcpFor > 0 {
		if rep.TCP, err = r.tcpStream(ctx, tcpFor); err != nil {
			return nil, err
		}
	}

	// The probes.
	lat, err := lab.Ping(ctx, aPing, echoAddr, lab.PingOptions{Duration: r.o.duration - floodFor - tcpFor, Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	rep.Latency = demoLatency{Probes: lat.Sent, Answered: lat.Received, Lost: lat.Lost,
		MinUs: micros(lat.Min), MeanUs: micros(lat.Mean), P50Us: micros(lat.P50), P90Us: micros(lat.P90), P99Us: micros(lat.P99), MaxUs: micros(lat.Max)}

	// The SA counters, once what was sealed has been opened (or is lost).
	if err := r.readSAs(ctx, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// tcpStream measures one TCP stream from A to B through the tunnel, both
// ends in this process, opened inside the namespaces.
func (r *demoRun) tcpStream(ctx context.Context, d time.Duration) (*demoTCP, error) {
	a, b := r.sites[0], r.sites[1]
	dst := netip.AddrPortFrom(b.addr, demoPortTCP)
	ln, err := b.ns.Listen("tcp", dst.String())
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	dial := func(ctx context.Context) (net.Conn, error) { return a.ns.Dial(ctx, "tcp", dst.String()) }
	res, err := lab.TCPStream(ctx, ln, dial, d)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return &demoTCP{Seconds: res.Elapsed.Seconds(), Bytes: res.Bytes, Mbps: res.Mbps()}, nil
}

// progress says on stderr what the demo is doing, so that its wait is not
// silent (the text report goes to stdout at the end).
func (r *demoRun) progress(format string, args ...any) {
	fmt.Fprintf(r.e.stderr, "sluice demo: "+format+"\n", args...)
}

// readSAs fills in the SA counters, waiting a bounded time for each SA's
// receiver to catch up with its sender.
func (r *demoRun) readSAs(ctx context.Context, rep *demoReport) error {
	var st [2]gateway.Stats
	read := func() (bool, error) {
		for i, s := range r.sites {
			var err error
			if st[i], err = s.stats(ctx); err != nil {
				return false, err
			}
		}
		levels := saLevels(st)
		for _, l := range levels {
			if l.Lost != 0 {
				return false, nil
			}
		}
		return true, nil
	}
	err := lab.WaitFor(ctx, "the SA counters to agree", demoSAWait, 20*time.Millisecond, read)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if len(st[0].SAs) == 0 && len(st[1].SAs) == 0 {
		return err // never read
	}
	rep.SAs = map[string][]gateway.SAInfo{"A": st[0].SAs, "B": st[1].SAs}
	rep.SALevel = saLevels(st)
	rep.Drops = map[string]map[string]uint64{"A": dataplaneDrops(st[0].Dataplane), "B": dataplaneDrops(st[1].Dataplane)}
	return nil
}

// saLevels pairs each SA's outbound counters at one gateway with its
// inbound counters at the other.
func saLevels(st [2]gateway.Stats) []demoSALevel {
	names := [2]string{"A", "B"}
	var out []demoSALevel
	for i := range 2 {
		for _, o := range st[i].SAs {
			if o.Direction != "out" {
				continue
			}
			l := demoSALevel{SA: o.Name, SPI: fmt.Sprintf("0x%08x", o.SPI), From: names[i], To: names[1-i], Sealed: o.Packets}
			for _, in := range st[1-i].SAs {
				if in.Direction == "in" && in.SPI == o.SPI {
					l.Opened = in.Packets
					l.InboundDrops = in.Drops
				}
			}
			if l.Sealed > l.Opened {
				l.Lost = l.Sealed - l.Opened
			}
			out = append(out, l)
		}
	}
	return out
}

// dataplaneDrops adds up a data plane's drop counters by reason, with its
// transmit errors as "tx_error".
func dataplaneDrops(st dataplane.Stats) map[string]uint64 {
	m := map[string]uint64{}
	for _, w := range st.Workers {
		for k, v := range w.Drops {
			m[k] += v
		}
		if w.TxErrors > 0 {
			m["tx_error"] += w.TxErrors
		}
	}
	for _, r := range st.Receivers {
		for k, v := range r.Drops {
			m[k] += v
		}
	}
	return m
}

// counterHint describes the gateways' counters for an error message about
// traffic that did not get through.
func (r *demoRun) counterHint(ctx context.Context) string {
	var b strings.Builder
	for _, s := range r.sites {
		if s == nil || s.stats == nil {
			continue
		}
		st, err := s.stats(ctx)
		if err != nil {
			fmt.Fprintf(&b, "\n\tgateway %s: %v", s.name, err)
			continue
		}
		for _, x := range st.SAs {
			fmt.Fprintf(&b, "\n\tgateway %s: SA %s (%s) packets %d drops %v", s.name, x.Name, x.Direction, x.Packets, x.Drops)
		}
		for _, w := range st.Dataplane.Workers {
			if len(w.Drops) > 0 {
				fmt.Fprintf(&b, "\n\tgateway %s: worker %d drops %v", s.name, w.Index, w.Drops)
			}
		}
		for i, rx := range st.Dataplane.Receivers {
			if len(rx.Drops) > 0 {
				fmt.Fprintf(&b, "\n\tgateway %s: receiver %d drops %v", s.name, i, rx.Drops)
			}
		}
	}
	return b.String()
}

// demoReport is what the demo prints; --json prints it as is.
type demoReport struct {
	Mode         string          `json:"mode"`     // "netns" or "in-memory"
	Gateways     string          `json:"gateways"` // "daemon", "in-process" or "in-memory"
	Namespaces   []string        `json:"namespaces,omitempty"`
	Pids         []int           `json:"pids,omitempty"`
	Keying       string          `json:"keying"` // "ike" (IKEv2, PSK) or "static" ([[sa]] tables)
	Engine       string          `json:"engine"`
	Alg          string          `json:"alg"`
	PayloadBytes int             `json:"payload_bytes"` // UDP payload per datagram
	Window       int             `json:"window"`        // datagrams in flight per direction, at most
	FirstPacket  float64         `json:"first_packet_s"`
	Traffic      []demoDirection `json:"traffic"`
	// TCP is one TCP stream A -> B through the tunnel (network namespaces
	// only: in-memory links carry no kernel TCP).
	TCP     *demoTCP                    `json:"tcp,omitempty"`
	Latency demoLatency                 `json:"latency"`
	SALevel []demoSALevel               `json:"sa_level"`
	SAs     map[string][]gateway.SAInfo `json:"sas"`
	// Drops are each gateway's data-plane drops by reason.
	Drops map[string]map[string]uint64 `json:"dataplane_drops"`
}

// demoTCP is the TCP stream's result.
type demoTCP struct {
	Seconds float64 `json:"seconds"`
	Bytes   uint64  `json:"bytes"`
	Mbps    float64 `json:"mbps"`
}

// demoDirection is one flood.
type demoDirection struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Seconds   float64 `json:"seconds"`
	Sent      uint64  `json:"sent"`
	Received  uint64  `json:"received"`
	Lost      uint64  `json:"lost"`
	LossRatio float64 `json:"loss_ratio"`
	Reordered uint64  `json:"reordered"`
	Mbps      float64 `json:"mbps"` // UDP payload, Mbit/s
	PPS       float64 `json:"pps"`
}

func direction(from, to string, r lab.FloodResult) demoDirection {
	return demoDirection{From: from, To: to, Seconds: seconds(r.Elapsed), Sent: r.Sent, Received: r.Received, Lost: r.Lost,
		LossRatio: r.LossRatio(), Reordered: r.Reordered, Mbps: r.Mbps(), PPS: r.PPS()}
}

// demoLatency is the echo probes' round trips, in microseconds.
type demoLatency struct {
	Probes   int     `json:"probes"`
	Answered int     `json:"answered"`
	Lost     int     `json:"lost"`
	MinUs    float64 `json:"min_us"`
	MeanUs   float64 `json:"mean_us"`
	P50Us    float64 `json:"p50_us"`
	P90Us    float64 `json:"p90_us"`
	P99Us    float64 `json:"p99_us"`
	MaxUs    float64 `json:"max_us"`
}

// demoSALevel is one SA end to end: sealed by one gateway, opened by the
// other. Lost is the difference.
type demoSALevel struct {
	SA           string            `json:"sa"`
	SPI          string            `json:"spi"`
	From         string            `json:"from"`
	To           string            `json:"to"`
	Sealed       uint64            `json:"sealed"`
	Opened       uint64            `json:"opened"`
	Lost         uint64            `json:"lost"`
	InboundDrops map[string]uint64 `json:"inbound_drops"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }
func micros(d time.Duration) float64  { return float64(d.Nanoseconds()) / 1e3 }

// failure says what makes the run a failure, or "".
func (rep *demoReport) failure() string {
	var bad []string
	for _, d := range rep.Traffic {
		if d.Received == 0 {
			bad = append(bad, fmt.Sprintf("%s -> %s", d.From, d.To))
		}
	}
	if rep.Latency.Answered == 0 {
		bad = append(bad, "the echo probes")
	}
	if len(bad) == 0 {
		return ""
	}
	return "no traffic got through: " + strings.Join(bad, ", ")
}

// print writes the text report.
func (rep *demoReport) print(w io.Writer) {
	where := "in-memory links between two data planes in this process"
	if rep.Mode == "netns" {
		how := "sluice run daemons"
		if rep.Gateways == "in-process" {
			how = "gateways in this process"
		}
		where = fmt.Sprintf("network namespaces %s, joined by a veth (%s - %s); %s",
			strings.Join(rep.Namespaces, " and "), demoWAN[0].Addr(), demoWAN[1].Addr(), how)
		if len(rep.Pids) > 0 {
			where += fmt.Sprintf(" (pids %s)", strings.Trim(fmt.Sprint(rep.Pids), "[]"))
		}
	}
	fmt.Fprintf(w, "sluice demo: site A %s <-> site B %s, one ESP tunnel (UDP 4500, %s, %s engine)\n",
		demoInner[0].Masked(), demoInner[1].Masked(), rep.Alg, rep.Engine)
	fmt.Fprintf(w, "  over %s\n", where)
	if rep.Keying == "ike" {
		fmt.Fprintf(w, "  keyed over IKEv2: A initiated to B with a fresh pre-shared key; the child SA is the tunnel (--static-keys: [[sa]] tables instead)\n")
	} else {
		fmt.Fprintf(w, "  keyed statically: two [[sa]] tables with keys fresh from crypto/rand, no IKE\n")
	}
	fmt.Fprintf(w, "  first packet through after %s%s\n\n", fmtDur(time.Duration(rep.FirstPacket*float64(time.Second))),
		map[bool]string{true: " (the IKE negotiation included)", false: ""}[rep.Keying == "ike"])

	secs := 0.0
	if len(rep.Traffic) > 0 {
		secs = rep.Traffic[0].Seconds
	}
	fmt.Fprintf(w, "traffic: %d-byte UDP payloads, both ways at once for %.1fs, at most %d in flight each way\n", rep.PayloadBytes, secs, rep.Window)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\t\tMbit/s\tpackets/s\tsent\treceived\tlost\t")
	for _, d := range rep.Traffic {
		fmt.Fprintf(tw, "\t%s -> %s\t%.1f\t%.0f\t%d\t%d\t%d (%.3f%%)\t\n", d.From, d.To, d.Mbps, d.PPS, d.Sent, d.Received, d.Lost, 100*d.LossRatio)
	}
	tw.Flush()
	if rep.TCP != nil {
		fmt.Fprintf(w, "\nTCP: one stream A -> B for %.1fs: %.1f Mbit/s (%d bytes)\n", rep.TCP.Seconds, rep.TCP.Mbps, rep.TCP.Bytes)
	}

	l := rep.Latency
	fmt.Fprintf(w, "\nlatency: UDP echo A -> B -> A, one probe at a time: %d probes, %d lost\n", l.Probes, l.Lost)
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	fmt.Fprintf(w, "  min %s  p50 %s  p90 %s  p99 %s  max %s\n", us(l.MinUs), us(l.P50Us), us(l.P90Us), us(l.P99Us), us(l.MaxUs))

	fmt.Fprintln(w, "\nSAs: sealed by one gateway, opened by the other")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tSA\tSPI\t\tsealed\topened\tlost\tinbound drops\t")
	for _, s := range rep.SALevel {
		drops := "none"
		if len(s.InboundDrops) > 0 {
			drops = fmt.Sprint(s.InboundDrops)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s -> %s\t%d\t%d\t%d\t%s\t\n", s.SA, s.SPI, s.From, s.To, s.Sealed, s.Opened, s.Lost, drops)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nnext: sluice demo tls, a TLS gateway (handshakes, resumption, requests; no root needed)")
}

// fmtDur prints a duration with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	}
}
