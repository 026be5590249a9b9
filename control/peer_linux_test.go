package control

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control/controltest"
)

// dialAs connects to path from a thread whose effective uid is uid; only
// that thread changes, and it ends with its goroutine.
func dialAs(uid int, path string) (net.Conn, error) {
	var c net.Conn
	err := asUser(uid, func() (err error) {
		c, err = net.Dial("unix", path)
		return err
	})
	return c, err
}

// asUser runs fn on a thread of its own whose real and effective uid are
// uid (setresuid(2) on that thread alone, saved uid 0), as another user's
// process would; the thread dies with it.
func asUser(uid int, fn func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			ch <- e
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// A connection from another user is refused even when the socket's mode
// would let it in (as between bind and chmod).
func TestOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	s := start(t, controltest.New(), nil)
	if err := os.Chmod(s.Path(), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(s.Path()), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := dialAs(65534, s.Path())
	if err != nil {
		t.Fatalf("dial as nobody: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte(`{"op":"sa.list"}` + "\n"))
	line, _ := bufio.NewReader(c).ReadBytes('\n')
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil || resp.OK || !strings.Contains(resp.Error, "permission denied") {
		t.Fatalf("nobody got %q (%v)", line, err)
	}
	// Root still gets in.
	if _, err := dial(t, s.Path()).SAs(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A flood of connections from another user is logged in two lines, not one
// per connection: the first refusal, then one summary of the rest.
func TestOtherUserFloodLogged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	rec := &logRecorder{}
	s, err := Listen(controltest.SocketPath(t), &Options{Log: slog.New(rec), RefusalLogInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(controltest.New())
	defer s.Close()
	if err := os.Chmod(s.Path(), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(s.Path()), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for range n {
		c, err := dialAs(65534, s.Path())
		if err != nil {
			t.Fatalf("dial as nobody: %v", err)
		}
		// Wait for the refusal, so that every connection is counted
		// before Close.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		c.Close()
	}
	refused := func() []slog.Record { return rec.records("control: connection refused", slog.LevelWarn) }
	if got := refused(); len(got) != 1 || !strings.Contains(attr(got[0], "err").String(), "peer uid 65534") {
		t.Fatalf("%d connections refused, logged as %d lines, want 1 with the peer's uid: %v", n, len(got), got)
	}
	s.Close()
	got := refused()
	if len(got) != 2 || got[1].Message != "control: connection refused (summary)" || attr(got[1], "refused").Int64() != n-1 {
		t.Fatalf("after Close, %d lines, want the first and one summary of %d: %v", len(got), n-1, got)
	}
	if !strings.Contains(attr(got[1], "last").String(), "peer uid 65534") {
		t.Fatalf("summary does not describe the last refusal: %v", got[1])
	}
}
