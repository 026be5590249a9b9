package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/control/controltest"
)

// gatewayConfig is a minimal configuration: one tunnel over UDP. extra
// goes into [gateway].
func runTestConfig(extra string) string {
	return `[gateway]
workers = 2
log_level = "debug"
` + extra + `

[tun]
name = "sluicet0"
addresses = ["10.1.0.1/24"]

[[tunnel]]
name = "t"
local = "192.0.2.1"
peer = "192.0.2.2"
remote = ["10.2.0.0/24"]
out = "o"
in = ["i"]

[[sa]]
name = "o"
spi = 0x1001
src = "192.0.2.1"
dst = "192.0.2.2"
encap = "udp"
esp = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "i"
spi = 0x1002
encap = "udp"
esp = "aes128gcm16"
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`
}

func ctlWriteFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Configuration errors stop run before anything starts, with exit status
// 2 and each error's position.
func TestRunBadConfig(t *testing.T) {
	dir := t.TempDir()
	sock := controltest.SocketPath(t)
	bad := ctlWriteFile(t, filepath.Join(dir, "bad.toml"), "[gateway]\nworkers = \"many\"\nlog_level = \"loud\"\n")
	engine := ctlWriteFile(t, filepath.Join(dir, "engine.toml"), strings.Replace(runTestConfig(`engine = "quantum"`), "workers = 2\n", "", 1))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "-c", bad}, "\n" + bad + ":2:11: gateway.workers: want an integer, got string"},
		{[]string{"run", "-c", bad}, "\n" + bad + ":3:13: gateway.log_level: "},
		{[]string{"run", "-c", engine}, "sluice: " + engine + ":3:10: gateway.engine: engine \"quantum\" is not registered"},
		{[]string{"run", "-c", filepath.Join(dir, "missing.toml")}, "no such file or directory"},
		{[]string{"run"}, `required flag(s) "config" not set`},
		{[]string{"run", "-c", bad, "extra"}, `unknown command "extra" for "sluice run"`},
	}
	for _, tt := range tests {
		code, out, errOut := ctlRun(append(tt.args, "--socket", sock)...)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q: exit %d, %q, %q; want %q", tt.args, code, out, errOut, tt.want)
		}
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed run left its socket: %v", err)
	}
}

// A second instance stops at the control socket, before it creates a TUN
// device (which it would share with the first: multi-queue TUN devices
// take new queues by name).
func TestRunSocketInUse(t *testing.T) {
	sock, b := fakeGateway(t)
	cfg := ctlWriteFile(t, filepath.Join(t.TempDir(), "gw.toml"), runTestConfig(""))
	code, out, errOut := ctlRun("run", "-c", cfg, "--socket", sock)
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "sluice: control: "+sock+" is in use: another sluice answers on it") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	if strings.Contains(errOut, "gateway up") {
		t.Fatal("the gateway started")
	}
	if code, _, errOut := ctlRun("stats", "--socket", sock); code != 0 || b.Calls("Stats") != 1 {
		t.Fatalf("the first server after the second run: exit %d, %s", code, errOut)
	}
}

// runLogBuffer is a bytes.Buffer for several writers.
type runLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *runLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *runLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// enterNewNetns moves the calling goroutine, locked to its thread for good,
// into a new network namespace with lo up, and returns a handle to it. The
// thread ends with the goroutine.
func enterNewNetns() (netns.NsHandle, error) {
	runtime.LockOSThread()
	ns, err := netns.New()
	if err != nil {
		return -1, fmt.Errorf("new netns: %w", err)
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		ns.Close()
		return -1, fmt.Errorf("lo up: %w", err)
	}
	return ns, nil
}

