package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/exampletest"
)

// ikeCheckConfig is an IKE gateway with one connection from local, the
// state directory and control socket under dir; auth is the
// [connection.local] and [connection.remote] tables' body.
func ikeCheckConfig(dir, local, auth, extra string) string {
	return `[gateway]
state_dir = "` + filepath.Join(dir, "state") + `"
control_socket = "` + filepath.Join(dir, "run", "sluice.sock") + `"

[tun]
name = "sluicec0"
addresses = ["10.1.0.1/24"]

[udp]
listen = "0.0.0.0:4500"

[[connection]]
name = "site-b"
local_addrs = ["` + local + `"]
remote_addrs = ["192.0.2.2"]
` + auth + `
  [[connection.children]]
  name = "net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.2.0.0/24"]
` + extra
}

const checkPSKAuth = `  [connection.local]
  auth = "psk"
  id = "a.example"
  [connection.remote]
  auth = "psk"
  id = "b.example"
`

const checkPSKSecret = `
[[secret]]
type = "ike"
ids = ["a.example", "b.example"]
secret = "0sYS1wcmUtc2hhcmVkLWtleS1mb3ItdGVzdHM="
`

// TestCheck: sluice check and sluice run --check accept a file that
// would start, say what it holds, and create nothing (no state directory,
// no socket); they refuse, with exit 2 and each error's file, line and
// field, what a start would refuse: a local address the host lacks, a
// certificate whose private key no [[secret]] holds, a control socket in
// a directory others may write, a syntax error.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := ctlWriteFile(t, filepath.Join(dir, "good.toml"), ikeCheckConfig(dir, "127.0.0.1", checkPSKAuth, checkPSKSecret))
	for _, args := range [][]string{{"check", "-c", good}, {"run", "--check", "-c", good}} {
		code, out, errOut := ctlRun(args...)
		if code != 0 || !strings.Contains(out, good+": configuration OK (0 tunnels, 1 IKE connections") {
			t.Errorf("%v: exit %d, %q, %q", args, code, out, errOut)
		}
	}
	for _, p := range []string{filepath.Join(dir, "state"), filepath.Join(dir, "run")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("check made %s (%v)", p, err)
		}
	}

	// A certificate and key of the command that makes them.
	if code, _, errOut := ctlRun("genkey", "cert", "--name", "a.example", filepath.Join(dir, "a")); code != 0 {
		t.Fatalf("genkey: %s", errOut)
	}
	if code, _, errOut := ctlRun("genkey", "cert", "--name", "other.example", filepath.Join(dir, "other")); code != 0 {
		t.Fatalf("genkey: %s", errOut)
	}
	certAuth := `  [connection.local]
  auth = "pubkey"
  certs = ["a.pem"]
  [connection.remote]
  auth = "pubkey"
  cacerts = ["a.pem"]
`
	withKey := ctlWriteFile(t, filepath.Join(dir, "cert.toml"), ikeCheckConfig(dir, "127.0.0.1", certAuth, "\n[[secret]]\ntype = \"private\"\nfile = \"a.key\"\n"))
	if code, out, errOut := ctlRun("check", "-c", withKey); code != 0 {
		t.Errorf("with its key: exit %d, %q, %q", code, out, errOut)
	}

	sharedDir := filepath.Join(dir, "shared")
	if err := os.Mkdir(sharedDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sharedDir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"absent-local", ikeCheckConfig(dir, "192.0.2.99", checkPSKAuth, checkPSKSecret),
			[]string{":14:15: connection[1].local_addrs: 192.0.2.99 is not an address of this host"}},
		{"wrong-key", ikeCheckConfig(dir, "127.0.0.1", certAuth, "\n[[secret]]\ntype = \"private\"\nfile = \"other.key\"\n"),
			[]string{"connection[1].local.certs[1]: no [[secret]] with type = \"private\" holds the key of"}},
		{"missing-key-file", ikeCheckConfig(dir, "127.0.0.1", certAuth, "\n[[secret]]\ntype = \"private\"\nfile = \"none.key\"\n"),
			[]string{"secret[1].file"}},
		{"shared-socket-dir", strings.Replace(ikeCheckConfig(dir, "127.0.0.1", checkPSKAuth, checkPSKSecret),
			filepath.Join(dir, "run", "sluice.sock"), filepath.Join(sharedDir, "sluice.sock"), 1),
			[]string{"not creating the control socket " + filepath.Join(sharedDir, "sluice.sock")}},
		{"syntax", "[gateway\n", []string{"syntax.toml:1:"}},
	} {
		f := ctlWriteFile(t, filepath.Join(dir, c.name+".toml"), c.text)
		code, out, errOut := ctlRun("check", "-c", f)
		if code != ExitUsage || out != "" {
			t.Errorf("%s: exit %d, stdout %q; want %d and nothing", c.name, code, out, ExitUsage)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: %q lacks %q", c.name, errOut, w)
			}
		}
	}
	if code, _, errOut := ctlRun("check"); code != ExitUsage || !strings.Contains(errOut, "config") {
		t.Errorf("check without -c: exit %d, %q", code, errOut)
	}
}

