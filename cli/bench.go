package cli

// sluice bench crypto|esp: the benchmark harness of package bench on the
// command line. Flags are checked before anything runs (exit status 2 for
// a bad one); then each combination runs in turn, its row printed as soon
// as it is measured (or, with --json, one document at the end). First, on
// stderr, an estimate of the whole run's time; then a progress bar on
// stderr when stdout and stderr are both terminals and --json is off, and
// otherwise a progress line on stderr now and then (a log or a pipe sees
// the run move too).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// exitBenchFailed is the exit status of a measurement that failed (an
// engine error, a packet dropped).
const exitBenchFailed = 1

// defaultCount is the repetitions of each crypto and ESP run: enough for a
// median and a spread.
const defaultCount = 3

// Bounds of the bench flags, so that a typo cannot ask for gigabytes.
const (
	maxCryptoSize = 65536
	maxThreads    = 1024
	maxBatch      = 4096
	maxTunnels    = 100000
	maxWorkers    = 256
)

func init() {
	commands = append(commands, newBenchCommand)
}

func newBenchCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the crypto engines, ESP throughput and tunnels end to end",
		Long: `Measure sluice's crypto engines (bench crypto) and its ESP data path
(bench esp) in process, each against a raw baseline measured in the same run,
and tunnels between network namespaces against wireguard-go and the bare
link (bench tunnel, as root).`,
	}
	cmd.AddCommand(newBenchCryptoCommand(e), newBenchESPCommand(e), newBenchTunnelCommand(e), newBenchTLSCommand(e), newBenchFailoverCommand(e), newBenchIKECommand(e))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErr("unknown command %q for %q (want crypto, esp, tunnel, tls, failover or ike)", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	return cmd
}

// benchCommon are the flags both bench commands take.
type benchCommon struct {
	engines      []string
	algs         []string
	batch        int
	inFlight     int
	duration     time.Duration
	schedWorkers int
	count        int
	json         bool
	dryRun       bool
	cpuProfile   string
}

func (c *benchCommon) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&c.engines, "engines", []string{bench.Raw, "soft", "sched"},
		"engines to measure: raw (Go's crypto called directly, the baseline), a library's own loop where linked in (ipsecmb-c; in bench esp, encap of one size), registered engines ("+strings.Join(cryptodev.Engines(), ", ")+") and sched over one (sched:ENGINE)")
	f.IntVar(&c.batch, "batch", 64, "ops (packets) per batch")
	f.IntVar(&c.inFlight, "inflight", bench.DefaultInFlight, "batches each submitter keeps in flight on an asynchronous engine")
	f.DurationVar(&c.duration, "duration", 2*time.Second, "measured time of each run (after a short warm-up)")
	f.IntVar(&c.schedWorkers, "sched-workers", 0, "worker goroutines of the sched engine (0: one per CPU)")
	f.IntVar(&c.count, "count", defaultCount, "repetitions of each run, interleaved across engines; a row is the median, its spread column the farthest repetition from it, every repetition's rate in its JSON samples")
	f.BoolVar(&c.json, "json", false, `print one JSON document {"env":...,"results":[...],"notes":[...]} instead of the table`)
	dryRunFlag(f, &c.dryRun)
	f.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs to `FILE`")
	f.MarkHidden("cpuprofile")
}

func (c *benchCommon) check() error {
	if len(c.engines) == 0 {
		return usageErr("--engines: name at least one engine")
	}
	for _, n := range c.engines {
		if err := bench.CheckEngine(n); err != nil {
			return withCode(ExitUsage, fmt.Errorf("--engines: %w", err))
		}
	}
	if len(c.algs) == 0 {
		return usageErr("--algs: name at least one algorithm")
	}
	switch {
	case c.batch <= 0 || c.batch > maxBatch:
		return usageErr("--batch %d: want 1 to %d", c.batch, maxBatch)
	case c.inFlight <= 0 || c.inFlight > 64:
		return usageErr("--inflight %d: want 1 to 64", c.inFlight)
	case c.duration <= 0:
		return usageErr("--duration %v: want more than 0", c.duration)
	case c.schedWorkers < 0 || c.schedWorkers > maxWorkers:
		return usageErr("--sched-workers %d: want 0 (one per CPU) to %d", c.schedWorkers, maxWorkers)
	case c.count <= 0 || c.count > 100:
		return usageErr("--count %d: want 1 to 100", c.count)
	}
	return nil
}

