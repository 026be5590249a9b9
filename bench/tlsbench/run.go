package tlsbench

// A bench run, group after group:
//
//  1. Material: a CA, a certificate and key per key type, a static file
//     per response size (certs.go), in a fresh directory.
//  2. A group is a key type and a TLS version. Its servers start side by
//     side on their own loopback ports: nginx (one worker) and sluice with
//     each engine; each is checked with one verified handshake and a GET.
//  3. --repeat times over, every server in turn: full handshakes (every
//     server), resumed handshakes (nginx and sluice's first engine: a
//     resumption signs nothing, so the engine does not matter), and, in the
//     groups of the first key type, keep-alive requests for each size
//     (nginx and sluice's first engine: the record layer is Go's whatever
//     the engine). The servers' CPU time (/proc) is read around each.
//  4. The storm group (RSA-4096, TLS 1.3 when asked for): small requests
//     on open keep-alive connections at a fixed pace, timed, first alone
//     and then during a storm of full handshakes, for nginx and for sluice
//     with every engine.
//  5. Each metric's median with its spread; the servers are stopped and
//     the directory removed (also when the run is cancelled).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/sluicegw/sluice/bench"
)

// Observer follows a run. Its methods are called from Run's goroutine,
// except Progress, which a ticker calls while a step runs.
type Observer interface {
	Step(label string)
	Progress(frac float64)
	StepDone()
	Note(msg string)
	// GroupDone delivers a group's results.
	GroupDone(g Group, rs []Result)
}

// The request clients.
const (
	ClientAuto = "auto" // wrk when installed, else the Go client
	ClientGo   = "go"
	ClientWrk  = "wrk"
)

// Options shape a Run.
type Options struct {
	Systems  []string
	Keys     []string
	Engines  []string // sluice's engines; the first also serves resumptions and requests
	Versions []string
	Sizes    []int // response body bytes
	Conns    int   // concurrent connections of every load
	Duration time.Duration
	Repeat   int
	// Storm runs the latency storm group.
	Storm bool
	// Client is the request client: ClientAuto, ClientGo or ClientWrk.
	Client string
	// GOMAXPROCS is set in sluice's environment when above 0.
	GOMAXPROCS int
	// SluiceArgv returns the command line of `sluice` with args.
	SluiceArgv func(args ...string) ([]string, error)
	// Nginx and Wrk are the executables ("": found on PATH, nginx also at
	// DefaultNginx).
	Nginx, Wrk string
	// Dir is where the run's directory is made ("": the system's temporary
	// directory); Keep leaves it behind.
	Dir  string
	Keep bool
	Log  *slog.Logger
}

// Defaults and bounds of the options.
const (
	DefaultConns = 32
	MaxConns     = 4096
	// ProbeConns and ProbeRate shape the storm's latency probes: that
	// many keep-alive connections, that many requests per second in all.
	ProbeConns = 4
	ProbeRate  = 400
	// ProbeSize is the probes' response body.
	ProbeSize = 1 << 10
	// StormKey is the key type of the storm.
	StormKey = RSA4096
)

// Check reports the first problem with the options.
func (o *Options) Check() error {
	switch {
	case len(o.Systems) == 0:
		return errors.New("--systems: name at least one of sluice, nginx")
	case len(o.Keys) == 0:
		return errors.New("--keys: name at least one key type")
	case len(o.Versions) == 0:
		return errors.New("--versions: name at least one of 1.2, 1.3")
	case len(o.Sizes) == 0:
		return errors.New("--sizes: give at least one size")
	case o.Conns < 1 || o.Conns > MaxConns:
		return fmt.Errorf("--conns %d: want 1 to %d", o.Conns, MaxConns)
	case o.Duration < 10*time.Millisecond:
		return fmt.Errorf("--duration %v: at least 10ms", o.Duration)
	case o.Repeat < 1 || o.Repeat > 100:
		return fmt.Errorf("--repeat %d: want 1 to 100", o.Repeat)
	case o.GOMAXPROCS < 0 || o.GOMAXPROCS > 1024:
		return fmt.Errorf("--gomaxprocs %d: want 0 (unset) to 1024", o.GOMAXPROCS)
	}
	for _, s := range o.Systems {
		if !slices.Contains(Systems, s) {
			return fmt.Errorf("--systems: unknown system %q (want sluice, nginx)", s)
		}
	}
	for _, k := range o.Keys {
		if !slices.Contains(Keys, k) {
			return fmt.Errorf("--keys: unknown key type %q (want ecdsap256, rsa2048, rsa4096)", k)
		}
	}
	for _, v := range o.Versions {
		if _, err := ParseVersion(v); err != nil {
			return err
		}
	}
	for _, n := range o.Sizes {
		if n < 1 || n > MaxSize {
			return fmt.Errorf("--sizes %d: want 1 to %d bytes", n, MaxSize)
		}
	}
	if slices.Contains(o.Systems, Sluice) && len(o.Engines) == 0 {
		return errors.New("--engines: name at least one engine for sluice")
	}
	switch o.Client {
	case ClientAuto, ClientGo, ClientWrk:
	default:
		return fmt.Errorf("--client %q: want auto, go or wrk", o.Client)
	}
	return nil
}

