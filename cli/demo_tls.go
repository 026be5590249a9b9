package cli

// sluice demo tls: a TLS-only gateway in this process, a Go client against
// it, and the numbers. No root, no arguments needed.
//
//  1. Files: in a fresh temporary directory, a throwaway CA and an ECDSA
//     P-256 server certificate for 127.0.0.1 (gateway/certgen), a static
//     site with a 1 KB and a 1 MB file, and the gateway's configuration: one
//     [[tls]] listener on a free loopback port serving the site.
//  2. Gateway: config.LoadGateway and gateway.Start, as `sluice run` does.
//  3. Traffic, --conns clients at once, each phase a quarter of --duration:
//     full handshakes (no session cache), resumed handshakes (a session
//     cache per client, one 1 KB request on each connection so that the
//     TLS 1.3 ticket arrives), 1 KB requests and 1 MB requests on
//     keep-alive connections. Every response is checked against the file.
//  4. Report: rates, resumption rate, throughput, latency percentiles and
//     the listener's counters, signing batches included.
//  5. The gateway is closed and the directory removed, also on failure and
//     on Ctrl-C.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	cryptotls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// Shape of the TLS demo.
const (
	demoTLSSmall      = 1 << 10
	demoTLSLarge      = 1 << 20
	demoTLSMaxSamples = 1 << 16 // latency samples kept per client and phase
	demoTLSDialWait   = 5 * time.Second
	// demoTLSPhaseCap bounds how long a phase may run past its share of
	// --duration while a client has not yet done the least it must
	// (demoTLSWorker.least): on a loaded machine a 1 MB request can take
	// longer than a short phase.
	demoTLSPhaseCap = 30 * time.Second
)

// demoTLSOptions are the flags of sluice demo tls.
type demoTLSOptions struct {
	duration time.Duration
	conns    int
	engine   string
	json     bool
	keep     bool // hidden: leave the directory for a look
}