// checkInts checks that every value of a list flag is in 1..hi.
func checkInts(name string, vs []int, hi int) error {
	if len(vs) == 0 {
		return usageErr("--%s: give at least one value", name)
	}
	for _, v := range vs {
		if v <= 0 || v > hi {
			return usageErr("--%s %d: want 1 to %d", name, v, hi)
		}
	}
	return nil
}

// benchRun is the output side of a bench command: the table or the JSON
// document, the notes, the progress bar and the CPU profile.
type benchRun struct {
	e     *env
	json  bool
	bar   *bench.Bar
	notes []string
	stop  func()
}

// progressEvery is the least time between two progress lines when no bar
// is drawn; tests set it to 0.
var progressEvery = 10 * time.Second

// dryRunFlag adds --dry-run to a bench command's flags.
func dryRunFlag(f *pflag.FlagSet, v *bool) {
	f.BoolVar(v, "dry-run", false, "print the estimate of the run's time and measure nothing")
}

// startBenchRun starts the output of a bench of runs measured runs that
// should take about est, and prints that estimate. With --dry-run it
// returns a nil *benchRun: the command ends there.
func startBenchRun(e *env, c *benchCommon, runs int, est time.Duration) (*benchRun, error) {
	if c.dryRun {
		fmt.Fprintf(e.stderr, "estimate: about %v for %d measured runs\n", roundEstimate(est), runs)
		return nil, nil
	}
	r := &benchRun{e: e, json: c.json, stop: func() {}}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return nil, withCode(ExitUsage, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, withCode(ExitUsage, err)
		}
		r.stop = func() { pprof.StopCPUProfile(); f.Close() }
	}
	fmt.Fprintf(e.stderr, "estimate: about %v for %d measured runs\n", roundEstimate(est), runs)
	if !c.json && bench.IsTerminal(e.stdout) && bench.IsTerminal(e.stderr) {
		r.bar = bench.NewBar(e.stderr, runs)
	} else {
		r.bar = bench.NewLines(e.stderr, runs, progressEvery)
	}
	return r, nil
}

// roundEstimate rounds an estimate to what it can claim: whole seconds
// under a minute, then 10 seconds.
func roundEstimate(d time.Duration) time.Duration {
	if d < time.Minute {
		return max(d.Round(time.Second), time.Second)
	}
	return d.Round(10 * time.Second)
}

// runTime is the expected time of one measured run of d (its warm-up and
// window).
func runTime(d time.Duration) time.Duration { return bench.DefaultWarmup(d) + d }

// line prints a table line (not in JSON mode).
func (r *benchRun) line(s string) {
	if !r.json {
		r.bar.Println(r.e.stdout, s)
	}
}

// note records a note, once: on stderr at once for a table, in the
// document for JSON.
func (r *benchRun) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if slices.Contains(r.notes, s) {
		return
	}
	r.notes = append(r.notes, s)
	if !r.json {
		r.bar.Println(r.e.stderr, "note: "+s)
	}
}

// end finishes a bench whose run returned runErr: charts into plotDir
// (when set and there are results; see charts), then the JSON document
// (with the run's notes in *notes) or the ratios under the table; an error
// of the run or the charts is the bench's failure (exitBenchFailed).
func (r *benchRun) end(plotDir, name string, runErr error, results bool, notes *[]string,
	writeJSON func(io.Writer) error, writeRatios func(io.Writer)) error {
	var plotErr error
	if plotDir != "" && results {
		*notes = r.notes
		plotErr = r.charts(plotDir, name, writeJSON)
	}
	if r.json {
		*notes = r.notes
		if err := writeJSON(r.e.stdout); err != nil {
			return err
		}
	} else {
		r.bar.Finish()
		writeRatios(r.e.stdout)
	}
	if err := errors.Join(runErr, plotErr); err != nil {
		return withCode(exitBenchFailed, err)
	}
	return nil
}

