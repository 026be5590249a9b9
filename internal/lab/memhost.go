package lab

// MemHost: UDP over IPv4 on a pktio.Link, the least of a host stack that
// the traffic functions need on the plaintext side of an in-memory gateway.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// Shape of a MemHost's buffers.
const (
	memSlot      = 16 << 10 // largest packet a MemHost receives
	memConnQueue = 1024     // datagrams queued per socket before drops
)

// MemHost is a UDP/IPv4 host on a link: sockets bound on it send IPv4 UDP
// packets into the link and receive those addressed to them. It answers
// nothing else (no ICMP, no ARP: the link is point to point). UDP
// checksums are left zero, as IPv4 allows.
type MemHost struct {
	link pktio.Link

	wmu  sync.Mutex    // serialises link writes
	wbuf []*packet.Buf // one buffer over slot
	slot []byte
	id   uint16

	mu    sync.Mutex
	socks map[netip.AddrPort]*MemConn

	// Unclaimed counts packets no socket took (not IPv4 UDP, no socket on
	// the port, the socket's queue full).
	Unclaimed atomic.Uint64

	done chan struct{} // closed when the reader has stopped
}

// NewMemHost starts a host on link; Close stops it and closes the link.
func NewMemHost(link pktio.Link) *MemHost {
	h := &MemHost{link: link, slot: make([]byte, memSlot), socks: map[netip.AddrPort]*MemConn{}, done: make(chan struct{})}
	h.wbuf = []*packet.Buf{packet.NewBuf(h.slot, 0, 0)}
	go h.read()
	return h
}

// Close closes the link and every socket.
func (h *MemHost) Close() error {
	err := h.link.Close()
	<-h.done
	h.mu.Lock()
	socks := h.socks
	h.socks = map[netip.AddrPort]*MemConn{}
	h.mu.Unlock()
	for _, c := range socks {
		c.Close()
	}
	return err
}

