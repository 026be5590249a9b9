package tunnel

// A bench run, cell after cell:
//
//  1. Topology: two namespaces, A and B, joined by one veth, the WAN
//     (192.0.2.1/24 and 192.0.2.2/24), the same for every system.
//  2. System: nothing more for veth; two `sluice run` daemons with N
//     tunnels; or two wireguard-go daemons with one peer and N prefixes.
//     Tunnel k carries 10.1.k.0/24 (A) <-> 10.2.k.0/24 (B).
//  3. Up: an echo answered through every tunnel.
//  4. Measurements, --repeat times over: TCP one stream and four (iperf3,
//     through tunnel 0), ping (ICMP through tunnel 0), UDP echo latency at a
//     fixed rate (spread over all tunnels), and a UDP flood for each size
//     (spread over all tunnels); the CPU time of both daemons around each.
//  5. The median of each metric, with its spread; then everything the cell
//     created is removed (also when the run is cancelled).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// The WAN of every cell.
var wan = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}

const wanIf = "wan0"

// Observer follows a run. Its methods are called from Run's goroutine,
// except Progress, which a ticker goroutine calls while a step runs.
type Observer interface {
	// Step says that a measured step begins; Progress how far it is.
	Step(label string)
	Progress(frac float64)
	StepDone()
	// Note reports something the reader should know (a skipped system, a
	// substitution).
	Note(msg string)
	// CellDone delivers a cell's results.
	CellDone(c Cell, rs []Result)
}

// Options shape a Run.
type Options struct {
	Systems []string
	Engines []string // sluice's engines
	Algs    []string // sluice's algorithms
	// Links are sluice's ESP links ([udp] link, Links); empty: LinkAuto,
	// the default a user gets.
	Links   []string
	Sizes   []int // inner IPv4 packet bytes of the UDP floods
	Tunnels []int
	// Workers are sluice's data-plane workers; empty: its default only.
	Workers  []int
	Duration time.Duration
	Repeat   int
	// LatencyRate is the probes per second of the latency measurement.
	LatencyRate int
	// GatewayArgv returns the command line of `sluice run` with args.
	GatewayArgv func(args ...string) ([]string, error)
	// WireGuard is the wireguard-go executable; "" finds or builds one
	// (FindWireGuard) in CacheDir.
	WireGuard string
	CacheDir  string
	Log       *slog.Logger
}

// Default values of the options.
const (
	DefaultLatencyRate = 1000 // a low rate: at 10,000/s on a shared 2-core machine wireguard-go queued probes for 175 ms
	// WireGuardAlg is wireguard-go's cipher.
	WireGuardAlg = "chacha20poly1305"
)

// Cells returns the cells of a run, in the order they run: veth (one
// tunnel count, it has no tunnels), then sluice by engine, algorithm,
// link, workers and tunnels, then wireguard-go by tunnels.
func (o *Options) Cells() []Cell {
	var cs []Cell
	workers := o.Workers
	if len(workers) == 0 {
		workers = []int{0}
	}
	for _, s := range o.Systems {
		switch s {
		case Veth:
			cs = append(cs, Cell{System: Veth, Encap: "-", Engine: "-", Alg: "-", Tunnels: 1})
		case Sluice:
			links := o.Links
			if len(links) == 0 {
				links = []string{LinkAuto}
			}
			for _, e := range o.Engines {
				for _, a := range o.Algs {
					for _, l := range links {
						for _, w := range workers {
							for _, n := range o.Tunnels {
								cs = append(cs, Cell{System: Sluice, Encap: "udp", Engine: e, Alg: a, Link: l, Tunnels: n, Workers: w})
							}
						}
					}
				}
			}
		case WireGuard:
			for _, n := range o.Tunnels {
				cs = append(cs, Cell{System: WireGuard, Encap: "udp", Engine: "-", Alg: WireGuardAlg, Tunnels: n})
			}
		}
	}
	return cs
}

// StepsPerCell is how many measured steps each cell has.
func (o *Options) StepsPerCell() int { return o.Repeat * (4 + len(o.Sizes)) }

// latencyDuration is how long each latency measurement runs.
func (o *Options) latencyDuration() time.Duration { return min(o.Duration, 5*time.Second) }

