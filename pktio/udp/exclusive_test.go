package udp_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/udp"
)

// A second SO_REUSEPORT group on a port a group holds is refused with
// EADDRINUSE, as a second charon or wireguard-go is, instead of joining it
// (the kernel lets sockets of the same user join, and would split the
// flows between the two): on the same address, on the wildcard, and in
// the other order. The first group keeps every flow.
func TestReusePortGroupExclusive(t *testing.T) {
	linktest.NoLeaks(t)
	first, err := udp.OpenN(netip.MustParseAddrPort("127.0.0.1:0"), 2, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(first)
	port := first[0].(*udp.Conn).LocalAddr().Port()
	for _, a := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv4Unspecified(), {}} {
		second, err := udp.OpenN(netip.AddrPortFrom(a, port), 2, udp.Options{})
		if err == nil {
			closeAll(second)
			t.Fatalf("a second group on %v:%d joined the first", a, port)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("a second group on %v:%d: %v, want address already in use", a, port, err)
		}
	}

	// A group on the wildcard refuses one on a specific address too.
	wild, err := udp.OpenN(netip.MustParseAddrPort("0.0.0.0:0"), 2, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(wild)
	wport := wild[0].(*udp.Conn).LocalAddr().Port()
	if l, err := udp.OpenN(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wport), 1, udp.Options{}); !errors.Is(err, syscall.EADDRINUSE) {
		closeAll(l)
		t.Fatalf("a group on 127.0.0.1:%d under one on 0.0.0.0: %v, want address already in use", wport, err)
	}

	// The first group still gets every flow.
	const flows = 32
	cols := make([]*linktest.Collector, len(first))
	for i, l := range first {
		cols[i] = linktest.Collect(t, l, headroom, slot)
	}
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}
	for i := range flows {
		c, err := net.DialUDP("udp4", nil, dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(linktest.ESP(uint32(0x3000+i), 1, 32)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	timeout := time.After(linktest.Timeout)
	for got := 0; got < flows; got++ {
		select {
		case <-cols[0].Packets:
		case <-cols[1].Packets:
		case <-timeout:
			t.Fatalf("%d of %d flows arrived at the first group", got, flows)
		}
	}
	// Once the group is closed the port is free again.
	closeAll(first)
	again, err := udp.OpenN(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), 2, udp.Options{})
	if err != nil {
		t.Fatalf("after the first group closed: %v", err)
	}
	closeAll(again)
}

func closeAll(ls []pktio.Link) {
	for _, l := range ls {
		l.Close()
	}
}
