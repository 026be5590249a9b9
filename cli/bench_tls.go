package cli

// sluice bench tls: package bench/tlsbench on the command line. Flags are
// checked first (exit status 2 for a bad one); then each group runs in
// turn, its rows printed as soon as it is measured (or, with --json, one
// document at the end), and --plot writes the
// document and has sluice-plot draw its charts (bench.go).

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/bench/tlsbench"
	"github.com/sluicegw/sluice/cryptodev"
)

// tlsOptions are the flags of bench tls.
type tlsOptions struct {
	systems    []string
	keys       []string
	engines    []string
	versions   []string
	sizes      []string
	conns      int
	duration   time.Duration
	repeat     int
	storm      bool
	client     string
	gomaxprocs int
	json       bool
	dryRun     bool
	plotDir    string
	nginx      string
	wrk        string
	keep       bool
}

// tlsEngines are the engines bench tls offers: soft, sched, and openssl
// when this binary has it (a build with -tags openssl).
func tlsEngines() []string {
	es := []string{"soft", "sched"}
	if cryptodev.CheckEngine("openssl") == nil && slices.Contains(cryptodev.Engines(), "openssl") {
		es = append(es, "openssl")
	}
	return es
}

func newBenchTLSCommand(e *env) *cobra.Command {
	o := &tlsOptions{}
	cmd := &cobra.Command{
		Use:   "tls [flags]",
		Short: "Measure the TLS gateway against nginx: handshakes, requests, CPU per operation",
		Long: `Measure sluice's TLS termination as a user runs it against nginx, on
loopback, in one command. The bench makes a throwaway CA, a certificate and
key per --keys type and a static file per --sizes, and serves them with

  sluice   'sluice run -c FILE' (this executable), a TLS-only configuration
           with one [[tls]] listener: backend static:DIR, the engine of the
           column (--engines), the version of the group, session tickets on
  nginx    Debian's nginx with a generated configuration: one worker
           process, ssl_protocols of the group, session tickets on,
           keep-alive

each on its own port, for each key type and TLS version. For each, --repeat
times, every server in turn: full handshakes per second (no session reuse)
and resumed ones (session tickets; every handshake's DidResume is checked),
made by a built-in Go client with --conns connections at once; for the first
key type, keep-alive requests of each size (wrk with --conns connections
when installed, else the Go client). Resumptions and requests run on nginx
and on sluice's first engine (no signature is made there).

The servers' CPU time (utime+stime of all their processes, from /proc)
around each window gives CPU per handshake, per request and per GiB. Client
and servers share the machine's cores, so rates are bound by both; CPU per
operation is what compares the systems, and the table shows each sluice
figure over nginx's beside it.

The latency storm (--storm): small requests on 4 open keep-alive
connections at 400/s, timed, first alone and then during a storm of
RSA-4096 full handshakes from --conns connections, for nginx and for sluice
with each engine.

Then the ratios that sluice's TLS targets are stated in. Everything the bench
starts is stopped, and its files removed, at the end and on Ctrl-C.

Exit status: 0; 1 if a measurement failed; 2 for bad flags.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.systems, "systems", []string{tlsbench.Sluice, tlsbench.Nginx}, "systems to measure: sluice, nginx")
	f.StringSliceVar(&o.keys, "keys", tlsbench.Keys, "key types of the certificates: ecdsap256, rsa2048, rsa4096")
	f.StringSliceVar(&o.engines, "engines", tlsEngines(), "sluice's engines holding the keys (this binary has: "+strings.Join(tlsEngines(), ", ")+")")
	f.StringSliceVar(&o.versions, "versions", tlsbench.Versions, "TLS versions: 1.2, 1.3")
	f.StringSliceVar(&o.sizes, "sizes", []string{"1k", "64k", "1m"}, "response sizes of the keep-alive requests (bytes, or with k or m)")
	f.IntVar(&o.conns, "conns", tlsbench.DefaultConns, "concurrent connections of each load (handshakes, requests, the storm)")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "measured window of each run (after a warm-up of a quarter of it, at most 1s)")
	f.IntVar(&o.repeat, "repeat", 3, "repetitions of each measurement; figures are the median")
	f.BoolVar(&o.storm, "storm", true, "measure request latency on open connections, idle and during an RSA-4096 handshake storm")
	f.StringVar(&o.client, "client", tlsbench.ClientAuto, "client of the keep-alive requests: auto (wrk when installed), wrk, go")
	f.IntVar(&o.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of the sluice servers (0: unset, the default a user gets)")
	f.BoolVar(&o.json, "json", false, `print one JSON document {"env":...,"results":[...],"ratios":[...],"notes":[...]} instead of the table`)
	dryRunFlag(f, &o.dryRun)
	f.StringVar(&o.plotDir, "plot", "", "write the results (NAME.json) and, with sluice-plot, PNG and SVG charts into `DIR`")
	f.StringVar(&o.nginx, "nginx", "", "the nginx executable (default: on PATH, else "+tlsbench.DefaultNginx+")")
	f.StringVar(&o.wrk, "wrk", "", "the wrk executable (default: on PATH)")
	f.BoolVar(&o.keep, "keep", false, "keep the run's directory (configurations, logs, certificates)")
	f.MarkHidden("keep")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchTLS(cmd.Context(), e, o)
	}
	return cmd
}

// options turns the flags into tlsbench.Options and checks them.
func (o *tlsOptions) options() (tlsbench.Options, error) {
	to := tlsbench.Options{
		Systems: o.systems, Keys: o.keys, Engines: o.engines, Versions: o.versions, Conns: o.conns,
		Duration: o.duration, Repeat: o.repeat, Storm: o.storm, Client: o.client, GOMAXPROCS: o.gomaxprocs,
		SluiceArgv: gatewayArgv, Nginx: o.nginx, Wrk: o.wrk, Keep: o.keep,
	}
	for _, s := range o.sizes {
		n, err := tlsbench.ParseSize(s)
		if err != nil {
			return to, withCode(ExitUsage, err)
		}
		if !slices.Contains(to.Sizes, n) {
			to.Sizes = append(to.Sizes, n)
		}
	}
	if err := to.Check(); err != nil {
		return to, withCode(ExitUsage, err)
	}
	if slices.Contains(o.systems, tlsbench.Sluice) {
		for _, n := range o.engines {
			if !slices.Contains(tlsEngines(), n) {
				return to, usageErr("--engines: %q is not an engine this binary has (%s)", n, strings.Join(tlsEngines(), ", "))
			}
		}
	}
	return to, nil
}

// tlsObserver prints a run: rows as groups finish, notes, the bar.
type tlsObserver struct {
	r     *benchRun
	table tlsbench.Table
}

func (t *tlsObserver) Step(label string)     { t.r.bar.Start(label) }
func (t *tlsObserver) Progress(frac float64) { t.r.bar.Progress(frac) }
func (t *tlsObserver) StepDone()             { t.r.bar.Done() }
func (t *tlsObserver) Note(msg string)       { t.r.note("%s", msg) }
func (t *tlsObserver) GroupDone(g tlsbench.Group, rs []tlsbench.Result) {
	for _, row := range t.table.Rows(g, rs) {
		t.r.line(row)
	}
}

func runBenchTLS(ctx context.Context, e *env, o *tlsOptions) error {
	to, err := o.options()
	if err != nil {
		return err
	}
	gs := to.Groups()
	// One step makes the material, and each group has one to start its
	// servers.
	steps := 1 + len(gs) + to.Steps()
	r, err := startBenchRun(e, &benchCommon{json: o.json, dryRun: o.dryRun}, steps, to.Estimate())
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	obs := &tlsObserver{r: r}
	if len(gs) > 0 {
		obs.table.Servers = gs[0].Servers
	}
	r.line(bench.CurrentEnv().Summary() + fmt.Sprintf(", %v per window, %d connections, median of %d", o.duration, o.conns, o.repeat))
	r.line(obs.table.Header())
	doc, runErr := tlsbench.Run(ctx, to, obs)
	if doc == nil {
		return withCode(exitBenchFailed, runErr)
	}
	return r.end(o.plotDir, tlsbench.BenchName, runErr, len(doc.Results) > 0, &doc.Notes, doc.WriteJSON, func(w io.Writer) { tlsbench.WriteRatios(w, doc.Ratios) })
}
