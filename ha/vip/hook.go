package vip

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hookTail is how much of a hook's output an error keeps: its end.
const hookTail = 2048

// hookWaitDelay bounds how long RunHook waits, once the hook has exited
// or been killed, for processes it left behind to close its output.
const hookWaitDelay = 500 * time.Millisecond

// RunHook runs the executable path as `path EVENT GROUP`, with the
// environment of this process, SLUICE_HA_EVENT=event,
// SLUICE_HA_GROUP=group and env ("KEY=value" entries, which win over the
// others). The hook runs in a process group of its own; when timeout
// passes or ctx ends first, the whole group is killed (SIGKILL). RunHook
// returns nil when the hook exits with status 0, and otherwise an error
// that says why (its exit status, "timeout after 5s (killed)", or ctx's
// error, which it wraps) and ends with the last 2 KiB of what the hook
// wrote to its standard output and error.
//
// RunHook blocks until the hook is done: a takeover runs it on a
// goroutine of its own, so that a slow hook never holds up the traffic.
func RunHook(ctx context.Context, path, event, group string, env []string, timeout time.Duration) error {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, path, event, group)
	cmd.Env = append(append(os.Environ(), "SLUICE_HA_EVENT="+event, "SLUICE_HA_GROUP="+group), env...)
	out := &tail{max: hookTail}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = hookWaitDelay
	err := cmd.Run()
	if err == nil || errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success() && hctx.Err() == nil {
		// A child left behind holding the output is the hook's
		// business once the hook itself succeeded.
		return nil
	}
	what := fmt.Sprintf("vip: hook %s %s %s", path, event, group)
	var why error
	switch {
	case ctx.Err() != nil:
		why = ctx.Err()
	case hctx.Err() != nil:
		why = fmt.Errorf("timeout after %v (killed)", timeout)
	default:
		why = err
	}
	if s := out.String(); s != "" {
		return fmt.Errorf("%s: %w; output:\n%s", what, why, s)
	}
	return fmt.Errorf("%s: %w", what, why)
}

// tail keeps the last max bytes written to it. It is safe for concurrent
// use: exec copies standard output and error from goroutines of their own
// when they are not files.
type tail struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	return n, nil
}

// String is what was kept, trimmed, after "..." if more was written.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if t.truncated && s != "" {
		s = "..." + s
	}
	return s
}
