package cli

import (
	"bufio"
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// TestRunTLSGateway is the TLS gateway end to end, as `sluice run -c` runs
// it, without root: a [[tls]] listener serving a static directory and a
// [[tls_origin]] that carries plaintext to it over TLS, verifying it with
// the test CA. A plain HTTP client through the origin gets the file; a
// `sluice reload` after the certificate file was replaced makes new
// handshakes show the new certificate while a connection opened before
// keeps working; the counters show through the control socket (sluice
// stats --json).
func TestRunTLSGateway(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sluice.sock")
	ca, err := certgen.NewCA("run test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueFiles(dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	ctlWriteFile(t, filepath.Join(dir, "ca.pem"), string(ca.PEM))
	body := "a file served by sluice\n"
	if err := os.Mkdir(filepath.Join(dir, "www"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctlWriteFile(t, filepath.Join(dir, "www", "f.txt"), body)
	// The listeners take free ports (listen port 0). The origin joins in
	// a reload, once the listener's port is known.
	const webSection = `
[gateway]
engine = "soft"
state_dir = %q

[[tls]]
name = "web"
listen = "127.0.0.1:0"
backend = "static:www"
  [[tls.cert]]
  cert = "site.pem"
  key = "site.key"
`
	stateDir := filepath.Join(dir, "never", "state")
	cfgPath := ctlWriteFile(t, filepath.Join(dir, "gw.toml"), fmt.Sprintf(webSection, stateDir))

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr runLogBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"run", "-c", cfgPath, "--socket", sock}, strings.NewReader(""), &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("run exited with %d:\n%s", code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("run did not stop:\n%s", stderr.String())
		}
	})
	ctlWaitUntil(t, "the control socket", func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("run exited with %d:\n%s", code, stderr.String())
		default:
		}
		c, err := control.Dial(ctx, sock)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Stats(ctx)
		return err == nil
	})
	if _, err := os.Stat(filepath.Join(dir, "never")); !os.IsNotExist(err) {
		t.Errorf("a TLS-only gateway made its state directory: %v", err)
	}

	tlsStats := func() []gateway.TLSInfo {
		t.Helper()
		code, out, errOut := ctlRun("stats", "--json", "--socket", sock)
		var st gateway.Stats
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			t.Fatalf("stats --json: exit %d, %v: %s%s", code, err, out, errOut)
		}
		return st.TLS
	}
	ls := tlsStats()
	if len(ls) != 1 || strings.HasSuffix(ls[0].Listen, ":0") {
		t.Fatalf("TLS listeners after start: %+v", ls)
	}
	tlsAddr := ls[0].Listen
	ctlWriteFile(t, cfgPath, fmt.Sprintf(webSection, stateDir)+fmt.Sprintf(`
[[tls_origin]]
name = "to-web"
listen = "127.0.0.1:0"
backend = "tls://%s"
ca = "ca.pem"
`, tlsAddr))
	if code, out, errOut := ctlRun("reload", "--socket", sock); code != 0 || !strings.Contains(out, "to-web") {
		t.Fatalf("reload adding the origin: exit %d: %s%s", code, out, errOut)
	}
	ls = tlsStats()
	if len(ls) != 2 || ls[0].Listen != tlsAddr || strings.HasSuffix(ls[1].Listen, ":0") {
		t.Fatalf("TLS listeners after the reload: %+v", ls)
	}
	originAddr := ls[1].Listen

	// Plaintext HTTP through the origin, which carries it over TLS.
	plain, err := net.DialTimeout("tcp", originAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plainR := bufio.NewReader(plain)
	getOn := func(c net.Conn, r *bufio.Reader) string {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /f.txt HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	if got := getOn(plain, plainR); got != body {
		t.Fatalf("through the origin: %q, want %q", got, body)
	}

	// A TLS connection straight to the listener, kept open over the reload.
	leafOf := func() ([]byte, *cryptotls.Conn) {
		t.Helper()
		c, err := cryptotls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tlsAddr,
			&cryptotls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		return c.ConnectionState().PeerCertificates[0].Raw, c
	}
	leaf1, open := leafOf()
	defer open.Close()
	openR := bufio.NewReader(open)
	if got := getOn(open, openR); got != body {
		t.Fatalf("direct: %q", got)
	}

	// A new certificate in the same files, then sluice reload.
	if _, _, err := ca.IssueFiles(dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := ctlRun("reload", "--socket", sock)
	if code != 0 {
		t.Fatalf("reload: exit %d: %s%s", code, out, errOut)
	}
	if !strings.Contains(out, "web") {
		t.Errorf("reload does not say the listener changed: %q", out)
	}
	leaf2, c2 := leafOf()
	c2.Close()
	if bytes.Equal(leaf1, leaf2) {
		t.Error("the old certificate is served after the reload")
	}
	if got := getOn(open, openR); got != body {
		t.Errorf("the connection opened before the reload: %q", got)
	}
	if got := getOn(plain, plainR); got != body {
		t.Errorf("the origin's connection opened before the reload: %q", got)
	}

	// The counters, through the control socket. The server counts a TLS
	// 1.3 handshake once it has read the client's Finished, which may be
	// after the client's side is done (c2 closed at once): wait for it.
	var st gateway.Stats
	ctlWaitUntil(t, "three handshakes counted by the listener", func() bool {
		code, out, errOut := ctlRun("stats", "--json", "--socket", sock)
		st = gateway.Stats{}
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			t.Fatalf("stats --json: exit %d, %v: %s%s", code, err, out, errOut)
		}
		return len(st.TLS) == 2 && st.TLS[0].Handshakes >= 3
	})
	if len(st.TLS) != 2 || len(st.SAs) != 0 || len(st.Dataplane.Workers) != 0 {
		t.Fatalf("stats: %+v", st)
	}
	web, origin := st.TLS[0], st.TLS[1]
	if web.Name != "web" || web.Kind != "terminate" || web.Handshakes < 3 || web.Open < 2 || web.BytesOut < uint64(3*len(body)) || web.SignOps < 1 {
		t.Errorf("listener counters %+v", web)
	}
	if origin.Name != "to-web" || origin.Kind != "originate" || origin.Handshakes < 1 || origin.Open < 1 || origin.BytesOut < uint64(2*len(body)) {
		t.Errorf("origin counters %+v", origin)
	}
	code, out, _ = ctlRun("stats", "--socket", sock)
	if code != 0 || !strings.HasPrefix(out, "TLS ") || !strings.Contains(out, "to-web") {
		t.Errorf("stats table:\n%s", out)
	}
	// The SA commands answer clearly on a gateway without SAs.
	if code, out, _ := ctlRun("sa", "list", "--socket", sock); code != 0 || strings.TrimSpace(out) != "no SAs" {
		t.Errorf("sa list: %d %q", code, out)
	}
	if code, _, errOut := ctlRun("sa", "del", "--socket", sock, "--spi", "0x100"); code != ExitUsage || !strings.Contains(errOut, "TLS-only gateway") {
		t.Errorf("sa del: %d %q", code, errOut)
	}
}
