//go:build !linux

package control

import "net"

// checkPeer relies on the socket's mode where SO_PEERCRED is not available.
func checkPeer(c *net.UnixConn) error { return nil }
