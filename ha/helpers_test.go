package ha

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway/certgen"
)

// The tests run two members on loopback with 20 ms heartbeats; they wait
// on conditions (never on fixed sleeps) and assert no timing.
const (
	testInterval = 20 * time.Millisecond
	testMisses   = 3
)

// pki is a throwaway CA with certificates in a directory.
type pki struct {
	dir string
	ca  *certgen.CA
}

func newPKI(t testing.TB, name string) *pki {
	t.Helper()
	ca, err := certgen.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(filepath.Join(p.dir, "ca.pem"), ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsFor issues a certificate naming names (the first is the file's base)
// and returns a TLSConfig with it that expects peerName.
func (p *pki) tlsFor(t testing.TB, peerName string, client bool, names ...string) *tls.Config {
	t.Helper()
	cert, key, err := p.ca.IssueFiles(p.dir, names[0], client, names...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := TLSConfig(cert, key, filepath.Join(p.dir, "ca.pem"), peerName)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// freePort returns a loopback address nobody listens on right now.
func freePort(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// blackhole returns a loopback address where connects time out.
func blackhole(t testing.TB) string {
	t.Helper()
	addr, silence := witness(t)
	silence()
	return addr
}

// witness returns a loopback address that accepts connections until
// silence is called, and then lets connects time out: its listener has a
// backlog of one, which silence stops accepting from and fills, so that
// the kernel drops further SYNs.
func witness(t testing.TB) (addr string, silence func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "witness")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	silence = func() {
		ln.(*net.TCPListener).SetDeadline(time.Now())
		<-done
		for range 8 {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		t.Fatal("witness: the backlog never filled")
	}
	return addr, silence
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d := time.Millisecond; !cond(); d = min(2*d, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("timed out waiting for %s\n%s", what, buf)
		}
		time.Sleep(d)
	}
}

// checkLeaks fails the test if goroutines started after it was called
// outlive the cleanups registered after it.
func checkLeaks(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	})
}

// fakeHandler is a gateway: it owns groups, holds a state per group and
// records every call.
type fakeHandler struct {
	mu       sync.Mutex
	owned    map[string]bool
	fenced   map[string]bool
	state    map[string]*State
	acquired []acquireCall
	released []string
	fences   []bool
	gate     chan struct{} // when set, Acquire waits for it to close
	// onAcquire, when set, runs inside Acquire (as a gateway reserves
	// while installing its SAs).
	onAcquire func(group string)
}

type acquireCall struct {
	group   string
	st      *State
	planned bool
	ivEpoch uint32
}

func newFakeHandler() *fakeHandler {
	return &fakeHandler{owned: map[string]bool{}, fenced: map[string]bool{}, state: map[string]*State{}}
}

func (h *fakeHandler) Acquire(group string, st *State, planned bool, ivEpoch uint32) error {
	h.mu.Lock()
	gate, hook := h.gate, h.onAcquire
	h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if hook != nil {
		hook(group)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owned[group] = true
	h.state[group] = st.clone()
	h.acquired = append(h.acquired, acquireCall{group, st.clone(), planned, ivEpoch})
	return nil
}

func (h *fakeHandler) Release(group string) *State {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owned[group] = false
	h.released = append(h.released, group)
	return h.state[group].clone()
}

func (h *fakeHandler) Fence(group string, fenced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fenced[group] = fenced
	h.fences = append(h.fences, fenced)
}

func (h *fakeHandler) Snapshot(group string) *State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state[group].clone()
}

// setIKE stores an IKE snapshot in the gateway's state (as the gateway
// would before calling IKEState).
func (h *fakeHandler) setIKE(group, key string, snap []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state[group] == nil {
		h.state[group] = newState()
	}
	h.state[group].IKE[key] = snap
}

func (h *fakeHandler) lastAcquire() (acquireCall, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.acquired) == 0 {
		return acquireCall{}, 0
	}
	return h.acquired[len(h.acquired)-1], len(h.acquired)
}

func (h *fakeHandler) isFenced(group string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fenced[group]
}

func (h *fakeHandler) releases() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.released)
}

