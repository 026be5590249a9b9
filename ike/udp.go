package ike

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// UDPTransport is a Transport over plain UDP sockets, one per local
// address and port (the IKE port and the NAT-T port), for standalone use
// and tests. A gateway that already owns port 4500 (pktio/udp) uses its own
// Transport instead and feeds Endpoint.Receive from its Control hook.
type UDPTransport struct {
	conns map[netip.AddrPort]*net.UDPConn
	wg    sync.WaitGroup
	once  sync.Once
}

// NewUDPTransport takes ownership of conns, each bound to a specific
// address (not a wildcard) so that Receive learns the local address.
func NewUDPTransport(conns ...*net.UDPConn) (*UDPTransport, error) {
	t := &UDPTransport{conns: map[netip.AddrPort]*net.UDPConn{}}
	for _, c := range conns {
		a := c.LocalAddr().(*net.UDPAddr).AddrPort()
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if a.Addr().IsUnspecified() {
			return nil, fmt.Errorf("ike: UDP socket bound to the wildcard %v", a)
		}
		t.conns[a] = c
	}
	if len(t.conns) == 0 {
		return nil, errors.New("ike: NewUDPTransport needs sockets")
	}
	return t, nil
}

// Send implements Transport.
func (t *UDPTransport) Send(local, remote netip.AddrPort, pkt []byte) error {
	c := t.conns[local]
	if c == nil {
		return fmt.Errorf("ike: no socket on %v", local)
	}
	_, err := c.WriteToUDPAddrPort(pkt, remote)
	return err
}

// Serve reads every socket in its own goroutine and hands each datagram to
// e.Receive, until Close.
func (t *UDPTransport) Serve(e *Endpoint) {
	for local, c := range t.conns {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			buf := make([]byte, 65536)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				e.Receive(local, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), buf[:n])
			}
		}()
	}
}

// Close closes the sockets and waits for Serve's goroutines. It is
// idempotent.
func (t *UDPTransport) Close() error {
	t.once.Do(func() {
		for _, c := range t.conns {
			c.Close()
		}
	})
	t.wg.Wait()
	return nil
}
