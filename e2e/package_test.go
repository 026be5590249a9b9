package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestPackageUnderSystemd installs the Debian package that
// packaging/build-deb.sh builds and runs sluice.service under systemd, as
// an operator would:
//
//  1. The package is built (nfpm from the module proxy).
//  2. systemd boots as PID 1 of a container (systemd-nspawn, with its own
//     network namespace) whose root is this machine's, seen through an
//     overlay so that nothing the test installs or writes reaches the
//     host. The host's own services boot in it too and are left alone.
//  3. dpkg installs the package: the user sluice, the units, the man
//     pages, the completions.
//  4. A gateway configuration with a static tunnel over raw ESP (a TUN
//     device, a raw socket: CAP_NET_ADMIN and CAP_NET_RAW) goes into
//     /etc/sluice, and `systemctl start sluice` must end with the unit
//     active: ExecStartPre's `sluice check` passed, and `sluice run`,
//     running as the user sluice with only the unit's capabilities, said
//     READY=1 (Type=notify).
//  5. root's `sluice tunnel list` reaches it through /run/sluice;
//     `systemctl reload` reloads it (SIGHUP); a configuration with an
//     error makes `systemctl restart` fail at `sluice check`, naming the
//     line; `systemctl stop` stops it.
func TestPackageUnderSystemd(t *testing.T) {
	lab.Require(t)
	requireTool(t, "systemd-nspawn", "nsenter", "dpkg")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()

	// 1. The package.
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, filepath.Join(root, "packaging", "build-deb.sh"))
	build.Env = append(os.Environ(), "OUT="+dir, "VERSION=0.0.0~test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("packaging/build-deb.sh: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "sluice_0.0.0~test_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("build-deb.sh made %v", debs)
	}

	// 2. systemd in a container over an overlay of this machine's root.
	ov := filepath.Join(dir, "ov")
	merged := filepath.Join(ov, "merged")
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(ov, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", filepath.Join(ov, "upper"), filepath.Join(ov, "work"))
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("overlay on %s: %v", merged, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", merged, err)
		}
	})
	var console bytes.Buffer
	machine := "sluicepkg" + strconv.Itoa(os.Getpid())
	nspawn := exec.Command("systemd-nspawn", "--quiet", "-D", merged, "--machine", machine,
		"--register=no", "--keep-unit", "--private-network", "-b", "systemd.firstboot=off")
	nspawn.Stdout, nspawn.Stderr = &console, &console
	if err := nspawn.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- nspawn.Wait() }()
	t.Cleanup(func() {
		// SIGTERM asks the container's systemd to shut down; then kill.
		nspawn.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			nspawn.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("container console:\n%s", lab.Tail(console.String(), 40))
		}
	})
	var initPID int
	err = lab.WaitFor(ctx, "systemd in the container", 90*time.Second, 100*time.Millisecond, func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("%w: systemd-nspawn exited: %v", lab.ErrStop, err)
		default:
		}
		if initPID == 0 {
			if initPID = containerInit(nspawn.Process.Pid); initPID == 0 {
				return false, errors.New("no init yet")
			}
		}
		out, _ := exec.Command("nsenter", "-t", strconv.Itoa(initPID), "-a", "systemctl", "is-system-running").Output()
		state := strings.TrimSpace(string(out))
		return state == "running" || state == "degraded", errors.New(state)
	})
	if err != nil {
		t.Fatal(err)
	}
	in := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustIn := func(args ...string) string {
		t.Helper()
		out, err := in(args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	journal := func() string { out, _ := in("journalctl", "-u", "sluice", "--no-pager"); return out }

	// 3. The package.
	if err := copyFile(debs[0], filepath.Join(merged, "var", "tmp", "sluice.deb")); err != nil {
		t.Fatal(err)
	}
	mustIn("dpkg", "-i", "/var/tmp/sluice.deb")
	for _, f := range []string{"/usr/bin/sluice", "/usr/lib/systemd/system/sluice.service", "/usr/lib/systemd/system/sluice@.service",
		"/usr/share/man/man8/sluice-run.8.gz", "/usr/share/bash-completion/completions/sluice"} {
		mustIn("test", "-e", f)
	}
	if id := mustIn("id", "-u", "sluice"); strings.TrimSpace(id) == "0" {
		t.Fatal("the package's user sluice is root")
	}

	// 4. A gateway, started by systemd.
	writeConf := func(text string) {
		t.Helper()
		p := filepath.Join(merged, "etc", "sluice", "sluice.toml")
		if err := os.WriteFile(p, []byte(text), 0o640); err != nil {
			t.Fatal(err)
		}
		mustIn("chgrp", "sluice", "/etc/sluice/sluice.toml")
	}
	writeConf(packageTestConfig)
	if out, err := in("systemctl", "start", "sluice"); err != nil {
		t.Fatalf("systemctl start sluice: %v\n%s\n%s", err, out, journal())
	}
	if out, _ := in("systemctl", "is-active", "sluice"); strings.TrimSpace(out) != "active" {
		t.Fatalf("sluice.service is %q\n%s", out, journal())
	}
	ps := mustIn("ps", "-o", "user=,pid=", "-C", "sluice")
	fields := strings.Fields(ps)
	if len(fields) != 2 || fields[0] != "sluice" {
		t.Fatalf("sluice runs as %q, want the user sluice", ps)
	}
	status := mustIn("cat", "/proc/"+fields[1]+"/status")
	if !strings.Contains(status, "CapEff:\t0000000000003400") {
		t.Errorf("the gateway's capabilities are not the unit's three (CAP_NET_BIND_SERVICE, CAP_NET_ADMIN, CAP_NET_RAW):\n%s", status)
	}
	if j := journal(); !strings.Contains(j, "configuration OK (1 tunnels") || !strings.Contains(j, "gateway up") {
		t.Errorf("the journal lacks sluice check's and the gateway's start:\n%s", j)
	}

	// 5. Operated.
	if out := mustIn("sluice", "tunnel", "list"); !strings.Contains(out, "pkg") {
		t.Errorf("sluice tunnel list as root:\n%s", out)
	}
	mustIn("systemctl", "reload", "sluice")
	if err := lab.WaitFor(ctx, "the reload in the journal", 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		return strings.Contains(journal(), "configuration reloaded"), nil
	}); err != nil {
		t.Fatal(err)
	}
	writeConf(strings.Replace(packageTestConfig, `esp = "aes128gcm16"`, `esp = "des"`, 1))
	if out, err := in("systemctl", "restart", "sluice"); err == nil {
		t.Errorf("systemctl restart with a bad configuration succeeded:\n%s", out)
	}
	if j := journal(); !strings.Contains(j, "/etc/sluice/sluice.toml:") || !strings.Contains(j, "esp") {
		t.Errorf("the journal does not name the bad line:\n%s", lab.Tail(j, 10))
	}
	writeConf(packageTestConfig)
	mustIn("systemctl", "reset-failed", "sluice")
	mustIn("systemctl", "start", "sluice")
	mustIn("systemctl", "stop", "sluice")
	if out, _ := in("systemctl", "is-active", "sluice"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("after stop, sluice.service is %q", out)
	}
}

// packageTestConfig is a gateway with a static tunnel over raw ESP.
const packageTestConfig = `[gateway]
engine = "soft"

[tun]
name = "sluicepkg0"
addresses = ["10.91.0.1/24"]

[rawesp]
listen = "0.0.0.0"

[[tunnel]]
name = "pkg"
local = "192.0.2.1"
peer = "192.0.2.2"
encap = "none"
remote = ["10.92.0.0/24"]
out = "o"
in = ["i"]

[[sa]]
name = "o"
spi = 0x1001
esp = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "i"
spi = 0x1002
esp = "aes128gcm16"
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`

// containerInit finds the container's PID 1 as this namespace sees it:
// systemd-nspawn's child's child (nspawn forks once for the namespaces,
// then init).
func containerInit(nspawnPID int) int {
	for pid := nspawnPID; ; {
		kids := children(pid)
		if len(kids) == 0 {
			return 0
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", kids[0]))
		if strings.TrimSpace(string(comm)) == "systemd" {
			return kids[0]
		}
		pid = kids[0]
	}
}

// children lists the child processes of pid.
func children(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
