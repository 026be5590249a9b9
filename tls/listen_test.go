package tls

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestListenFamilies: an IPv4 listen address accepts IPv4 only, "[::]"
// accepts IPv6 only unless dual stack is asked for, and an empty host is
// IPv4's every address, as nginx's "listen 8443" (issue 16, defect 13:
// "0.0.0.0:8443" also listened on [::]:8443).
func TestListenFamilies(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	tests := []struct {
		listen       string
		dual         bool
		want4, want6 bool
	}{
		{"0.0.0.0:0", false, true, false},
		{"0.0.0.0:0", true, true, false}, // dual applies to [::] only
		{":0", false, true, false},
		{"127.0.0.1:0", false, true, false},
		{"[::]:0", false, false, true},
		{"[::]:0", true, true, true},
		{"[::1]:0", false, false, true},
	}
	for _, tt := range tests {
		ln, err := listenTCP(tt.listen, tt.dual)
		if err != nil {
			t.Fatalf("%s: %v", tt.listen, err)
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		for _, d := range []struct {
			addr string
			want bool
		}{{"127.0.0.1", tt.want4}, {"::1", tt.want6}} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(d.addr, port), 5*time.Second)
			if c != nil {
				c.Close()
			}
			if got := err == nil; got != d.want {
				t.Errorf("listen %s (dual %v): connect to %s: %v, want connected = %v", tt.listen, tt.dual, d.addr, err, d.want)
			}
		}
		ln.Close()
	}
}

// TestSourceOf: IPv4 sources count by address (mapped ones too), IPv6
// sources by /64.
func TestSourceOf(t *testing.T) {
	conn := func(s string) net.Conn {
		return &addrConn{remote: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s))}
	}
	for _, tt := range []struct{ remote, want string }{
		{"192.0.2.7:5000", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:5000", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:5000", "2001:db8:1:2::"},
	} {
		if got := sourceOf(conn(tt.remote)); got != netip.MustParseAddr(tt.want) {
			t.Errorf("sourceOf(%s) = %v, want %s", tt.remote, got, tt.want)
		}
	}
}

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c *addrConn) RemoteAddr() net.Addr { return c.remote }

// TestListenNoKeepAlive: accepted connections have no TCP keepalives (Go
// turns them on by default, at four setsockopt calls a connection; the
// idle and handshake timeouts end connections whose peer has gone).
func TestListenNoKeepAlive(t *testing.T) {
	ln, err := listenTCP("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	rc.Control(func(fd uintptr) { on, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) })
	if serr != nil {
		t.Fatal(serr)
	}
	if on != 0 {
		t.Errorf("SO_KEEPALIVE is %d on an accepted connection, want 0", on)
	}
}
