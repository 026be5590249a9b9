package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicegw/sluice/control/controltest"
)

// TestRunStateDirUnwritable: a state_dir that exists but cannot be written,
// or cannot be made, stops run with exit status 2 and an error naming the
// field, before the gateway comes up (it used to log "gateway up" and drop
// every outbound packet). The unwritable directory holds a directory where
// the probe file goes, so the test holds as root too.
func TestRunStateDirUnwritable(t *testing.T) {
	dir := t.TempDir()
	sock := controltest.SocketPath(t)
	ro := filepath.Join(dir, "ro")
	if err := os.MkdirAll(filepath.Join(ro, ".sluice-probe.tmp", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	file := ctlWriteFile(t, filepath.Join(dir, "file"), "")
	for _, state := range []string{ro, filepath.Join(file, "state")} {
		cfg := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), runTestConfig(`state_dir = "`+state+`"`))
		code, out, errOut := ctlRun("run", "-c", cfg, "--socket", sock)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, cfg+":4:13: gateway.state_dir: state directory "+state) ||
			strings.Contains(errOut, "gateway up") {
			t.Errorf("state_dir %s: exit %d, %q, %q; want exit %d and the state_dir error", state, code, out, errOut, ExitUsage)
		}
	}
}

// TestRunStateDirInUse: run refuses, with exit status 2 and the field, a
// state_dir that another gateway holds (its flock is taken here, as a
// running gateway takes it), before the gateway comes up.
func TestRunStateDirInUse(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o700)
	lock, err := os.OpenFile(filepath.Join(state, ".sluice.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	lock.WriteString("4242\n")
	cfg := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), runTestConfig(`state_dir = "`+state+`"`))
	code, _, errOut := ctlRun("run", "-c", cfg, "--socket", controltest.SocketPath(t))
	want := cfg + ":4:13: gateway.state_dir: state directory " + state + " is in use by another gateway (pid 4242)"
	if code != ExitUsage || !strings.Contains(errOut, want) || strings.Contains(errOut, "gateway up") {
		t.Errorf("exit %d, %q; want exit %d and %q", code, errOut, ExitUsage, want)
	}
}