// charts writes the document into dir as NAME.json and has sluice-plot
// draw its charts there. The plotting library is not linked into this
// binary (the gateway's): sluice-plot is found next to it, on PATH, or, in
// sluice's source tree, run with go run; without any, a note says what to
// run.
func (r *benchRun) charts(dir, name string, writeJSON func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	path := filepath.Join(dir, name+".json")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	err = writeJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: --plot: %s: %w", path, err)
	}
	cmd := plotCommand()
	if cmd == nil {
		r.note("charts: sluice-plot is not installed; the results are in %s: draw them with sluice-plot -o %s %s (go install %s)",
			path, dir, path, plotPackage)
		return nil
	}
	cmd.Args = append(cmd.Args, "-o", dir, path)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench: --plot: %s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	r.note("charts: %s", strings.Join(strings.Fields(stdout.String()), " "))
	return nil
}

// plotPackage is the import path of the sluice-plot command.
const plotPackage = "github.com/sluicegw/sluice/cmd/sluice-plot"

// plotCommand returns the command that runs sluice-plot (without its
// arguments), or nil; tests replace it.
var plotCommand = findPlotCommand

func findPlotCommand() *exec.Cmd {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sluice-plot")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return exec.Command(p)
		}
	}
	if p, err := exec.LookPath("sluice-plot"); err == nil {
		return exec.Command(p)
	}
	// In sluice's source tree (go run ./cmd/sluice bench ...): go run it.
	goExe, err := exec.LookPath("go")
	if err != nil {
		return nil
	}
	dir, err := os.Getwd()
	for err == nil {
		mod, rerr := os.ReadFile(filepath.Join(dir, "go.mod"))
		if rerr == nil {
			first, _, _ := strings.Cut(string(mod), "\n")
			if strings.TrimSpace(first) != "module github.com/sluicegw/sluice" {
				return nil
			}
			if _, err := os.Stat(filepath.Join(dir, "cmd", "sluice-plot", "main.go")); err != nil {
				return nil
			}
			cmd := exec.Command(goExe, "run", "./cmd/sluice-plot")
			cmd.Dir = dir
			return cmd
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
	return nil
}

func (r *benchRun) finish() {
	r.bar.Finish()
	r.stop()
}

// runErr turns the error of one run into the command's error.
func runErr(ctx context.Context, label string, err error) error {
	if ctx.Err() != nil {
		return withCode(exitBenchFailed, fmt.Errorf("bench: interrupted during %s", label))
	}
	return withCode(exitBenchFailed, fmt.Errorf("%s: %w", label, err))
}

// cryptoOptions are the flags of bench crypto.
type cryptoOptions struct {
	benchCommon
	sizes   []int
	threads []int
	openssl bool
}

func newBenchCryptoCommand(e *env) *cobra.Command {
	o := &cryptoOptions{}
	cmd := &cobra.Command{
		Use:   "crypto [flags]",
		Short: "Measure crypto engines: ops/s and MB/s by algorithm, size and threads",
		Long: `Measure the crypto engines as openssl speed -evp ... -multi N does: each
thread is a goroutine with its own queue that submits batches of --batch ops of
each size (encryption in place, the tag behind the data, a fresh IV per op),
keeping up to --inflight batches in flight on an asynchronous engine, for
--duration after a short warm-up. The raw engine calls Go's cipher.AEAD (or
AES-CBC and HMAC) directly: every run carries its own baseline, and each row
says how it compares with the raw row of the same algorithm, size and threads.

Signature algorithms (rsa2048, rsa3072, rsa4096, ecdsap256, ecdsap384,
ed25519) measure signs per second through the engine, and x25519 and ecdhp256
key agreements per second; their size column is "-" and their batches hold at
most ` + strconv.Itoa(bench.MaxAsymBatch) + ` ops.

--openssl also runs openssl speed (with -mr -elapsed, and -multi for several
threads) for the same algorithms, sizes and threads, when openssl is
installed: "openssl-speed" rows are -evp ALG -bytes N (a stream of updates on
one context), "openssl-speed-aead" rows add -aead (init, AAD, update, final
per buffer, as a per-packet seal does). They are the openssl binary on its
own; the engine "openssl" (a build with -tags openssl) is libcrypto through
sluice's engine API, and is named in --engines like any other.

MB is 10^6 bytes. Exit status: 0; 1 if a run failed; 2 for bad flags.`,
		Args: cobra.NoArgs,
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&o.algs, "algs", []string{"aes128gcm16"},
		"algorithms: ESP suites ("+strings.Join(names(cryptodev.Algs()), ", ")+") and signature or agreement key types ("+strings.Join(names(cryptodev.AsymAlgs()), ", ")+")")
	f.IntSliceVar(&o.sizes, "sizes", []int{16, 64, 256, 1024, 1420, 8192}, "bytes per op of the symmetric algorithms")
	f.IntSliceVar(&o.threads, "threads", []int{1}, "submitting threads, each with its own queue (a list runs each)")
	f.BoolVar(&o.openssl, "openssl", false, "also run openssl speed for the same algorithms, sizes and threads")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchCrypto(cmd.Context(), e, o)
	}
	return cmd
}

