package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	ikebench "github.com/sluicegw/sluice/bench/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// runIKECmd runs `sluice bench ike args...` in-process.
func runIKECmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(ctx, append([]string{"bench", "ike"}, args...), strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// TestBenchIKEFlags: bad flags exit with status 2 and name the flag,
// before anything is built.
func TestBenchIKEFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--systems", "libreswan"}, "--systems"},
		{[]string{"--auth", "rsa4096"}, "--auth"},
		{[]string{"--count", "0"}, "--count"},
		{[]string{"--count", "1000000"}, "--count"},
		{[]string{"--concurrency", "0"}, "--concurrency"},
		{[]string{"--concurrency", "5000"}, "--concurrency"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--count", "many"}, "count"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, _, stderr := runIKECmd(context.Background(), tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %s", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

// TestBenchIKENotRoot: without the privileges for namespaces the command
// exits 2 and says it needs root; --dry-run only estimates.
func TestBenchIKENotRoot(t *testing.T) {
	saved := labAvailable
	labAvailable = func() error { return errors.New("lab: network namespaces need root") }
	t.Cleanup(func() { labAvailable = saved })
	code, stdout, stderr := runIKECmd(context.Background(), "--count", "10")
	if code != ExitUsage || !strings.Contains(stderr, "need root") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the reason", code, stdout, stderr)
	}
	code, stdout, stderr = runIKECmd(context.Background(), "--count", "10", "--dry-run")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "estimate: about") || !strings.Contains(stderr, "for 7 measured runs") {
		t.Errorf("--dry-run: exit %d, stdout %q, stderr %q; want 0 and an estimate of 1+2x3 steps", code, stdout, stderr)
	}
}

// TestBenchIKETiny: as root, 20 road warriors of each --auth kind against sluice, and
// against charon when it is installed (CI=true: it must be), all set up
// with their Child SAs installed at the responder; the JSON document has
// every figure, and no namespace is left behind.
func TestBenchIKETiny(t *testing.T) {
	lab.Require(t)
	systems := []string{ikebench.Sluice}
	if _, err := exec.LookPath(lab.CharonPath); err == nil {
		systems = append(systems, ikebench.Charon)
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v (CI=true: not skipping charon)", lab.CharonPath, err)
	} else {
		t.Logf("charon is not installed: sluice only")
	}
	useTestBinaryAsGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code, stdout, stderr := runIKECmd(ctx, "--systems", strings.Join(systems, ","), "--count", "20", "--concurrency", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout: %s", code, stderr, stdout)
	}
	var doc ikebench.Document
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, stdout)
	}
	if len(doc.Results) != len(systems)*len(ikebench.AuthKinds) {
		t.Fatalf("results %+v, want one per system and kind", doc.Results)
	}
	for _, r := range doc.Results {
		if r.Completed != 20 || r.Failed != 0 || r.Installed < 20 {
			t.Errorf("%s, %s: %d completed, %d failed, %d installed; want 20, 0, 20 (%s)", r.System, r.Auth, r.Completed, r.Failed, r.Installed, r.FirstError)
		}
		// 20 setups may take less than a clock tick (10 ms) of the
		// responder's CPU: the rate per CPU-second is only checked
		// against the time read.
		if r.PerSecond <= 0 || r.CPU < 0 || (r.CPU > 0) != (r.PerCPUSec > 0) || r.P50 <= 0 || r.P99 < r.P50 || r.RSSAfter <= 0 {
			t.Errorf("%s: figures missing: %+v", r.System, r)
		}
	}
	if left := labNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}
