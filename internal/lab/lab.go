// Package lab builds small networks for tests and demos: network
// namespaces joined by veth pairs, processes running inside them, sockets
// opened inside them from the calling process, and an in-memory stand-in for
// all of it when there is no root (two data planes on pktio/pipe links).
// For the interop tests it also runs strongSwan's charon in a namespace
// (Charon) and renders peers' configuration files (RenderTemplate).
//
// Everything a Lab creates is registered with it as it is created, and
// Lab.Close removes it again in reverse order: processes are stopped
// (SIGTERM, then SIGKILL after a bounded wait), namespaces deleted (which
// deletes the veth and TUN devices in them), temporary files removed. Close
// is idempotent and safe on any failure path, so a test calls it from
// t.Cleanup right after New, and a command from a defer.
//
// # Names
//
// A lab's namespaces are named "sl-PID-RAND-SUFFIX": the prefix marks them
// as a lab's, PID is the creating process and RAND tells two labs of one
// process apart. Sweep uses the PID to remove namespaces left behind by a
// lab whose process died without closing it (a killed test binary), and
// touches nothing else.
//
// # Privileges
//
// Namespaces, veths and TUN devices need root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN) and iproute2's ip command: Available says whether this
// process has them. The in-memory parts (MemoryPair, MemHost, the traffic
// functions) need neither.
package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Prefix starts the name of every namespace a lab creates.
const Prefix = "sl-"

// DefaultStopTimeout is how long Close (and Process.Stop with no timeout)
// waits for a process to exit after SIGTERM before it sends SIGKILL.
const DefaultStopTimeout = 5 * time.Second

// Lab owns the namespaces, processes and files of one test or demo. Its
// methods are safe for concurrent use.
type Lab struct {
	id  string // "sl-PID-RAND"
	log *slog.Logger

	mu       sync.Mutex
	cleanups []cleanup // in creation order; Close runs them backwards
	names    map[string]bool
	dir      string
	closed   bool
}

type cleanup struct {
	what string
	fn   func() error
}

// Options configure a Lab. The zero value is usable.
type Options struct {
	// Log receives a line for each thing created and removed; nil
	// discards.
	Log *slog.Logger
}

// Available reports whether this process can build namespace labs: it must
// run as root and find iproute2's ip. The error says what is missing.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("lab: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("lab: iproute2's ip command is needed: %w", err)
	}
	return nil
}

// New returns an empty lab. It creates nothing yet, so it cannot fail for
// want of privileges; NewNetns and the rest do.
func New(opt *Options) *Lab {
	var o Options
	if opt != nil {
		o = *opt
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Lab{id: fmt.Sprintf("%s%d-%s", Prefix, os.Getpid(), randHex(2)), log: log, names: map[string]bool{}}
}

// ID is the prefix of the lab's namespace names: "sl-PID-RAND".
func (l *Lab) ID() string { return l.id }

// Logger is the lab's logger (never nil).
func (l *Lab) Logger() *slog.Logger { return l.log }

// Defer registers fn to run on Close, before everything created earlier is
// removed and after everything created later. what names it in errors. fn
// runs at most once. After Close, Defer runs fn at once and returns its
// error.
func (l *Lab) Defer(what string, fn func() error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return wrapCleanup(what, fn())
	}
	l.cleanups = append(l.cleanups, cleanup{what, fn})
	l.mu.Unlock()
	return nil
}

// Dir returns the lab's temporary directory, creating it on first use. It
// is removed, with everything in it, by Close.
func (l *Lab) Dir() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", errors.New("lab: closed")
	}
	if l.dir != "" {
		return l.dir, nil
	}
	d, err := os.MkdirTemp("", l.id+"-")
	if err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	l.dir = d
	l.cleanups = append(l.cleanups, cleanup{"remove " + d, func() error { return os.RemoveAll(d) }})
	return d, nil
}

// Close removes everything the lab created, newest first: it stops
// processes, runs deferred functions, deletes namespaces and removes the
// temporary directory. It goes on after an error and returns them all
// joined. It is idempotent; a second call returns nil.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	cs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		if err := wrapCleanup(cs[i].what, cs[i].fn()); err != nil {
			errs = append(errs, err)
		}
	}
	if len(cs) > 0 {
		l.log.Debug("lab closed", "lab", l.id, "removed", len(cs), "errors", len(errs))
	}
	return errors.Join(errs...)
}

func wrapCleanup(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("lab: %s: %w", what, err)
}

// register adds a cleanup unless the lab is closed, in which case it runs
// the cleanup at once and reports that the lab is closed.
func (l *Lab) register(what string, fn func() error) error {
	l.mu.Lock()
	if !l.closed {
		l.cleanups = append(l.cleanups, cleanup{what, fn})
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	fn()
	return errors.New("lab: closed")
}

// reserve claims a namespace name in this lab.
func (l *Lab) reserve(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab: closed")
	}
	if l.names[name] {
		return fmt.Errorf("lab: namespace %s already exists in this lab", name)
	}
	l.names[name] = true
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TB is the part of testing.TB that Require uses.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Require skips the test when this process cannot build namespace labs
// (see Available), or fails it when CI=true, where a test that needs root
// must not skip silently.
func Require(t TB) {
	t.Helper()
	err := Available()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v (CI=true: not skipping)", err)
	}
	t.Skipf("%v", err)
}
