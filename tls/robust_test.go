package tls

import (
	"context"
	"crypto"
	"crypto/rand"
	gotls "crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// robustSite is a static listener with short timeouts and a small limit.
func robustSite(t *testing.T, maxConns int) (*Service, *testCA, string) {
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	os.WriteFile(filepath.Join(www, "index.html"), []byte("ok\n"), 0o644)
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	s := startService(t, Config{Listeners: []ListenerConfig{{
		Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + www,
		HandshakeTimeout: 300 * time.Millisecond, HeaderTimeout: 300 * time.Millisecond,
		IdleTimeout: 5 * time.Second, MaxConns: maxConns,
	}}})
	return s, ca, addrOf(t, s, "web")
}

// expectClosed reads from c until the server closes it, within 10 s.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server did not close the connection")
	}
}

// clientHello returns the first flight of a Go TLS client.
func clientHello(t *testing.T) []byte {
	a, b := net.Pipe()
	go func() {
		gotls.Client(a, &gotls.Config{ServerName: "site.test"}).Handshake()
		a.Close()
	}()
	buf := make([]byte, 4096)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	return buf[:n]
}

func TestGarbageAndTruncatedHellos(t *testing.T) {
	s, _, addr := robustSite(t, 100)
	hello := clientHello(t)
	junk := make([]byte, 600)
	rand.Read(junk)
	cases := [][]byte{
		junk,
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		hello[:5],
		hello[:len(hello)/2],
		append([]byte{0x16, 3, 1, 0xff, 0xff}, hello[5:]...), // a length beyond the record limit
		{0x16, 3, 1, 0, 4, 1, 0, 0, 0},                       // an empty ClientHello
	}
	for _, b := range cases {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.(*net.TCPConn).CloseWrite()
		expectClosed(t, c)
		c.Close()
	}
	waitFor(t, "every connection to be counted", func() bool {
		st := statsOf(t, s, "web")
		var failed uint64
		for _, n := range st.HandshakeFailures {
			failed += n
		}
		return failed == uint64(len(cases)) && st.Open == 0
	})
	if st := statsOf(t, s, "web"); st.Handshakes != 0 || st.HandshakeFailures["protocol"] == 0 {
		t.Fatalf("%+v", st)
	}
}

func TestStalledHandshake(t *testing.T) {
	s, _, addr := robustSite(t, 100)
	hello := clientHello(t)
	for _, b := range [][]byte{nil, hello[:20]} {
		// Before the dial: the server's deadline starts at its accept,
		// after this, however long this goroutine is kept from running.
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b) // and then nothing: the handshake timeout closes it
		expectClosed(t, c)
		c.Close()
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("closed after %v, before the handshake timeout", d)
		}
	}
	waitFor(t, "timeouts", func() bool { return statsOf(t, s, "web").HandshakeFailures["timeout"] == 2 })
}