// Group is one key type and TLS version with its servers, and which of
// them each measurement runs on (indexes into Servers).
type Group struct {
	Key, Version string
	Servers      []Server
	Full         []int
	Resumed      []int
	Requests     []int // each for every size
	Storm        []int // latency idle and during the storm
	Sizes        []int
}

// String is "ecdsap256 TLS 1.3" or "storm rsa4096 TLS 1.3".
func (g Group) String() string {
	s := g.Key + " TLS " + g.Version
	if len(g.Storm) > 0 {
		s = "storm " + s
	}
	return s
}

// steps is the measured steps of one repetition of g.
func (g Group) steps() int {
	return len(g.Full) + len(g.Resumed) + len(g.Requests)*len(g.Sizes) + 2*len(g.Storm)
}

// servers returns nginx (if asked for) and sluice with each engine.
func (o *Options) servers() []Server {
	var ss []Server
	for _, s := range Systems {
		if !slices.Contains(o.Systems, s) {
			continue
		}
		if s == Nginx {
			ss = append(ss, Server{System: Nginx, Engine: "-"})
			continue
		}
		for _, e := range o.Engines {
			ss = append(ss, Server{System: Sluice, Engine: e})
		}
	}
	return ss
}

// firsts are the indexes of nginx and of sluice's first engine.
func firsts(ss []Server) []int {
	var out []int
	seen := map[string]bool{}
	for i, s := range ss {
		if !seen[s.System] {
			seen[s.System] = true
			out = append(out, i)
		}
	}
	return out
}

// Groups returns the groups of a run, in the order they run: by version,
// then key type; then the storm group.
func (o *Options) Groups() []Group {
	ss := o.servers()
	all := make([]int, len(ss))
	for i := range all {
		all[i] = i
	}
	var gs []Group
	for _, v := range o.Versions {
		for ki, k := range o.Keys {
			g := Group{Key: k, Version: v, Servers: ss, Full: all, Resumed: firsts(ss)}
			if ki == 0 {
				g.Requests, g.Sizes = firsts(ss), o.Sizes
			}
			gs = append(gs, g)
		}
	}
	if o.Storm {
		v := o.Versions[len(o.Versions)-1]
		if slices.Contains(o.Versions, "1.3") {
			v = "1.3"
		}
		gs = append(gs, Group{Key: StormKey, Version: v, Servers: ss, Storm: all})
	}
	return gs
}

// Steps is the measured steps of the whole run.
func (o *Options) Steps() int {
	n := 0
	for _, g := range o.Groups() {
		n += g.steps() * o.Repeat
	}
	return n
}

// warmup is how long a load runs before its window opens.
func (o *Options) warmup() time.Duration { return min(time.Second, o.Duration/4) }

// runner is the state of one Run.
type runner struct {
	o       Options
	obs     Observer
	doc     *Document
	mat     *Material
	dir     string
	nginx   string
	wrk     string // "" = the Go client for requests
	sluiceE []string
}

func (r *runner) note(s string) {
	if !slices.Contains(r.doc.Notes, s) {
		r.doc.Notes = append(r.doc.Notes, s)
		r.obs.Note(s)
	}
}

