// Package rawesp is the Link for ESP as IP protocol 50 (RFC 4303 without
// UDP encapsulation), on a raw IPv4 or IPv6 socket. It needs CAP_NET_RAW.
//
// A Link is of one family, the family of the address it is opened on.
// Read delivers whole IP packets: a raw IPv4 socket hands over the IP header
// with the payload, so the packet is received as it is, at the buffer's
// data offset; a raw IPv6 socket hands over only the payload, so the Link
// writes an IPv6 header in the headroom in front of it (HeaderRoom bytes)
// from the datagram's source, its destination (IPV6_PKTINFO) and traffic
// class. Write strips the outer header the ESP layer wrote and sends the
// ESP packet behind it to the destination the header names, from its
// source (IP_PKTINFO/IPV6_PKTINFO when the socket is bound to the
// unspecified address) with its TOS; the kernel writes the outer header
// (and chooses DF and the IPv4 ID). A packet that is not ESP, carries IPv6
// extension headers, is malformed or of the other family is dropped and
// counted (TxInvalid).
//
// A raw socket receives every ESP packet addressed to the host (to the
// bound address, if it is not unspecified), whichever SA it belongs to.
package rawesp

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/sockio"
)

// HeaderRoom is the headroom Read needs on an IPv6 Link for the header it
// synthesises. An IPv4 Link needs none.
const HeaderRoom = packet.IPv6Header

// Conn is a raw ESP socket as a pktio.Link.
type Conn struct {
	sock  *sockio.Conn
	local netip.Addr
	r     *sockio.Reader
	w     *sockio.Writer
	stats pktio.LinkStats
}

// SocketBuffer is the send and receive buffer size of the raw sockets.
const SocketBuffer = 4 << 20

// Open opens a raw socket for IP protocol 50 bound to laddr (the
// unspecified address of a family receives all ESP of that family) and
// returns it as a Link (a *Conn).
func Open(laddr netip.Addr) (pktio.Link, error) {
	if !laddr.IsValid() {
		return nil, fmt.Errorf("rawesp: no address (use 0.0.0.0 or :: for any)")
	}
	laddr = laddr.Unmap()
	v6 := laddr.Is6()
	network := "ip4:50"
	if v6 {
		network = "ip6:50"
	}
	pc, err := net.ListenPacket(network, laddr.String())
	if err != nil {
		return nil, fmt.Errorf("rawesp: %w", err)
	}
	ic := pc.(*net.IPConn)
	sock, err := sockio.NewConn(ic)
	if err != nil {
		ic.Close()
		return nil, fmt.Errorf("rawesp: %w", err)
	}
	// A raw socket gets every ESP packet of its family in one queue; the
	// default receive buffer overflows under a TCP flow through the tunnel.
	err = sock.Control(func(fd int) error {
		if err := sockio.SetBuffers(fd, SocketBuffer); err != nil {
			return err
		}
		if v6 {
			return sockio.EnableRecvInfo(fd, true, true)
		}
		return nil
	})
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("rawesp: socket options: %w", err)
	}
	c := &Conn{sock: sock, local: laddr}
	room := 0
	if v6 {
		room = HeaderRoom
	}
	batch := pktio.DefaultBatchSize
	c.r = sockio.NewReader(sock, sockio.ReaderConfig{
		Proto: packet.ProtoESP, Synth: v6, Local: netip.AddrPortFrom(laddr, 0),
		Headroom: room, Batch: batch,
	}, &c.stats)
	c.w = sockio.NewWriter(sock, sockio.WriterConfig{
		Proto: packet.ProtoESP, V6Socket: v6, Wildcard: laddr.IsUnspecified(), Batch: batch,
	}, &c.stats)
	return c, nil
}

// Read implements pktio.Link.Read: see the package comment.
func (c *Conn) Read(bufs []*packet.Buf) (int, error) { return c.r.Read(bufs) }

// Write implements pktio.Link.Write: see the package comment.
func (c *Conn) Write(bufs []*packet.Buf) (int, error) { return c.w.Write(bufs) }

// BatchSize is pktio.DefaultBatchSize.
func (c *Conn) BatchSize() int { return pktio.DefaultBatchSize }

// Close closes the socket. It is idempotent and unblocks a blocked Read.
func (c *Conn) Close() error { return c.sock.Close() }

// Stats returns the counters.
func (c *Conn) Stats() *pktio.LinkStats { return &c.stats }

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.Addr { return c.local }