func names(algs []cryptodev.Alg) []string {
	out := make([]string, len(algs))
	for i, a := range algs {
		out[i] = a.String()
	}
	return out
}

// parseAnyAlg accepts an ESP suite or an asymmetric key type.
func parseAnyAlg(name string) (cryptodev.Alg, error) {
	if a, err := cryptodev.ParseAlg(name); err == nil {
		return a, nil
	}
	if a, err := cryptodev.ParseAsymAlg(name); err == nil {
		return a, nil
	}
	return cryptodev.AlgInvalid, fmt.Errorf("--algs: unknown algorithm %q (ESP suites: %s; signatures and agreements: %s)",
		name, strings.Join(names(cryptodev.Algs()), ", "), strings.Join(names(cryptodev.AsymAlgs()), ", "))
}

func runBenchCrypto(ctx context.Context, e *env, o *cryptoOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	if err := checkInts("threads", o.threads, maxThreads); err != nil {
		return err
	}
	var algs []cryptodev.Alg
	sym := false
	for _, n := range o.algs {
		a, err := parseAnyAlg(n)
		if err != nil {
			return withCode(ExitUsage, err)
		}
		sym = sym || !a.IsAsymmetric()
		algs = append(algs, a)
	}
	if sym {
		if err := checkInts("sizes", o.sizes, maxCryptoSize); err != nil {
			return err
		}
	}

	// The plan: for each algorithm, size and thread count, every engine,
	// then openssl.
	type group struct {
		alg           cryptodev.Alg
		size, threads int
	}
	var groups []group
	for _, a := range algs {
		sizes := o.sizes
		if a.IsAsymmetric() {
			sizes = []int{0}
		}
		for _, s := range sizes {
			for _, t := range o.threads {
				groups = append(groups, group{a, s, t})
			}
		}
	}
	opensslPath := ""
	runs := len(groups) * len(o.engines)
	if o.openssl {
		if p, err := exec.LookPath("openssl"); err == nil {
			opensslPath = p
			for _, g := range groups {
				runs += len(bench.OpenSSLEngines(g.alg))
			}
		}
	}

	r, err := startBenchRun(e, &o.benchCommon, runs*o.count, time.Duration(runs*o.count)*runTime(o.duration))
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	env := bench.CurrentEnv()
	doc := bench.Document[bench.CryptoResult]{Env: env}
	table := bench.NewCryptoTable()
	r.line(env.Summary() + fmt.Sprintf(", %v per run, batch %d, median of %d", o.duration, o.batch, o.count))
	r.line(table.Header())
	if o.openssl && opensslPath == "" {
		r.note("openssl is not installed: --openssl rows skipped")
	}
	noCounterpart := map[cryptodev.Alg]bool{}
	for _, g := range groups {
		sizeLabel := "-"
		if g.size > 0 {
			sizeLabel = strconv.Itoa(g.size) + "B"
		}
		// Every engine of the group, then openssl, count times over, so
		// that a change in the machine's load falls on all of them.
		engines := o.engines
		if opensslPath != "" {
			engs := bench.OpenSSLEngines(g.alg)
			if len(engs) == 0 && !noCounterpart[g.alg] {
				noCounterpart[g.alg] = true
				r.note("openssl speed has no counterpart for %v: no openssl rows", g.alg)
			}
			engines = append(slices.Clip(engines), engs...)
		}
		reps := make([][]bench.CryptoResult, len(engines))
		skip := make([]bool, len(engines))
		for range o.count {
			for i, eng := range engines {
				if skip[i] {
					r.bar.Done()
					continue
				}
				label := fmt.Sprintf("%s %v %s x%d", eng, g.alg, sizeLabel, g.threads)
				r.bar.Start(label)
				var res bench.CryptoResult
				if eng == bench.OpenSSLSpeed || eng == bench.OpenSSLSpeedAEAD {
					res, err = bench.RunOpenSSL(ctx, opensslPath, bench.OpenSSLSpec{Engine: eng, Alg: g.alg, Size: g.size,
						Threads: g.threads, Duration: o.duration})
					if err != nil && ctx.Err() == nil {
						// An openssl that cannot run this is not our failure.
						r.note("%v", err)
						skip[i], err = true, nil
					}
				} else {
					res, err = bench.RunCrypto(ctx, bench.CryptoSpec{Engine: eng, Alg: g.alg, Size: g.size, Threads: g.threads,
						Batch: o.batch, InFlight: o.inFlight, Duration: o.duration, SchedWorkers: o.schedWorkers}, r.bar.Progress)
					if errors.Is(err, cryptodev.ErrUnsupported) && ctx.Err() == nil {
						r.note("%s skipped: %v", label, err)
						skip[i], err = true, nil
					}
				}
				r.bar.Done()
				if err != nil {
					return runErr(ctx, label, err)
				}
				if !skip[i] {
					reps[i] = append(reps[i], res)
				}
			}
		}
		for i := range engines {
			if skip[i] || len(reps[i]) == 0 {
				continue
			}
			res := bench.MedianCrypto(reps[i])
			doc.Results = append(doc.Results, res)
			r.line(table.Row(res))
			if res.Note != "" {
				r.note("%s %s: %s", res.Engine, res.Alg, res.Note)
			}
		}
	}
	if o.json {
		doc.Notes = r.notes
		return doc.WriteJSON(e.stdout)
	}
	return nil
}

