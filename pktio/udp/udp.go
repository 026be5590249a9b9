// Package udp is the ESP-in-UDP (RFC 3948) Link: a UDP socket, usually on
// port 4500, read and written in batches with recvmmsg/sendmmsg.
//
// Read delivers each ESP datagram as a whole IP packet: the payload is
// received at the buffer's data offset and an IPv4 or IPv6 header and a UDP
// header are written in the headroom in front of it (HeaderRoom bytes are
// needed; 28 suffice on an IPv4 socket), built from the datagram's
// addresses, ports and TOS, so that esp.Parse recognises it unchanged.
// Datagrams with the non-ESP marker (IKE) and NAT-keepalives are counted
// (RxIKE, RxKeepalive), handed to Options.Control if set, and never
// delivered. Write strips the outer IP and UDP header the ESP layer wrote
// and sends the rest to the address and port that header names; a packet
// that is not UDP, is malformed, or whose destination is of a family the
// socket cannot reach is dropped and counted (TxInvalid).
//
// Offloads (both off unless asked for, so that behaviour does not depend on
// the kernel and the route):
//
//   - GSO (UDP_SEGMENT): consecutive packets to one destination with the
//     same size are sent as one datagram whose iovecs point at the packets
//     where they lie, and the kernel (or the NIC) cuts it into datagrams.
//     If the kernel refuses it with EIO (no checksum offload on the route)
//     the Conn turns GSO off and resends packet by packet.
//   - GRO (UDP_GRO): the kernel may hand over several datagrams of one flow
//     as one; they arrive in 64 KiB staging buffers and are split into the
//     caller's buffers (one copy each), where without GRO datagrams are
//     received straight into the caller's buffers. GRO saves per-datagram
//     kernel work at high rates; without it the receive path copies
//     nothing.
//
// OpenN opens several sockets on one address with SO_REUSEPORT, one per
// worker; the kernel spreads flows (by a hash of addresses and ports) across
// them. The group is the caller's alone: a port that another socket holds
// is refused with EADDRINUSE (see OpenN).
package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/sockio"
)

// DefaultPort is the IKE NAT-traversal port (RFC 3948, RFC 7296 section
// 2.23) on which ESP-in-UDP is expected.
const DefaultPort = 4500

// HeaderRoom is the headroom Read needs in each buffer for the IPv6 and UDP
// header it synthesises.
const HeaderRoom = sockio.IPv6UDPHeader

// groStage is how many 64 KiB staging buffers a GRO reader receives into.
const groStage = 8

// Options configure a Conn. The zero value is a plain socket: no offloads,
// default batch and buffer sizes, IKE and keepalives only counted.
type Options struct {
	// Control, if set, is called from Read for each IKE datagram (the
	// UDP payload, non-ESP marker included) and each NAT-keepalive. pkt
	// aliases a receive buffer and is valid only during the call; from
	// is the sender and to the address it was sent to (the destination
	// the kernel reports, which names the local address on a socket
	// bound to a wildcard, and the socket's port). It runs on the
	// reading goroutine, in the data path: it must not block, and should
	// not allocate per call.
	Control func(pkt []byte, from, to netip.AddrPort)
	// GSO sends runs of equal-sized packets to one destination as one
	// UDP_SEGMENT datagram.
	GSO bool
	// GRO receives coalesced datagrams (UDP_GRO).
	GRO bool
	// BatchSize is the number of messages per recvmmsg/sendmmsg call;
	// 0 means pktio.DefaultBatchSize.
	BatchSize int
	// SocketBuffer, if > 0, sets SO_RCVBUF and SO_SNDBUF (forcing past
	// the sysctl limits when allowed).
	SocketBuffer int
	// FreeBind binds the address while it is not (yet) one of the host's
	// (IP_FREEBIND): a hot standby's virtual address, which arrives at a
	// takeover.
	FreeBind bool
}

// Conn is one UDP socket as a pktio.Link.
type Conn struct {
	sock   *sockio.Conn
	local  netip.AddrPort
	batch  int
	gro    bool
	r      *sockio.Reader
	w      *sockio.Writer
	stats  pktio.LinkStats
	ctl    func(pkt []byte, from, to netip.AddrPort)
	v6     bool // AF_INET6 socket
	v6only bool
	lock   *portLock // OpenN's group lock, released once by Close
	unlock sync.Once
}

