package cli

// sluice bench tunnel: package bench/tunnel on the command line. Flags are
// checked first (exit status 2 for a bad one, and without root); then each
// cell runs in turn, its rows printed as soon as it is measured (or, with
// --json, one document at the end), and --plot writes the
// document and has sluice-plot draw its charts (bench.go).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/bench/tunnel"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/internal/lab"
)

// tunnelOptions are the flags of bench tunnel.
type tunnelOptions struct {
	systems  []string
	engines  []string
	algs     []string
	links    []string
	sizes    []int
	tunnels  []int
	workers  []int
	duration time.Duration
	repeat   int
	latRate  int
	json     bool
	dryRun   bool
	plotDir  string
	wg       string
}

func newBenchTunnelCommand(e *env) *cobra.Command {
	o := &tunnelOptions{}
	cmd := &cobra.Command{
		Use:   "tunnel [flags]",
		Short: "Measure tunnels between two namespaces: sluice, wireguard-go and plain veth",
		Long: `Measure a tunnel end to end, as a user would run it, against wireguard-go
and against the bare link, on one topology: two network namespaces A and B
joined by a veth (192.0.2.1/24 and 192.0.2.2/24). Tunnel k carries
10.1.k.0/24 (A) to 10.2.k.0/24 (B).

  veth          no tunnel: traffic goes to B's WAN address (the ceiling)
  sluice        two 'sluice run' daemons with the defaults a user gets: ESP in
                UDP 4500, --engines, --algs and --links as given, workers only
                when --workers is given; N tunnels are N tunnels with their
                own SAs
  wireguard-go  two wireguard-go daemons (built with go install at a pinned
                version when none is on PATH), configured over their UAPI
                socket, MTU 1420; N tunnels are one peer with N allowed-IP
                prefixes

--links sets the gateways' [udp] link: auto (the default: AF_XDP where its
program loads, the UDP sockets otherwise), socket (recvmmsg/sendmmsg) or xdp
(AF_XDP on the WAN veth); '--links socket,xdp' measures both in one run. The
table's link column says what the gateways reported: "socket", or "xdp" with
its AF_XDP mode (copy or zerocopy; native or generic XDP).

For each cell (system, engine, algorithm, link, workers, tunnels), --repeat times:
TCP throughput with one stream and with four (iperf3, through tunnel 0), ping
(ICMP, 100 echoes 10 ms apart), UDP echo round trips at a fixed rate
(--latency-rate, spread over all tunnels; p50, p99, p99.9), and a UDP flood
for each --sizes (the inner IPv4 packet; spread over all tunnels, sent with
sendmmsg as fast as the socket takes them): payload Gbit/s and packets/s
received, and the loss. The CPU time of both daemons (utime+stime) around
each measurement gives Gbit per CPU-second. Each figure is the median of the
repetitions; --json gives the spread (min, max).

Needs root, iproute2, iperf3 and ping. Everything it creates (namespaces,
processes, files) is removed at the end and on Ctrl-C; a wireguard-go it
builds stays in the cache directory for the next run.

Exit status: 0; 1 if a measurement failed; 2 for bad flags or without root.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.systems, "systems", tunnel.Systems, "systems to measure: veth, sluice, wireguard-go")
	f.StringSliceVar(&o.engines, "engines", []string{"soft"}, "sluice's crypto engines (registered: "+strings.Join(cryptodev.Engines(), ", ")+")")
	f.StringSliceVar(&o.algs, "algs", []string{"aes128gcm16"}, "sluice's ESP algorithms (strongSwan keywords)")
	f.StringSliceVar(&o.links, "links", []string{tunnel.LinkAuto}, "sluice's ESP links ([udp] link): auto, socket, xdp; several measure each in the same run")
	f.IntSliceVar(&o.sizes, "sizes", []int{64, 512, 1024, 1400}, fmt.Sprintf("inner IPv4 packet bytes of the UDP floods (%d to %d)", tunnel.MinSize, tunnel.MaxSize))
	f.IntSliceVar(&o.tunnels, "tunnels", []int{1}, fmt.Sprintf("tunnel counts (1 to %d)", tunnel.MaxTunnels))
	f.IntSliceVar(&o.workers, "workers", nil, "sluice's data-plane workers (default: not set, the gateway's default)")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "length of each throughput measurement (whole seconds for iperf3)")
	f.IntVar(&o.repeat, "repeat", 3, "repetitions of each measurement; figures are the median")
	f.IntVar(&o.latRate, "latency-rate", tunnel.DefaultLatencyRate, "UDP echo probes per second of the latency measurement")
	f.BoolVar(&o.json, "json", false, `print one JSON document {"results":[...],"ratios":[...],"notes":[...]} instead of the table`)
	dryRunFlag(f, &o.dryRun)
	f.StringVar(&o.plotDir, "plot", "", "write the results (NAME.json) and, with sluice-plot, PNG and SVG charts into `DIR`")
	f.StringVar(&o.wg, "wireguard-go", "", "the wireguard-go executable (default: on PATH, or built into the cache directory)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchTunnel(cmd.Context(), e, o)
	}
	return cmd
}

// options turns the flags into tunnel.Options and checks them.
func (o *tunnelOptions) options() (tunnel.Options, error) {
	to := tunnel.Options{
		Systems: o.systems, Engines: o.engines, Algs: o.algs, Links: o.links, Sizes: o.sizes, Tunnels: o.tunnels, Workers: o.workers,
		Duration: o.duration, Repeat: o.repeat, LatencyRate: o.latRate,
		GatewayArgv: gatewayArgv, WireGuard: o.wg,
	}
	if err := to.Check(); err != nil {
		return to, withCode(ExitUsage, err)
	}
	for _, n := range o.engines {
		if err := cryptodev.CheckEngine(n); err != nil {
			return to, usageErr("--engines: %s", strings.TrimPrefix(err.Error(), "cryptodev: "))
		}
	}
	for _, a := range o.algs {
		if alg, err := cryptodev.ParseAlg(a); err != nil || alg.IsAsymmetric() {
			return to, usageErr("--algs: %q is not an ESP algorithm (%s)", a, algNames())
		}
	}
	if dir, err := os.UserCacheDir(); err == nil {
		to.CacheDir = filepath.Join(dir, "sluice")
	}
	return to, nil
}

// labAvailable says whether namespaces can be built here; tests replace
// it.
var labAvailable = lab.Available

// tunnelObserver prints a run: rows as cells finish, notes, the bar.
type tunnelObserver struct {
	r     *benchRun
	table tunnel.Table
}

func (t *tunnelObserver) Step(label string)     { t.r.bar.Start(label) }
func (t *tunnelObserver) Progress(frac float64) { t.r.bar.Progress(frac) }
func (t *tunnelObserver) StepDone()             { t.r.bar.Done() }
func (t *tunnelObserver) Note(msg string)       { t.r.note("%s", msg) }
func (t *tunnelObserver) CellDone(c tunnel.Cell, rs []tunnel.Result) {
	for _, row := range t.table.Rows(c, rs) {
		t.r.line(row)
	}
}

func runBenchTunnel(ctx context.Context, e *env, o *tunnelOptions) error {
	to, err := o.options()
	if err != nil {
		return err
	}
	if err := labAvailable(); err != nil && !o.dryRun {
		return withCode(ExitUsage, fmt.Errorf("bench tunnel: %w (run it as root)", err))
	}
	steps := len(to.Cells()) * to.StepsPerCell()
	r, err := startBenchRun(e, &benchCommon{json: o.json, dryRun: o.dryRun}, steps, to.Estimate())
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	obs := &tunnelObserver{r: r}
	r.line(bench.CurrentEnv().Summary() + fmt.Sprintf(", %v per throughput run, median of %d", o.duration, o.repeat))
	r.line(obs.table.Header())
	doc, runErr := tunnel.Run(ctx, to, obs)
	if doc == nil {
		return withCode(exitBenchFailed, runErr)
	}
	return r.end(o.plotDir, tunnel.BenchName, runErr, len(doc.Results) > 0, &doc.Notes, doc.WriteJSON, func(w io.Writer) { tunnel.WriteRatios(w, doc.Ratios) })
}
