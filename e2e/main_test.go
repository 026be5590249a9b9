// Package e2e_test runs whole sluice gateways, the real `sluice run`
// daemon built from this module, in network namespaces, and drives real
// traffic through them: iputils ping, iperf3, UDP streams from sockets
// opened inside the namespaces, and strongSwan's userspace data plane
// (kernel-libipsec) as a peer.
//
// Every test builds its own namespaces and processes with internal/lab and
// removes them on the way out (t.Cleanup), also when it fails. The tests
// need root; they skip without it, except under CI=true, where they fail.
// The numbers they measure (ping round trips, iperf3 Mbit/s, packets per
// second) go to the test log as lines starting with "measure:", so that
//
//	go test ./e2e/ -v -run . 2>&1 | grep measure:
//
// collects them.
package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// sluiceBin is the sluice executable TestMain built for this run.
var sluiceBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Namespaces left by an earlier run of this package that was killed.
	if lab.Available() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		lab.Sweep(ctx)
		cancel()
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	sluiceBin = filepath.Join(dir, "sluice")
	if raceEnabled {
		// A program built with the race detector sleeps a second on exit
		// (to let racing goroutines report) unless told otherwise: every
		// sluice client command would take a second.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	if err := buildSluice(sluiceBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building sluice:", err)
		return 1
	}
	return m.Run()
}

// buildSluice builds cmd/sluice into out. With the race detector on in this
// test binary, the daemon is built with it too (raceEnabled), so that the
// end-to-end tests also look for data races in the real gateway.
func buildSluice(out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	args := []string{"build", "-o", out}
	if raceEnabled || os.Getenv("SLUICE_E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/sluicegw/sluice/cmd/sluice")
	cmd := exec.Command(goBin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// requireTool skips the test when a program it drives is not installed, or
// fails it under CI=true (where .ci/run installs every peer).
func requireTool(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI=true: not skipping; .ci/run installs it)", name)
			}
			t.Skipf("%s is not installed", name)
		}
	}
}

// knownBug reports a sluice bug that a test found and that must be fixed
// outside this package: it skips the test with the bug's description,
// unless SLUICE_E2E_KNOWN_BUGS=1, where it fails it. Every known bug is
// also in the report of the change that added its test.
func knownBug(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("SLUICE_E2E_KNOWN_BUGS") == "" {
		t.Skip("known bug: " + msg + " (SLUICE_E2E_KNOWN_BUGS=1 fails the test instead)")
	}
	t.Error("known bug: " + msg)
}

// measuref logs a measured number on a line that starts with "measure:",
// marked when the race detector slows the daemons down.
func measuref(t *testing.T, format string, args ...any) {
	t.Helper()
	if raceEnabled {
		format += " [race detector on]"
	}
	t.Logf("measure: "+format, args...)
}
