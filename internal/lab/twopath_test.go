package lab_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestTwoPath: the host reaches the gateway's address from its path 0
// address; with path 0 down, from its path 1 address; with path 0 back
// (a backup), still from path 1's; with path 1 down, from path 0's. Each
// time a datagram to the gateway arrives from the address the host's
// routes pick.
func TestTwoPath(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	tp, err := l.NewTwoPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := tp.Gateway.ListenUDP(netip.AddrPortFrom(tp.GatewayAddr(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dst := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	from := func() netip.Addr {
		t.Helper()
		c, err := tp.Host.Dial(ctx, "udp", dst.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [16]byte
		_, src, err := srv.ReadFromUDPAddrPort(b[:])
		if err != nil {
			t.Fatal(err)
		}
		return src.Addr()
	}
	check := func(what string, path int) {
		t.Helper()
		if got := from(); got != tp.HostAddr(path) {
			t.Errorf("%s: the gateway saw %v, want path %d's %v", what, got, path, tp.HostAddr(path))
		}
	}
	check("both paths up", 0)
	if err := tp.Down(0); err != nil {
		t.Fatal(err)
	}
	check("path 0 down", 1)
	if err := tp.Up(0); err != nil {
		t.Fatal(err)
	}
	check("path 0 back", 1)
	if err := tp.Down(1); err != nil {
		t.Fatal(err)
	}
	check("path 1 down", 0)
}
