package ikebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// BenchName names the bench's documents.
const BenchName = "ike"

// The responders.
const (
	Sluice = "sluice"
	Charon = "charon"
)

// Systems are the responders bench ike knows, in the order it runs them.
var Systems = []string{Sluice, Charon}

// Authentication kinds.
const (
	AuthPSK = "psk"
)

// AuthKinds are the authentication kinds bench ike can run: a pre-shared
// key, ECDSA P-256 and RSA-2048 certificates (both ways). EAP-MSCHAPv2 is
// not built yet.
var AuthKinds = []string{AuthPSK, AuthECDSA, AuthRSA}

// Defaults of Options.
const (
	DefaultCount       = 2000
	DefaultConcurrency = 8
	DefaultDuration    = 2 * time.Minute
	// MaxCount: sluice's default limit of IKE SAs is 4096
	// (ike.Config.MaxSAs), and the inner addresses are a /16.
	MaxCount       = 60000
	MaxConcurrency = 200
)

// The suites both responders are given and the initiators offer: one
// proposal each, so that both negotiate the same.
const (
	ikeSuite = "aes128gcm16-prfsha256-curve25519"
	espSuite = "aes128gcm16"
	gwID     = "gw@bench.sluice"
)

// Options configure a run.
type Options struct {
	Systems     []string
	Auth        []string
	Count       int           // IKE SAs per responder and kind
	Concurrency int           // setups at once (one source address each)
	Duration    time.Duration // at most this long per responder and kind (0: no limit)
	// GatewayArgv returns the command line of `sluice` with args.
	GatewayArgv func(args ...string) ([]string, error)
	// Keep keeps the run's directory.
	Keep bool
	// Profile, if set, records the sluice responder with perf record -g
	// into Profile while the load runs (perf must be installed).
	Profile string
}

// Check checks the options; errors name the flag.
func (o *Options) Check() error {
	if len(o.Systems) == 0 {
		return errors.New("--systems: none")
	}
	for _, s := range o.Systems {
		if !slices.Contains(Systems, s) {
			return fmt.Errorf("--systems: %q is not one of %s", s, strings.Join(Systems, ", "))
		}
	}
	if len(o.Auth) == 0 {
		return errors.New("--auth: none")
	}
	for _, a := range o.Auth {
		if !slices.Contains(AuthKinds, a) {
			return fmt.Errorf("--auth: %q is not one of %s (EAP-MSCHAPv2 is not built yet)", a, strings.Join(AuthKinds, ", "))
		}
	}
	if o.Count < 1 || o.Count > MaxCount {
		return fmt.Errorf("--count: %d is not between 1 and %d", o.Count, MaxCount)
	}
	if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
		return fmt.Errorf("--concurrency: %d is not between 1 and %d", o.Concurrency, MaxConcurrency)
	}
	if o.Duration < 0 {
		return fmt.Errorf("--duration: %v is negative", o.Duration)
	}
	return nil
}

// Steps is the number of Observer steps of a run.
func (o *Options) Steps() int { return 1 + len(o.Systems)*len(o.Auth) }

// Estimate is a rough time for the run: a setup of each responder and
// kind at 100 a second, bounded by Duration, plus starting and stopping.
func (o *Options) Estimate() time.Duration {
	per := time.Duration(o.Count) * 10 * time.Millisecond
	if o.Duration > 0 && per > o.Duration {
		per = o.Duration
	}
	return time.Duration(len(o.Systems)*len(o.Auth)) * (per + 10*time.Second)
}

// Result is one responder's figures for one authentication kind.
type Result struct {
	System      string        `json:"system"`
	Auth        string        `json:"auth"`
	Count       int           `json:"count"`       // setups asked for
	Completed   int           `json:"completed"`   // the initiator had its Child SA
	Failed      int           `json:"failed"`      // setups that failed or timed out
	Installed   int           `json:"installed"`   // Child SAs the responder shows installed at the end
	Elapsed     time.Duration `json:"elapsed_ns"`  // first request to last completion
	PerSecond   float64       `json:"per_second"`  // Completed / Elapsed
	CPU         time.Duration `json:"cpu_ns"`      // the responder's utime+stime over the load
	PerCPUSec   float64       `json:"per_cpu_sec"` // Completed / CPU
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	RSSBefore   int64         `json:"rss_before_kib"`
	RSSAfter    int64         `json:"rss_after_kib"`
	RSSPerSAKiB float64       `json:"rss_per_sa_kib"`
	FirstError  string        `json:"first_error,omitempty"`
}

