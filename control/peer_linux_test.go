package control

import (
	"bufio"
	"encoding/json"
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
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		// setresuid(2) on this thread alone: real and effective uid, saved 0.
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			ch <- result{nil, e}
			return
		}
		c, err := net.Dial("unix", path)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
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
