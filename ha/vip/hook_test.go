package vip_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ha/vip"
	"github.com/sluicegw/sluice/internal/lab"
)

// script writes an executable shell script into dir and returns its path.
func script(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "hook")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunHook: the hook gets the event and group as arguments and in
// SLUICE_HA_EVENT and SLUICE_HA_GROUP, and the caller's variables.
func TestRunHook(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	hook := script(t, dir, `echo "$1 $2 $SLUICE_HA_EVENT $SLUICE_HA_GROUP $SLUICE_HA_EPOCH" > `+out+"\n")
	err := vip.RunHook(context.Background(), hook, "acquire", "site1", []string{"SLUICE_HA_EPOCH=7"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "acquire site1 acquire site1 7\n"; string(got) != want {
		t.Errorf("hook saw %q, want %q", got, want)
	}
}

// TestRunHookFails: a hook that exits non-zero is an error that says its
// status and the end of what it wrote; a hook that cannot be run is one
// too.
func TestRunHookFails(t *testing.T) {
	dir := t.TempDir()
	hook := script(t, dir, "i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done\necho 'route add failed' >&2\nexit 3\n")
	err := vip.RunHook(context.Background(), hook, "release", "site1", nil, 10*time.Second)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"vip: hook " + hook + " release site1", "exit status 3", "line 499", "route add failed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "line 0\n") || len(msg) > 4096 {
		t.Errorf("error holds more than the tail of the output (%d bytes)", len(msg))
	}
	err = vip.RunHook(context.Background(), filepath.Join(dir, "missing"), "fence", "site1", nil, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing hook: %v", err)
	}
}

// TestRunHookTimeout: a hook that outlives its timeout is killed with
// every process it started, and the error says so with its output.
func TestRunHookTimeout(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// The hook starts a child that would outlive it, then waits.
	hook := script(t, dir, "sleep 300 &\necho $$ $! > "+pids+".tmp && mv "+pids+".tmp "+pids+"\necho waiting for bgp\nsleep 300\n")
	done := make(chan error, 1)
	go func() { done <- vip.RunHook(context.Background(), hook, "acquire", "site1", nil, 500*time.Millisecond) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RunHook did not return 30 s after its timeout of 500 ms")
	}
	if err == nil || !strings.Contains(err.Error(), "timeout after 500ms") || !strings.Contains(err.Error(), "waiting for bgp") {
		t.Fatalf("error %v: want a timeout with the hook's output", err)
	}
	b, rerr := os.ReadFile(pids)
	if rerr != nil {
		t.Fatal(rerr)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		werr := lab.WaitFor(context.Background(), fmt.Sprintf("process %d gone", pid), 5*time.Second, 0, func() (bool, error) {
			return !alive(pid), nil
		})
		if werr != nil {
			t.Error(werr)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunHookCanceled: a hook whose context ends is killed, and the error
// is the context's.
func TestRunHookCanceled(t *testing.T) {
	dir := t.TempDir()
	hook := script(t, dir, "sleep 300\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := vip.RunHook(ctx, hook, "acquire", "site1", nil, time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