// dialIn dials from inside namespace ns; the connection works from any
// thread afterwards.
func dialInNetns(ns netns.NsHandle, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			ch <- result{nil, err}
			return
		}
		c, err := net.Dial(network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// TestRunGateway runs the daemon with a real TUN device in a network
// namespace of its own and drives it as an administrator would: client
// commands, metrics, SIGHUP and control reloads, a refused reload, and
// shutdown by cancelling its context.
func TestRunGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a TUN device in a new network namespace")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN: %v", err)
	}
	dir := t.TempDir()
	sock := controltest.SocketPath(t)
	const metricsAddr = "127.0.0.1:9109"
	extra := `metrics = "` + metricsAddr + `"` + "\n" + `state_dir = "` + filepath.Join(dir, "state") + `"`
	cfgPath := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), runTestConfig(extra))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr runLogBuffer
	nsc := make(chan netns.NsHandle, 1)
	done := make(chan int, 1)
	go func() {
		ns, err := enterNewNetns()
		if err != nil {
			fmt.Fprintln(&stderr, err)
			done <- -1
			return
		}
		nsc <- ns
		done <- Run(ctx, []string{"run", "-c", cfgPath, "--socket", sock}, strings.NewReader(""), &stdout, &stderr)
	}()
	var ns netns.NsHandle
	select {
	case ns = <-nsc:
		defer ns.Close()
	case <-done:
		t.Skipf("cannot make a network namespace: %s", stderr.String())
	}
	// Wait for the socket to answer.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := control.Dial(ctx, sock)
		if err == nil {
			_, err = c.Stats(ctx)
			c.Close()
			if err == nil {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("run exited with %d:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("control socket not up: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v", fi.Mode(), err)
	}

	must := func(args ...string) string {
		t.Helper()
		code, out, errOut := ctlRun(append(args, "--socket", sock)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s\n%s", args, code, errOut, stderr.String())
		}
		return out
	}
	if out := must("tunnel", "list"); !strings.Contains(out, "t     192.0.2.2  udp    1438") {
		t.Errorf("tunnel list:\n%s", out)
	}
	if out := must("sa", "list"); !strings.Contains(out, "t       out  o     0x00001001") || !strings.Contains(out, "t       in   i     0x00001002") {
		t.Errorf("sa list:\n%s", out)
	}
	newSA := ctlWriteFile(t, filepath.Join(dir, "new.toml"), `[[sa]]
name = "i2"
spi = 0x1003
encap = "udp"
esp = "aes128gcm16"
enc_key = "202122232425262728292a2b2c2d2e2f30313233"
`)
	must("sa", "add", "--tunnel", "t", "--dir", "in", newSA)
	if out := must("sa", "list"); !strings.Contains(out, "0x00001003") {
		t.Errorf("sa list after sa add:\n%s", out)
	}
	must("sa", "del", "--spi", "0x1003")
	if out := must("sa", "list"); strings.Contains(out, "0x00001003") {
		t.Errorf("sa list after sa del:\n%s", out)
	}
	must("stats")
	must("policy", "list")

	// Metrics, scraped from inside the namespace.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialInNetns(ns, network, addr)
	}}}
	resp, err := hc.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_tunnel_packets_total{direction="out",tunnel="t"} 0`, `sluice_worker_sealed_total{worker="1"} 0`,
		`sluice_worker_drops_total{reason="no_route",worker="0"} 0`, "sluice_build_info{", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// SIGHUP applies a changed file: a rekey of the inbound SA.
	rekeyed := strings.Replace(runTestConfig(extra), "spi = 0x1002", "spi = 0x1004", 1)
	// It also lowers the log level, and that applies at once.
	ctlWriteFile(t, cfgPath, strings.Replace(rekeyed, `log_level = "debug"`, `log_level = "warn"`, 1))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctlWaitUntil(t, "the SIGHUP reload", func() bool { return strings.Contains(must("sa", "list"), "0x00001004") })
	must("sa", "add", "--tunnel", "t", "--dir", "in", newSA)
	must("sa", "del", "--spi", "0x1003")
	if n := strings.Count(stderr.String(), "control: SA added"); n != 1 {
		t.Errorf("log_level = \"warn\" did not apply: %d SA added lines", n)
	}

	// An invalid file is refused with its position; the configuration stays.
	ctlWriteFile(t, cfgPath, strings.Replace(rekeyed, "workers = 2", "workers = -2", 1))
	code, _, errOut := ctlRun("reload", "--socket", sock)
	if code != ExitUsage || !strings.Contains(errOut, "sluice: "+cfgPath+":2:11: gateway.workers: ") {
		t.Errorf("reload of a bad file: exit %d, %q", code, errOut)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctlWaitUntil(t, "the refused SIGHUP reload in the log", func() bool {
		return strings.Count(stderr.String(), "reload refused") == 2
	})
	// A change that needs a restart is refused too.
	ctlWriteFile(t, cfgPath, strings.Replace(rekeyed, "workers = 2", "workers = 3", 1))
	if code, _, errOut := ctlRun("reload", "--socket", sock); code != ExitUsage || !strings.Contains(errOut, "needs a restart") {
		t.Errorf("reload with other workers: exit %d, %q", code, errOut)
	}
	if out := must("sa", "list"); !strings.Contains(out, "0x00001004") || !strings.Contains(out, "0x00001001") {
		t.Errorf("sa list after refused reloads:\n%s", out)
	}
	// The rekeyed file with its log level back, through the socket: the
	// level change is listed; the same file again changes nothing.
	ctlWriteFile(t, cfgPath, rekeyed)
	if out := must("reload"); !strings.Contains(out, "log level from=warn to=debug") {
		t.Errorf("reload: %q", out)
	}
	if out := must("reload"); out != "configuration reloaded: nothing changed\n" {
		t.Errorf("reload: %q", out)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited with %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not stop:\n%s", stderr.String())
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after shutdown: %v", err)
	}
	log := stderr.String()
	for _, want := range []string{"level=INFO msg=\"gateway up\"", "msg=\"SIGHUP: reloading\"", "msg=\"configuration reloaded\"", "msg=\"shutting down\"", "msg=\"control socket closed\"", "msg=\"gateway down\""} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if stdout.String() != "" {
		t.Errorf("run wrote to stdout: %q", stdout.String())
	}
}

func ctlWaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