// Document is a run's results.
type Document struct {
	Env     bench.Env `json:"env"`
	Options struct {
		Count       int    `json:"count"`
		Concurrency int    `json:"concurrency"`
		Duration    string `json:"duration"`
	} `json:"options"`
	Results []Result `json:"results"`
	Notes   []string `json:"notes"`
}

// WriteJSON writes d as indented JSON.
func (d *Document) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// Observer sees a run move.
type Observer interface {
	Step(label string)
	StepDone()
	Progress(frac float64)
	Note(msg string)
	ResultDone(r Result)
}

// Run measures each responder for each kind in turn on one test bed and
// returns the document; on error, what was measured so far with the
// error. Everything it starts is stopped and removed when it returns.
func Run(ctx context.Context, o Options, obs Observer) (doc *Document, err error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	doc = &Document{Env: bench.CurrentEnv()}
	doc.Options.Count, doc.Options.Concurrency, doc.Options.Duration = o.Count, o.Concurrency, o.Duration.String()
	obs.Step("building the test bed")
	b, err := newBed(ctx, &o)
	obs.StepDone()
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := b.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, kind := range o.Auth {
		for _, sys := range o.Systems {
			obs.Step(fmt.Sprintf("%s, %s: %d setups", sys, kind, o.Count))
			r, err := b.measure(ctx, sys, kind, obs)
			obs.StepDone()
			if err != nil {
				return doc, fmt.Errorf("ikebench: %s, %s: %w", sys, kind, err)
			}
			doc.Results = append(doc.Results, *r)
			obs.ResultDone(*r)
		}
	}
	return doc, nil
}

// The test bed's addresses: a veth from the load namespace to each
// responder, the responder at .1 and the load generator's workers from .10.
var (
	sluiceNet = netip.MustParsePrefix("192.0.2.0/24")
	charonNet = netip.MustParsePrefix("198.51.100.0/24")
	site      = netip.MustParsePrefix("10.9.0.0/24")   // the responders' side (TSr)
	inner     = netip.MustParsePrefix("10.128.0.0/16") // the road warriors' (TSi)
)

// nth is the n-th address of p.
func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// bed is the three namespaces and the run's directory.
type bed struct {
	o    *Options
	lab  *lab.Lab
	dir  string
	load *lab.Netns
	ns   map[string]*lab.Netns
	srcs map[string][]netip.Addr
}

func newBed(ctx context.Context, o *Options) (b *bed, err error) {
	if err := lab.Available(); err != nil {
		return nil, err
	}
	b = &bed{o: o, lab: lab.New(nil), ns: map[string]*lab.Netns{}, srcs: map[string][]netip.Addr{}}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.dir, err = b.lab.Dir(); err != nil {
		return nil, err
	}
	if b.load, err = b.lab.NewNetns(ctx, "load"); err != nil {
		return nil, err
	}
	for _, sys := range o.Systems {
		ns, err := b.lab.NewNetns(ctx, sys[:2])
		if err != nil {
			return nil, err
		}
		b.ns[sys] = ns
		pfx := sluiceNet
		if sys == Charon {
			pfx = charonNet
		}
		ifLoad := "to-" + sys[:2]
		if err := b.lab.Veth(b.load, ifLoad, ns, "wan0"); err != nil {
			return nil, err
		}
		if err := ns.AddAddr("wan0", netip.PrefixFrom(nth(pfx, 1), 24)); err != nil {
			return nil, err
		}
		for w := range o.Concurrency {
			a := nth(pfx, 10+w)
			if err := b.load.AddAddr(ifLoad, netip.PrefixFrom(a, 24)); err != nil {
				return nil, err
			}
			b.srcs[sys] = append(b.srcs[sys], a)
		}
	}
	if err := b.load.LinkUp("lo"); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bed) close() error {
	err := b.lab.Close()
	if b.o.Keep {
		fmt.Fprintf(os.Stderr, "ikebench: kept %s\n", b.dir)
	}
	return err
}