// Check reports the first problem with the options.
func (o *Options) Check() error {
	switch {
	case len(o.Systems) == 0:
		return errors.New("--systems: name at least one of veth, sluice, wireguard-go")
	case o.Duration < time.Second:
		return fmt.Errorf("--duration %v: at least 1s (iperf3 measures whole seconds)", o.Duration)
	case o.Repeat < 1 || o.Repeat > 100:
		return fmt.Errorf("--repeat %d: want 1 to 100", o.Repeat)
	case o.LatencyRate < 1 || o.LatencyRate > 100000:
		return fmt.Errorf("--latency-rate %d: want 1 to 100000 probes per second", o.LatencyRate)
	}
	for _, s := range o.Systems {
		if !slices.Contains(Systems, s) {
			return fmt.Errorf("--systems: unknown system %q (want veth, sluice, wireguard-go)", s)
		}
	}
	if len(o.Sizes) == 0 {
		return errors.New("--sizes: give at least one size")
	}
	for _, s := range o.Sizes {
		if s < MinSize || s > MaxSize {
			return fmt.Errorf("--sizes %d: want %d to %d bytes (an inner IPv4 packet that fits wireguard-go's MTU of %d)", s, MinSize, MaxSize, wgMTU)
		}
	}
	if len(o.Tunnels) == 0 {
		return errors.New("--tunnels: give at least one count")
	}
	for _, n := range o.Tunnels {
		if n < 1 || n > MaxTunnels {
			return fmt.Errorf("--tunnels %d: want 1 to %d", n, MaxTunnels)
		}
	}
	for _, w := range o.Workers {
		if w < 1 || w > 1024 {
			return fmt.Errorf("--workers %d: want 1 to 1024", w)
		}
	}
	for _, l := range o.Links {
		if !slices.Contains(Links, l) {
			return fmt.Errorf("--links: unknown link %q (want %s)", l, strings.Join(Links, ", "))
		}
	}
	if slices.Contains(o.Systems, Sluice) && (len(o.Engines) == 0 || len(o.Algs) == 0) {
		return errors.New("--engines and --algs: name at least one each for sluice")
	}
	return nil
}

// Packet sizes a flood may use: a UDP payload of at least headerBytes, and
// an inner packet within wireguard-go's MTU.
const (
	MinSize = 48
	MaxSize = wgMTU
)

// topology is the namespaces of one cell.
type topology struct {
	lab *lab.Lab
	ns  [2]*lab.Netns
}

