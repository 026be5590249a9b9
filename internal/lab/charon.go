package lab

// strongSwan's IKE daemon, charon, in a namespace, as the interop tests of
// package ike and of e2e run it opposite sluice: with its own
// strongswan.conf (STRONGSWAN_CONF) and a private /run (unshare -m and a
// tmpfs), so that it neither reads nor disturbs the host's, and driven by
// swanctl over its own vici socket. Its files (strongswan.conf,
// swanctl.conf, the vici socket, its log, and the x509/ and key
// directories swanctl --load-all --file reads) share one directory.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"
)

// CharonPath is Debian's charon daemon (package strongswan-charon).
const CharonPath = "/usr/lib/ipsec/charon"

const (
	// charonUpWait bounds the wait for a started charon's vici socket.
	charonUpWait = 20 * time.Second
	// swanctlTimeout bounds one swanctl call.
	swanctlTimeout = 30 * time.Second
)

// RequireCharon is Require, and also needs charon (CharonPath), swanctl
// and unshare: without them it skips the test, or fails it when CI=true.
func RequireCharon(t TB) {
	t.Helper()
	Require(t)
	for _, p := range []string{CharonPath, "swanctl", "unshare"} {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v (CI=true: not skipping; install strongswan-charon and strongswan-swanctl)", p, err)
			}
			t.Skipf("strongSwan is not installed: %v", err)
		}
	}
}

// Charon is one charon daemon in a namespace of a lab, with its files in
// one directory: Conf, Vici, Log. The caller writes Conf (RenderTemplate)
// and its swanctl.conf there before Start. Its methods are safe for
// concurrent use.
type Charon struct {
	lab *Lab
	ns  *Netns
	dir string

	mu   sync.Mutex
	proc *Process // the last started
}

// NewCharon returns a charon to run in ns with its files in dir (normally
// the lab's Dir). It starts nothing.
func (l *Lab) NewCharon(ns *Netns, dir string) *Charon {
	return &Charon{lab: l, ns: ns, dir: dir}
}

// Netns is the namespace charon runs in.
func (c *Charon) Netns() *Netns { return c.ns }

// Dir is the directory of charon's files.
func (c *Charon) Dir() string { return c.dir }

// Conf is the path of charon's strongswan.conf, DIR/strongswan.conf.
func (c *Charon) Conf() string { return filepath.Join(c.dir, "strongswan.conf") }

// Vici is the path of the vici socket, DIR/charon.vici, that Conf must
// make charon listen on.
func (c *Charon) Vici() string { return filepath.Join(c.dir, "charon.vici") }

// Log is the path of the log file, DIR/charon.log, that Conf should make
// charon log to.
func (c *Charon) Log() string { return filepath.Join(c.dir, "charon.log") }

// Process is the running charon (nil before Start).
func (c *Charon) Process() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// Start runs charon in its namespace with a private /run and waits until
// its vici socket answers (20 seconds at most). Its Stop is registered
// with the lab. After Kill, Start runs a new charon with the same files.
func (c *Charon) Start(ctx context.Context) error {
	argv := []string{"unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run && exec " + CharonPath}
	p, err := c.lab.Start(c.ns, "charon", argv, &ProcOptions{Env: []string{"STRONGSWAN_CONF=" + c.Conf()}})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
	return WaitFor(ctx, fmt.Sprintf("charon in %s to answer on %s", c.ns, c.Vici()), charonUpWait, 50*time.Millisecond, func() (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%w: charon exited: %v: %s", ErrStop, err, p.Output())
		}
		_, err := c.Swanctl(ctx, "--stats")
		return err == nil, err
	})
}

// Kill ends charon with SIGKILL, as a crash would, and waits until it has
// exited.
func (c *Charon) Kill() {
	if p := c.Process(); p != nil {
		p.Kill()
	}
}

