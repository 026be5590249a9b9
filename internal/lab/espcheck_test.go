package lab_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/internal/lab"
	"github.com/sluicegw/sluice/pktio/pcap"
)

// espPayload is an ESP header, an IV and a few bytes of ciphertext.
func espPayload(spi, seq uint32, iv uint64) []byte {
	b := make([]byte, 8+8+24)
	binary.BigEndian.PutUint32(b, spi)
	binary.BigEndian.PutUint32(b[4:], seq)
	binary.BigEndian.PutUint64(b[8:], iv)
	return b
}

// ip4 wraps payload in an IPv4 header of protocol proto (checksums not
// set: the checker does not look at them).
func ip4(src, dst string, proto byte, payload []byte) []byte {
	b := make([]byte, 20, 20+len(payload))
	b[0], b[8], b[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(b[2:], uint16(20+len(payload)))
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return append(b, payload...)
}

func ip6(src, dst string, proto byte, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0], b[6], b[7] = 0x60, proto, 64
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

func udp(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// TestCheckESP writes a capture by hand, ESP in UDP and in IP, IPv4 and
// IPv6, with IKE, a NAT keepalive and other traffic beside it, and checks
// that ReadESP finds exactly the ESP and CheckESP counts the repeated
// (SPI, IV) and (SPI, sequence number) pairs per SPI, leaving the IVs of
// an SPI named as not AEAD alone.
func TestCheckESP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "esp.pcap")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkRaw, true)
	if err != nil {
		t.Fatal(err)
	}
	pkts := [][]byte{
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x1001, 1, 100))),
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x1001, 2, 101))),
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x1001, 3, 100))),                         // IV of #1
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x1001, 2, 102))),                         // seq of #2
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, append([]byte{0, 0, 0, 0}, espPayload(0, 0, 0)...))), // IKE
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(4500, 4500, []byte{0xff})),                                       // keepalive
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_UDP, udp(53, 53, espPayload(0x1001, 9, 9))),                               // not 4500
		ip4("198.51.100.1", "192.0.2.10", unix.IPPROTO_ESP, espPayload(0x2001, 1, 7)),
		ip4("198.51.100.1", "192.0.2.10", unix.IPPROTO_ESP, espPayload(0x2001, 2, 7)), // CBC: IV may repeat
		ip6("2001:db8::1", "2001:db8::2", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x3001, 5, 1))),
		ip6("2001:db8::1", "2001:db8::2", unix.IPPROTO_UDP, udp(4500, 4500, espPayload(0x3001, 5, 1))), // both
		ip4("192.0.2.10", "198.51.100.1", unix.IPPROTO_TCP, make([]byte, 40)),
	}
	t0 := time.Unix(1700000000, 0)
	for i, p := range pkts {
		if err := w.WritePacket(t0.Add(time.Duration(i)*time.Millisecond), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	got, err := lab.ReadESP(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("ReadESP found %d ESP packets, want 8: %v", len(got), got)
	}
	if p := got[0]; p.SPI != 0x1001 || p.Seq != 1 || !p.UDP || p.Src != netip.MustParseAddrPort("192.0.2.10:4500") || p.Record != 1 ||
		!bytes.Equal(p.Data, pkts[0]) || !p.Time.Equal(t0) || p.Truncated {
		t.Errorf("first packet: %+v", p)
	}
	if p := got[4]; p.UDP || p.SPI != 0x2001 || p.Src.Port() != 0 || p.Record != 8 {
		t.Errorf("ESP in IP: %+v", p)
	}
	r := lab.CheckESP(got, 0x2001)
	t.Log(r)
	want := map[uint32][3]int{0x1001: {4, 1, 1}, 0x2001: {2, 0, 0}, 0x3001: {2, 1, 1}}
	if len(r.SPIs) != 3 || r.Packets != 8 || r.DupIV() != 2 || r.DupSeq() != 2 {
		t.Errorf("report %v: want 3 SPIs, 8 packets, 2 repeated IVs, 2 repeated sequence numbers", r)
	}
	for spi, w := range want {
		s := r.SPI(spi)
		if s.Packets != w[0] || s.DupIV != w[1] || s.DupSeq != w[2] {
			t.Errorf("SPI 0x%x: %d packets, %d repeated IVs, %d repeated seqs; want %v", spi, s.Packets, s.DupIV, s.DupSeq, w)
		}
	}
	if s := r.SPI(0x1001); s.MinSeq != 1 || s.MaxSeq != 3 || len(s.Examples) != 2 {
		t.Errorf("SPI 0x1001: %+v", s)
	}
}

// TestCaptureReplayESP: a capture on a veth in a namespace records the
// ESP in UDP that crosses it, single datagrams and a UDP GSO super-packet
// cut into its datagrams, and leaves other traffic out; replayed from the
// other namespace, every packet arrives again, byte for byte, at the
// receiving socket (its checksum valid).
func TestCaptureReplayESP(t *testing.T) {
	lab.Require(t)
	ctx := testContext(t)
	l := labWithCleanup(t)
	x, err := l.NewNetns(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := l.NewNetns(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(x, "e0", y, "e0"); err != nil {
		t.Fatal(err)
	}
	xa, ya := netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")
	if err := x.AddAddr("e0", xa); err != nil {
		t.Fatal(err)
	}
	if err := y.AddAddr("e0", ya); err != nil {
		t.Fatal(err)
	}
	sink, err := y.ListenUDP(netip.AddrPortFrom(ya.Addr(), 4500))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	src, err := x.ListenUDP(netip.AddrPortFrom(xa.Addr(), 4500))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	other, err := x.ListenUDP(netip.AddrPortFrom(xa.Addr(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	file := filepath.Join(t.TempDir(), "esp.pcap")
	c, err := lab.CaptureESP(y, "e0", file)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	dst := netip.AddrPortFrom(ya.Addr(), 4500)
	var sent [][]byte
	for i := range 10 {
		p := espPayload(0x1001, uint32(i+1), uint64(1000+i))
		sent = append(sent, p)
		if _, err := src.WriteToUDPAddrPort(p, dst); err != nil {
			t.Fatal(err)
		}
		other.WriteToUDPAddrPort(p, netip.AddrPortFrom(ya.Addr(), 9)) // not 4500: left out
	}
	// One GSO send of 5 datagrams of 40 bytes, the last 20.
	var gso []byte
	for i := range 5 {
		p := espPayload(0x1002, uint32(i+1), uint64(2000+i))
		if i == 4 {
			p = p[:20]
		}
		sent = append(sent, p)
		gso = append(gso, p...)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], 40)
	if _, _, err := src.WriteMsgUDPAddrPort(gso, oob, dst); err != nil {
		t.Fatal(err)
	}
	recv := func(n int) [][]byte {
		t.Helper()
		var got [][]byte
		buf := make([]byte, 2048)
		for len(got) < n {
			sink.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, _, err := sink.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("after %d of %d datagrams: %v", len(got), n, err)
			}
			got = append(got, append([]byte(nil), buf[:k]...))
		}
		return got
	}
	recv(len(sent))
	err = lab.WaitFor(ctx, "15 packets captured", 5*time.Second, 0, func() (bool, error) { return c.Packets() >= 15, nil })
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %+v", st)
	if st.Packets != 15 || st.Other < 10 || st.Dropped != 0 {
		t.Errorf("capture: %+v; want 15 ESP packets, at least 10 others, none dropped", st)
	}
	pkts, err := lab.ReadESP(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) != 15 {
		t.Fatalf("read %d ESP packets back, want 15", len(pkts))
	}
	for i, p := range pkts {
		if want := binary.BigEndian.Uint32(sent[i]); p.SPI != want || !bytes.Equal(p.Data[28:], sent[i]) {
			t.Errorf("packet %d: %v with payload %x, want SPI 0x%x and %x", i, &p, p.Data[28:], want, sent[i])
		}
	}
	if r := lab.CheckESP(pkts); r.DupIV() != 0 || r.DupSeq() != 0 || len(r.SPIs) != 2 {
		t.Errorf("check: %v", r)
	}

	n, err := lab.ReplayESP(x, pkts)
	if err != nil || n != 15 {
		t.Fatalf("replayed %d: %v", n, err)
	}
	for i, got := range recv(15) {
		if !bytes.Equal(got, sent[i]) {
			t.Errorf("replayed datagram %d: %x, want %x", i, got, sent[i])
		}
	}
}