// espOptions are the flags of bench esp.
type espOptions struct {
	benchCommon
	sizes   []string
	tunnels []int
	workers []int
	dirs    []string
}

func newBenchESPCommand(e *env) *cobra.Command {
	o := &espOptions{}
	cmd := &cobra.Command{
		Use:   "esp [flags]",
		Short: "Measure ESP encapsulation and decapsulation: packets/s and Gbit/s",
		Long: `Measure ESP encapsulation and decapsulation in process, with no I/O, by inner
packet size, tunnel count and workers, in the shape of the published IPsec
throughput tables.

Each tunnel is a pair of SAs (tunnel mode, IPv4 in IPv4, ESP as IP protocol
50, ESN on) with its own key. Each worker is a goroutine with its own packet
pool, ESP pipeline and engine queue, and owns an equal share of the tunnels
(an SA has one owner); its batches of --batch packets go round robin over its
tunnels. Encapsulation restores each inner packet's headers and seals it;
decapsulation copies a ciphertext made beforehand for the tunnel and size into
the buffer (decryption is in place), parses it and opens it. The measuring
inbound SAs have anti-replay off (window 0), so that ciphertext can be opened
again and again. Combinations with more workers than tunnels are skipped.

The raw rows seal (or copy and open) the same ESP payloads (inner packet,
padding, trailer) with the tunnels' ciphers directly, one goroutine per worker.
A library's own loop, where linked in (ipsecmb-c: intel-ipsec-mb driven from
C), seals the same payloads for the encap rows of one size: the floor of its
engine, as raw is soft's.

Size is the inner IP packet in bytes (28 to 9000), or imix: 7:4:1 packets of
64, 576 and 1500 bytes (the simple IMIX, mean 354.33 bytes). Gbit/s counts
inner packet bits. Exit status: 0; 1 if a run failed; 2 for bad flags.`,
		Args: cobra.NoArgs,
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&o.algs, "algs", []string{"aes128gcm16"}, "ESP suites ("+strings.Join(names(cryptodev.Algs()), ", ")+")")
	f.StringSliceVar(&o.sizes, "sizes", []string{"64", "512", "1024", "1420", "imix"}, "inner IP packet sizes in bytes, or imix")
	f.IntSliceVar(&o.tunnels, "tunnels", []int{1}, "tunnel counts (a list runs each)")
	f.IntSliceVar(&o.workers, "workers", []int{1}, "worker counts, each worker with its own pipeline and queue (a list runs each)")
	f.StringSliceVar(&o.dirs, "dir", []string{"encap", "decap"}, "directions: encap, decap")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runBenchESP(cmd.Context(), e, o)
	}
	return cmd
}

