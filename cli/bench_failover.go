package cli

// sluice bench failover: package bench/failover on the command line. Flags
// are checked first (exit status 2 for a bad one, and without root); then
// each system is killed --runs times, its summary row printed when its
// runs are done (or, with --json, one document at the end); --out also
// writes the document to a file.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/bench/failover"
)

// failoverOptions are the flags of bench failover.
type failoverOptions struct {
	systems    []string
	runs       int
	rate       int
	tcpRate    float64
	giveUp     time.Duration
	dpd        time.Duration
	throughput time.Duration
	tpRepeat   int
	json       bool
	dryRun     bool
	out        string
}

func newBenchFailoverCommand(e *env) *cobra.Command {
	o := &failoverOptions{}
	cmd := &cobra.Command{
		Use:   "failover [flags]",
		Short: "Measure how long a tunnel stops when its gateway is killed: sluice with a standby, sluice and strongSwan restarted",
		Long: `Kill (SIGKILL) the gateway that carries a site-to-site tunnel in the middle
of the traffic and measure how long the traffic stops, on one topology of
network namespaces: a wan router, gateways a and b behind the virtual
addresses 192.0.2.10 (wan) and 10.1.0.1 (lan), a host behind the lan router,
and a peer (sluice) with a host behind it. Every run builds it anew.

  sluice-ha           gateways a and b with [ha] (100 ms heartbeats, 3 misses),
                      one static tunnel to the peer; a owns it, b is the
                      standby; a is killed and b takes over
  sluice-ha-silent    the same, a first cut off the wan and the sync link (as
                      a box that loses power: no TCP reset tells b, which must
                      miss its heartbeats), then killed
  sluice-ha-handover  the same, a planned handover (sluice ha handover) in
                      place of the kill
  sluice-restart      gateway a alone with the same tunnel, killed and started
                      again at once, as a supervisor would
  strongswan-restart  strongSwan's charon (kernel-libipsec) as gateway a,
                      responder of an IKEv2 connection the peer initiates, with
                      liveness checks every --dpd-delay; charon is killed and
                      started again, and the peer must find out and negotiate
                      again

Sequence-numbered UDP flows (--rate datagrams a second each way, between the
hosts) and a paced TCP stream (--tcp-rate) cross the tunnel; traffic must come
back both ways within --give-up of the kill, else the run counts as at least
that long. Per system: the gap (the longest run of lost datagrams, in send
time) each way, p50, p99 and max over the runs (nearest rank); the datagrams
lost (median of the runs); the peer's packets the gateway that carries the
tunnel afterwards refused as replays (the most in one run; "-" for
strongSwan); and the TCP stall (the longest time the stream's receiver read
nothing). With a sluice-ha system, one TCP stream through the owner is first measured
without and with a standby (--throughput, 0 for none).

Needs root, iproute2, nft and ping, and for strongswan-restart charon and
swanctl. Everything it creates is removed at the end and on Ctrl-C.

Exit status: 0; 1 if a run failed; 2 for bad flags or without root.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.systems, "systems", failover.Systems, "systems to measure: "+strings.Join(failover.Systems, ", "))
	f.IntVar(&o.runs, "runs", failover.DefaultRuns, "kills per system")
	f.IntVar(&o.rate, "rate", failover.DefaultRate, "datagrams per second of each sequence-numbered flow (one each way)")
	f.Float64Var(&o.tcpRate, "tcp-rate", failover.DefaultTCPMbps, "Mbit/s of the paced TCP stream")
	f.DurationVar(&o.giveUp, "give-up", failover.DefaultGiveUp, "longest wait for traffic after a kill")
	f.DurationVar(&o.dpd, "dpd-delay", failover.DefaultDPDDelay, "liveness-check interval (dpd_delay) of the peer opposite strongSwan")
	f.DurationVar(&o.throughput, "throughput", failover.DefaultThroughput, "length of each steady-state TCP measurement without and with a standby (0: none)")
	f.IntVar(&o.tpRepeat, "throughput-repeat", failover.DefaultTPRepeat, "steady-state TCP measurements of each kind; the median is reported")
	f.BoolVar(&o.json, "json", false, `print one JSON document {"env":...,"samples":[...],"summaries":[...],...} instead of the table`)
	f.StringVar(&o.out, "out", "", "also write the JSON document to `FILE`")
	dryRunFlag(f, &o.dryRun)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchFailover(cmd.Context(), e, o)
	}
	return cmd
}

// options turns the flags into failover.Options and checks them.
func (o *failoverOptions) options() (failover.Options, error) {
	fo := failover.Options{
		Systems: o.systems, Runs: o.runs, Rate: o.rate, TCPMbps: o.tcpRate, GiveUp: o.giveUp, DPDDelay: o.dpd,
		Throughput: o.throughput, ThroughputRepeat: o.tpRepeat, GatewayArgv: gatewayArgv,
	}
	if err := fo.Check(); err != nil {
		return fo, withCode(ExitUsage, err)
	}
	return fo, nil
}

// failoverObserver prints a run: a system's row when its runs are done,
// notes, the bar.
type failoverObserver struct {
	r     *benchRun
	table failover.Table
}

func (f *failoverObserver) Step(label string) { f.r.bar.Start(label) }
func (f *failoverObserver) StepDone()         { f.r.bar.Done() }
func (f *failoverObserver) Note(msg string)   { f.r.note("%s", msg) }
func (f *failoverObserver) SystemDone(s failover.Summary, _ []failover.Sample) {
	f.r.line(f.table.Row(s))
}

func runBenchFailover(ctx context.Context, e *env, o *failoverOptions) error {
	fo, err := o.options()
	if err != nil {
		return err
	}
	if err := labAvailable(); err != nil && !o.dryRun {
		return withCode(ExitUsage, fmt.Errorf("bench failover: %w (run it as root)", err))
	}
	r, err := startBenchRun(e, &benchCommon{json: o.json, dryRun: o.dryRun}, fo.Steps(), fo.Estimate())
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	obs := &failoverObserver{r: r, table: failover.Table{GiveUp: fo.GiveUp}}
	r.line(bench.CurrentEnv().Summary() + fmt.Sprintf(", %d kills per system, %d datagrams/s each way, TCP %g Mbit/s", o.runs, o.rate, o.tcpRate))
	r.line(obs.table.Header())
	doc, runErr := failover.Run(ctx, fo, obs)
	if doc == nil {
		return withCode(exitBenchFailed, runErr)
	}
	if o.out != "" {
		doc.Notes = r.notes
		if err := writeDocFile(o.out, doc.WriteJSON); err != nil {
			return withCode(exitBenchFailed, err)
		}
	}
	return r.end("", failover.BenchName, runErr, len(doc.Samples) > 0, &doc.Notes, doc.WriteJSON, func(w io.Writer) {
		failover.WriteThroughput(w, doc.Throughput)
		failover.WriteRatios(w, doc.Summaries, fo.GiveUp)
	})
}

// writeDocFile writes a document into path.
func writeDocFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: --out: %w", err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: --out: %s: %w", path, err)
	}
	return nil
}
