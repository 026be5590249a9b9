package tlsbench

// The built-in load generator, a Go client on crypto/tls:
//
//   - handshakes: each of N workers dials, handshakes and closes, over and
//     over; full handshakes have no session cache, resumed ones a cache
//     primed with a ticket (and DidResume is checked on every one);
//   - requests: N keep-alive connections, each sending GET and reading the
//     whole response in a loop (a minimal HTTP/1.1 client: status line,
//     headers, Content-Length body);
//   - probes: N keep-alive connections, each sending a small GET at a
//     fixed pace and timing it, for latency while other load runs.
//
// The client is kept cheap so that it takes as little as possible of the
// cores it shares with the servers: it offers X25519 and P-256 only, with
// a key share for X25519 (what nginx with OpenSSL 3.0 and Go both pick
// first; P-256 is there because in TLS 1.2 an ECDSA certificate's curve
// must be among the client's groups), and under load it does not verify
// the chain (InsecureSkipVerify; the CertificateVerify signature is still
// checked); Check makes one fully verified handshake per server first.
// Each worker dials from its own loopback source address (127.1.x.y), so
// that closed connections in TIME_WAIT never run a worker out of ports.
//
// A measurement (measure) starts its loads, lets them warm up, and counts
// what happens between two marks, with the servers' CPU time read at each.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one TLS server to load.
type Target struct {
	Addr    string         // 127.0.0.1:PORT
	Roots   *x509.CertPool // trusted by Check
	Version uint16         // tls.VersionTLS12 or tls.VersionTLS13, offered alone
}

// ioWait bounds every read, write and handshake of the client.
const ioWait = 10 * time.Second

// config is the client configuration for t.
func (t Target) config(verify bool, cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{
		ServerName:         ServerName,
		RootCAs:            t.Roots,
		InsecureSkipVerify: !verify,
		MinVersion:         t.Version,
		MaxVersion:         t.Version,
		CurvePreferences:   []tls.CurveID{tls.X25519, tls.CurveP256},
		ClientSessionCache: cache,
	}
}

// sourceAddr is worker i's local address: 127.1.x.y, y from 1.
func sourceAddr(i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 1, byte(i/250), byte(1+i%250))}
}

// dial connects to t from worker i's address and hands over to TLS,
// without handshaking yet. Closing the returned connection when ctx ends
// unblocks whatever it is doing; stop ends that.
func dial(ctx context.Context, t Target, i int, cfg *tls.Config) (tc *tls.Conn, stop func() bool, err error) {
	d := net.Dialer{LocalAddr: sourceAddr(i), Timeout: ioWait}
	c, err := d.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, nil, err
	}
	stop = context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return tls.Client(c, cfg), stop, nil
}

// Check makes one handshake with full verification against t.Roots,
// checks that the leaf's key is of type key, and fetches path, whose body
// must be size bytes.
func Check(ctx context.Context, t Target, key, path string, size int) error {
	tc, stop, err := dial(ctx, t, 0, t.config(true, nil))
	if err != nil {
		return err
	}
	defer stop()
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(ioWait))
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tlsbench: handshake with %s: %w", t.Addr, err)
	}
	st := tc.ConnectionState()
	if st.Version != t.Version {
		return fmt.Errorf("tlsbench: %s negotiated %s, want %s", t.Addr, tls.VersionName(st.Version), tls.VersionName(t.Version))
	}
	got := "?"
	switch k := st.PeerCertificates[0].PublicKey.(type) {
	case *ecdsa.PublicKey:
		got = "ecdsap" + strconv.Itoa(k.Curve.Params().BitSize)
	case *rsa.PublicKey:
		got = "rsa" + strconv.Itoa(k.N.BitLen())
	}
	if got != key {
		return fmt.Errorf("tlsbench: %s serves a %s key, want %s", t.Addr, got, key)
	}
	br := bufio.NewReader(tc)
	n, err := get(tc, br, getRequest(path))
	if err != nil {
		return fmt.Errorf("tlsbench: GET %s from %s: %w", path, t.Addr, err)
	}
	if n != int64(size) {
		return fmt.Errorf("tlsbench: GET %s from %s: %d bytes, want %d", path, t.Addr, n, size)
	}
	return nil
}

// getRequest is the request line and headers of a GET of path.
func getRequest(path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + ServerName + "\r\n\r\n")
}

// errClose says the server will close the connection after a response.
var errClose = errors.New("tlsbench: the server closes the connection")

// get writes req and reads one response from br; it returns the body's
// length. A response that is not 200 with a Content-Length is an error;
// one that says "Connection: close" returns errClose with its length.
func get(w io.Writer, br *bufio.Reader, req []byte) (int64, error) {
	if _, err := w.Write(req); err != nil {
		return 0, err
	}
	return readResponse(br)
}

