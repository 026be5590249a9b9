package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// runFailoverCmd runs `sluice bench failover args...` in-process.
func runFailoverCmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(ctx, append([]string{"bench", "failover"}, args...), strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// TestBenchFailoverFlags: bad flags exit with status 2 and name the flag,
// before anything is built.
func TestBenchFailoverFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--systems", "keepalived"}, "--systems"},
		{[]string{"--runs", "0"}, "--runs"},
		{[]string{"--rate", "5"}, "--rate"},
		{[]string{"--tcp-rate", "0"}, "--tcp-rate"},
		{[]string{"--give-up", "1s"}, "--give-up"},
		{[]string{"--dpd-delay", "10ms"}, "--dpd-delay"},
		{[]string{"--throughput", "-1s"}, "--throughput"},
		{[]string{"--throughput-repeat", "0"}, "--throughput-repeat"},
		{[]string{"--runs", "many"}, "runs"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, _, stderr := runFailoverCmd(context.Background(), tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %s", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

// TestBenchFailoverNotRoot: without the privileges for namespaces the
// command exits 2 and says it needs root; --dry-run only estimates.
func TestBenchFailoverNotRoot(t *testing.T) {
	saved := labAvailable
	labAvailable = func() error { return errors.New("lab: network namespaces need root") }
	t.Cleanup(func() { labAvailable = saved })
	code, stdout, stderr := runFailoverCmd(context.Background(), "--runs", "1")
	if code != ExitUsage || !strings.Contains(stderr, "need root") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the reason", code, stdout, stderr)
	}
	code, stdout, stderr = runFailoverCmd(context.Background(), "--runs", "2", "--systems", "sluice-ha,strongswan-restart", "--dry-run")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "estimate: about") || !strings.Contains(stderr, "for 10 measured runs") {
		t.Errorf("--dry-run: exit %d, stdout %q, stderr %q; want 0 and an estimate of 2+2 kills and 2x3 throughput runs", code, stdout, stderr)
	}
}
