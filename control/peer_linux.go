package control

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
)

// peerCred returns the credentials the kernel holds for the other end of
// c (SO_PEERCRED): the connecting process's for a server, the listening
// process's (as of its listen call) for a client.
func peerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}

// checkPeer accepts a connection from root or from the user the server runs
// as (SO_PEERCRED), the users the socket's mode 0600 lets in. It closes the
// window between creating the socket and restricting its mode.
func checkPeer(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if !trustedUID(cred.Uid) {
		return fmt.Errorf("peer uid %d (pid %d) is neither root nor uid %d", cred.Uid, cred.Pid, os.Geteuid())
	}
	return nil
}

// checkServer accepts a server that runs as one of o: root, the client's
// own user, or the owner of the socket's private directory (rule 4 in
// trust.go).
func checkServer(path string, c *net.UnixConn, o owners) error {
	cred, err := peerCred(c)
	if err != nil {
		return fmt.Errorf("control: %s: %w", path, err)
	}
	if !o.trusts(cred.Uid) {
		return &UntrustedError{Path: path, Reason: fmt.Sprintf(
			"the process listening on it (pid %d) runs as uid %d, %s; nothing was sent to it; %s",
			cred.Pid, cred.Uid, o, fix)}
	}
	return nil
}

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