// parseESPSize accepts a size in bytes or imix.
func parseESPSize(s string) (bench.Size, error) {
	if strings.EqualFold(strings.TrimSpace(s), "imix") {
		return bench.IMIX, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < bench.MinESPSize || n > bench.MaxESPSize {
		return 0, usageErr("--sizes %q: want an inner IP packet size of %d to %d bytes, or imix", s, bench.MinESPSize, bench.MaxESPSize)
	}
	return bench.Size(n), nil
}

func runBenchESP(ctx context.Context, e *env, o *espOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	var algs []cryptodev.Alg
	for _, n := range o.algs {
		a, err := cryptodev.ParseAlg(n)
		if err != nil {
			return usageErr("--algs: %v", err)
		}
		algs = append(algs, a)
	}
	if len(o.sizes) == 0 {
		return usageErr("--sizes: give at least one size")
	}
	var sizes []bench.Size
	for _, s := range o.sizes {
		n, err := parseESPSize(s)
		if err != nil {
			return err
		}
		sizes = append(sizes, n)
	}
	if err := checkInts("tunnels", o.tunnels, maxTunnels); err != nil {
		return err
	}
	if err := checkInts("workers", o.workers, maxWorkers); err != nil {
		return err
	}
	var dirs []esp.Direction
	for _, d := range o.dirs {
		switch strings.ToLower(strings.TrimSpace(d)) {
		case "encap":
			dirs = append(dirs, esp.Outbound)
		case "decap":
			dirs = append(dirs, esp.Inbound)
		default:
			return usageErr("--dir %q: want encap or decap", d)
		}
	}
	if len(dirs) == 0 {
		return usageErr("--dir: give encap, decap or both")
	}

	// A group is one combination; its engines run count times over,
	// interleaved, so that a change in the machine's load falls on all.
	var groups [][]bench.ESPSpec
	var skipped []string
	for _, a := range algs {
		for _, d := range dirs {
			for _, s := range sizes {
				for _, t := range o.tunnels {
					for _, w := range o.workers {
						if w > t {
							skipped = append(skipped, fmt.Sprintf("%d workers, %d tunnels", w, t))
							continue
						}
						var g []bench.ESPSpec
						for _, eng := range o.engines {
							g = append(g, bench.ESPSpec{Engine: eng, Alg: a, Size: s, Tunnels: t, Workers: w, Dir: d,
								Batch: o.batch, InFlight: o.inFlight, Duration: o.duration, SchedWorkers: o.schedWorkers})
						}
						groups = append(groups, g)
					}
				}
			}
		}
	}

	runs := len(groups) * len(o.engines) * o.count
	r, err := startBenchRun(e, &o.benchCommon, runs, time.Duration(runs)*runTime(o.duration))
	if err != nil || r == nil {
		return err
	}
	defer r.finish()
	env := bench.CurrentEnv()
	doc := bench.Document[bench.ESPResult]{Env: env}
	table := bench.NewESPTable()
	r.line(env.Summary() + fmt.Sprintf(", %v per run, batch %d, median of %d", o.duration, o.batch, o.count))
	r.line(table.Header())
	seen := map[string]bool{}
	for _, s := range skipped {
		if !seen[s] {
			seen[s] = true
			r.note("skipped %s: a worker needs a tunnel of its own (an SA has one owner)", s)
		}
	}
	for _, g := range groups {
		reps := make([][]bench.ESPResult, len(g))
		skip := make([]bool, len(g))
		for range o.count {
			for i, s := range g {
				if skip[i] {
					r.bar.Done()
					continue
				}
				label := fmt.Sprintf("%s %v %s %vB t%d w%d", s.Engine, s.Alg, bench.DirName(s.Dir), s.Size, s.Tunnels, s.Workers)
				r.bar.Start(label)
				res, err := bench.RunESP(ctx, s, r.bar.Progress)
				r.bar.Done()
				if errors.Is(err, cryptodev.ErrUnsupported) && ctx.Err() == nil {
					r.note("%s skipped: %v", label, err)
					skip[i] = true
					continue
				}
				if err != nil {
					return runErr(ctx, label, err)
				}
				reps[i] = append(reps[i], res)
			}
		}
		for i := range g {
			if !skip[i] && len(reps[i]) > 0 {
				res := bench.MedianESP(reps[i])
				doc.Results = append(doc.Results, res)
				r.line(table.Row(res))
			}
		}
	}
	if o.json {
		doc.Notes = r.notes
		return doc.WriteJSON(e.stdout)
	}
	return nil
}