func newTopology(ctx context.Context, l *lab.Lab) (*topology, error) {
	t := &topology{lab: l}
	for i, s := range []string{"a", "b"} {
		ns, err := l.NewNetns(ctx, s)
		if err != nil {
			return nil, err
		}
		t.ns[i] = ns
	}
	if err := l.Veth(t.ns[0], wanIf, t.ns[1], wanIf); err != nil {
		return nil, err
	}
	for i, ns := range t.ns {
		if err := ns.AddAddr(wanIf, wan[i]); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Run measures every cell of o in turn and returns the document (with the
// results so far if it fails). Each cell's namespaces, processes and files
// are removed before the next starts, and when ctx is cancelled.
func Run(ctx context.Context, o Options, obs Observer) (*Document, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := lab.Available(); err != nil {
		return nil, err
	}
	for _, tool := range []string{"iperf3", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("bench: %s is not installed (Debian: apt-get install iperf3 iputils-ping)", tool)
		}
	}
	doc := &Document{}
	note := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !slices.Contains(doc.Notes, s) {
			doc.Notes = append(doc.Notes, s)
			obs.Note(s)
		}
	}
	if swept, err := lab.Sweep(ctx); len(swept) > 0 || err != nil {
		note("removed namespaces left by earlier runs: %v (%v)", swept, err)
	}
	wgExe := ""
	cells := o.Cells()
	if slices.Contains(o.Systems, WireGuard) {
		exe, built, err := FindWireGuard(ctx, o.WireGuard, o.CacheDir)
		if err != nil {
			note("wireguard-go skipped: %v", err)
			cells = slices.DeleteFunc(cells, func(c Cell) bool { return c.System == WireGuard })
		} else {
			wgExe = exe
			if built {
				note("built %s (%s@%s) into %s", WireGuardName, WireGuardModule, WireGuardVersion, exe)
			}
			note("wireguard-go: N tunnels are one peer with N allowed-IP prefixes (one key pair each side, one session)")
			note("%s", cipherNote(o))
		}
	}
	if slices.Contains(o.Systems, Veth) {
		note("veth: no tunnel, traffic to B's WAN address; measured with one path only")
	}
	if slices.ContainsFunc(cells, func(c Cell) bool { return c.Tunnels > 1 }) {
		note("TCP and ping go through tunnel 0 only; UDP floods and latency probes are spread round robin over all tunnels")
	}
	for _, c := range cells {
		rs, err := runCell(ctx, o, &c, wgExe, note, obs)
		doc.Results = append(doc.Results, rs...)
		if err != nil {
			if ctx.Err() != nil {
				return doc, fmt.Errorf("bench: interrupted during %s: everything it created is removed", c)
			}
			return doc, fmt.Errorf("bench: %s: %w", c, err)
		}
		obs.CellDone(c, rs)
	}
	doc.Ratios = Ratios(doc.Results)
	return doc, nil
}

// runCell sets up one cell, measures it and removes it. It sets the
// cell's LinkGot from what the gateways report, and notes why an auto
// link took the UDP sockets.
func runCell(ctx context.Context, o Options, cp *Cell, wgExe string, note func(string, ...any), obs Observer) (rs []Result, err error) {
	c := *cp
	l := lab.New(&lab.Options{Log: o.Log})
	defer func() {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	t, err := newTopology(ctx, l)
	if err != nil {
		return nil, err
	}
	a, b := t.ns[0], t.ns[1]
	var pids []int
	paths := []Path{{Src: wan[0].Addr(), Dst: wan[1].Addr()}}
	switch c.System {
	case Sluice:
		var links [2]*gateway.ESPLinkInfo
		pids, links, err = startSluice(ctx, t, c, o.GatewayArgv)
		paths = tunnelPaths(c.Tunnels)
		c.LinkGot = linkGot(links)
		*cp = c
		for i, l := range links {
			if l != nil && l.Why != "" && l.Config == LinkAuto {
				note("sluice link auto: gateway %s took the UDP sockets: %s", []string{"A", "B"}[i], l.Why)
			}
		}
	case WireGuard:
		pids, err = startWireGuard(ctx, t, wgExe, c.Tunnels)
		paths = tunnelPaths(c.Tunnels)
	}
	if err != nil {
		return nil, err
	}

	// The built-in traffic's sockets and the echo in site B.
	listen := func(ns *lab.Netns, port uint16) (*net.UDPConn, error) {
		conn, err := ns.ListenUDP(netip.AddrPortFrom(netip.IPv4Unspecified(), port))
		if err != nil {
			return nil, err
		}
		l.Defer("close socket", conn.Close)
		conn.SetReadBuffer(4 << 20) // best effort
		conn.SetWriteBuffer(4 << 20)
		return conn, nil
	}
	var socks [4]*net.UDPConn
	for i, sp := range []struct {
		ns   *lab.Netns
		port uint16
	}{{a, 0}, {a, 0}, {b, floodPort}, {b, echoPort}} {
		if socks[i], err = listen(sp.ns, sp.port); err != nil {
			return nil, err
		}
	}
	floodSrc, probeSock, sink, echoSock := socks[0], socks[1], socks[2], socks[3]
	echoCtx, stopEcho := context.WithCancel(ctx)
	echoDone := make(chan struct{})
	go func() { defer close(echoDone); echo(echoCtx, echoSock) }()
	defer func() { stopEcho(); <-echoDone }()
	if err := reachAll(ctx, probeSock, paths, upWait); err != nil {
		return nil, err
	}

	samples := map[sampleKey][]float64{}
	add := func(size int, metric string, v float64) {
		k := sampleKey{size, metric}
		samples[k] = append(samples[k], v)
	}
	// cpuAround runs f and returns the wall and CPU time of the daemons
	// meanwhile (CPU 0 without daemons).
	cpuAround := func(f func() error) (wall, cpu time.Duration, err error) {
		c0, err := cpuOf(pids)
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		wall = time.Since(t0)
		c1, err := cpuOf(pids)
		return wall, c1 - c0, err
	}
	tcpDst, pingDst := paths[0].Dst.String(), paths[0].Dst.String()
	step := func(what string) { obs.Step(fmt.Sprintf("%s: %s", c, what)) }
	for range o.Repeat {
		for _, streams := range []int{1, 4} {
			step(fmt.Sprintf("TCP, %d stream(s)", streams))
			var gbps float64
			stop := bench.Ticker(o.Duration, obs.Progress)
			wall, cpu, err := cpuAround(func() (err error) {
				gbps, err = iperfTCP(ctx, a, b, tcpDst, streams, o.Duration)
				return err
			})
			stop()
			if err != nil {
				return nil, err
			}
			metric, perCPU := TCP1, TCP1PerCPU
			if streams == 4 {
				metric, perCPU = TCP4, TCP4PerCPU
			}
			add(0, metric, gbps)
			if cpu > 0 {
				add(0, perCPU, gbps*float64(iperfSeconds(o.Duration))/cpu.Seconds())
				if streams == 1 {
					add(0, GatewayCPU, cpu.Seconds()/wall.Seconds())
				}
			}
			obs.StepDone()
		}

		step("ping")
		avg, err := pingAvg(ctx, a, pingDst)
		if err != nil {
			return nil, err
		}
		add(0, PingAvg, avg)
		obs.StepDone()

		step(fmt.Sprintf("UDP echo latency at %d/s", o.LatencyRate))
		stop := bench.Ticker(o.latencyDuration(), obs.Progress)
		pr, err := probe(ctx, probeSock, paths, o.LatencyRate, o.latencyDuration())
		stop()
		if err != nil {
			return nil, err
		}
		if len(pr.RTTs) == 0 {
			return nil, fmt.Errorf("no latency probe of %d answered", pr.Sent)
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		add(0, LatP50, us(pr.Quantile(0.5)))
		add(0, LatP99, us(pr.Quantile(0.99)))
		add(0, LatP999, us(pr.Quantile(0.999)))
		add(0, LatLoss, pr.LossPercent())
		obs.StepDone()

		for _, size := range o.Sizes {
			step("UDP flood, " + strconv.Itoa(size) + " B")
			var fr FloodResult
			stop := bench.Ticker(o.Duration, obs.Progress)
			_, cpu, err := cpuAround(func() (err error) {
				fr, err = flood(ctx, floodSrc, sink, paths, size-udpIPHeaders, o.Duration)
				return err
			})
			stop()
			if err != nil {
				return nil, err
			}
			if fr.Received == 0 {
				return nil, fmt.Errorf("UDP flood of %d B: none of %d datagrams arrived", size, fr.Sent)
			}
			add(size, UDPRate, fr.Gbps())
			add(size, UDPPPS, fr.PPS())
			add(size, UDPLoss, fr.LossPercent())
			if cpu > 0 {
				add(size, UDPPerCPU, float64(fr.Received)*float64(fr.Payload)*8/1e9/cpu.Seconds())
			}
			obs.StepDone()
		}
	}
	return collect(c, samples), nil
}

// sampleKey names the samples of one metric at one size.
type sampleKey struct {
	size   int
	metric string
}

// metricOrder is the order of a cell's results.
var metricOrder = []string{TCP1, TCP4, TCP1PerCPU, TCP4PerCPU, GatewayCPU, PingAvg, LatP50, LatP99, LatP999, LatLoss,
	UDPRate, UDPPPS, UDPLoss, UDPPerCPU}

// collect turns a cell's samples into results: size 0 first, then by size,
// each in metricOrder.
func collect(c Cell, samples map[sampleKey][]float64) []Result {
	keys := make([]sampleKey, 0, len(samples))
	for k := range samples {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y sampleKey) int {
		if x.size != y.size {
			return x.size - y.size
		}
		return slices.Index(metricOrder, x.metric) - slices.Index(metricOrder, y.metric)
	})
	var rs []Result
	for _, k := range keys {
		v, sp := bench.Median(samples[k])
		rs = append(rs, Result{Cell: c, Size: k.size, Metric: k.metric, Value: v, Unit: Units[k.metric], Spread: sp})
	}
	return rs
}

// cipherNote says which cipher wireguard-go runs against sluice's, and how
// to measure sluice with the same one when it is not in the run.
func cipherNote(o Options) string {
	s := "wireguard-go runs ChaCha20-Poly1305 (" + WireGuardAlg + ", WireGuard's only cipher)"
	if !slices.Contains(o.Systems, Sluice) {
		return s
	}
	s += "; sluice runs " + strings.Join(o.Algs, ", ")
	if !slices.Contains(o.Algs, WireGuardAlg) {
		s += "; add " + WireGuardAlg + " to --algs (--algs " + strings.Join(append(slices.Clone(o.Algs), WireGuardAlg), ",") + ") for sluice on the same cipher in this table"
	}
	return s
}

// Allowances of Estimate for what is not a measurement window.
const (
	estCellSetup = 2 * time.Second        // namespaces, daemons, the first echo, teardown
	estStep      = 250 * time.Millisecond // starting a tool, reading its output
	estPing      = 1200 * time.Millisecond
)

// Estimate is about how long a run of o takes: for every cell its setup,
// and Repeat times its measurement windows (TCP one and four streams, ping,
// the latency probes, a flood per size) with each step's overhead. Building
// wireguard-go, when a run needs to, comes on top.
func (o *Options) Estimate() time.Duration {
	tcp := time.Duration(iperfSeconds(o.Duration)) * time.Second
	perRepeat := 2*tcp + estPing + o.latencyDuration() + time.Duration(len(o.Sizes))*o.Duration +
		time.Duration(4+len(o.Sizes))*estStep
	return time.Duration(len(o.Cells())) * (estCellSetup + time.Duration(o.Repeat)*perRepeat)
}