// Run measures every group of o in turn and returns the document (with the
// results so far if it fails).
func Run(ctx context.Context, o Options, obs Observer) (doc *Document, err error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &runner{o: o, obs: obs, doc: &Document{Env: bench.CurrentEnv()}}
	if slices.Contains(o.Systems, Nginx) {
		if r.nginx, err = FindNginx(o.Nginx); err != nil {
			return nil, err
		}
	}
	switch o.Client {
	case ClientWrk, ClientAuto:
		exe := o.Wrk
		if exe == "" {
			exe = "wrk"
		}
		p, err := exec.LookPath(exe)
		if err != nil && o.Client == ClientWrk {
			return nil, fmt.Errorf("tlsbench: --client wrk: %w", err)
		}
		r.wrk = p
	}
	if r.wrk != "" {
		r.note(fmt.Sprintf("requests: wrk -t%d -c%d (a C client, cheaper per request than the Go client); handshakes and latency: the built-in Go client", min(wrkThreads, o.Conns), o.Conns))
		if o.Duration < time.Second {
			r.note("wrk measures whole seconds: its runs last 1s")
		}
	} else {
		r.note("requests, handshakes and latency: the built-in Go client")
	}
	if slices.Contains(o.Systems, Nginx) {
		r.note("nginx: one worker process (worker_processes 1), its master and worker's CPU counted; sluice: GOMAXPROCS " + gomaxprocsNote(o.GOMAXPROCS) + "; compare CPU per operation, not rates")
	}
	if r.dir, err = os.MkdirTemp(o.Dir, "sluice-bench-tls-"); err != nil {
		return nil, err
	}
	if err := os.Chmod(r.dir, 0o755); err != nil { // nginx's workers drop root and read below it
		return nil, err
	}
	if o.Keep {
		r.note("files kept in " + r.dir)
	} else {
		defer os.RemoveAll(r.dir)
	}
	keys := slices.Clone(o.Keys)
	if o.Storm && !slices.Contains(keys, StormKey) {
		keys = append(keys, StormKey)
	}
	sizes := slices.Clone(o.Sizes)
	if !slices.Contains(sizes, ProbeSize) {
		sizes = append(sizes, ProbeSize)
	}
	obs.Step("keys, certificates and files")
	r.mat, err = NewMaterial(r.dir, keys, sizes)
	obs.StepDone()
	if err != nil {
		return nil, err
	}
	for _, g := range o.Groups() {
		rs, err := r.group(ctx, g)
		r.doc.Results = append(r.doc.Results, rs...)
		if err != nil {
			if ctx.Err() != nil {
				return r.doc, fmt.Errorf("tlsbench: interrupted during %s: its servers are stopped", g)
			}
			return r.doc, fmt.Errorf("tlsbench: %s: %w", g, err)
		}
		obs.GroupDone(g, rs)
	}
	r.doc.Ratios = Ratios(r.doc.Results)
	return r.doc, nil
}

func gomaxprocsNote(n int) string {
	if n == 0 {
		return "unset (one per CPU, the default a user gets)"
	}
	return strconv.Itoa(n)
}

// started is a group's running servers.
type started struct {
	procs  []*proc
	target []Target
}

func (s *started) stop() {
	for _, p := range s.procs {
		if p != nil {
			p.stop()
		}
	}
}

