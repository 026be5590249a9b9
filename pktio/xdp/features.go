package xdp

// features.go asks the kernel what a driver offers AF_XDP before anything
// is attached: the netdev generic netlink family (Linux 6.3 and later)
// reports each device's XDP features, zero-copy sockets among them. A
// caller that wants AF_XDP only in zero-copy mode can so leave a device
// alone instead of attaching a program (on many drivers a reset of the
// device's rings) only to detach it again.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The netdev family's names and numbers (include/uapi/linux/netdev.h).
const (
	netdevFamily          = "netdev"
	netdevCmdDevGet       = 1 // NETDEV_CMD_DEV_GET
	netdevAttrIfindex     = 1 // NETDEV_A_DEV_IFINDEX, u32
	netdevAttrXDPFeatures = 3 // NETDEV_A_DEV_XDP_FEATURES, u64
	xdpActXSKZeroCopy     = 8 // NETDEV_XDP_ACT_XSK_ZEROCOPY
)

// ErrNoFeatures is ZeroCopy's error where the kernel does not report XDP
// features (no netdev family: before Linux 6.3).
var ErrNoFeatures = errors.New("xdp: the kernel does not report XDP features (netdev netlink family)")

// ZeroCopy reports whether the driver of ifname offers AF_XDP sockets in
// zero-copy mode, as the kernel's netdev family says. It returns
// ErrNoFeatures (wrapped) where the kernel has no such family, and an
// error for an interface it does not know. It runs in the caller's
// network namespace (its thread's).
func ZeroCopy(ifname string) (bool, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return false, fmt.Errorf("xdp: interface %s: %w", ifname, err)
	}
	fam, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return false, ErrNoFeatures
		}
		return false, fmt.Errorf("xdp: netdev family: %w", err)
	}
	f, err := devFeatures(fam.ID, uint32(link.Attrs().Index))
	if err != nil {
		return false, fmt.Errorf("xdp: netdev features of %s: %w", ifname, err)
	}
	return f&xdpActXSKZeroCopy != 0, nil
}

// devFeatures sends NETDEV_CMD_DEV_GET for ifindex to the netdev family
// (its id) and returns the device's XDP features. (netlink's request
// helper gets EINVAL from this command on 6.18, where the same bytes
// sent on a socket of our own are answered: it is done by hand.)
func devFeatures(family uint16, ifindex uint32) (uint64, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// A reply that never comes is an error, not a hang.
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	const seq = 1
	req := make([]byte, unix.NLMSG_HDRLEN+nl.SizeofGenlmsg+8)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], family)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], seq)
	req[16], req[17] = netdevCmdDevGet, 1 // command, version
	binary.NativeEndian.PutUint16(req[20:], 8)
	binary.NativeEndian.PutUint16(req[22:], netdevAttrIfindex)
	binary.NativeEndian.PutUint32(req[24:], ifindex)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return 0, syscall.Errno(-e)
					}
				}
				return 0, ErrNoFeatures
			case family:
				if f, ok := xdpFeatures(m.Data); ok {
					return f, nil
				}
				return 0, ErrNoFeatures
			}
		}
	}
}

// xdpFeatures finds NETDEV_A_DEV_XDP_FEATURES in a netdev family reply
// (the generic netlink header, then attributes).
func xdpFeatures(msg []byte) (uint64, bool) {
	if len(msg) < nl.SizeofGenlmsg {
		return 0, false
	}
	attrs, err := nl.ParseRouteAttr(msg[nl.SizeofGenlmsg:])
	if err != nil {
		return 0, false
	}
	for _, a := range attrs {
		if a.Attr.Type&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER) == netdevAttrXDPFeatures && len(a.Value) == 8 {
			return binary.NativeEndian.Uint64(a.Value), true
		}
	}
	return 0, false
}