func newDemoTLSCommand(e *env) *cobra.Command {
	o := &demoTLSOptions{}
	cmd := &cobra.Command{
		Use:   "tls [--duration 4s] [--conns 8] [--engine soft|sched] [--json]",
		Short: "Run a TLS gateway in this process and measure it with a Go client",
		Long: `Run a TLS-only gateway in this process (no root needed): a throwaway CA and
an ECDSA P-256 server certificate in a temporary directory, one [[tls]]
listener on a free loopback port serving a static site, the private key held
by --engine. A built-in Go client then makes, with --conns connections at
once, a quarter of --duration each: full handshakes, resumed handshakes
(session tickets), 1 KB requests and 1 MB requests on keep-alive
connections.

Printed: handshakes per second, the resumption rate, request rates,
throughput, latency percentiles, and the listener's counters as sluice stats
shows them, with the mean and largest batch of handshake signatures the
engine was given. Everything is removed at the end, on failure and on Ctrl-C.

Exit status: 0; 1 if a phase got nothing through or the demo could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemoTLS(cmd.Context(), e, o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 4*time.Second, "how long traffic runs, all phases together")
	f.IntVar(&o.conns, "conns", 8, "clients at once")
	f.StringVar(&o.engine, "engine", "soft", "crypto engine holding the private key (registered: "+strings.Join(cryptodev.Engines(), ", ")+")")
	f.BoolVar(&o.json, "json", false, "print one JSON document instead of the text report")
	f.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	f.MarkHidden("keep")
	return cmd
}

// demoTLSReport is what the TLS demo prints; --json prints it as is.
type demoTLSReport struct {
	Engine   string          `json:"engine"`
	Key      string          `json:"key"`
	Listen   string          `json:"listen"`
	Conns    int             `json:"conns"`
	Phases   []demoTLSPhase  `json:"phases"`
	Listener gateway.TLSInfo `json:"listener"`
	// MeanSignBatch is the listener's signatures per batch given to the
	// engine.
	MeanSignBatch float64 `json:"mean_sign_batch"`
}

// demoTLSPhase is one phase of the client's traffic.
type demoTLSPhase struct {
	Name    string  `json:"name"` // "full handshakes", "resumed handshakes", "1 KB requests", "1 MB requests"
	Seconds float64 `json:"seconds"`
	OK      uint64  `json:"ok"`     // handshakes or requests that succeeded
	Errors  uint64  `json:"errors"` // that failed
	PerSec  float64 `json:"per_s"`
	// Resumed and ResumeRate are for the handshake phases: of OK, how many
	// resumed a session.
	Resumed    uint64  `json:"resumed"`
	ResumeRate float64 `json:"resume_rate"`
	MiBps      float64 `json:"mib_per_s,omitempty"` // response bodies
	P50Us      float64 `json:"p50_us"`
	P90Us      float64 `json:"p90_us"`
	P99Us      float64 `json:"p99_us"`
	MaxUs      float64 `json:"max_us"`
	FirstError string  `json:"first_error,omitempty"`
}

func runDemoTLS(ctx context.Context, e *env, o *demoTLSOptions) (err error) {
	if err := cryptodev.CheckEngine(o.engine); err != nil {
		return usageErr("--engine: %s", strings.TrimPrefix(err.Error(), "cryptodev: "))
	}
	if o.duration < 200*time.Millisecond {
		return usageErr("--duration %v: at least 200ms", o.duration)
	}
	if o.conns < 1 || o.conns > 1024 {
		return usageErr("--conns %d: want 1..1024", o.conns)
	}
	dir, err := os.MkdirTemp("", "sluice-demo-tls-")
	if err != nil {
		return withCode(exitNoTraffic, fmt.Errorf("demo tls: %w", err))
	}
	defer func() {
		if o.keep {
			fmt.Fprintf(e.stderr, "sluice demo tls: files kept in %s\n", dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, withCode(exitNoTraffic, fmt.Errorf("demo tls: cleanup: %w", rerr)))
		}
	}()
	fail := func(err error) error {
		if ctx.Err() != nil {
			return withCode(exitNoTraffic, fmt.Errorf("demo tls: interrupted (%v); everything it created is removed", context.Cause(ctx)))
		}
		return withCode(exitNoTraffic, fmt.Errorf("demo tls: %w", err))
	}

	site, err := demoTLSSite(dir, o.engine)
	if err != nil {
		return fail(err)
	}
	cfg, err := config.LoadGateway(site.file)
	if err != nil {
		return fail(fmt.Errorf("generated configuration: %w", err))
	}
	if err := cfg.CheckEngines(cryptodev.CheckEngine); err != nil {
		return fail(err)
	}
	gw, err := gateway.Start(context.WithoutCancel(ctx), cfg, nil)
	if err != nil {
		return fail(err)
	}
	defer gw.Close()
	// The listener took a free port; its counters name it.
	if st := gw.TLS(); len(st) == 1 {
		site.addr = st[0].Listen
	} else {
		return fail(fmt.Errorf("demo tls: %d TLS listeners running, want 1", len(st)))
	}

	rep := &demoTLSReport{Engine: o.engine, Key: "ECDSA P-256", Listen: site.addr, Conns: o.conns}
	c := &demoTLSClient{site: site, conns: o.conns}
	phase := o.duration / 4
	for _, run := range []func(context.Context, time.Duration) demoTLSPhase{c.fullHandshakes, c.resumedHandshakes, c.smallRequests, c.largeRequests} {
		p := run(ctx, phase)
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		rep.Phases = append(rep.Phases, p)
	}
	if st := gw.Stats(); len(st.TLS) > 0 {
		rep.Listener = st.TLS[0]
		if b := rep.Listener.SignBatches; b > 0 {
			rep.MeanSignBatch = float64(rep.Listener.SignOps) / float64(b)
		}
	}
	return emitDemoReport(e.stdout, o.json, rep, "demo tls")
}

// demoTLSFiles is the demo's site on disk.
type demoTLSFiles struct {
	file         string // the gateway's configuration
	addr         string // the listener's bound address, once it runs
	ca           *certgen.CA
	small, large []byte // the files' contents
}

// demoTLSSite writes the CA, the server certificate, the static site and
// the configuration into dir.
func demoTLSSite(dir, engine string) (*demoTLSFiles, error) {
	ca, err := certgen.NewCA("sluice demo CA")
	if err != nil {
		return nil, err
	}
	if _, _, err := ca.IssueFiles(dir, "server", false, "127.0.0.1", "localhost"); err != nil {
		return nil, err
	}
	s := &demoTLSFiles{ca: ca, small: make([]byte, demoTLSSmall), large: make([]byte, demoTLSLarge)}
	rand.Read(s.small)
	rand.Read(s.large)
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o700); err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"1k.bin": s.small, "1m.bin": s.large, "index.html": []byte("<p>sluice demo tls</p>\n")} {
		if err := os.WriteFile(filepath.Join(www, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	f := &config.File{
		Gateway: config.FileGateway{Engine: engine, LogLevel: "warn"},
		TLS: []config.FileTLS{{Name: "demo", Listen: "127.0.0.1:0", Backend: "static:www",
			Versions: []string{"1.2", "1.3"}, ALPN: []string{"http/1.1"},
			Certs: []config.FileTLSCert{{Cert: "server.pem", Key: "server.key"}}}},
	}
	text, err := f.Encode()
	if err != nil {
		return nil, err
	}
	text = append([]byte("# sluice demo tls: written by `sluice demo tls`, removed when it ends\n\n"), text...)
	s.file = filepath.Join(dir, "gateway.toml")
	if err := os.WriteFile(s.file, text, 0o600); err != nil {
		return nil, err
	}
	return s, nil
}

// demoTLSClient is the built-in load generator.
type demoTLSClient struct {
	site  *demoTLSFiles
	conns int
}

// demoTLSWorker is one client goroutine's results in one phase.
type demoTLSWorker struct {
	end                      time.Time // of the phase's share of --duration
	least                    uint64    // operations to complete before the phase may end
	ok, errs, resumed, bytes uint64
	lat                      []time.Duration
	firstErr                 error
}

// over reports whether the worker is done: its share of the time has
// passed and it has completed the least it must (least), or ctx (which
// caps the phase at demoTLSPhaseCap past its share) has ended. A phase
// ends on what it did, not on how much a loaded machine moved in a fixed
// fraction of a second.
func (w *demoTLSWorker) over(ctx context.Context) bool {
	return ctx.Err() != nil || (w.ok >= w.least && !time.Now().Before(w.end))
}

// cutShort reports whether err is ctx's end cutting an operation short
// (the phase's cap or the caller's cancel): not the server's failure, and
// not counted.
func cutShort(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil
}

func (w *demoTLSWorker) done(start time.Time, err error) {
	if err != nil {
		w.errs++
		if w.firstErr == nil {
			w.firstErr = err
		}
		return
	}
	w.ok++
	if len(w.lat) < demoTLSMaxSamples {
		w.lat = append(w.lat, time.Since(start))
	}
}

// run runs fn in c.conns goroutines until d has passed and each has
// completed least operations of its own, or ctx ends, and sums their results. The
// phase is capped at d + demoTLSPhaseCap.
func (c *demoTLSClient) run(ctx context.Context, name string, d time.Duration, least uint64, fn func(ctx context.Context, w *demoTLSWorker)) demoTLSPhase {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(d+demoTLSPhaseCap))
	defer cancel()
	workers := make([]demoTLSWorker, c.conns)
	var wg sync.WaitGroup
	for i := range workers {
		workers[i].end = start.Add(d)
		workers[i].least = least
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx, &workers[i])
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	p := demoTLSPhase{Name: name, Seconds: elapsed.Seconds()}
	var lat []time.Duration
	var bytes uint64
	for i := range workers {
		w := &workers[i]
		p.OK += w.ok
		p.Errors += w.errs
		p.Resumed += w.resumed
		bytes += w.bytes
		lat = append(lat, w.lat...)
		if p.FirstError == "" && w.firstErr != nil {
			p.FirstError = w.firstErr.Error()
		}
	}
	p.PerSec = float64(p.OK) / elapsed.Seconds()
	if p.OK > 0 {
		p.ResumeRate = float64(p.Resumed) / float64(p.OK)
	}
	if bytes > 0 {
		p.MiBps = float64(bytes) / (1 << 20) / elapsed.Seconds()
	}
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return micros(lat[min(len(lat)-1, int(q*float64(len(lat))))])
	}
	p.P50Us, p.P90Us, p.P99Us = pct(0.50), pct(0.90), pct(0.99)
	if len(lat) > 0 {
		p.MaxUs = micros(lat[len(lat)-1])
	}
	return p
}

// dial makes one TLS connection to the listener, verified with the demo's
// CA, and completes its handshake.
func (c *demoTLSClient) dial(ctx context.Context, cache cryptotls.ClientSessionCache) (*cryptotls.Conn, error) {
	d := &cryptotls.Dialer{
		NetDialer: &net.Dialer{Timeout: demoTLSDialWait},
		Config: &cryptotls.Config{
			RootCAs: c.site.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"},
			ClientSessionCache: cache,
		},
	}
	conn, err := d.DialContext(ctx, "tcp", c.site.addr)
	if err != nil {
		return nil, err
	}
	return conn.(*cryptotls.Conn), nil
}

// get sends GET path on conn and reads the response, checking its body
// against want.
func (c *demoTLSClient) get(conn net.Conn, br *bufio.Reader, path string, want []byte, keepAlive bool) (int, error) {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	hdr := "keep-alive"
	if !keepAlive {
		hdr = "close"
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: %s\r\n\r\n", path, hdr); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
		return 0, fmt.Errorf("GET %s: status %d, %d bytes, want 200 and the file's %d", path, resp.StatusCode, len(body), len(want))
	}
	return len(body), nil
}

// fullHandshakes: connect, handshake, close; never resume.
func (c *demoTLSClient) fullHandshakes(ctx context.Context, d time.Duration) demoTLSPhase {
	return c.run(ctx, "full handshakes", d, 1, func(ctx context.Context, w *demoTLSWorker) {
		for !w.over(ctx) {
			start := time.Now()
			conn, err := c.dial(ctx, nil)
			if cutShort(ctx, err) {
				return
			}
			if err == nil {
				if conn.ConnectionState().DidResume {
					w.resumed++
				}
				conn.Close()
			}
			w.done(start, err)
		}
	})
}

// resumedHandshakes: connect with a session cache and make one 1 KB
// request (which also takes in the TLS 1.3 ticket). The first connection of
// each client is a full handshake; the others resume, and each client makes
// at least three so that most of what it did could resume.
func (c *demoTLSClient) resumedHandshakes(ctx context.Context, d time.Duration) demoTLSPhase {
	return c.run(ctx, "resumed handshakes", d, 3, func(ctx context.Context, w *demoTLSWorker) {
		cache := cryptotls.NewLRUClientSessionCache(4)
		for !w.over(ctx) {
			start := time.Now()
			conn, err := c.dial(ctx, cache)
			resumed := false
			if err == nil {
				resumed = conn.ConnectionState().DidResume
				_, err = c.get(conn, bufio.NewReader(conn), "/1k.bin", c.site.small, false)
				conn.Close()
			}
			if cutShort(ctx, err) {
				return
			}
			if resumed && err == nil {
				w.resumed++
			}
			w.done(start, err)
		}
	})
}

// keepAlive: requests for path, one after another on one connection per
// client (a new one when the server closes it).
func (c *demoTLSClient) keepAlive(ctx context.Context, name string, d time.Duration, path string, want []byte) demoTLSPhase {
	return c.run(ctx, name, d, 1, func(ctx context.Context, w *demoTLSWorker) {
		var conn *cryptotls.Conn
		var br *bufio.Reader
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		for !w.over(ctx) {
			start := time.Now()
			if conn == nil {
				var err error
				if conn, err = c.dial(ctx, nil); err != nil {
					if cutShort(ctx, err) {
						return
					}
					w.done(start, err)
					conn = nil
					continue
				}
				br = bufio.NewReader(conn)
			}
			n, err := c.get(conn, br, path, want, true)
			if cutShort(ctx, err) {
				return
			}
			if err != nil {
				conn.Close()
				conn = nil
			}
			w.bytes += uint64(n)
			w.done(start, err)
		}
	})
}

func (c *demoTLSClient) smallRequests(ctx context.Context, d time.Duration) demoTLSPhase {
	return c.keepAlive(ctx, "1 KB requests", d, "/1k.bin", c.site.small)
}

func (c *demoTLSClient) largeRequests(ctx context.Context, d time.Duration) demoTLSPhase {
	return c.keepAlive(ctx, "1 MB requests", d, "/1m.bin", c.site.large)
}

// failure says what makes the run a failure, or "".
func (rep *demoTLSReport) failure() string {
	var bad []string
	for _, p := range rep.Phases {
		if p.OK == 0 {
			msg := p.Name
			if p.FirstError != "" {
				msg += " (" + p.FirstError + ")"
			}
			bad = append(bad, msg)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "nothing got through: " + strings.Join(bad, ", ")
}

// print writes the text report.
func (rep *demoTLSReport) print(w io.Writer) {
	fmt.Fprintf(w, "sluice demo tls: a TLS-only gateway in this process on %s, static site, %s key in the %s engine\n",
		rep.Listen, rep.Key, rep.Engine)
	fmt.Fprintf(w, "  a Go client, %d connections at once, TLS 1.3\n\n", rep.Conns)
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\t\tper second\tMiB/s\tok\terrors\tresumed\tp50\tp90\tp99\tmax\t")
	for _, p := range rep.Phases {
		mib, resumed := "-", "-"
		if p.MiBps > 0 {
			mib = fmt.Sprintf("%.1f", p.MiBps)
		}
		if strings.Contains(p.Name, "handshakes") {
			resumed = fmt.Sprintf("%.0f%%", 100*p.ResumeRate)
		}
		fmt.Fprintf(tw, "\t%s\t%.0f\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, p.PerSec, mib, p.OK, p.Errors, resumed,
			us(p.P50Us), us(p.P90Us), us(p.P99Us), us(p.MaxUs))
	}
	tw.Flush()
	for _, p := range rep.Phases {
		if p.FirstError != "" {
			fmt.Fprintf(w, "  %s: first error: %s\n", p.Name, p.FirstError)
		}
	}
	fmt.Fprintln(w, "\nthe listener's counters (sluice stats):")
	printTLSStats(w, []gateway.TLSInfo{rep.Listener})
	mean := "-"
	if rep.Listener.SignBatches > 0 {
		mean = fmt.Sprintf("%.2f", rep.MeanSignBatch)
	}
	fmt.Fprintf(w, "\nhandshake signatures: %d in %d batches given to the %s engine, %s per batch on average, at most %d\n",
		rep.Listener.SignOps, rep.Listener.SignBatches, rep.Engine, mean, rep.Listener.SignMaxBatch)
}