// ListenUDP binds a socket to addr (an IPv4 address and a port other than
// 0; the unspecified address takes the port on every address).
func (h *MemHost) ListenUDP(addr netip.AddrPort) (*MemConn, error) {
	if !addr.Addr().Is4() || addr.Port() == 0 {
		return nil, fmt.Errorf("lab: memory host: bind %v: want an IPv4 address and a port", addr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.socks[addr]; dup {
		return nil, fmt.Errorf("lab: memory host: %v already bound", addr)
	}
	c := &MemConn{h: h, local: addr, q: make(chan datagram, memConnQueue), wake: make(chan struct{}, 1), closed: make(chan struct{})}
	h.socks[addr] = c
	return c, nil
}

// read delivers the link's packets to the sockets until the link closes.
func (h *MemHost) read() {
	defer close(h.done)
	bufs := make([]*packet.Buf, h.link.BatchSize())
	for i := range bufs {
		bufs[i] = packet.NewBuf(make([]byte, memSlot), 0, 0)
	}
	for {
		for _, b := range bufs {
			b.SetWindow(0, 0)
		}
		n, err := h.link.Read(bufs)
		for _, b := range bufs[:n] {
			h.deliver(b.Bytes())
		}
		if err != nil {
			return
		}
	}
}

func (h *MemHost) deliver(p []byte) {
	ip := packet.IPv4(p)
	if packet.IPVersion(p) != 4 || !ip.IsValid() || ip.Protocol() != packet.ProtoUDP || ip.FragmentOffset() != 0 || ip.MoreFragments() {
		h.Unclaimed.Add(1)
		return
	}
	u := packet.UDP(ip.Payload())
	if len(u) < packet.UDPHeader || int(u.Length()) < packet.UDPHeader || int(u.Length()) > len(u) {
		h.Unclaimed.Add(1)
		return
	}
	dst := netip.AddrPortFrom(ip.Dst(), u.DstPort())
	h.mu.Lock()
	c := h.socks[dst]
	if c == nil {
		c = h.socks[netip.AddrPortFrom(netip.IPv4Unspecified(), u.DstPort())]
	}
	h.mu.Unlock()
	if c == nil {
		h.Unclaimed.Add(1)
		return
	}
	d := datagram{from: netip.AddrPortFrom(ip.Src(), u.SrcPort()), data: append([]byte(nil), u[packet.UDPHeader:u.Length()]...)}
	select {
	case c.q <- d:
	default:
		h.Unclaimed.Add(1)
	}
}

// send writes one UDP packet into the link.
func (h *MemHost) send(src, dst netip.AddrPort, payload []byte) error {
	n := packet.IPv4MinHeader + packet.UDPHeader + len(payload)
	if n > len(h.slot) || n > 0xffff {
		return fmt.Errorf("lab: memory host: %d-byte datagram too large", len(payload))
	}
	if !dst.Addr().Is4() {
		return fmt.Errorf("lab: memory host: %v is not IPv4", dst)
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.id++
	p := h.slot[:n]
	packet.IPv4(p).Encode(&packet.IPv4Fields{Length: uint16(n), ID: h.id, TTL: 64, Protocol: packet.ProtoUDP,
		Src: src.Addr().As4(), Dst: dst.Addr().As4()})
	packet.UDP(p[packet.IPv4MinHeader:]).Encode(src.Port(), dst.Port(), uint16(packet.UDPHeader+len(payload)))
	copy(p[packet.IPv4MinHeader+packet.UDPHeader:], payload)
	h.wbuf[0].SetWindow(0, n)
	_, err := h.link.Write(h.wbuf)
	if errors.Is(err, pktio.ErrClosed) {
		return net.ErrClosed
	}
	return err
}

type datagram struct {
	from netip.AddrPort
	data []byte
}

// MemConn is a UDP socket on a MemHost. It has the methods of *net.UDPConn
// that Conn names, with the same errors: a read past its deadline fails
// with an error that is os.ErrDeadlineExceeded, one after Close with
// net.ErrClosed. Reads and writes may run concurrently.
type MemConn struct {
	h     *MemHost
	local netip.AddrPort
	q     chan datagram

	dmu      sync.Mutex
	deadline time.Time
	wake     chan struct{} // a new deadline was set

	closeOnce sync.Once
	closed    chan struct{}
}

// LocalAddr is the address the socket is bound to.
func (c *MemConn) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(c.local) }

// ReadFromUDPAddrPort receives one datagram into b (truncating it to
// len(b)) and returns its length and sender.
func (c *MemConn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	for {
		n, from, again, err := c.readOnce(b)
		if !again {
			return n, from, err
		}
	}
}

// readOnce waits for a datagram until the deadline in force when it
// starts; again says that the deadline changed meanwhile.
func (c *MemConn) readOnce(b []byte) (n int, from netip.AddrPort, again bool, err error) {
	c.dmu.Lock()
	dl := c.deadline
	c.dmu.Unlock()
	var expire <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return 0, netip.AddrPort{}, false, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expire = t.C
	}
	select {
	case d := <-c.q:
		return copy(b, d.data), d.from, false, nil
	case <-c.closed:
		return 0, netip.AddrPort{}, false, net.ErrClosed
	case <-expire:
		return 0, netip.AddrPort{}, false, os.ErrDeadlineExceeded
	case <-c.wake:
		return 0, netip.AddrPort{}, true, nil
	}
}

// WriteToUDPAddrPort sends b to addr from the socket's address. A socket
// bound to the unspecified address cannot send.
func (c *MemConn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	if c.local.Addr().IsUnspecified() {
		return 0, errors.New("lab: memory host: a socket bound to 0.0.0.0 cannot choose a source address")
	}
	if err := c.h.send(c.local, addr, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// SetReadDeadline sets the time after which reads fail; the zero time
// means never. It applies to a read already waiting.
func (c *MemConn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	c.deadline = t
	c.dmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// Close unbinds the socket and ends its reads.
func (c *MemConn) Close() error {
	c.closeOnce.Do(func() {
		c.h.mu.Lock()
		if c.h.socks[c.local] == c {
			delete(c.h.socks, c.local)
		}
		c.h.mu.Unlock()
		close(c.closed)
	})
	return nil
}