// readResponse reads one HTTP/1.1 response from br and discards its body.
func readResponse(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) && !bytes.HasPrefix(line, []byte("HTTP/1.0 200 ")) {
		return 0, fmt.Errorf("tlsbench: response %q, want 200", bytes.TrimSpace(line))
	}
	length, closing := int64(-1), false
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, fmt.Errorf("tlsbench: header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return 0, fmt.Errorf("tlsbench: Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, fmt.Errorf("tlsbench: Transfer-Encoding %q: the client reads Content-Length bodies only", value)
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length < 0 {
		return 0, errors.New("tlsbench: response without Content-Length")
	}
	if _, err := br.Discard(int(length)); err != nil {
		return 0, err
	}
	if closing {
		return length, errClose
	}
	return length, nil
}

// counters are what the workers of one load count, atomically.
type counters struct {
	ops, bytes, resumed, missed, failed atomic.Uint64
	// pair makes a request's op and bytes one step for snapshot: read
	// apart, a window's edge could fall between them (TestLoad saw 319
	// bodies' bytes for 318 requests).
	pair sync.Mutex

	mu       sync.Mutex
	firstErr error
	lats     []latSample // probes only
}

// latSample is one probe: when it was sent and how long it took.
type latSample struct {
	at  time.Time
	rtt time.Duration
}

// fail counts a failed operation and keeps the first error.
func (c *counters) fail(err error) {
	c.failed.Add(1)
	c.mu.Lock()
	if c.firstErr == nil {
		c.firstErr = err
	}
	c.mu.Unlock()
}

func (c *counters) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstErr
}

// Counts are a load's counters over a window.
type Counts struct {
	Ops, Bytes, Resumed, Missed, Failed uint64
}

func (c *counters) snapshot() Counts {
	c.pair.Lock()
	defer c.pair.Unlock()
	return Counts{c.ops.Load(), c.bytes.Load(), c.resumed.Load(), c.missed.Load(), c.failed.Load()}
}

// request counts a request that returned n bytes.
func (c *counters) request(n int64) {
	c.pair.Lock()
	c.ops.Add(1)
	c.bytes.Add(uint64(n))
	c.pair.Unlock()
}

func (a Counts) sub(b Counts) Counts {
	return Counts{a.Ops - b.Ops, a.Bytes - b.Bytes, a.Resumed - b.Resumed, a.Missed - b.Missed, a.Failed - b.Failed}
}

// load is conns workers running worker(ctx, i, c), each until ctx ends.
type load struct {
	conns  int
	first  int // index of the first worker's source address
	worker func(ctx context.Context, i int, c *counters)
	c      counters
	// opened, if not nil, gets one value from each worker once its
	// first connection is up: measure starts the loads after this one
	// only then (the storm's probes are requests on connections opened
	// before the storm).
	opened chan struct{}
}

// openWait bounds how long measure waits for a load's connections before
// it starts the next load anyway (the workers count what failed).
const openWait = ioWait

// Window is what a measurement counted between its two marks.
type Window struct {
	Start, End time.Time
	CPU        time.Duration // the server's CPU time between the marks
	Counts     []Counts      // by load
}

// Seconds is the window's length.
func (w Window) Seconds() float64 { return w.End.Sub(w.Start).Seconds() }

// measure runs loads together: warm for warm, then a window of d whose
// edges read cpu (the server's CPU time), then stops every worker and
// waits for them. progress, if not nil, is called with the window's
// fraction done. The error is ctx's, or cpu's.
func measure(ctx context.Context, warm, d time.Duration, cpu func() (time.Duration, error), progress func(float64), loads ...*load) (Window, error) {
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, l := range loads {
		for i := range l.conns {
			wg.Go(func() { l.worker(lctx, l.first+i, &l.c) })
		}
		if l.opened != nil {
			if err := waitOpened(ctx, l); err != nil {
				return Window{}, err
			}
		}
	}
	var w Window
	sleep := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			case <-tick.C:
				if progress != nil && !w.Start.IsZero() {
					progress(min(1, time.Since(w.Start).Seconds()/d.Seconds()))
				}
			}
		}
	}
	if err := sleep(warm); err != nil {
		return w, err
	}
	mark := func() (time.Time, time.Duration, []Counts, error) {
		cs := make([]Counts, len(loads))
		for i, l := range loads {
			cs[i] = l.c.snapshot()
		}
		c, err := cpu()
		return time.Now(), c, cs, err
	}
	t0, c0, s0, err := mark()
	if err != nil {
		return w, err
	}
	w.Start = t0
	if err := sleep(d); err != nil {
		return w, err
	}
	t1, c1, s1, err := mark()
	if err != nil {
		return w, err
	}
	w.End, w.CPU = t1, c1-c0
	for i := range loads {
		w.Counts = append(w.Counts, s1[i].sub(s0[i]))
	}
	return w, nil
}