// Open binds a UDP socket to laddr and returns it as a Link (a *Conn). An
// IPv4 address (or an IPv4-mapped one) opens an IPv4 socket; the IPv6
// unspecified address or the zero Addr opens a dual-stack socket; any other
// IPv6 address an IPv6-only one. Port 0 binds an ephemeral port (LocalAddr
// tells which); gateways pass DefaultPort.
func Open(laddr netip.AddrPort, opts Options) (pktio.Link, error) {
	c, err := open(laddr, opts, false)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// OpenN opens n sockets bound to laddr with SO_REUSEPORT, so that the
// kernel spreads flows across them: one per worker. With port 0 they all
// share an ephemeral port.
//
// The group is exclusive, as one socket of wireguard-go or charon is: a
// port that any other socket holds (another process's group included) is
// refused with an error that wraps syscall.EADDRINUSE. The kernel alone
// would let a second group of the same user (a second root gateway) join
// the first and take a share of its flows. OpenN therefore:
//
//  1. binds a probe socket without SO_REUSEPORT to laddr, which fails if
//     anything holds the port (and picks the port when laddr's is 0);
//  2. takes the port's lock: an abstract Unix socket named after the
//     address and port, which, like the port, belongs to the network
//     namespace and is released by the kernel when the process dies; a
//     second sluice that got past its probe stops here;
//  3. closes the probe and binds the group.
//
// Between 3's close and bind (microseconds) a process that is not sluice
// and uses SO_REUSEPORT under the same user could still bind the port and
// join; nothing else can.
func OpenN(laddr netip.AddrPort, n int, opts Options) ([]pktio.Link, error) {
	if n < 1 {
		return nil, fmt.Errorf("udp: OpenN needs at least one socket, got %d", n)
	}
	network, addr := listenAddr(laddr)
	plc := net.ListenConfig{Control: freeBind(addr, opts.FreeBind)}
	probe, err := plc.ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, laddr.Port()).String())
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	bound := probe.LocalAddr().(*net.UDPAddr).AddrPort()
	lock, err := lockPort(netip.AddrPortFrom(addr, bound.Port()))
	probe.Close()
	if err != nil {
		return nil, err
	}
	laddr = netip.AddrPortFrom(laddr.Addr(), bound.Port())
	links := make([]pktio.Link, 0, n)
	for range n {
		c, err := open(laddr, opts, true)
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			lock.release()
			return nil, err
		}
		lock.refs.Add(1)
		c.lock = lock
		links = append(links, c)
	}
	lock.release() // OpenN's own reference: the last Close releases it
	return links, nil
}

// portLock is the lock of one group's address and port (OpenN, step 2):
// held while a socket of the group is open.
type portLock struct {
	fd   int
	refs atomic.Int32
}

// lockPort binds the abstract Unix socket that stands for ap in this
// network namespace, with one reference held by the caller. The socket
// never listens, so nobody can connect to it.
func lockPort(ap netip.AddrPort) (*portLock, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("udp: lock of %v: %w", ap, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@sluice/udp/" + ap.String()}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("udp: listen %v: %w (another sluice gateway in this network namespace holds the port)", ap, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("udp: lock of %v: %w", ap, err)
	}
	l := &portLock{fd: fd}
	l.refs.Store(1)
	return l, nil
}

func (l *portLock) release() {
	if l.refs.Add(-1) == 0 {
		unix.Close(l.fd)
	}
}

// listenAddr is the network and address to bind for laddr (see Open).
func listenAddr(laddr netip.AddrPort) (network string, addr netip.Addr) {
	network, addr = "udp6", laddr.Addr()
	switch {
	case !addr.IsValid():
		network, addr = "udp", netip.IPv6Unspecified()
	case addr.Is4() || addr.Is4In6():
		network, addr = "udp4", addr.Unmap()
	case addr.IsUnspecified():
		network = "udp"
	}
	return network, addr
}

func open(laddr netip.AddrPort, opts Options, reuseport bool) (*Conn, error) {
	network, addr := listenAddr(laddr)
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		if !reuseport && !opts.FreeBind {
			return nil
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if reuseport {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}
			if opts.FreeBind && serr == nil {
				serr = SetFreeBind(int(fd), addr)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, laddr.Port()).String())
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	uc := pc.(*net.UDPConn)
	sock, err := sockio.NewConn(uc)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: %w", err)
	}
	c, err := setup(sock, uc.LocalAddr().(*net.UDPAddr).AddrPort(), opts)
	if err != nil {
		sock.Close()
		return nil, err
	}
	return c, nil
}

