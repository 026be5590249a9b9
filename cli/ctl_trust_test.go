package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// `sluice reload` through a socket another user bound (here: a listener
// whose file belongs to uid 65534) exits with status 2 and says whom it
// did not trust and why, and the listener receives nothing.
func TestCtlRefusesOtherUsersSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the socket to another user")
	}
	path := controltest.SocketPath(t)
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		if c, err := ln.Accept(); err == nil {
			close(accepted)
			c.Close()
		}
	}()
	code, out, errOut := ctlRun("reload", "--socket", path)
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "not trusting "+path) || !strings.Contains(errOut, "uid 65534") {
		t.Fatalf("exit %d, %q, %q; want exit %d naming %s and uid 65534", code, out, errOut, ExitUsage, path)
	}
	select {
	case <-accepted:
		t.Fatal("the client connected to another user's socket")
	default:
	}
}

// `sluice run` refuses a control socket in a directory others may write,
// with exit status 2, before the gateway starts. The gateway is TLS-only
// (no TUN device, no routes), and a run that wrongly starts ends with ctx.
func TestRunRefusesSharedSocketDir(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("run test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueFiles(dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	cfg := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), `
[gateway]
engine = "soft"

[[tls]]
name = "web"
listen = "127.0.0.1:0"
backend = "tcp://127.0.0.1:9"
  [[tls.cert]]
  cert = "site.pem"
  key = "site.key"
`)
	shared := filepath.Dir(controltest.SocketPath(t))
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shared, "sluice.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, _, errOut := ctlRunCtx(ctx, "", "run", "-c", cfg, "--socket", sock)
	if code != ExitUsage || !strings.Contains(errOut, "not creating the control socket "+sock) || !strings.Contains(errOut, "writable by other users") || strings.Contains(errOut, "gateway up") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
}
