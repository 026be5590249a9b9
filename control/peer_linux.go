package control

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer accepts a connection from root or from the user the server runs
// as (SO_PEERCRED), the users the socket's mode 0600 lets in. It closes the
// window between creating the socket and restricting its mode.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	if cred.Uid != 0 && cred.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("peer uid %d (pid %d) is neither root nor uid %d", cred.Uid, cred.Pid, os.Geteuid())
	}
	return nil
}
