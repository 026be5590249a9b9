package sockio

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
)

// What PrependHeader synthesises, ParseOuter reads back.
func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		src, dst netip.Addr
		proto    uint8
	}{
		{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.2"), packet.ProtoUDP},
		{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), packet.ProtoUDP},
		{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.2"), packet.ProtoESP},
		{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), packet.ProtoESP},
	} {
		payload := []byte("0123456789abcdef")
		b := packet.NewBuf(make([]byte, 128), 64, len(payload))
		copy(b.Bytes(), payload)
		PrependHeader(b, tc.src, tc.dst, 4500, 4501, 0x2e, tc.proto)
		if b.Len() != len(payload)+HeaderLen(tc.src, tc.proto == packet.ProtoUDP) {
			t.Fatalf("%v: length %d", tc.src, b.Len())
		}
		if tc.src.Is4() && !packet.IPv4(b.Bytes()).ChecksumValid() {
			t.Errorf("%v: bad IPv4 checksum", tc.src)
		}
		var o Outer
		start, end, ok := ParseOuter(b.Bytes(), tc.proto, &o)
		if !ok || !bytes.Equal(b.Bytes()[start:end], payload) {
			t.Fatalf("%v: ParseOuter = %d, %d, %v", tc.src, start, end, ok)
		}
		want := Outer{Src: tc.src, Dst: tc.dst, TOS: 0x2e}
		if tc.proto == packet.ProtoUDP {
			want.SPort, want.DPort = 4500, 4501
		}
		if o != want {
			t.Errorf("%v: %+v, want %+v", tc.src, o, want)
		}
		other := uint8(packet.ProtoUDP + packet.ProtoESP - tc.proto)
		if _, _, ok := ParseOuter(b.Bytes(), other, &o); ok {
			t.Errorf("%v: accepted as protocol %d", tc.src, other)
		}
	}
	// A destination of the other family becomes the unspecified address.
	b := packet.NewBuf(make([]byte, 128), 64, 8)
	PrependHeader(b, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::1"), 1, 2, 0, packet.ProtoUDP)
	if d := packet.IPv4(b.Bytes()).Dst(); d != netip.IPv4Unspecified() {
		t.Errorf("dst %v", d)
	}
}

// The control messages PutSend writes parse back as the kernel's would.
func TestCmsgRoundTrip(t *testing.T) {
	b := make([]byte, SendCtrlSize)
	n := PutSend(b, true, netip.MustParseAddr("192.0.2.7"), 0x10, 1200)
	if n == 0 || n > SendCtrlSize {
		t.Fatalf("length %d", n)
	}
	levels := map[[2]int32]bool{}
	for rest := b[:n]; len(rest) >= unix.SizeofCmsghdr; {
		h, data, r, err := unix.ParseOneSocketControlMessage(rest)
		if err != nil {
			t.Fatal(err)
		}
		levels[[2]int32{h.Level, h.Type}] = true
		switch {
		case h.Type == unix.IP_PKTINFO:
			if !bytes.Equal(data[4:8], []byte{192, 0, 2, 7}) {
				t.Errorf("spec_dst %v", data[4:8])
			}
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT:
			if len(data) != 2 {
				t.Errorf("UDP_SEGMENT data %v", data)
			}
		}
		rest = r
	}
	for _, k := range [][2]int32{{unix.IPPROTO_IP, unix.IP_PKTINFO}, {unix.IPPROTO_IP, unix.IP_TOS}, {unix.IPPROTO_UDP, unix.UDP_SEGMENT}} {
		if !levels[k] {
			t.Errorf("missing control message %v", k)
		}
	}
	// IPv6: PKTINFO's address is the destination on receive; ParseRecv
	// reads it from the same layout.
	n = PutSend(b, false, netip.MustParseAddr("2001:db8::9"), 0x20, 0)
	var ri RecvInfo
	ParseRecv(b[:n], &ri)
	if ri.Dst != netip.MustParseAddr("2001:db8::9") || ri.TOS != 0x20 || ri.GSOSize != 0 {
		t.Errorf("parsed %+v", ri)
	}
	// Nothing to say: no control messages.
	if n := PutSend(b, true, netip.IPv4Unspecified(), 0, 0); n != 0 {
		t.Errorf("empty: %d", n)
	}
}

func TestSockaddr(t *testing.T) {
	var sa unix.RawSockaddrInet6
	for _, tc := range []struct {
		addr   string
		v6sock bool
		ok     bool
	}{
		{"192.0.2.1", false, true},
		{"192.0.2.1", true, true}, // v4-mapped
		{"2001:db8::1", true, true},
		{"2001:db8::1", false, false},
	} {
		a := netip.MustParseAddr(tc.addr)
		_, ok := PutSockaddr(&sa, a, 4500, tc.v6sock)
		if ok != tc.ok {
			t.Errorf("%s v6sock=%v: ok %v", tc.addr, tc.v6sock, ok)
			continue
		}
		if ok {
			if got := Sockaddr(&sa); got != netip.AddrPortFrom(a, 4500) {
				t.Errorf("%s v6sock=%v: read back %v", tc.addr, tc.v6sock, got)
			}
		}
	}
	if _, ok := PutSockaddr(&sa, netip.Addr{}, 1, true); ok {
		t.Error("accepted the zero Addr")
	}
}

// ParseOuter and ParseRecv take anything without panicking.
func FuzzParseOuter(f *testing.F) {
	b := packet.NewBuf(make([]byte, 128), 64, 16)
	PrependHeader(b, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 1, 2, 0, packet.ProtoUDP)
	f.Add(bytes.Clone(b.Bytes()))
	b = packet.NewBuf(make([]byte, 128), 64, 16)
	PrependHeader(b, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), 1, 2, 0, packet.ProtoUDP)
	f.Add(bytes.Clone(b.Bytes()))
	ctl := make([]byte, SendCtrlSize)
	f.Add(ctl[:PutSend(ctl, false, netip.MustParseAddr("2001:db8::9"), 1, 1000)])
	f.Fuzz(func(t *testing.T, data []byte) {
		var o Outer
		for _, proto := range []uint8{packet.ProtoUDP, packet.ProtoESP} {
			if s, e, ok := ParseOuter(data, proto, &o); ok && (s > e || e > len(data)) {
				t.Fatalf("payload [%d:%d] of %d bytes", s, e, len(data))
			}
		}
		// ParseRecv reads control messages in place: give it an
		// aligned copy as the kernel would.
		al := make([]uint64, (len(data)+7)/8)
		buf := unsafeBytes(al)[:len(data)]
		copy(buf, data)
		var ri RecvInfo
		ParseRecv(buf, &ri)
	})
}

func unsafeBytes(u []uint64) []byte {
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), len(u)*8)
}