// TestCheckWarnsWeak: sluice check accepts a file whose proposals name
// weak algorithms (exit 0) and prints a WARN for each with its file, line
// and field; a file with the defaults gets none.
func TestCheckWarnsWeak(t *testing.T) {
	dir := t.TempDir()
	weak := strings.Replace(ikeCheckConfig(dir, "127.0.0.1", checkPSKAuth, checkPSKSecret),
		`remote_addrs = ["192.0.2.2"]`, "remote_addrs = [\"192.0.2.2\"]\nproposals = \"aes256-sha256-modp1024\"", 1)
	f := ctlWriteFile(t, filepath.Join(dir, "weak.toml"), weak)
	code, out, errOut := ctlRun("check", "-c", f)
	if code != 0 || !strings.Contains(out, "configuration OK") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	want := f + ":16:13: connection[1].proposals: weak algorithm modp1024 (RFC 8247 section 2.4: SHOULD NOT"
	if !strings.Contains(errOut, "level=WARN") || !strings.Contains(errOut, want) {
		t.Errorf("no warning %q in %q", want, errOut)
	}
	good := ctlWriteFile(t, filepath.Join(dir, "good.toml"), ikeCheckConfig(dir, "127.0.0.1", checkPSKAuth, checkPSKSecret))
	if code, _, errOut := ctlRun("check", "-c", good); code != 0 || strings.Contains(errOut, "weak") {
		t.Errorf("defaults: exit %d, %q", code, errOut)
	}
}

// TestCheckExample: examples/ike-gateway.toml with its road-warrior block
// uncommented passes sluice check on this host (its addresses made the
// loopback's, its paths a temporary directory's, the gateway's
// certificate made by sluice genkey cert) without a warning: what the
// example promises the native clients is what its defaults accept.
func TestCheckExample(t *testing.T) {
	dir := t.TempDir()
	text, err := exampletest.Replace("../examples/ike-gateway.toml")
	if err != nil {
		t.Fatal(err)
	}
	for old, repl := range map[string]string{
		`"192.0.2.1"`:               `"127.0.0.1"`,
		`"/run/sluice/sluice.sock"`: `"` + filepath.Join(dir, "run", "sluice.sock") + `"`,
		`"/var/lib/sluice"`:         `"` + filepath.Join(dir, "state") + `"`,
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("the example has no %s", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	if code, _, errOut := ctlRun("genkey", "cert", "--name", "vpn.example", filepath.Join(dir, "vpn")); code != 0 {
		t.Fatalf("genkey: %s", errOut)
	}
	f := ctlWriteFile(t, filepath.Join(dir, "ike-gateway.toml"), text)
	code, out, errOut := ctlRun("check", "-c", f)
	if code != 0 || !strings.Contains(out, "configuration OK (0 tunnels, 2 IKE connections") || errOut != "" {
		t.Errorf("exit %d, %q, %q\n%s", code, out, errOut, text)
	}
}
