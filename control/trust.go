package control

// Whom the client trusts with a request: the socket path is only a name,
// and whoever binds it first answers there. Before a request leaves, the
// client checks, as ssh-agent's and gpg-agent's clients rely on private
// directories:
//
//  1. its directory is writable by no one but its owner (a world-writable
//     /tmp, sticky or not, lets any local user bind the name first); its
//     owner is root, the client's own user, or the gateway's user: only
//     the owner of such a private directory can have made the socket in
//     it (systemd's RuntimeDirectory= makes /run/sluice the service
//     user's, mode 0750, and root's `sluice reload` goes through it);
//  2. every directory above it is owned by root or the client's user and
//     writable by no one else unless sticky (so that nobody can rename the
//     directory away);
//  3. the socket file is owned by root, the client's own user or the
//     directory's owner;
//  4. after connecting, the kernel's word on who listens (SO_PEERCRED):
//     one of the same. This closes the window between the checks of the
//     file and the connect.
//
// The server holds its directory to rules 1 and 2 too (listenUnix), and
// creates a missing one with mode 0700.

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

// owners is who may answer at a socket path: root, the client's user and
// gw, the owner of the socket's private directory (rule 1).
type owners struct{ gw uint32 }

func (o owners) trusts(uid uint32) bool { return trustedUID(uid) || uid == o.gw }

// String names them for an error.
func (o owners) String() string {
	if trustedUID(o.gw) {
		return fmt.Sprintf("neither root nor uid %d (this user)", os.Geteuid())
	}
	return fmt.Sprintf("neither root, uid %d (this user) nor uid %d (the owner of the socket's directory)", os.Geteuid(), o.gw)
}

// fix is the advice every refusal ends with.
const fix = "put control_socket in a directory only root or the gateway's user can write, such as " +
	"/run/sluice (sluice run creates a missing one with mode 0700)"

// checkSocketFile checks rules 1 to 3 for the socket at path, before the
// client connects, and returns who may answer there (rule 4). A path with
// nothing there, or one this user may not look up, passes: the dial fails
// on it too, and says so.
func checkSocketFile(path string) (owners, error) {
	me := owners{gw: uint32(os.Geteuid())}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return me, nil
	}
	if err != nil {
		return me, fmt.Errorf("control: %w", err)
	}
	if !filepath.IsAbs(real) {
		if real, err = filepath.Abs(real); err != nil {
			return me, fmt.Errorf("control: %w", err)
		}
	}
	o, err := checkSocketDir(path, filepath.Dir(real))
	if err != nil {
		return me, err
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return o, nil // gone since: the dial reports it
	}
	if uid, ok := fileOwner(fi); ok && !o.trusts(uid) {
		return me, &UntrustedError{Path: path, Reason: fmt.Sprintf(
			"the socket %s is owned by uid %d, %s: another user may have bound it before sluice; remove it, and %s",
			real, uid, o, fix)}
	}
	return o, nil
}

// checkSocketDir checks rules 1 and 2 for dir, the directory of the
// socket at path, and returns who may answer there.
func checkSocketDir(path, dir string) (owners, error) {
	me := owners{gw: uint32(os.Geteuid())}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return me, fmt.Errorf("control: %w", err)
	}
	o := me
	for d, first := dir, true; ; d, first = filepath.Dir(d), false {
		fi, err := os.Stat(d)
		if err != nil {
			return me, fmt.Errorf("control: %w", err)
		}
		uid, ok := fileOwner(fi)
		what := "its directory"
		if !first {
			what = "the directory above it"
		}
		if first && ok {
			// Private (checked below): its owner alone made the socket.
			o.gw = uid
		} else if ok && !trustedUID(uid) {
			return me, &UntrustedError{Path: path, Reason: fmt.Sprintf(
				"%s %s is owned by uid %d, neither root nor uid %d (this user), who could replace the socket; %s",
				what, d, uid, os.Geteuid(), fix)}
		}
		m := fi.Mode()
		if m.Perm()&0o022 != 0 && (first || m&fs.ModeSticky == 0) {
			return me, &UntrustedError{Path: path, Reason: fmt.Sprintf(
				"%s %s is writable by other users (mode %#o), who could bind the socket's name first; %s",
				what, d, m.Perm()|stickyBit(m), fix)}
		}
		if up := filepath.Dir(d); up == d {
			return o, nil
		}
	}
}

func stickyBit(m fs.FileMode) fs.FileMode {
	if m&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}
