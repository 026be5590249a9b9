package control

// Whom the client trusts with a request: the socket path is only a name,
// and whoever binds it first answers there. Before a request leaves, the
// client checks, as ssh-agent's and gpg-agent's clients rely on private
// directories:
//
//  1. the socket file is owned by root or by the client's own user;
//  2. its directory is owned by one of them and writable by no one else
//     (a world-writable /tmp, sticky or not, lets any local user bind the
//     name first);
//  3. every directory above it is owned by one of them and writable by no
//     one else unless sticky (so that nobody can rename the directory away);
//  4. after connecting, the kernel's word on who listens (SO_PEERCRED):
//     root or the client's own user. This closes the window between the
//     checks of the file and the connect.
//
// The server holds its directory to rule 2 too (listenUnix), and creates a
// missing one with mode 0700.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// UntrustedError is the error of a client that will not talk to what
// listens at the socket path, or of a server that will not create its
// socket where others could take its place.
type UntrustedError struct {
	Path   string
	Reason string
}

func (e *UntrustedError) Error() string { return "control: not trusting " + e.Path + ": " + e.Reason }

// trustedUID reports whether uid is root or the process's effective user.
func trustedUID(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// fix is the advice every refusal ends with.
const fix = "put control_socket in a directory only root or the gateway's user can write, such as " +
	"/run/sluice (sluice run creates a missing one with mode 0700)"

// checkSocketFile checks rules 1 to 3 for the socket at path, before the
// client connects. A path with nothing there, or one this user may not
// look up, passes: the dial fails on it too, and says so.
func checkSocketFile(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if !filepath.IsAbs(real) {
		if real, err = filepath.Abs(real); err != nil {
			return fmt.Errorf("control: %w", err)
		}
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return nil // gone since: the dial reports it
	}
	if uid, ok := fileOwner(fi); ok && !trustedUID(uid) {
		return &UntrustedError{Path: path, Reason: fmt.Sprintf(
			"the socket %s is owned by uid %d, neither root nor uid %d (this user): another user may have bound it before sluice; remove it, and %s",
			real, uid, os.Geteuid(), fix)}
	}
	return checkSocketDir(path, filepath.Dir(real))
}

// checkSocketDir checks rules 2 and 3 for dir, the directory of the socket
// at path.
func checkSocketDir(path, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	for d, first := dir, true; ; d, first = filepath.Dir(d), false {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
		uid, ok := fileOwner(fi)
		what := "its directory"
		if !first {
			what = "the directory above it"
		}
		if ok && !trustedUID(uid) {
			return &UntrustedError{Path: path, Reason: fmt.Sprintf(
				"%s %s is owned by uid %d, neither root nor uid %d (this user), who could replace the socket; %s",
				what, d, uid, os.Geteuid(), fix)}
		}
		m := fi.Mode()
		if m.Perm()&0o022 != 0 && (first || m&fs.ModeSticky == 0) {
			return &UntrustedError{Path: path, Reason: fmt.Sprintf(
				"%s %s is writable by other users (mode %#o), who could bind the socket's name first; %s",
				what, d, m.Perm()|stickyBit(m), fix)}
		}
		if up := filepath.Dir(d); up == d {
			return nil
		}
	}
}

func stickyBit(m fs.FileMode) fs.FileMode {
	if m&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}
