package rawesp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/rawesp"
)

const (
	headroom = 128
	slot     = 2048
)

// Each test runs in a network namespace of its own, so that no ESP from
// elsewhere on the host reaches its raw sockets.

func open(t *testing.T, addr netip.Addr) *rawesp.Conn {
	t.Helper()
	l, err := rawesp.Open(addr)
	if err != nil {
		if addr.Is6() {
			t.Skipf("no IPv6: %v", err)
		}
		t.Fatal(err)
	}
	return l.(*rawesp.Conn)
}

// Write strips the outer header and the kernel writes its own; the raw
// socket on loopback receives the packet back, and Read hands over the
// whole IP packet (IPv4: the kernel's header; IPv6: a synthesised one).
// The SPI is random so that ESP from elsewhere on the host is told apart.
func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bind      netip.Addr
		src, addr netip.Addr
		tos       uint8
	}{
		{"ipv4", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"), 0x28},
		{"ipv6", netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), 0x2a},
		// Bound to the wildcard address, the source comes from the
		// outer header through IP_PKTINFO.
		{"ipv4-any", netip.IPv4Unspecified(), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"), 0},
		{"ipv6-any", netip.IPv6Unspecified(), netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.InNewNetns(t)
			l := open(t, tc.bind)
			col := linktest.Collect(t, l, headroom, slot)
			pool := packet.NewPool(8, slot, headroom)
			spi := rand.Uint32() | 1
			out := make([]*packet.Buf, 4)
			pool.GetN(out)
			from, to := netip.AddrPortFrom(tc.src, 0), netip.AddrPortFrom(tc.addr, 0)
			for i, b := range out {
				b.Reset(headroom)
				copy(b.Append(8+40+i), linktest.ESP(spi, uint32(i+1), 40+i))
				linktest.Outer(b, from, to, tc.tos)
			}
			if n, err := l.Write(out); n != len(out) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			for i := range out {
				p := col.Next(t, func(p []byte) bool {
					var pp esp.Parsed
					return esp.Parse(p, nil, &pp) == esp.ReasonNone && pp.SPI == spi
				})
				var pp esp.Parsed
				esp.Parse(p, nil, &pp)
				if pp.Src != tc.src || pp.Dst != tc.addr || pp.UDP {
					t.Errorf("packet %d: %+v", i, pp)
				}
				if seq := binary.BigEndian.Uint32(p[pp.ESPOff+4:]); seq != uint32(i+1) {
					t.Errorf("packet %d: sequence %d (out of order?)", i, seq)
					continue
				}
				if !bytes.Equal(p[pp.ESPOff:], linktest.ESP(spi, uint32(i+1), 40+i)) {
					t.Errorf("packet %d: payload differs", i)
				}
				var tos uint8
				if tc.addr.Is4() {
					tos = packet.IPv4(p).TOS()
				} else {
					tos = packet.IPv6(p).TrafficClass()
				}
				if tos != tc.tos {
					t.Errorf("packet %d: TOS %#x, want %#x", i, tos, tc.tos)
				}
			}
			if s := l.Stats().Snapshot(); s.TxPackets != 4 || s.TxDrops() != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	linktest.InNewNetns(t)
	l := open(t, netip.MustParseAddr("127.0.0.1"))
	defer l.Close()
	pool := packet.NewPool(8, slot, headroom)
	mk := func(src, dst netip.AddrPort) *packet.Buf {
		b := pool.Get()
		copy(b.Append(24), linktest.ESP(1, 1, 16))
		linktest.Outer(b, src, dst, 0)
		return b
	}
	lo6 := netip.MustParseAddrPort("[::1]:0")
	bad := []*packet.Buf{
		mk(lo6, lo6), // wrong family
		mk(netip.MustParseAddrPort("127.0.0.1:4500"), netip.MustParseAddrPort("127.0.0.1:4500")), // UDP, not ESP
		packet.NewBuf(make([]byte, 64), 0, 3),
	}
	if n, err := l.Write(bad); n != len(bad) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if s := l.Stats().Snapshot(); s.TxInvalid != 3 || s.TxPackets != 0 {
		t.Errorf("stats %+v", s)
	}

	l6 := open(t, netip.MustParseAddr("::1"))
	defer l6.Close()
	if _, err := l6.Read([]*packet.Buf{packet.NewBuf(make([]byte, 256), 8, 0)}); !errors.Is(err, pktio.ErrShortBuffer) {
		t.Errorf("Read without headroom on IPv6: %v", err)
	}
}

func TestClose(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1"} {
		t.Run(a, func(t *testing.T) {
			linktest.InNewNetns(t)
			l := open(t, netip.MustParseAddr(a))
			linktest.CheckClose(t, l, headroom)
		})
	}
}
