package tls

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// FuzzProxyV2 parses arbitrary input: no panic, a consistent length, and
// a parsed TCP header re-encodes to an equal header.
func FuzzProxyV2(f *testing.F) {
	v4, _ := AppendProxyV2(nil, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}, &net.TCPAddr{IP: net.IPv4(198, 51, 100, 2), Port: 443})
	v6, _ := AppendProxyV2(nil, &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, &net.TCPAddr{IP: net.ParseIP("2001:db8::2"), Port: 2})
	local, _ := AppendProxyV2(nil, nil, nil)
	f.Add(v4)
	f.Add(append(v6, "payload"...))
	f.Add(local)
	f.Add(v4[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseProxyV2(b)
		if err != nil {
			if err != ErrProxyIncomplete && err != ErrProxyInvalid {
				t.Fatalf("error %v", err)
			}
			if n != 0 {
				t.Fatalf("n %d with an error", n)
			}
			return
		}
		if n < proxyV2HeadLen || n > len(b) {
			t.Fatalf("n %d of %d", n, len(b))
		}
		// A prefix of a valid header is incomplete, never invalid.
		for _, k := range []int{0, 1, 12, 15, n - 1} {
			if k >= 0 && k < n {
				if _, _, err := ParseProxyV2(b[:k]); err != ErrProxyIncomplete {
					t.Fatalf("prefix %d of a valid header: %v", k, err)
				}
			}
		}
		if h.Local || (h.Family != famTCP4 && h.Family != famTCP6) || h.TLVs != nil {
			return
		}
		enc, err := AppendProxyV2(nil, net.TCPAddrFromAddrPort(h.Src), net.TCPAddrFromAddrPort(h.Dst))
		if err != nil {
			t.Fatal(err)
		}
		h2, n2, err := ParseProxyV2(enc)
		if err != nil || n2 != len(enc) || h2.Src.Addr().Unmap() != h.Src.Addr().Unmap() || h2.Dst.Addr().Unmap() != h.Dst.Addr().Unmap() ||
			h2.Src.Port() != h.Src.Port() || h2.Dst.Port() != h.Dst.Port() {
			t.Fatalf("round trip %+v -> %x -> %+v %v", h, enc, h2, err)
		}
	})
}

// FuzzProxyV2RoundTrip encodes arbitrary addresses and parses them back.
func FuzzProxyV2RoundTrip(f *testing.F) {
	f.Add([]byte{192, 0, 2, 1}, uint16(4711), []byte{198, 51, 100, 2}, uint16(443))
	f.Add(netip.MustParseAddr("2001:db8::1").AsSlice(), uint16(1), []byte{10, 0, 0, 1}, uint16(65535))
	f.Fuzz(func(t *testing.T, src []byte, sp uint16, dst []byte, dp uint16) {
		sa, ok1 := netip.AddrFromSlice(src)
		da, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 {
			return
		}
		buf := make([]byte, 0, proxyV2MaxLen)
		enc, err := AppendProxyV2(buf, net.TCPAddrFromAddrPort(netip.AddrPortFrom(sa, sp)), net.TCPAddrFromAddrPort(netip.AddrPortFrom(da, dp)))
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > proxyV2MaxLen || &enc[0] != &buf[:1][0] {
			t.Fatalf("%d bytes, or not in place", len(enc))
		}
		h, n, err := ParseProxyV2(append(enc, "data"...))
		if err != nil || n != len(enc) || h.Local {
			t.Fatalf("%x: %+v %d %v", enc, h, n, err)
		}
		if h.Src.Addr().Unmap() != sa.Unmap() || h.Dst.Addr().Unmap() != da.Unmap() || h.Src.Port() != sp || h.Dst.Port() != dp {
			t.Fatalf("%v:%d %v:%d -> %+v", sa, sp, da, dp, h)
		}
		if both4 := sa.Unmap().Is4() && da.Unmap().Is4(); both4 != (h.Family == famTCP4) {
			t.Fatalf("family %#x for %v, %v", h.Family, sa, da)
		}
	})
}

// refMatch is matchName written the obvious way, to compare against.
func refMatch(pattern, host string) bool {
	p := strings.ToLower(strings.TrimSuffix(pattern, "."))
	h := strings.ToLower(host)
	if p == "" || h == "" {
		return false
	}
	if strings.HasPrefix(p, "*.") && len(p) > 2 {
		pl := strings.Split(p[2:], ".")
		hl := strings.Split(h, ".")
		if len(hl) != len(pl)+1 || hl[0] == "" {
			return false
		}
		return strings.Join(hl[1:], ".") == strings.Join(pl, ".")
	}
	return p == h
}

// FuzzSNI checks the certificate matcher against refMatch and pickCert's
// contract.
func FuzzSNI(f *testing.F) {
	f.Add("*.example.com", "a.example.com", "example.com")
	f.Add("example.com", "EXAMPLE.com.", "*.")
	f.Add("*.a.b", "x.y.a.b", "a.b")
	f.Add("*", "host", "")
	f.Fuzz(func(t *testing.T, p1, host, p2 string) {
		// refMatch compares ASCII case-insensitively, as EqualFold does
		// for ASCII; other letters fold differently and are out of scope.
		for _, s := range []string{p1, host, p2} {
			for i := range len(s) {
				if s[i] >= 0x80 {
					return
				}
			}
		}
		h := strings.TrimSuffix(host, ".")
		if got, want := matchName(p1, h), refMatch(p1, h); got != want {
			t.Fatalf("matchName(%q, %q) = %v, want %v", p1, h, got, want)
		}
		names := [][]string{{p2}, {p1}}
		i := pickCert(names, host)
		switch {
		case i < 0 || i >= len(names):
			t.Fatalf("index %d", i)
		case i == 1 && (!matchName(p1, h) || matchName(p2, h)):
			t.Fatalf("picked %q for %q", p1, host)
		case i == 0 && matchName(p1, h) && !matchName(p2, h):
			t.Fatalf("missed %q for %q", p1, host)
		}
	})
}

// FuzzRequestHead parses arbitrary heads and checks the parser's
// contract and that a path never leaves the served directory.
func FuzzRequestHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("\r\nHEAD /a/b%20c?q=1 HTTP/1.0\nConnection: keep-alive\n\n"))
	f.Add([]byte("GET http://h/x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close, x\r\n\r\nabc"))
	f.Add([]byte("GET /../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("GET /%2e%2e/x HTTP/1.1\r\nHost: a\r\n \r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h reqHead
		n, err := parseRequestHead(b, &h)
		if err != nil {
			if err != errHeadIncomplete && err != errBadRequest {
				t.Fatal(err)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("n %d of %d", n, len(b))
		}
		var h2 reqHead
		if n2, err := parseRequestHead(b[:n], &h2); err != nil || n2 != n || !bytes.Equal(h2.method, h.method) || h2.keepAlive != h.keepAlive {
			t.Fatalf("the head alone parses differently: %d %v", n2, err)
		}
		if _, err := parseRequestHead(b[:n-1], &h2); err != errHeadIncomplete {
			t.Fatalf("a truncated head: %v", err)
		}
		name, err := cleanTarget(nil, h.target)
		if err != nil {
			return
		}
		if len(name) == 0 || name[0] == '/' || bytes.Contains(name, []byte("//")) || bytes.IndexByte(name, 0) >= 0 {
			t.Fatalf("name %q from %q", name, h.target)
		}
		for _, seg := range bytes.Split(name, []byte("/")) {
			if string(seg) == ".." || string(seg) == "." {
				t.Fatalf("name %q from %q", name, h.target)
			}
		}
	})
}
