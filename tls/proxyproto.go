package tls

// PROXY protocol version 2 (the HAProxy PROXY protocol specification,
// section 2.2): a binary header a tcp:// backend receives before the
// stream, naming the client's address.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
)

// proxyV2Sig is the header's 12-byte signature.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

const (
	proxyV2HeadLen = 16      // signature, version/command, family, length
	proxyV2MaxLen  = 16 + 36 // the longest header AppendProxyV2 writes (TCP over IPv6)
	proxyV2Local   = 0x20    // version 2, LOCAL
	proxyV2Proxy   = 0x21    // version 2, PROXY
	famUnspec      = 0x00
	famTCP4        = 0x11
	famUDP4        = 0x12
	famTCP6        = 0x21
	famUDP6        = 0x22
	famUnixStream  = 0x31
	famUnixDgram   = 0x32
	unixAddrsLen   = 216 // two 108-byte paths
	inet4AddrsLen  = 12
	inet6AddrsLen  = 36
)

// Errors of ParseProxyV2.
var (
	// ErrProxyIncomplete: b holds a prefix of a valid header; read more.
	ErrProxyIncomplete = errors.New("tls: PROXY v2 header incomplete")
	// ErrProxyInvalid: b does not start with a valid version 2 header.
	ErrProxyInvalid = errors.New("tls: invalid PROXY v2 header")
)

// ProxyHeader is a parsed PROXY protocol v2 header.
type ProxyHeader struct {
	// Local is set for the LOCAL command (a connection the proxy made
	// itself, e.g. a health check): the addresses are not the client's.
	Local bool
	// Family is the address family and transport byte (0x11 TCP over
	// IPv4, 0x21 TCP over IPv6, 0x00 unspecified, ...).
	Family byte
	// Src and Dst are the client's and the proxy's addresses for the
	// IPv4 and IPv6 families, zero otherwise.
	Src, Dst netip.AddrPort
	// TLVs are the bytes after the addresses, unparsed; they alias the
	// parsed input.
	TLVs []byte
}

// AppendProxyV2 appends a PROXY command header for a TCP connection from
// src (the client) to dst (the address it connected to) to b and returns
// it. Addresses that are not *net.TCPAddr give a LOCAL header with no
// addresses. When one address is IPv4 and the other IPv6, both are written
// as IPv6 (IPv4-mapped). It does not allocate when b has room for
// proxyV2MaxLen more bytes.
func AppendProxyV2(b []byte, src, dst net.Addr) ([]byte, error) {
	b = append(b, proxyV2Sig...)
	s, ok1 := src.(*net.TCPAddr)
	d, ok2 := dst.(*net.TCPAddr)
	if !ok1 || !ok2 || s == nil || d == nil {
		return append(b, proxyV2Local, famUnspec, 0, 0), nil
	}
	sa, okS := netip.AddrFromSlice(s.IP)
	da, okD := netip.AddrFromSlice(d.IP)
	if !okS || !okD || s.Port < 0 || s.Port > 0xffff || d.Port < 0 || d.Port > 0xffff {
		return nil, errors.New("tls: PROXY v2: bad TCP address")
	}
	sa, da = sa.Unmap(), da.Unmap()
	if sa.Is4() && da.Is4() {
		b = append(b, proxyV2Proxy, famTCP4, 0, inet4AddrsLen)
		s4, d4 := sa.As4(), da.As4()
		b = append(b, s4[:]...)
		b = append(b, d4[:]...)
	} else {
		b = append(b, proxyV2Proxy, famTCP6, 0, inet6AddrsLen)
		s16, d16 := sa.As16(), da.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(s.Port))
	return binary.BigEndian.AppendUint16(b, uint16(d.Port)), nil
}

// ParseProxyV2 parses the PROXY v2 header at the start of b and returns it
// with its length in bytes. A prefix of a valid header gives
// ErrProxyIncomplete; anything else that is not a valid header gives
// ErrProxyInvalid. It does not allocate; h.TLVs aliases b.
func ParseProxyV2(b []byte) (h ProxyHeader, n int, err error) {
	k := min(len(b), len(proxyV2Sig))
	if !bytes.Equal(b[:k], proxyV2Sig[:k]) {
		return h, 0, ErrProxyInvalid
	}
	if len(b) >= 13 && b[12] != proxyV2Local && b[12] != proxyV2Proxy {
		return h, 0, ErrProxyInvalid
	}
	if len(b) < proxyV2HeadLen {
		return h, 0, ErrProxyIncomplete
	}
	h.Local = b[12] == proxyV2Local
	h.Family = b[13]
	n = proxyV2HeadLen + int(binary.BigEndian.Uint16(b[14:16]))
	var need int
	switch h.Family {
	case famUnspec:
	case famTCP4, famUDP4:
		need = inet4AddrsLen
	case famTCP6, famUDP6:
		need = inet6AddrsLen
	case famUnixStream, famUnixDgram:
		need = unixAddrsLen
	default:
		return ProxyHeader{}, 0, ErrProxyInvalid
	}
	if n-proxyV2HeadLen < need {
		return ProxyHeader{}, 0, ErrProxyInvalid
	}
	if len(b) < n {
		return ProxyHeader{}, 0, ErrProxyIncomplete
	}
	a := b[proxyV2HeadLen:n]
	switch need {
	case inet4AddrsLen:
		h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[0:4])), binary.BigEndian.Uint16(a[8:10]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[4:8])), binary.BigEndian.Uint16(a[10:12]))
	case inet6AddrsLen:
		h.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[0:16])), binary.BigEndian.Uint16(a[32:34]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[16:32])), binary.BigEndian.Uint16(a[34:36]))
	}
	if len(a) > need {
		h.TLVs = a[need:]
	}
	return h, n, nil
}