func TestSlowloris(t *testing.T) {
	s, ca, addr := robustSite(t, 100)
	c, err := goClient(t, addr, "site.test", ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := httpGet(t, c, "/"); len(r) == 0 {
		t.Fatal("no response")
	}
	// A head that trickles: one byte per 100 ms never completes within the
	// 300 ms header timeout.
	head := []byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, b := range head {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-time.After(100 * time.Millisecond): // the attack's pace
			case <-t.Context().Done():
				return
			}
		}
	}()
	expectClosed(t, c)
	<-closed
	waitFor(t, "a header timeout", func() bool { return statsOf(t, s, "web").HeaderTimeouts == 1 })

	// A head beyond the bound is refused.
	c2, err := goClient(t, addr, "site.test", ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := append([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Big: "), make([]byte, maxHeadLen)...)
	for i := range big[30:] {
		big[30+i] = 'a'
	}
	go c2.Write(big)
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf, _ := io.ReadAll(c2)
	if string(buf[:12]) != "HTTP/1.1 431" {
		t.Fatalf("%q", buf)
	}
}

func TestFloodBeyondMaxConns(t *testing.T) {
	const max = 4
	s, ca, addr := robustSite(t, max)
	var held []net.Conn
	for range max {
		c, err := goClient(t, addr, "site.test", ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		httpGet(t, c, "/")
		held = append(held, c)
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	const flood = 300
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			if i%2 == 0 {
				c.Write(clientHelloCache)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c)
		}()
	}
	wg.Wait()
	waitFor(t, "every refusal", func() bool { return statsOf(t, s, "web").Refused == flood })
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if grow := int64(ms1.HeapInuse) - int64(ms0.HeapInuse); grow > 8<<20 {
		t.Errorf("heap grew by %d bytes under a refused flood", grow)
	}
	st := statsOf(t, s, "web")
	if st.Open != max || st.Accepted != max {
		t.Fatalf("%+v", st)
	}
	// The held connections still work, and a slot freed is reused.
	httpGet(t, held[0], "/")
	held[1].Close()
	waitFor(t, "a free slot", func() bool { return statsOf(t, s, "web").Open == max-1 })
	c, err := goClient(t, addr, "site.test", ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	httpGet(t, c, "/")
}

var clientHelloCache = []byte{0x16, 3, 1, 0, 1, 1}

// TestMaxConnsPerSource: one source holding its limit of bare TCP
// connections is refused more, counted, while another source still
// connects and is served (issue 16, defect 15: 10,000 connections from
// one address filled max_conns).
func TestMaxConnsPerSource(t *testing.T) {
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	os.WriteFile(filepath.Join(www, "index.html"), []byte("ok\n"), 0o644)
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	const limit = 3
	s := startService(t, Config{Listeners: []ListenerConfig{{
		Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + www,
		HandshakeTimeout: time.Minute, MaxConns: 100, MaxConnsPerSource: limit,
	}}})
	addr := addrOf(t, s, "web")
	dialFrom := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range limit {
		dialFrom("127.0.0.1") // bare: no ClientHello, held until the handshake timeout
	}
	waitFor(t, "the first source's connections to be open", func() bool { return statsOf(t, s, "web").Open == limit })
	// Refused by a reset, which may come before the dial returns.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Timeout: 5 * time.Second}
	if extra, err := d.Dial("tcp", addr); err == nil {
		expectClosed(t, extra)
		extra.Close()
	}
	waitFor(t, "the refusal to be counted", func() bool { return statsOf(t, s, "web").RefusedPerSource == 1 })

	// Another source is served.
	d.LocalAddr = &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := gotls.Client(raw, &gotls.Config{ServerName: "site.test", RootCAs: ca.pool()})
	if r := httpGet(t, c, "/"); !strings.HasSuffix(r, "\r\n\r\nok\n") {
		t.Fatalf("127.0.0.2: %q", r)
	}
	if st := statsOf(t, s, "web"); st.RefusedPerSource != 1 || st.Refused != 0 || st.Open != limit+1 {
		t.Fatalf("%+v", st)
	}
}

// stallEngine is soft whose handshake queues hold every batch until
// release is closed: a signature that does not come.
type stallEngine struct {
	cryptodev.AsymEngine
	release chan struct{}
	held    atomic.Int32 // batches waiting for release
	// signed counts the batches handed on after release; deadKey those
	// of them whose first key was destroyed by then.
	signed, deadKey atomic.Int32
	key             atomic.Pointer[cryptodev.Key] // the first op's key of the last batch
}

func (e *stallEngine) NewQueue() (cryptodev.Queue, error) {
	q, err := e.AsymEngine.NewQueue()
	return &stallQueue{Queue: q, e: e}, err
}

type stallQueue struct {
	cryptodev.Queue
	e *stallEngine
}

func (q *stallQueue) Submit(b *cryptodev.Batch) error {
	q.e.held.Add(1)
	<-q.e.release
	if k := b.Ops[0].Key; k != nil {
		q.e.key.Store(k)
		if k.Destroyed() {
			q.e.deadKey.Add(1)
		}
	}
	defer q.e.signed.Add(1)
	return q.Queue.Submit(b)
}

// TestStalledSignature: a handshake whose signature does not come fails
// at the handshake timeout, counted as a timeout.
func TestStalledSignature(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	cert := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	soft, err := cryptodev.Open("soft")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { soft.Close() })
	eng := &stallEngine{AsymEngine: soft.(cryptodev.AsymEngine), release: make(chan struct{})}
	s := startServiceOpts(t, Config{Listeners: []ListenerConfig{{
		Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Backend: "static:" + dir,
		HandshakeTimeout: 300 * time.Millisecond,
	}}}, Options{Engine: func(string) (cryptodev.Engine, error) { return eng, nil }})
	t.Cleanup(func() { close(eng.release) }) // before Close, which waits for the lanes
	if c, err := goClient(t, addrOf(t, s, "web"), "site.test", ca, nil); err == nil {
		c.Close()
		t.Fatal("handshake succeeded without a signature")
	}
	if eng.held.Load() == 0 {
		t.Fatal("the handshake did not ask for a signature")
	}
	waitFor(t, "a timeout", func() bool { return statsOf(t, s, "web").HandshakeFailures["timeout"] == 1 })
}

// TestSignerLimits: under a listener's handshake context (never
// cancelled itself), a signature's wait ends at the handshake's deadline
// and when the Service's context ends.
func TestSignerLimits(t *testing.T) {
	eng := openEngine(t, "soft")
	priv := genKey(t, "ecdsa")
	key, err := eng.(cryptodev.AsymEngine).NewPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Destroy()
	// No lane: requests wait in the queue for ever.
	q := &signQueue{eng: eng, reqs: make(chan *signReq, 4), quit: make(chan struct{}), split: 1}
	ek := &engineKey{key: key, pub: priv.Public(), q: q}
	d := make([]byte, 32)
	svc, stop := context.WithCancel(context.Background())
	defer stop()
	for _, c := range []struct {
		deadline time.Duration
		cancel   bool
		want     error
	}{{50 * time.Millisecond, false, context.DeadlineExceeded}, {time.Hour, true, context.Canceled}} {
		hctx := &handshakeCtx{lim: handshakeLimits{deadline: time.Now().Add(c.deadline), svc: svc}}
		res := make(chan error, 1)
		go func() {
			_, err := (&handshakeSigner{k: ek, ctx: hctx}).Sign(nil, d, crypto.SHA256)
			res <- err
		}()
		if c.cancel {
			waitFor(t, "the request to wait", func() bool { return q.depth.Load() == 2 })
			stop()
		}
		select {
		case err := <-res:
			if !errors.Is(err, c.want) {
				t.Errorf("deadline in %v, cancel %v: %v, want %v", c.deadline, c.cancel, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("deadline in %v, cancel %v: the signer still waits", c.deadline, c.cancel)
		}
	}
	if hctx := (&handshakeCtx{}); hctx.Done() != nil || hctx.Err() != nil {
		t.Error("a handshake context can be cancelled")
	}
}

// TestReloadWhileSigning: a Reload that replaces a certificate while a lane
// still holds a signature of it for a handshake that has given up (timed
// out) does not destroy the key under the lane: the key goes once the lane
// is done with it.
func TestReloadWhileSigning(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "root")
	first := ca.issue(t, dir, "site", "ecdsa", false, "site.test")
	second := ca.issue(t, dir, "site2", "ecdsa", false, "site.test")
	soft, err := cryptodev.Open("soft")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { soft.Close() })
	eng := &stallEngine{AsymEngine: soft.(cryptodev.AsymEngine), release: make(chan struct{})}
	lc := ListenerConfig{
		Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{first}, Backend: "static:" + dir,
		HandshakeTimeout: 300 * time.Millisecond,
	}
	s := startServiceOpts(t, Config{Listeners: []ListenerConfig{lc}}, Options{Engine: func(string) (cryptodev.Engine, error) { return eng, nil }})
	released := false
	t.Cleanup(func() {
		if !released {
			close(eng.release)
		}
	})
	if c, err := goClient(t, addrOf(t, s, "web"), "site.test", ca, nil); err == nil {
		c.Close()
		t.Fatal("handshake succeeded without a signature")
	}
	waitFor(t, "a timeout", func() bool { return statsOf(t, s, "web").HandshakeFailures["timeout"] == 1 })
	if eng.held.Load() != 1 {
		t.Fatalf("%d signatures asked for, want 1", eng.held.Load())
	}
	lc.Listen, lc.Certs = addrOf(t, s, "web"), []Cert{second}
	if _, err := s.Reload(Config{Listeners: []ListenerConfig{lc}}); err != nil {
		t.Fatal(err)
	}
	close(eng.release)
	released = true
	waitFor(t, "the lane to sign", func() bool { return eng.signed.Load() == 1 })
	if n := eng.deadKey.Load(); n != 0 {
		t.Fatalf("the lane signed with a key the Reload had destroyed")
	}
	waitFor(t, "the replaced key to be destroyed", func() bool { return eng.key.Load().Destroyed() })
}