// waitOpened waits until each of l's workers has its first connection
// up, at most openWait, or ctx ends.
func waitOpened(ctx context.Context, l *load) error {
	t := time.NewTimer(openWait)
	defer t.Stop()
	for range l.conns {
		select {
		case <-l.opened:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// handshakeLoad is conns workers making handshakes with t, each closing
// the connection at once; resume primes each worker's session cache with
// a ticket (a full handshake and a GET of path, which in TLS 1.3 is what
// brings the ticket) and counts handshakes that did not resume.
func handshakeLoad(t Target, conns, first int, resume bool, path string) *load {
	l := &load{conns: conns, first: first}
	l.worker = func(ctx context.Context, i int, c *counters) {
		var cache tls.ClientSessionCache
		if resume {
			cache = tls.NewLRUClientSessionCache(4)
		}
		cfg := t.config(false, cache)
		prime := resume
		for ctx.Err() == nil {
			tc, stop, err := dial(ctx, t, i, cfg)
			if err != nil {
				if ctx.Err() == nil {
					c.fail(err)
					pause(ctx)
				}
				continue
			}
			tc.SetDeadline(time.Now().Add(ioWait))
			err = tc.HandshakeContext(ctx)
			if err == nil && prime {
				_, err = get(tc, bufio.NewReader(tc), getRequest(path))
				if err == nil {
					prime = false
				}
			} else if err == nil {
				c.ops.Add(1)
				if resume {
					if tc.ConnectionState().DidResume {
						c.resumed.Add(1)
					} else {
						c.missed.Add(1)
						prime = true // fetch a fresh ticket on the next one
					}
				}
			}
			if err == nil {
				err = closeGracefully(tc)
			}
			if err != nil && ctx.Err() == nil {
				c.fail(err)
			}
			stop()
			tc.Close()
		}
	}
	return l
}

// closeGracefully ends a connection the way a polite client does: it
// sends close_notify and reads until the server closes. Closing at once
// would leave what the server sends after the handshake (TLS 1.3 session
// tickets) unread, and the kernel would answer it with a reset that can
// reach the server before the client's Finished is read, failing the
// server's handshake after it has done most of the work. The reads also
// take in the tickets (crypto/tls keeps them in the session cache).
func closeGracefully(tc *tls.Conn) error {
	if err := tc.CloseWrite(); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, tc)
	return err
}

// pause waits a little after a failure, so that a refusing server is not
// hammered in a tight loop.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Millisecond):
	}
}

// requestLoad is conns keep-alive connections to t, each fetching path
// over and over (every pace, or back to back when pace is 0), counting
// responses and body bytes, and with pace, each response's latency.
func requestLoad(t Target, conns, first int, path string, pace time.Duration) *load {
	l := &load{conns: conns, first: first, opened: make(chan struct{}, conns)}
	req := getRequest(path)
	l.worker = func(ctx context.Context, i int, c *counters) {
		cfg := t.config(false, nil)
		opened := false
		var lats []latSample
		defer func() {
			c.mu.Lock()
			c.lats = append(c.lats, lats...)
			c.mu.Unlock()
		}()
		for ctx.Err() == nil {
			tc, stop, err := dial(ctx, t, i, cfg)
			if err != nil {
				if ctx.Err() == nil {
					c.fail(err)
					pause(ctx)
				}
				continue
			}
			tc.SetDeadline(time.Now().Add(ioWait))
			err = tc.HandshakeContext(ctx)
			if err == nil && !opened {
				opened = true
				l.opened <- struct{}{} // room for every worker's one
			}
			br := bufio.NewReaderSize(tc, 64<<10)
			next := time.Now()
			for err == nil && ctx.Err() == nil {
				if pace > 0 {
					next = next.Add(pace)
					if wait := time.Until(next); wait > 0 {
						select {
						case <-ctx.Done():
							continue
						case <-time.After(wait):
						}
					} else if wait < -pace {
						next = time.Now() // fell behind: do not catch up in a burst
					}
				}
				tc.SetDeadline(time.Now().Add(ioWait))
				start := time.Now()
				var n int64
				n, err = get(tc, br, req)
				if err == nil || err == errClose {
					c.request(n)
					if pace > 0 {
						lats = append(lats, latSample{start, time.Since(start)})
					}
				}
			}
			if err != nil && err != errClose && ctx.Err() == nil {
				c.fail(err)
				pause(ctx)
			}
			stop()
			tc.Close()
		}
	}
	return l
}

// quantiles returns the q-quantiles of the latencies of samples sent in
// [from, to), and how many there were.
func quantiles(samples []latSample, from, to time.Time, qs ...float64) ([]time.Duration, int) {
	var rtts []time.Duration
	for _, s := range samples {
		if !s.at.Before(from) && s.at.Before(to) {
			rtts = append(rtts, s.rtt)
		}
	}
	out := make([]time.Duration, len(qs))
	if len(rtts) == 0 {
		return out, 0
	}
	slices.Sort(rtts)
	for i, q := range qs {
		k := int(q*float64(len(rtts))+0.5) - 1
		out[i] = rtts[min(max(k, 0), len(rtts)-1)]
	}
	return out, len(rtts)
}
