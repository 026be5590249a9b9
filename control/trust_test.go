package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/control/controltest"
)

// impostor listens at path as a server that is not sluice, and counts the
// connections it accepts and the bytes they send.
type impostor struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
	bytes int
	wg    sync.WaitGroup
}

func serveImpostor(t *testing.T, ln net.Listener) *impostor {
	im := &impostor{ln: ln}
	im.wg.Add(1)
	go func() {
		defer im.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			im.mu.Lock()
			im.conns++
			im.mu.Unlock()
			im.wg.Add(1)
			go func() {
				defer im.wg.Done()
				defer c.Close()
				// Answer like a server would, so that a client that sends
				// gets a reply and the test sees what it gave away.
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					im.mu.Lock()
					im.bytes += n
					im.mu.Unlock()
					if err != nil {
						return
					}
					c.Write([]byte(`{"ok":true,"result":{"changes":[]}}` + "\n"))
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); im.wg.Wait() })
	return im
}

// got returns what the impostor received once the client is done.
func (im *impostor) got() (conns, bytes int) {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.conns, im.bytes
}

// privateDir returns a new directory with mode 0700, owned by root.
func privateDir(t *testing.T) string {
	return filepath.Dir(controltest.SocketPath(t))
}

// listenAs binds and listens on path from a thread whose effective uid is
// uid, as another user's process would.
func listenAs(uid int, path string) (net.Listener, error) {
	var ln net.Listener
	err := asUser(uid, func() (err error) {
		ln, err = net.Listen("unix", path)
		return err
	})
	return ln, err
}

// reloadVia dials path and asks for a reload, as `sluice reload` does.
func reloadVia(path string) error {
	c, err := Dial(context.Background(), path)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Reload(context.Background())
	return err
}

// A socket another user owns (bound first at the configured path) is
// refused before a byte of the request is sent, with the path, the owner
// and what to do.
func TestClientRefusesOtherUsersSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to play another user")
	}
	dir := privateDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	im := serveImpostor(t, ln)
	err = reloadVia(path)
	var ue *UntrustedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("reload through another user's socket: %v, want it refused naming %s and uid 65534", err, path)
	}
	t.Log(err)
	if conns, n := im.got(); conns != 0 || n != 0 {
		t.Fatalf("the other user's server saw %d connections and %d bytes, want none", conns, n)
	}
}

// A server that runs as another user is refused even when its socket file
// looks right (it was swapped between the client's check and its connect):
// the client asks the kernel who listens (SO_PEERCRED) before it sends.
func TestClientRefusesOtherUsersServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to play another user")
	}
	dir := privateDir(t)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.sock")
	ln, err := listenAs(65534, path)
	if err != nil {
		t.Fatal(err)
	}
	// The file now looks like root's, in a directory only root may write.
	if err := os.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	im := serveImpostor(t, ln)
	err = reloadVia(path)
	var ue *UntrustedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("reload through a server running as uid 65534: %v, want it refused naming the uid", err)
	}
	// The connection itself was made (that is how the client learns the
	// server's uid); the request was not sent on it.
	ln.Close()
	im.wg.Wait()
	if _, n := im.got(); n != 0 {
		t.Fatalf("the other user's server got %d bytes, want none", n)
	}
}

// A socket in a directory others may write (as /tmp, sticky or not) is
// refused by the client, and the server does not create one there.
func TestSocketInSharedDirRefused(t *testing.T) {
	s := start(t, controltest.New(), nil)
	dir := filepath.Dir(s.Path())
	// Root or the test's user in a private directory: fine.
	if _, err := dial(t, s.Path()).SAs(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o777 | os.ModeSticky, 0o777, 0o770} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Dial(t.Context(), s.Path())
		var ue *UntrustedError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "writable") {
			t.Fatalf("dial with its directory mode %v: %v, want it refused naming %s", mode, err, dir)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}

	shared := privateDir(t)
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shared, "sluice.sock")
	if s, err := Listen(path, nil); err == nil || !strings.Contains(err.Error(), shared) || !strings.Contains(err.Error(), "writable") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("listen in a world-writable directory: %v, want it refused", err)
	}
	if _, err := os.Lstat(path); err == nil {
		t.Fatalf("socket created in %s", shared)
	}
}

// The server creates a missing directory with mode 0700.
func TestSocketDirCreatedPrivate(t *testing.T) {
	path := filepath.Join(privateDir(t), "run", "sluice", "sluice.sock")
	s, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(controltest.New())
	defer s.Close()
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory %s created with mode %v, want 0700", filepath.Dir(path), fi.Mode().Perm())
	}
	c, err := Dial(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Stats(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A user who may not reach root's socket directory gets the dial's
// "permission denied" explanation, as before the checks.
func TestClientNoAccessExplained(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to play another user")
	}
	s := start(t, controltest.New(), nil)
	err := asUser(65534, func() error {
		c, err := Dial(context.Background(), s.Path())
		if err == nil {
			c.Close()
		}
		return err
	})
	var de *DialError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "only for root and the user sluice runs as") {
		t.Fatalf("dial as nobody into root's 0700 directory: %v", err)
	}
}

// The systemd unit's way (packaging/systemd): the gateway runs as its own
// user, in a runtime directory that user owns and no one else may write
// (mode 0750). Only that user can have made the socket there, so root's
// client trusts it, its socket and its process, and sends the request;
// a root server still refuses to create its socket in another user's
// directory, whose owner could replace it.
func TestClientTrustsGatewayUsersPrivateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to play another user")
	}
	dir := privateDir(t)
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.sock")
	ln, err := listenAs(65534, path)
	if err != nil {
		t.Fatal(err)
	}
	im := serveImpostor(t, ln)
	if err := reloadVia(path); err != nil {
		t.Fatalf("reload through the gateway user's private directory: %v", err)
	}
	if conns, n := im.got(); conns != 1 || n == 0 {
		t.Errorf("the gateway user's server saw %d connections and %d bytes, want the request", conns, n)
	}
	if err := CheckSocketDir(filepath.Join(dir, "root.sock")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a root server's socket in uid 65534's directory: %v, want it refused", err)
	}

	// The same directory made writable by its group is no longer private.
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	var ue *UntrustedError
	if err := reloadVia(path); !errors.As(err, &ue) {
		t.Errorf("reload through a group-writable directory: %v, want it refused", err)
	}
}
