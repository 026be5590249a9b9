package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/tunnel"
	"github.com/sluicegw/sluice/internal/lab"
)

// runBenchTunnel runs `sluice bench tunnel args...` in-process.
func runTunnelCmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(ctx, append([]string{"bench", "tunnel"}, args...), strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// TestBenchTunnelFlags: bad flags exit with status 2 and name the flag,
// before anything is built.
func TestBenchTunnelFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--systems", "ipsec"}, "--systems"},
		{[]string{"--engines", "quantum"}, "--engines"},
		{[]string{"--algs", "rsa2048"}, "--algs"},
		{[]string{"--algs", "des"}, "--algs"},
		{[]string{"--sizes", "20"}, "--sizes"},
		{[]string{"--sizes", "9000"}, "--sizes"},
		{[]string{"--tunnels", "0"}, "--tunnels"},
		{[]string{"--tunnels", "1000"}, "--tunnels"},
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--duration", "10ms"}, "--duration"},
		{[]string{"--repeat", "0"}, "--repeat"},
		{[]string{"--links", "socket,dpdk"}, `--links: unknown link "dpdk"`},
		{[]string{"--sizes", "abc"}, "sizes"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, _, stderr := runTunnelCmd(context.Background(), tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %s", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

// TestBenchTunnelNotRoot: without the privileges for namespaces the
// command exits 2 and says it needs root.
func TestBenchTunnelNotRoot(t *testing.T) {
	saved := labAvailable
	labAvailable = func() error { return errors.New("lab: network namespaces need root") }
	t.Cleanup(func() { labAvailable = saved })
	code, stdout, stderr := runTunnelCmd(context.Background(), "--systems", "veth", "--duration", "1s")
	if code != ExitUsage || !strings.Contains(stderr, "need root") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the reason", code, stdout, stderr)
	}
}

// wireguardAvailable reports whether the bench can run wireguard-go here:
// installed, built before, or buildable with the go command.
func wireguardAvailable() bool {
	if _, err := exec.LookPath("wireguard-go"); err == nil {
		return true
	}
	_, err := exec.LookPath("go")
	return err == nil
}

// TestBenchTunnelShort: as root, a very short bench of veth, sluice and
// (when it can be found or built) wireguard-go gives nonzero figures for
// every metric, and leaves no namespace behind.
func TestBenchTunnelShort(t *testing.T) {
	lab.Require(t)
	for _, tool := range []string{"iperf3", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI=true: not skipping)", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	useTestBinaryAsGateway(t)
	systems := []string{tunnel.Veth, tunnel.Sluice}
	if wireguardAvailable() {
		systems = append(systems, tunnel.WireGuard)
	} else {
		t.Log("wireguard-go: neither installed nor buildable; not measured")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plots := filepath.Join(t.TempDir(), "plots")
	code, stdout, stderr := runTunnelCmd(ctx, "--systems", strings.Join(systems, ","), "--duration", "1s", "--repeat", "1",
		"--sizes", "1400", "--tunnels", "1", "--latency-rate", "1000", "--json", "--plot", plots)
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout: %s", code, stderr, stdout)
	}
	var doc tunnel.Document
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, stdout)
	}
	got := map[string]map[string]float64{}
	for _, r := range doc.Results {
		if got[r.System] == nil {
			got[r.System] = map[string]float64{}
		}
		got[r.System][r.Metric] = r.Value
		if r.Spread.N != 1 {
			t.Errorf("%v %s: spread %+v, want one repetition", r.Cell, r.Metric, r.Spread)
		}
	}
	for _, s := range systems {
		for _, m := range []string{tunnel.TCP1, tunnel.TCP4, tunnel.PingAvg, tunnel.LatP50, tunnel.LatP99, tunnel.UDPRate, tunnel.UDPPPS} {
			if got[s][m] <= 0 {
				t.Errorf("%s %s = %v, want > 0", s, m, got[s][m])
			}
		}
		if s != tunnel.Veth && (got[s][tunnel.TCP1PerCPU] <= 0 || got[s][tunnel.UDPPerCPU] <= 0) {
			t.Errorf("%s: no CPU figures: %v", s, got[s])
		}
	}
	if len(systems) == 3 && len(doc.Ratios) == 0 {
		t.Errorf("sluice and wireguard-go ran, but no ratios")
	}
	if _, err := os.Stat(filepath.Join(plots, "udp-1400.svg")); err != nil {
		t.Errorf("--plot: %v", err)
	}
	if left := labNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if t.Failed() {
		t.Logf("stderr: %s\nstdout: %s", stderr, stdout)
	}
}

// TestBenchTunnelInterrupted: a bench cancelled while traffic flows (as
// Ctrl-C does) exits 1 saying so, and removes its namespaces and daemons.
func TestBenchTunnelInterrupted(t *testing.T) {
	lab.Require(t)
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 is not installed")
	}
	useTestBinaryAsGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel while traffic flows: once an iperf3 runs in one of this
	// process's namespaces.
	go func() {
		lab.WaitFor(ctx, "iperf3 in a namespace", time.Minute, 20*time.Millisecond, func() (bool, error) {
			for _, ns := range labNamespaces(t) {
				out, _ := exec.Command("ip", "netns", "pids", ns).Output()
				for _, pid := range strings.Fields(string(out)) {
					if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(comm)) == "iperf3" {
						return true, nil
					}
				}
			}
			return false, nil
		})
		cancel()
	}()
	start := time.Now()
	code, _, stderr := runTunnelCmd(ctx, "--systems", "sluice", "--duration", "5s", "--repeat", "1", "--sizes", "1400")
	t.Logf("after %v: exit %d: %s", time.Since(start).Round(time.Millisecond), code, strings.TrimSpace(stderr))
	if code != exitBenchFailed || !strings.Contains(stderr, "interrupted") {
		t.Errorf("exit %d, stderr %q; want 1 and \"interrupted\"", code, stderr)
	}
	if left := labNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}
