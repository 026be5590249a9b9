package gateway

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSErrorPositions: what the TLS service finds wrong when it starts a
// listener, or reloads one, is reported at the line and field of the
// configuration that names it (issue 16: `tls: listener "web": ... the
// key does not match` had no position).
func TestTLSErrorPositions(t *testing.T) {
	// Lines of tlsSite.write: 7 listen = ..., 11 key = ... (column 9).
	t.Run("key", func(t *testing.T) {
		s := newTLSSite(t)
		if _, _, err := s.ca.IssueFiles(s.dir, "other", false, "other.test"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(s.dir, "other.key"), filepath.Join(s.dir, "site.key")); err != nil {
			t.Fatal(err)
		}
		g, err := Start(context.Background(), s.load(t), nil)
		if err == nil {
			g.Close()
		}
		want := s.file + ":11:9: tls[1].cert[1].key: "
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("got %v, want %q...", err, want)
		}
	})
	t.Run("listen", func(t *testing.T) {
		s := newTLSSite(t)
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		g, err := Start(context.Background(), s.load(t), nil)
		if err == nil {
			g.Close()
		}
		want := s.file + ":7:10: tls[1].listen: "
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("got %v, want %q...", err, want)
		}
	})
	t.Run("reload", func(t *testing.T) {
		s := newTLSSite(t)
		g, err := Start(context.Background(), s.load(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if err := os.WriteFile(filepath.Join(s.dir, "shadow"), []byte("root:*:1::::::\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.write(t, "\n[[tls_origin]]\nname = \"o\"\nlisten = \"127.0.0.1:0\"\nbackend = \"tls://127.0.0.1:1\"\nca = \"shadow\"\n")
		_, err = g.Reload(s.load(t))
		want := s.file + ":17:6: tls_origin[1].ca: "
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "no CA certificate") {
			t.Fatalf("got %v, want %q...", err, want)
		}
	})
}
