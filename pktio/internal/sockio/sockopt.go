package sockio

import (
	"golang.org/x/sys/unix"
)

// Family returns the socket's address family and, for AF_INET6, whether
// it is IPv6-only.
func Family(fd int) (v6, v6only bool, err error) {
	d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return false, false, err
	}
	if d != unix.AF_INET6 {
		return false, false, nil
	}
	o, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
	if err != nil {
		return true, false, err
	}
	return true, o != 0, nil
}

// EnableRecvInfo asks for the destination address and TOS of each
// datagram as control messages. On a dual-stack IPv6 socket it asks for
// the IPv4 ones too, for the v4-mapped datagrams.
func EnableRecvInfo(fd int, v6, v6only bool) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return err
		}
		if v6only {
			return nil
		}
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
}

// SetBuffers sets the receive and send buffer sizes, past the sysctl
// limits when the process may (SO_RCVBUFFORCE needs CAP_NET_ADMIN).
func SetBuffers(fd, size int) error {
	if size <= 0 {
		return nil
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size); err != nil {
			return err
		}
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
	return nil
}