// start starts and checks the servers of g.
func (r *runner) start(ctx context.Context, g Group) (*started, error) {
	st := &started{procs: make([]*proc, len(g.Servers)), target: make([]Target, len(g.Servers))}
	ver, _ := ParseVersion(g.Version)
	small := slices.Min(slices.Collect(mapsKeys(r.mat.Files)))
	for i, s := range g.Servers {
		port, err := freePort()
		if err != nil {
			st.stop()
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		name := g.Key + "-" + g.Version
		if s.System == Sluice {
			name += "-" + s.Engine
		}
		if len(g.Storm) > 0 {
			name = "storm-" + name
		}
		var p *proc
		switch s.System {
		case Nginx:
			p, err = startNginx(ctx, r.nginx, r.dir, name, r.mat, NginxSite{Listen: addr, Cert: r.mat.Certs[g.Key], Version: g.Version})
		case Sluice:
			var env []string
			if r.o.GOMAXPROCS > 0 {
				env = []string{"GOMAXPROCS=" + strconv.Itoa(r.o.GOMAXPROCS)}
			}
			p, err = startSluice(ctx, r.o.SluiceArgv, env, r.dir, name, SluiceSite{Listen: addr, Cert: r.mat.Certs[g.Key],
				Version: g.Version, Engine: s.Engine, WWW: r.mat.WWW})
		}
		if err != nil {
			st.stop()
			return nil, err
		}
		st.procs[i] = p
		st.target[i] = Target{Addr: addr, Roots: r.mat.Roots, Version: ver}
		if err := Check(ctx, st.target[i], g.Key, r.mat.Files[small], small); err != nil {
			st.stop()
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		r.o.Log.Info("server up", "server", s.String(), "group", g.String(), "addr", addr, "pid", p.pid())
	}
	return st, nil
}

// mapsKeys returns m's keys as an iterator.
func mapsKeys(m map[int]string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// group starts g's servers, measures them and stops them.
func (r *runner) group(ctx context.Context, g Group) ([]Result, error) {
	r.obs.Step(fmt.Sprintf("%s: starting %d server(s)", g, len(g.Servers)))
	st, err := r.start(ctx, g)
	r.obs.StepDone()
	if err != nil {
		return nil, err
	}
	defer st.stop()
	samples := map[sampleKey][]float64{}
	add := func(server, size int, metric string, v float64) {
		k := sampleKey{server, size, metric}
		samples[k] = append(samples[k], v)
	}
	o := r.o
	for range o.Repeat {
		for _, i := range g.Full {
			if err := r.step(g, i, "full handshakes", func(progress func(float64)) error {
				return r.handshakes(ctx, g, i, st, false, add, progress)
			}); err != nil {
				return collect(g.Servers, g.Key, g.Version, samples), err
			}
		}
		for _, i := range g.Resumed {
			if err := r.step(g, i, "resumed handshakes", func(progress func(float64)) error {
				return r.handshakes(ctx, g, i, st, true, add, progress)
			}); err != nil {
				return collect(g.Servers, g.Key, g.Version, samples), err
			}
		}
		for _, size := range g.Sizes {
			for _, i := range g.Requests {
				if err := r.step(g, i, "requests "+SizeLabel(size), func(progress func(float64)) error {
					return r.requests(ctx, g, i, st, size, add, progress)
				}); err != nil {
					return collect(g.Servers, g.Key, g.Version, samples), err
				}
			}
		}
		for _, i := range g.Storm {
			for _, storm := range []bool{false, true} {
				what := "latency, idle"
				if storm {
					what = "latency, during the storm"
				}
				if err := r.step(g, i, what, func(progress func(float64)) error {
					return r.latency(ctx, g, i, st, storm, add, progress)
				}); err != nil {
					return collect(g.Servers, g.Key, g.Version, samples), err
				}
			}
		}
	}
	return collect(g.Servers, g.Key, g.Version, samples), nil
}

// step runs one measured step with its label and progress.
func (r *runner) step(g Group, i int, what string, f func(progress func(float64)) error) error {
	r.obs.Step(fmt.Sprintf("%s, %s: %s", g, g.Servers[i], what))
	err := f(r.obs.Progress)
	r.obs.StepDone()
	return err
}

type addFunc func(server, size int, metric string, v float64)

// usPer is microseconds of cpu per op.
func usPer(cpu time.Duration, ops uint64) float64 {
	return float64(cpu.Nanoseconds()) / 1e3 / float64(ops)
}

// handshakes measures full or resumed handshakes on server i.
func (r *runner) handshakes(ctx context.Context, g Group, i int, st *started, resume bool, add addFunc, progress func(float64)) error {
	small := r.mat.Files[ProbeSize]
	l := handshakeLoad(st.target[i], r.o.Conns, 0, resume, small)
	w, err := measure(ctx, r.o.warmup(), r.o.Duration, st.procs[i].cpu, progress, l)
	if err != nil {
		return err
	}
	c := w.Counts[0]
	if c.Ops == 0 {
		return fmt.Errorf("%s: no handshake completed (%d failed: %v)", g.Servers[i], c.Failed, l.c.err())
	}
	if c.Failed > 0 {
		r.note(fmt.Sprintf("%s, %s: %d of %d handshakes failed (first: %v)", g, g.Servers[i], c.Failed, c.Failed+c.Ops, l.c.err()))
	}
	rate, cpu, cores := float64(c.Ops)/w.Seconds(), usPer(w.CPU, c.Ops), w.CPU.Seconds()/w.Seconds()
	if resume {
		add(i, 0, HSResumed, rate)
		add(i, 0, HSResumedCPU, cpu)
		add(i, 0, HSResumedMiss, 100*float64(c.Missed)/float64(c.Ops))
	} else {
		add(i, 0, HSFull, rate)
		add(i, 0, HSFullCPU, cpu)
		add(i, 0, HSFullCores, cores)
	}
	return nil
}

// requests measures keep-alive requests of size bytes on server i, with
// wrk or the Go client.
func (r *runner) requests(ctx context.Context, g Group, i int, st *started, size int, add addFunc, progress func(float64)) error {
	path := r.mat.Files[size]
	var reqs, body uint64
	var secs float64
	var cpu time.Duration
	if r.wrk != "" {
		stop := bench.Ticker(time.Duration(wrkSeconds(r.o.Duration))*time.Second, progress)
		res, c, err := runWrk(ctx, r.wrk, "https://"+st.target[i].Addr+path, r.o.Conns, r.o.Duration, st.procs[i].cpu)
		stop()
		if err != nil {
			return err
		}
		if res.SocketErrors != "" && res.SocketErrors != "connect 0, read 0, write 0, timeout 0" {
			r.note(fmt.Sprintf("%s, %s, %s: wrk socket errors: %s", g, g.Servers[i], SizeLabel(size), res.SocketErrors))
		}
		reqs, body, secs, cpu = res.Requests, res.Requests*uint64(size), res.Elapsed.Seconds(), c
	} else {
		l := requestLoad(st.target[i], r.o.Conns, 0, path, 0)
		w, err := measure(ctx, r.o.warmup(), r.o.Duration, st.procs[i].cpu, progress, l)
		if err != nil {
			return err
		}
		c := w.Counts[0]
		if c.Failed > 0 {
			r.note(fmt.Sprintf("%s, %s, %s: %d requests failed (first: %v)", g, g.Servers[i], SizeLabel(size), c.Failed, l.c.err()))
		}
		reqs, body, secs, cpu = c.Ops, c.Bytes, w.Seconds(), w.CPU
	}
	if reqs == 0 {
		return fmt.Errorf("%s: no response to GET %s", g.Servers[i], path)
	}
	add(i, size, Req, float64(reqs)/secs)
	add(i, size, ReqCPU, usPer(cpu, reqs))
	add(i, size, ReqMiBs, float64(body)/(1<<20)/secs)
	add(i, size, ReqGiBCPU, cpu.Seconds()/(float64(body)/(1<<30)))
	add(i, size, ReqCores, cpu.Seconds()/secs)
	return nil
}

// latency measures small requests on open connections to server i, paced,
// alone or during a storm of full handshakes.
func (r *runner) latency(ctx context.Context, g Group, i int, st *started, storm bool, add addFunc, progress func(float64)) error {
	probes := requestLoad(st.target[i], ProbeConns, r.o.Conns, r.mat.Files[ProbeSize], time.Second*ProbeConns/ProbeRate)
	loads := []*load{probes}
	if storm {
		loads = append(loads, handshakeLoad(st.target[i], r.o.Conns, 0, false, ""))
	}
	w, err := measure(ctx, r.o.warmup(), r.o.Duration, st.procs[i].cpu, progress, loads...)
	if err != nil {
		return err
	}
	// The probes' samples are complete once measure has stopped them.
	probes.c.mu.Lock()
	q, n := quantiles(probes.c.lats, w.Start, w.End, 0.5, 0.99)
	probes.c.mu.Unlock()
	if n == 0 {
		return fmt.Errorf("%s: no latency probe answered (%v)", g.Servers[i], probes.c.err())
	}
	if f := w.Counts[0].Failed; f > 0 {
		r.note(fmt.Sprintf("%s, %s: %d latency probes failed (first: %v)", g, g.Servers[i], f, probes.c.err()))
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if !storm {
		add(i, 0, LatIdleP50, us(q[0]))
		add(i, 0, LatIdleP99, us(q[1]))
		return nil
	}
	add(i, 0, LatStormP50, us(q[0]))
	add(i, 0, LatStormP99, us(q[1]))
	add(i, 0, StormHS, float64(w.Counts[1].Ops)/w.Seconds())
	add(i, 0, StormCores, w.CPU.Seconds()/w.Seconds())
	return nil
}

// Allowances of Estimate for what is not a measurement window.
const (
	estMaterial    = 2 * time.Second        // the CA, keys (RSA-4096 takes a while) and files
	estGroupServer = time.Second            // starting and stopping a group's servers
	estStep        = 300 * time.Millisecond // connecting, reading CPU times
)

// Estimate is about how long a run of o takes: the material, each group's
// servers, and every measured step's warm-up and window.
func (o *Options) Estimate() time.Duration {
	gs := o.Groups()
	step := o.warmup() + o.Duration + estStep
	if w := time.Duration(wrkSeconds(o.Duration)) * time.Second; w > o.Duration {
		step = o.warmup() + w + estStep
	}
	return estMaterial + time.Duration(len(gs))*estGroupServer + time.Duration(o.Steps())*step
}
