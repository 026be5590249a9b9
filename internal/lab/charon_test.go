package lab_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestLabRenderTail: RenderTemplate fills in a template file, WritePEM
// writes one block in a new directory, and Tail keeps the last lines.
func TestLabRenderTail(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "in.tmpl")
	if err := os.WriteFile(tmpl, []byte("a = {{.A}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.conf")
	if err := lab.RenderTemplate(tmpl, out, map[string]string{"A": "b"}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(out); err != nil || string(data) != "a = b\n" {
		t.Errorf("rendered %q, %v", data, err)
	}
	if err := lab.RenderTemplate(filepath.Join(dir, "none.tmpl"), out, nil); err == nil {
		t.Error("rendered a template that does not exist")
	}
	p := filepath.Join(dir, "sub", "x.pem")
	if err := lab.WritePEM(p, "CERTIFICATE", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	if b, _ := pem.Decode(data); b == nil || b.Type != "CERTIFICATE" || string(b.Bytes) != "\x01\x02\x03" {
		t.Errorf("PEM file %q", data)
	}
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"a\nb\nc\n", 2, "b\nc"}, {"a\nb", 5, "a\nb"}, {"", 3, ""}} {
		if got := lab.Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// charonTestConf is a strongswan.conf for TestLabCharon: the kernel's
// IPsec (nothing is negotiated), vici, and what loads certificates.
const charonTestConf = `charon {
  load_modular = no
  load = random nonce openssl pem pkcs1 x509 kernel-netlink socket-default vici
  plugins {
    vici {
      socket = unix://{{.Vici}}
    }
  }
  filelog {
    lab {
      path = {{.Log}}
      default = 1
      flush_line = yes
    }
  }
}
`

// charonTestSwanctl is one connection authenticated with the credentials
// WriteCredentials wrote.
const charonTestSwanctl = `connections {
  lab {
    version = 2
    local_addrs = 192.0.2.1
    remote_addrs = 192.0.2.2
    local {
      auth = pubkey
      certs = {{.Cert}}
    }
    remote {
      auth = pubkey
      cacerts = {{.CA}}
    }
  }
}
`

// TestLabCharon: charon starts in a namespace with its files in the lab's
// directory and answers swanctl; it loads a configuration with the
// credentials WriteCredentials wrote; after Kill it starts again.
func TestLabCharon(t *testing.T) {
	lab.RequireCharon(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := l.NewNetns(ctx, "ss")
	if err != nil {
		t.Fatal(err)
	}
	c := l.NewCharon(ns, dir)
	lab.LogOnFailure(t, "charon log", c.Log(), 40)
	if c.Process() != nil {
		t.Error("a process before Start")
	}
	tmpl := filepath.Join(dir, "strongswan.conf.tmpl")
	if err := os.WriteFile(tmpl, []byte(charonTestConf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := lab.RenderTemplate(tmpl, c.Conf(), map[string]string{"Vici": c.Vici(), "Log": c.Log()}); err != nil {
		t.Fatal(err)
	}

	ca, err := certgen.NewCA("lab test CA")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Certify(key.Public(), []string{"charon@lab.sluice"})
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, err := c.WriteCredentials(ca.Cert, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join("x509ca", caFile), filepath.Join("x509", certFile), filepath.Join("ecdsa", "charon.key")} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	stmpl := filepath.Join(dir, "swanctl.conf.tmpl")
	if err := os.WriteFile(stmpl, []byte(charonTestSwanctl), 0o600); err != nil {
		t.Fatal(err)
	}
	swconf := filepath.Join(dir, "swanctl.conf")
	if err := lab.RenderTemplate(stmpl, swconf, map[string]string{"Cert": certFile, "CA": caFile}); err != nil {
		t.Fatal(err)
	}

	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx, swconf, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx, swconf, 2); err == nil {
		t.Error("Load counted 2 connections in a file of 1")
	}
	out, err := c.Swanctl(ctx, "--list-certs")
	if err != nil || !strings.Contains(out, "charon@lab.sluice") || !strings.Contains(out, "lab test CA") {
		t.Errorf("swanctl --list-certs: %v\n%s", err, out)
	}
	if _, err := c.Swanctl(ctx, "--no-such-option"); err == nil {
		t.Error("swanctl with a bad option succeeded")
	}
	first := c.Process()
	c.Kill()
	if done, _ := first.Exited(); !done {
		t.Fatal("charon runs after Kill")
	}
	if _, err := c.Swanctl(ctx, "--stats"); err == nil {
		t.Error("swanctl reached a killed charon")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("after Kill: %v", err)
	}
	if c.Process() == first {
		t.Error("Start after Kill kept the old process")
	}
	if _, err := c.Swanctl(ctx, "--stats"); err != nil {
		t.Error(err)
	}
	if s, err := c.LogTail(5); err != nil || s == "" {
		t.Errorf("charon's log: %q, %v", s, err)
	}
}
