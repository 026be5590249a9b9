package control

// Creating the socket file: its directory, a stale file left by a process
// that died, its mode, and who may connect.

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// staleProbeTimeout bounds the dial that tells a live server's socket from a
// stale one.
const staleProbeTimeout = time.Second

// listenUnix creates the Unix socket at path with mode 0600. A missing
// parent directory is created with mode 0700; an existing one is left as
// it is, but refused if others may write it or a directory above it
// (checkSocketDir). A socket file already at path is removed only when
// nothing answers on it (its server died); a live socket or a file that
// is not a socket is an error. The listener does not unlink path on Close: the server removes
// the file itself, and only if it is still the one it created (same).
func listenUnix(path string) (l *net.UnixListener, same fs.FileInfo, err error) {
	if path == "" {
		return nil, nil, errors.New("control: empty socket path")
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("control: %w", err)
		}
	}
	if err := CheckSocketDir(path); err != nil {
		return nil, nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, nil, err
	}
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("control: %w", err)
	}
	l.SetUnlinkOnClose(false)
	// Before the first Accept. A client that connects between bind and
	// chmod is still refused by checkPeer.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		os.Remove(path)
		return nil, nil, fmt.Errorf("control: %w", err)
	}
	if same, err = os.Lstat(path); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("control: %w", err)
	}
	return l, same, nil
}

// CheckSocketDir reports whether a server may create its control socket
// at path: the directory, if it exists, must be root's or this user's and
// writable by its owner alone, and those above it root's or this user's
// and not writable by others unless sticky; otherwise another user could
// bind the name first (or replace the socket), and clients refuse to
// talk through it. A missing directory is fine: the server creates it,
// mode 0700.
func CheckSocketDir(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	o, err := checkSocketDir(path, dir)
	if err == nil && !trustedUID(o.gw) {
		// Clients would trust its owner, who could replace the socket.
		err = &UntrustedError{Path: path, Reason: fmt.Sprintf("its directory %s is owned by uid %d, neither root nor uid %d (this user); %s",
			dir, o.gw, os.Geteuid(), fix)}
	}
	if err != nil {
		var ue *UntrustedError
		if errors.As(err, &ue) {
			err = fmt.Errorf("control: not creating the control socket %s: %s", path, ue.Reason)
		}
		return err
	}
	return nil
}

// removeStale removes the socket file at path if no server answers on it.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("control: %s exists and is not a socket; not replacing it", path)
	}
	c, err := net.DialTimeout("unix", path, staleProbeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("control: %s is in use: another sluice answers on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control: %s exists and cannot be probed (%w); not replacing it", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control: removing stale socket: %w", err)
	}
	return nil
}

// removeIfSame removes path if it is still the file described by same: a
// later server that replaced it keeps its socket.
func removeIfSame(path string, same fs.FileInfo) {
	if fi, err := os.Lstat(path); err == nil && os.SameFile(fi, same) {
		os.Remove(path)
	}
}