func setup(sock *sockio.Conn, local netip.AddrPort, opts Options) (*Conn, error) {
	batch := opts.BatchSize
	if batch <= 0 {
		batch = pktio.DefaultBatchSize
	}
	var v6, v6only, gso, gro bool
	err := sock.Control(func(fd int) error {
		var err error
		if v6, v6only, err = sockio.Family(fd); err != nil {
			return err
		}
		if err := sockio.EnableRecvInfo(fd, v6, v6only); err != nil {
			return err
		}
		if err := sockio.SetBuffers(fd, opts.SocketBuffer); err != nil {
			return err
		}
		if opts.GSO {
			// Probe: kernels without UDP GSO (< 4.18) do not know the option.
			_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
			gso = err == nil
		}
		if opts.GRO {
			gro = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("udp: socket options: %w", err)
	}
	c := &Conn{sock: sock, local: local, batch: batch, gro: gro, ctl: opts.Control, v6: v6, v6only: v6only}
	room := sockio.IPv4UDPHeader
	if v6 {
		room = sockio.IPv6UDPHeader
	}
	rc := sockio.ReaderConfig{
		Proto: packet.ProtoUDP, Synth: true, Local: local, Headroom: room,
		Batch: batch, Filter: c.filter,
	}
	if gro {
		rc.GROStage = groStage
	}
	c.r = sockio.NewReader(sock, rc, &c.stats)
	c.w = sockio.NewWriter(sock, sockio.WriterConfig{
		Proto: packet.ProtoUDP, V6Socket: v6, MapV4: v6 && !v6only,
		Wildcard: local.Addr().IsUnspecified(), GSO: gso, Batch: batch,
	}, &c.stats)
	return c, nil
}

// filter takes IKE datagrams and NAT-keepalives out of the ESP stream.
func (c *Conn) filter(p []byte, from, to netip.AddrPort, t *pktio.Tally) bool {
	switch {
	case len(p) == 1 && p[0] == 0xff: // RFC 3948 section 2.3
		t.RxKeepalive++
	case len(p) >= 4 && p[0]|p[1]|p[2]|p[3] == 0: // RFC 3948 section 2.2
		t.RxIKE++
	default:
		return false
	}
	if c.ctl != nil {
		c.ctl(p, from, to)
	}
	return true
}

// Read implements pktio.Link.Read: see the package comment.
func (c *Conn) Read(bufs []*packet.Buf) (int, error) { return c.r.Read(bufs) }

// Write implements pktio.Link.Write: see the package comment.
func (c *Conn) Write(bufs []*packet.Buf) (int, error) { return c.w.Write(bufs) }

// BatchSize is Options.BatchSize or pktio.DefaultBatchSize.
func (c *Conn) BatchSize() int { return c.batch }

// Close closes the socket. It is idempotent and unblocks a blocked Read.
func (c *Conn) Close() error {
	err := c.sock.Close()
	if c.lock != nil {
		c.unlock.Do(c.lock.release)
	}
	return err
}

// Stats returns the counters.
func (c *Conn) Stats() *pktio.LinkStats { return &c.stats }

// LocalAddr is the address and port the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Offloads reports whether GSO and GRO are in use (asked for, supported,
// and for GSO not turned off after a refusal).
func (c *Conn) Offloads() (gso, gro bool) { return c.w.GSO(), c.gro }

// SendDatagram sends p as one UDP datagram from the socket to dst, with
// src as its source address when the socket is bound to a wildcard (src
// may be the zero Addr to let the kernel choose). It is the path for what
// is not ESP on the same port: IKE on port 4500 must leave from the socket
// that carries ESP, since a second socket with SO_REUSEPORT on that port
// would take a share of the peer's ESP (RFC 3948, RFC 7296 section 2.23).
// p is the whole UDP payload (an IKE message begins with the non-ESP
// marker). It is safe to call concurrently with Read and Write, does not
// keep p, and is not meant for the data path: it allocates.
func (c *Conn) SendDatagram(p []byte, src netip.Addr, dst netip.AddrPort) error {
	if c.sock.Closed() {
		return pktio.ErrClosed
	}
	a := dst.Addr().Unmap()
	var sa unix.Sockaddr
	switch {
	case a.Is4() && !c.v6:
		sa = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: a.As4()}
	case a.Is4() && !c.v6only:
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: netip.AddrFrom16(a.As16()).As16()}
	case a.Is6() && c.v6:
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: a.As16()}
	default:
		return fmt.Errorf("udp: cannot send to %v from a socket bound to %v", dst, c.local)
	}
	var oob []byte
	if c.local.Addr().IsUnspecified() && src.IsValid() && !src.IsUnspecified() {
		oob = make([]byte, sockio.SendCtrlSize)
		oob = oob[:sockio.PutSend(oob, a.Is4(), src.Unmap(), 0, 0)]
	}
	var serr error
	err := c.sock.Write(func(fd int) bool {
		serr = unix.Sendmsg(fd, p, oob, sa, 0)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("udp: sendmsg to %v: %w", dst, serr)
	}
	return nil
}

// SetFreeBind lets socket fd bind addr while it is not an address of the
// host (IP_FREEBIND, IPV6_FREEBIND).
func SetFreeBind(fd int, addr netip.Addr) error {
	if addr.Is4() || addr.Is4In6() {
		return unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_FREEBIND, 1)
	}
	return unix.SetsockoptInt(fd, unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
}

// freeBind is a net.ListenConfig Control that sets SetFreeBind if on.
func freeBind(addr netip.Addr, on bool) func(string, string, syscall.RawConn) error {
	if !on {
		return nil
	}
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = SetFreeBind(int(fd), addr) }); err != nil {
			return err
		}
		return serr
	}
}
