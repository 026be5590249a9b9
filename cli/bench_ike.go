package cli

// sluice bench ike: package bench/ike on the command line. Flags are
// checked first (exit status 2 for a bad one, and without root); then
// each responder is loaded in turn for each authentication kind, its row
// printed when it is measured (or, with --json, one document at the end).

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/bench"
	ikebench "github.com/sluicegw/sluice/bench/ike"
)

// ikeOptions are the flags of bench ike.
type ikeOptions struct {
	systems     []string
	auth        []string
	count       int
	concurrency int
	duration    time.Duration
	profile     string
	json        bool
	dryRun      bool
	out         string
	keep        bool
}

func newBenchIKECommand(e *env) *cobra.Command {
	o := &ikeOptions{}
	cmd := &cobra.Command{
		Use:   "ike [flags]",
		Short: "Measure IKE SA setups per second with sluice and strongSwan's charon as the responder",
		Long: `Measure how many road warriors a responder sets up per second, each with an
IKE SA (IKE_SA_INIT, IKE_AUTH) and one Child SA, on network namespaces: a
load generator in one, and each responder in its own, run as a user runs it

  sluice   'sluice run' (this executable) with one road-warrior connection:
           any remote identity, the --auth kind, one child
  charon   strongSwan's charon (Debian) with kernel-libipsec, its default
           thread pool, the same connection in swanctl.conf

The --auth kinds, the same both ways:

  psk      a pre-shared key
  ecdsa    ECDSA P-256 certificates from one CA (ECDSA P-256), the
           identities as rfc822 subjectAltNames
  rsa2048  RSA-2048 certificates from the same kind of CA

Both take one proposal (aes128gcm16-prfsha256-curve25519, ESP aes128gcm16)
and otherwise their defaults. The load generator is the same for both:
sluice's ike package as initiator, --concurrency workers with a source
address each, each road warrior an initiator of its own on its own UDP
ports, with its own identity and inner address (TSi). Per responder and
--auth kind, --count setups (or what fits in --duration; a responder cut
short holds fewer SAs, and per-SA costs grow with them, so compare runs that
reached --count):

  setups       completed: the initiator has its Child SA and the responder
               shows it installed (sluice's SAD, charon's INSTALLED children)
  failed       setups that failed, timed out, or were not installed
  setups/s     completed over the time from the first request to the last
  setups/cpus  completed per CPU-second of the responder (utime+stime of
               its processes from /proc, over the load)
  p50, p99     setup latency (IKE_SA_INIT to the Child SA), nearest rank
  KiB/IKE SA   the responder's VmRSS after the load minus before, over the
               setups (the SAs stay up until it is read)

Both are run with their defaults, limits included: sluice holds at most
4,096 IKE SAs (charon has no limit), so a --count above that counts the
refused setups as failed.

The load generator runs in this process and shares the machine's cores with
the responder: compare the responders by their ratios in one run.
--profile records the sluice responder with perf record -g while it is
loaded. Needs root, iproute2, and for charon strongswan-charon and swanctl.
Everything it creates is removed at the end and on Ctrl-C.

Exit status: 0; 1 if a measurement failed; 2 for bad flags or without root.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.systems, "systems", ikebench.Systems, "responders to measure: "+strings.Join(ikebench.Systems, ", "))
	f.StringSliceVar(&o.auth, "auth", ikebench.AuthKinds, "authentication kinds: "+strings.Join(ikebench.AuthKinds, ", "))
	f.IntVar(&o.count, "count", ikebench.DefaultCount, "IKE SAs to set up per responder and kind")
	f.IntVar(&o.concurrency, "concurrency", ikebench.DefaultConcurrency, "setups in flight at once (each worker has its own source address)")
	f.DurationVar(&o.duration, "duration", ikebench.DefaultDuration, "longest load per responder and kind; 0: until --count")
	f.StringVar(&o.profile, "profile", "", "record the sluice responder with perf record -g into `FILE`")
	f.BoolVar(&o.json, "json", false, `print one JSON document {"env":...,"options":...,"results":[...],"notes":[...]} instead of the table`)
	f.StringVar(&o.out, "out", "", "also write the JSON document to `FILE`")
	dryRunFlag(f, &o.dryRun)
	f.BoolVar(&o.keep, "keep", false, "keep the run's directory (configurations, logs)")
	f.MarkHidden("keep")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchIKE(cmd.Context(), e, o)
	}
	return cmd
}

// options turns the flags into ikebench.Options and checks them.
func (o *ikeOptions) options() (ikebench.Options, error) {
	bo := ikebench.Options{Systems: o.systems, Auth: o.auth, Count: o.count, Concurrency: o.concurrency, Duration: o.duration,
		GatewayArgv: gatewayArgv, Keep: o.keep, Profile: o.profile}
	if err := bo.Check(); err != nil {
		return bo, withCode(ExitUsage, err)
	}
	return bo, nil
}

// ikeObserver prints a run: a row per result, notes, the bar.
type ikeObserver struct {
	r     *benchRun
	table ikebench.Table
}

func (i *ikeObserver) Step(label string)              { i.r.bar.Start(label) }
func (i *ikeObserver) StepDone()                      { i.r.bar.Done() }
func (i *ikeObserver) Progress(frac float64)          { i.r.bar.Progress(frac) }
func (i *ikeObserver) Note(msg string)                { i.r.note("%s", msg) }
func (i *ikeObserver) ResultDone(res ikebench.Result) { i.r.line(i.table.Row(res)) }

func runBenchIKE(ctx context.Context, e *env, o *ikeOptions) error {
	bo, err := o.options()
	if err != nil {
		return err
	}
	if err := labAvailable(); err != nil && !o.dryRun {
		return withCode(ExitUsage, fmt.Errorf("bench ike: %w (run it as root)", err))
	}
	r, err := startBenchRun(e, &benchCommon{json: o.json, dryRun: o.dryRun}, bo.Steps(), bo.Estimate())
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	obs := &ikeObserver{r: r}
	r.line(bench.CurrentEnv().Summary() + fmt.Sprintf(", %d setups per responder, %d at once", o.count, o.concurrency))
	r.line(obs.table.Header())
	doc, runErr := ikebench.Run(ctx, bo, obs)
	if doc == nil {
		return withCode(exitBenchFailed, runErr)
	}
	if o.out != "" {
		doc.Notes = r.notes
		if err := writeDocFile(o.out, doc.WriteJSON); err != nil {
			return withCode(exitBenchFailed, err)
		}
	}
	return r.end("", ikebench.BenchName, runErr, len(doc.Results) > 0, &doc.Notes, doc.WriteJSON, func(w io.Writer) {
		ikebench.WriteRatios(w, doc.Results)
	})
}
