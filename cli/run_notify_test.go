package cli

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway/certgen"
)

// TestRunNotifiesSystemd: under a Type=notify unit (packaging/systemd),
// sluice run says READY=1 on $NOTIFY_SOCKET once it serves, RELOADING=1
// and READY=1 again around a SIGHUP reload, and STOPPING=1 when it shuts
// down.
func TestRunNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	notifyPath := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	t.Setenv("NOTIFY_SOCKET", notifyPath)

	ca, err := certgen.NewCA("notify test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueFiles(dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	cfgPath := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), fmt.Sprintf(`
[gateway]
engine = "soft"
control_socket = %q

[[tls]]
name = "web"
listen = "127.0.0.1:0"
backend = "tcp://127.0.0.1:9"
  [[tls.cert]]
  cert = "site.pem"
  key = "site.key"
`, filepath.Join(dir, "run", "sluice.sock")))

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr runLogBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, []string{"run", "-c", cfgPath}, strings.NewReader(""), &stdout, &stderr) }()
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			<-done
		}
	})

	next := func(want string) {
		t.Helper()
		buf := make([]byte, 512)
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := nc.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("notification %q, %v; want %q\n%s", buf[:n], err, want, stderr.String())
		}
	}
	next("READY=1")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next("RELOADING=1")
	next("READY=1")
	cancel()
	next("STOPPING=1")
	if code := <-done; code != 0 {
		t.Errorf("run exited with %d:\n%s", code, stderr.String())
	}
	stopped = true
}