// responder is one running responder.
type responder interface {
	pid() int
	// installed counts the Child SAs it has installed.
	installed(ctx context.Context) (int, error)
	stop() error
	logs() string
}

// measure starts sys for kind, loads it, measures it and stops it.
func (b *bed) measure(ctx context.Context, sys, kind string, obs Observer) (*Result, error) {
	creds, err := newCredentials(kind)
	if err != nil {
		return nil, err
	}
	var (
		resp responder
		pfx  = sluiceNet
	)
	switch sys {
	case Sluice:
		resp, err = b.startSluice(ctx, creds)
	case Charon:
		pfx = charonNet
		resp, err = b.startCharon(ctx, creds)
	}
	if err != nil {
		return nil, err
	}
	defer resp.stop()
	ikeProps, err := ike.ParseProposals(ike.ProtoIKE, ikeSuite)
	if err != nil {
		return nil, err
	}
	espProps, err := ike.ParseProposals(ike.ProtoESP, espSuite)
	if err != nil {
		return nil, err
	}
	t := &target{ns: b.load, sources: b.srcs[sys], remote: nth(pfx, 1), remoteID: ike.ParseIdentity(gwID),
		creds: creds, ike: ikeProps, esp: espProps, site: site}

	before, err := treeUsage(resp.pid())
	if err != nil {
		return nil, err
	}
	var stopProf func() error
	if b.o.Profile != "" && sys == Sluice {
		if stopProf, err = b.perfRecord(resp.pid()); err != nil {
			return nil, err
		}
	}
	lr, rws := runLoad(ctx, t, b.o.Count, b.o.Concurrency, b.o.Duration, func(done int) {
		obs.Progress(float64(done) / float64(b.o.Count))
	})
	defer closeAll(rws)
	after, err := treeUsage(resp.pid())
	if stopProf != nil {
		if perr := stopProf(); perr != nil {
			obs.Note("perf record: " + perr.Error())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, resp.logs())
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r := &Result{System: sys, Auth: kind, Count: b.o.Count, Completed: lr.completed, Failed: lr.failed,
		Elapsed: lr.elapsed, CPU: after.CPU - before.CPU, P50: percentile(lr.latencies, 50), P99: percentile(lr.latencies, 99),
		RSSBefore: before.RSSKiB, RSSAfter: after.RSSKiB}
	if lr.firstErr != nil {
		r.FirstError = lr.firstErr.Error()
		obs.Note(fmt.Sprintf("%s, %s: %d setups failed; the first: %v", sys, kind, lr.failed, lr.firstErr))
	}
	if n := lr.completed + lr.failed; n < b.o.Count {
		obs.Note(fmt.Sprintf("%s, %s: %d of %d setups tried within --duration %v", sys, kind, n, b.o.Count, b.o.Duration))
	}
	// The responder installs a pair before it answers IKE_AUTH; a
	// bounded wait covers a responder that installs it just after.
	err = lab.WaitFor(ctx, "the responder's Child SAs", 30*time.Second, 200*time.Millisecond, func() (bool, error) {
		n, err := resp.installed(ctx)
		r.Installed = n
		return err == nil && n >= lr.completed, err
	})
	if err != nil {
		obs.Note(fmt.Sprintf("%s, %s: %d setups completed at the initiators, %d Child SAs installed at the responder: %v", sys, kind, lr.completed, r.Installed, err))
	}
	// Only setups with a Child SA installed at the responder count.
	if r.Installed < r.Completed {
		r.Failed += r.Completed - r.Installed
		r.Completed = r.Installed
	}
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Completed) / r.Elapsed.Seconds()
	}
	if r.CPU > 0 {
		r.PerCPUSec = float64(r.Completed) / r.CPU.Seconds()
	}
	if r.Completed > 0 {
		r.RSSPerSAKiB = float64(r.RSSAfter-r.RSSBefore) / float64(r.Completed)
	}
	return r, nil
}
