package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// TestRunLogsJSON runs a TLS-only gateway (no root) with log_format =
// "json", log_level = "warn" and log_levels = { tls = "debug" }: every
// line on stderr is a JSON object with level, msg and subsys; the TLS
// subsystem's debug lines (a failed handshake, with its reason) are there
// and the other subsystems' info lines are not.
func TestRunLogsJSON(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("cli test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueFiles(dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "www"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfgPath := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), fmt.Sprintf(`[gateway]
engine = "soft"
log_level = "warn"
log_format = "json"
log_levels = { tls = "debug" }

[[tls]]
name = "web"
listen = %q
backend = "static:www"
  [[tls.cert]]
  cert = "site.pem"
  key = "site.key"
`, addr))
	sock := controltest.SocketPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr runLogBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"run", "-c", cfgPath, "--socket", sock}, strings.NewReader(""), &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("run did not stop")
		}
	})
	ctlWaitUntil(t, "the control socket", func() bool {
		c, err := control.Dial(ctx, sock)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Stats(ctx)
		return err == nil
	})
	// Not TLS: a handshake failure.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Read(make([]byte, 64))
	c.Close()
	ctlWaitUntil(t, "the handshake failure's line", func() bool { return strings.Contains(stderr.String(), "tls: handshake failed") })
	cancel()
	<-done
	done <- 0

	var sawDebug bool
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if m["level"] == nil || m["msg"] == nil || m["subsys"] == nil {
			t.Errorf("line lacks level, msg or subsys: %q", line)
		}
		if m["subsys"] != "tls" && (m["level"] == "INFO" || m["level"] == "DEBUG") {
			t.Errorf("below warn outside tls: %q", line)
		}
		if m["subsys"] == "tls" && m["level"] == "DEBUG" && m["msg"] == "tls: handshake failed" && m["listener"] == "web" && m["reason"] != nil {
			sawDebug = true
		}
	}
	if !sawDebug {
		t.Errorf("no debug line for the failed handshake:\n%s", stderr.String())
	}
}