// Swanctl runs swanctl with args against charon's vici socket (30 seconds
// at most) and returns its output. On failure the error holds the last
// lines of the output.
func (c *Charon) Swanctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, swanctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "swanctl", append(args, "--uri", "unix://"+c.Vici())...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+c.Conf())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("swanctl %s: %w: %s", strings.Join(args, " "), err, Tail(string(out), 10))
	}
	return string(out), nil
}

// Load loads the swanctl configuration file swconf, with the credentials
// in the x509/, x509ca/ and key directories beside it (swanctl --load-all
// --file), and checks that swanctl reports conns connections loaded.
func (c *Charon) Load(ctx context.Context, swconf string, conns int) error {
	out, err := c.Swanctl(ctx, "--load-all", "--file", swconf)
	if err != nil {
		return err
	}
	if !strings.Contains(out, fmt.Sprintf("successfully loaded %d connections", conns)) {
		return fmt.Errorf("swanctl --load-all: %s", out)
	}
	return nil
}

// LogTail returns the last n lines of charon's log file.
func (c *Charon) LogTail(n int) (string, error) {
	data, err := os.ReadFile(c.Log())
	if err != nil {
		return "", err
	}
	return Tail(string(data), n), nil
}

// WriteCredentials writes a CA's certificate, charon's certificate and
// charon's private key (ECDSA or RSA) where swanctl --load-all --file
// DIR/swanctl.conf finds them: DIR/x509ca/ca.pem, DIR/x509/charon.pem and
// DIR/ecdsa/charon.key or DIR/rsa/charon.key. It returns the names
// swanctl.conf gives them as cacerts and certs: "ca.pem" and
// "charon.pem".
func (c *Charon) WriteCredentials(ca, cert *x509.Certificate, key crypto.Signer) (caFile, certFile string, err error) {
	var sub, typ string
	var der []byte
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if der, err = x509.MarshalECPrivateKey(k); err != nil {
			return "", "", fmt.Errorf("lab: charon's key: %w", err)
		}
		sub, typ = "ecdsa", "EC PRIVATE KEY"
	case *rsa.PrivateKey:
		sub, typ, der = "rsa", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k)
	default:
		return "", "", fmt.Errorf("lab: charon's key: %T is neither ECDSA nor RSA", key)
	}
	caFile, certFile = "ca.pem", "charon.pem"
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{filepath.Join(c.dir, "x509ca", caFile), "CERTIFICATE", ca.Raw},
		{filepath.Join(c.dir, "x509", certFile), "CERTIFICATE", cert.Raw},
		{filepath.Join(c.dir, sub, "charon.key"), typ, der},
	} {
		if err := WritePEM(f.path, f.typ, f.der); err != nil {
			return "", "", err
		}
	}
	return caFile, certFile, nil
}

// WritePEM writes der as one PEM block of type typ to path (mode 0600),
// creating its directory (mode 0700) if need be.
func WritePEM(path, typ string, der []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// RenderTemplate renders the text/template file tmpl with data into the
// file out (mode 0600): a peer's configuration from a template beside the
// test.
func RenderTemplate(tmpl, out string, data any) error {
	tp, err := template.ParseFiles(tmpl)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	var b bytes.Buffer
	if err := tp.Execute(&b, data); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CleanupTB is the part of testing.TB that NewForTest and LogOnFailure
// use.
type CleanupTB interface {
	Cleanup(func())
	Failed() bool
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// NewForTest is New for a test: t's cleanup closes the lab and reports an
// error of Close as the test's.
func NewForTest(t CleanupTB, opt *Options) *Lab {
	l := New(opt)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("removing the test bed: %v", err)
		}
	})
	return l
}

// LogOnFailure has t, if it has failed when its cleanups run, log the
// last n lines of the file at path, headed by what. Registered after the
// lab's Close (NewForTest), it runs before it, while the lab's files are
// still there.
func LogOnFailure(t CleanupTB, what, path string, n int) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if data, err := os.ReadFile(path); err == nil {
			t.Logf("%s (%s):\n%s", what, path, Tail(string(data), n))
		}
	})
}