// node is one member under test with its handler.
type node struct {
	*Member
	h   *fakeHandler
	cfg Config
}

// pairOpts shapes a test pair.
type pairOpts struct {
	prefA, prefB       int
	witnessA, witnessB string
	preempt            bool
	startBFirst        bool
	missesA, missesB   int         // 0: testMisses
	beforeSecond       func(*node) // runs between the two starts
}

// newPair starts members a and b (a dials) on loopback with group "g".
// The one started first is alone until the other comes up.
func newPair(t *testing.T, o pairOpts) (a, b *node) {
	t.Helper()
	p := newPKI(t, "ha-test")
	addrA, addrB := freePort(t), freePort(t)
	mk := func(name, peer string, listen, peerAddr netip.AddrPort, pref int, witness string) *node {
		return &node{h: newFakeHandler(), cfg: Config{
			Name: name, PeerName: peer, Listen: listen, Peer: peerAddr,
			TLS:      p.tlsFor(t, peer, false, name),
			Interval: testInterval, Misses: testMisses, Witness: witness,
			Groups:  []Group{{Name: "g", Preference: pref}},
			Preempt: o.preempt,
			Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		}}
	}
	a = mk("a", "b", addrA, addrB, o.prefA, o.witnessA)
	b = mk("b", "a", addrB, addrA, o.prefB, o.witnessB)
	if o.missesA != 0 {
		a.cfg.Misses = o.missesA
	}
	if o.missesB != 0 {
		b.cfg.Misses = o.missesB
	}
	checkLeaks(t)
	first, second := a, b
	if o.startBFirst {
		first, second = b, a
	}
	first.start(t)
	if first.cfg.Witness == "" || first.probeWitness() {
		waitFor(t, first.cfg.Name+" to own g alone", func() bool { return first.Owner("g") })
	}
	if o.beforeSecond != nil {
		o.beforeSecond(first)
	}
	second.start(t)
	return a, b
}

// start starts the member; the test's cleanup closes it.
func (n *node) start(t *testing.T) {
	t.Helper()
	m, err := Start(n.cfg, n.h)
	if err != nil {
		t.Fatal(err)
	}
	n.Member = m
	t.Cleanup(func() { m.Close() })
}

// group returns the member's status of group "g".
func (n *node) group() GroupStatus {
	return n.Status().Groups[0]
}

// replicaBound is what the standby holds for k.
func (n *node) replicaBound(k Key) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.groups["g"].replica.Bounds[k]
}

func (n *node) replicaIKE(key string) ([]byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.groups["g"].replica.IKE[key]
	return v, ok
}

// waitSynced waits until owner owns "g" and standby holds it in sync.
func waitSynced(t *testing.T, owner, standby *node) {
	t.Helper()
	waitFor(t, owner.cfg.Name+" to own g with "+standby.cfg.Name+" in sync", func() bool {
		o, s := owner.group(), standby.group()
		return o.Role == "owner" && o.InSync && s.Role == "standby" && s.InSync && o.Epoch == s.Epoch
	})
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-1]))
	return len(b), nil
}

// reserve calls Reserve and waits for the grant, checking that the
// standby (nil: none) recorded the bound before it.
func reserve(t *testing.T, owner, standby *node, k Key, upTo uint64) {
	t.Helper()
	granted := make(chan error, 1)
	owner.Reserve("g", k, upTo, func(got uint64) {
		var err error
		switch {
		case got != upTo:
			err = fmt.Errorf("granted %d, reserved %d", got, upTo)
		case standby != nil && standby.replicaBound(k) < upTo:
			err = fmt.Errorf("granted %d before the standby recorded it (it holds %d)", got, standby.replicaBound(k))
		}
		granted <- err
	})
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("reservation of %s up to %d never granted", k, upTo)
	}
}
