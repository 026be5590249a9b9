package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/internal/lab"
)

// testTimeout bounds every test here.
const testTimeout = 60 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// netnsList is what `ip netns list` shows, names only.
func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// labWithCleanup returns a lab that the test's cleanup closes.
func labWithCleanup(t *testing.T) *lab.Lab { return lab.NewForTest(t, nil) }

// TestLabNetnsVeth: two namespaces joined by a veth carry a UDP datagram
// between sockets opened inside them from this process; Close removes the
// namespaces (and so the veth), and a second Close is a no-op.
func TestLabNetnsVeth(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	a, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.NewNetns(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Name(), lab.Prefix) || a.Name() == b.Name() {
		t.Fatalf("names %q and %q: want distinct, prefixed %q", a.Name(), b.Name(), lab.Prefix)
	}
	if err := l.Veth(a, "wan0", b, "wan0"); err != nil {
		t.Fatal(err)
	}
	pa, pb := netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")
	if err := a.AddAddr("wan0", pa); err != nil {
		t.Fatal(err)
	}
	if err := b.AddAddr("wan0", pb); err != nil {
		t.Fatal(err)
	}
	if err := a.AddRoute(netip.MustParsePrefix("10.2.0.0/24"), "wan0", pb.Addr()); err != nil {
		t.Fatal(err)
	}
	out, err := a.Exec(ctx, "ip", "-o", "route", "show", "10.2.0.0/24")
	if err != nil || !strings.Contains(string(out), "via 192.0.2.2 dev wan0") {
		t.Fatalf("route in %s: %q, %v", a, out, err)
	}
	if ok, err := b.HasLink("wan0"); !ok || err != nil {
		t.Fatalf("HasLink(wan0) in %s = %v, %v", b, ok, err)
	}
	if ok, err := b.HasLink("nothere0"); ok || err != nil {
		t.Fatalf("HasLink(nothere0) = %v, %v; want false, nil", ok, err)
	}

	// A datagram from a socket in a to a socket in b, across the veth.
	ca, err := a.ListenUDP(netip.AddrPortFrom(pa.Addr(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := b.ListenUDP(netip.AddrPortFrom(pb.Addr(), 9999))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if _, err := ca.WriteToUDPAddrPort([]byte("hello"), netip.MustParseAddrPort("192.0.2.2:9999")); err != nil {
		t.Fatal(err)
	}
	cb.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := cb.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "hello" || from.Addr() != pa.Addr() {
		t.Fatalf("read %q from %v, %v; want hello from %v", buf[:n], from, err, pa.Addr())
	}

	names := netnsList(t)
	for _, ns := range []*lab.Netns{a, b} {
		if !slices.Contains(names, ns.Name()) {
			t.Fatalf("ip netns list %v lacks %s", names, ns)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names = netnsList(t)
	for _, ns := range []*lab.Netns{a, b} {
		if slices.Contains(names, ns.Name()) {
			t.Fatalf("after Close, ip netns list %v still has %s", names, ns)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.NewNetns(ctx, "c"); err == nil {
		t.Fatal("NewNetns after Close succeeded")
	}
}

// TestLabCloseAfterFailure: a setup that fails half way (a veth to an
// interface name the kernel refuses, a process that ignores SIGTERM) is
// still removed completely by Close.
func TestLabCloseAfterFailure(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	a, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.NewNetns(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(a, "this-name-is-far-too-long", b, "x"); err == nil {
		t.Fatal("veth with a 25-byte name succeeded")
	}
	if err := a.AddAddr("nothere0", netip.MustParsePrefix("192.0.2.1/24")); err == nil {
		t.Fatal("AddAddr on a missing interface succeeded")
	}
	if _, err := l.NewNetns(ctx, "a"); err == nil {
		t.Fatal("a second namespace with suffix a succeeded")
	}
	if _, err := l.NewNetns(ctx, "Bad/Name"); err == nil {
		t.Fatal("suffix Bad/Name accepted")
	}
	// A well-behaved process, and one that ignores SIGTERM.
	good, err := l.Start(a, "sleeper", []string{"sleep", "60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := l.Start(b, "stubborn", []string{"sh", "-c", `trap "" TERM; echo ready; sleep 60`}, &lab.ProcOptions{StopTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitFor(ctx, "stubborn to start", 10*time.Second, 0, func() (bool, error) {
		return strings.Contains(stubborn.Output(), "ready"), nil
	}); err != nil {
		t.Fatal(err)
	}
	// The process runs in the lab's namespace (once ip has entered it and
	// exec'd the command).
	self, _ := os.Readlink("/proc/self/ns/net")
	want, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", stubborn.Pid())) // past "ready": in b
	if err := lab.WaitFor(ctx, "sleeper in its namespace", 10*time.Second, 0, func() (bool, error) {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", good.Pid()))
		return err == nil && link != self && link != want, err
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	err = l.Close()
	if err == nil || !strings.Contains(err.Error(), "stubborn") || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Close = %v; want the stubborn process reported as killed", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v", d)
	}
	for _, p := range []*lab.Process{good, stubborn} {
		if done, _ := p.Exited(); !done {
			t.Fatalf("%s still runs after Close", p.Name())
		}
	}
	if err := good.Stop(); err != nil {
		t.Fatalf("sleeper: Stop after SIGTERM = %v, want nil", err)
	}
	names := netnsList(t)
	for _, ns := range []*lab.Netns{a, b} {
		if slices.Contains(names, ns.Name()) {
			t.Fatalf("after Close, ip netns list %v still has %s", names, ns)
		}
	}
}

// TestLabProcessExitEndsWait: waiting on something a process should create
// ends, with the process's output, as soon as the process exits.
func TestLabProcessExitEndsWait(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := lab.New(nil)
	t.Cleanup(func() { l.Close() })
	ns, err := l.NewNetns(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Start(ns, "failing", []string{"sh", "-c", "echo cannot start >&2; exit 3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = ns.WaitLink(ctx, "sluice0", 30*time.Second, p)
	if err == nil || !errors.Is(err, lab.ErrStop) || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("WaitLink = %v; want the process's exit and output", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("WaitLink took %v after the process exited", d)
	}
	if err := p.Stop(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Stop = %v; want exit status 3", err)
	}
	// Close reports it too: a daemon that died is worth knowing about.
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Close = %v; want exit status 3", err)
	}
	ran := false
	if err := l.Defer("after close", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Defer after Close: ran %v, %v; want it run at once", ran, err)
	}
}

// TestLabSweep removes namespaces that a dead process's lab left behind, and
// nothing else.
func TestLabSweep(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	// A pid that is no process any more.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-abcd-a", lab.Prefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-abcd-a", lab.Prefix, os.Getpid())
	other := fmt.Sprintf("%s%d-not-a-lab", lab.Prefix, dead.Process.Pid)
	for _, n := range []string{stale, live, other} {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", n, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
	}
	swept, err := lab.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(swept, stale) || slices.Contains(swept, live) || slices.Contains(swept, other) {
		t.Fatalf("Sweep removed %v; want %s and neither %s nor %s", swept, stale, live, other)
	}
	names := netnsList(t)
	if slices.Contains(names, stale) || !slices.Contains(names, live) || !slices.Contains(names, other) {
		t.Fatalf("after Sweep: %v", names)
	}
}

// TestLabWaitFor: met, timed out, and stopped early.
func TestLabWaitFor(t *testing.T) {
	ctx := testContext(t)
	n := 0
	if err := lab.WaitFor(ctx, "three polls", 5*time.Second, time.Millisecond, func() (bool, error) {
		n++
		return n == 3, nil
	}); err != nil || n != 3 {
		t.Fatalf("WaitFor = %v after %d polls", err, n)
	}
	start := time.Now()
	err := lab.WaitFor(ctx, "never", 50*time.Millisecond, 0, func() (bool, error) { return false, errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("WaitFor = %v; want a timeout naming the condition and its last error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 50ms wait took %v", d)
	}
	err = lab.WaitFor(ctx, "doomed", time.Hour, 0, func() (bool, error) { return false, fmt.Errorf("%w: gone", lab.ErrStop) })
	if !errors.Is(err, lab.ErrStop) {
		t.Fatalf("WaitFor = %v; want ErrStop", err)
	}
}

// memConfigs are two gateways with one tunnel between them, as the demo
// writes them.
func memConfigs(t *testing.T) (a, b *config.Gateway) {
	t.Helper()
	const sas = `
[[sa]]
name = "a-to-b"
spi = 0x1001
src = "192.0.2.1"
dst = "192.0.2.2"
mode = "tunnel"
encap = "udp"
esp = "aes128gcm16"
enc_key = "c0675727378d0319cf26c72a13033041625abcb9"
replay_window = 1024

[[sa]]
name = "b-to-a"
spi = 0x2001
src = "192.0.2.2"
dst = "192.0.2.1"
mode = "tunnel"
encap = "udp"
esp = "aes128gcm16"
enc_key = "488b578da4c130087b008fbc8ede4fdac1b02fe6"
replay_window = 1024
`
	a, b, err := lab.PairConfigs(sas)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestLabMemoryPairTraffic: without root, two gateways on in-memory links
// carry floods both ways and echo probes, and the SA counters agree with
// what the floods counted.
func TestLabMemoryPairTraffic(t *testing.T) {
	ctx := testContext(t)
	l := labWithCleanup(t)
	ca, cb := memConfigs(t)
	a, b, err := l.MemoryPair(ctx, ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	ts := a.Tunnels()
	if len(ts) != 1 || ts[0].MTU < 1300 || ts[0].MTU > 1500 {
		t.Fatalf("tunnels %+v: want one with an MTU near 1440", ts)
	}
	listen := func(h *lab.MemHost, ap string) lab.Conn {
		c, err := h.ListenUDP(netip.MustParseAddrPort(ap))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	aTx, bSink := listen(a.Host, "10.1.0.1:5001"), listen(b.Host, "10.2.0.1:5001")
	bTx, aSink := listen(b.Host, "10.2.0.1:5002"), listen(a.Host, "10.1.0.1:5002")
	aPing, bEcho := listen(a.Host, "10.1.0.1:5003"), listen(b.Host, "10.2.0.1:7")

	echoCtx, stopEcho := context.WithCancel(ctx)
	echoed := make(chan uint64, 1)
	go func() { n, _ := lab.Echo(echoCtx, bEcho); echoed <- n }()

	o := lab.FloodOptions{Size: ts[0].MTU - 28, Duration: 300 * time.Millisecond, Window: 32}
	type res struct {
		r   lab.FloodResult
		err error
	}
	ab, ba := make(chan res, 1), make(chan res, 1)
	go func() {
		r, err := lab.Flood(ctx, aTx, netip.MustParseAddrPort("10.2.0.1:5001"), bSink, o)
		ab <- res{r, err}
	}()
	go func() {
		r, err := lab.Flood(ctx, bTx, netip.MustParseAddrPort("10.1.0.1:5002"), aSink, o)
		ba <- res{r, err}
	}()
	rab, rba := <-ab, <-ba
	for _, r := range []res{rab, rba} {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.r.Received == 0 || r.r.Mbps() <= 0 || r.r.Lost != 0 {
			t.Fatalf("flood %+v: want traffic and no loss", r.r)
		}
	}
	lat, err := lab.Ping(ctx, aPing, netip.MustParseAddrPort("10.2.0.1:7"), lab.PingOptions{Count: 50})
	if err != nil {
		t.Fatal(err)
	}
	if lat.Sent != 50 || lat.Received != 50 || lat.P50 <= 0 || lat.P50 > lat.P99 || lat.P99 > lat.Max {
		t.Fatalf("ping: %+v", lat)
	}
	stopEcho()
	if n := <-echoed; n < 50 {
		t.Fatalf("echo answered %d, want at least 50", n)
	}

	// Every packet sealed by one side was opened by the other.
	sealed := map[uint32]uint64{}
	for _, s := range a.SAs() {
		if s.Direction == "out" {
			sealed[s.SPI] = s.Packets
		}
	}
	for _, s := range b.SAs() {
		if s.Direction == "in" && s.Packets != sealed[s.SPI] {
			t.Fatalf("SA %s: B opened %d, A sealed %d", s.Name, s.Packets, sealed[s.SPI])
		}
	}
	if want := rab.r.Received + uint64(lat.Received); sealed[0x1001] < want {
		t.Fatalf("A sealed %d packets of a-to-b, fewer than the %d that arrived", sealed[0x1001], want)
	}
}

// TestLabMemHost: sockets on a MemHost get what is addressed to them, time
// out, and fail after Close.
func TestLabMemHost(t *testing.T) {
	ctx := testContext(t)
	l := labWithCleanup(t)
	ca, cb := memConfigs(t)
	a, b, err := l.MemoryPair(ctx, ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Host.ListenUDP(netip.MustParseAddrPort("10.1.0.1:0")); err == nil {
		t.Fatal("bound port 0")
	}
	src, err := a.Host.ListenUDP(netip.MustParseAddrPort("10.1.0.1:1000"))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := b.Host.ListenUDP(netip.MustParseAddrPort("0.0.0.0:2000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Host.ListenUDP(netip.MustParseAddrPort("0.0.0.0:2000")); err == nil {
		t.Fatal("bound a port twice")
	}
	if _, err := src.WriteToUDPAddrPort([]byte("through the tunnel"), netip.MustParseAddrPort("10.2.0.9:2000")); err != nil {
		t.Fatal(err)
	}
	dst.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 100)
	n, from, err := dst.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "through the tunnel" || from != netip.MustParseAddrPort("10.1.0.1:1000") {
		t.Fatalf("read %q from %v, %v", buf[:n], from, err)
	}
	dst.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, _, err := dst.ReadFromUDPAddrPort(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	dst.Close()
	if _, _, err := dst.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

func TestLabPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {1, 100}, {0.001, 1}} {
		if got := lab.Percentile(d, c.q); got != c.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if lab.Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

// TestTCPStream: a stream over loopback carries bytes for about its
// duration and reports a rate; a dial that fails is an error and leaves
// the listener usable.
func TestTCPStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	res, err := lab.TCPStream(context.Background(), ln, dial, 200*time.Millisecond)
	if err != nil || res.Bytes == 0 || res.Elapsed < 200*time.Millisecond || res.Mbps() <= 0 {
		t.Fatalf("stream: %+v, %v", res, err)
	}
	bad := func(context.Context) (net.Conn, error) { return nil, errors.New("refused") }
	if _, err := lab.TCPStream(context.Background(), ln, bad, 100*time.Millisecond); err == nil {
		t.Fatal("a failed dial was not an error")
	}
	if res, err := lab.TCPStream(context.Background(), ln, dial, 50*time.Millisecond); err != nil || res.Bytes == 0 {
		t.Fatalf("after a failed dial: %+v, %v", res, err)
	}
}
