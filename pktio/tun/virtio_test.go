package tun_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/pktio/tun"
)

// TCP flags.
const (
	fin = 0x01
	syn = 0x02
	psh = 0x08
	ack = 0x10
)

// tcpPacket builds an IPv4 TCP packet with valid checksums.
func tcpPacket(src, dst netip.AddrPort, seq, ackn uint32, flags byte, opts, payload []byte) []byte {
	th := 20 + len(opts)
	p := make([]byte, 20+th+len(payload))
	ip := packet.IPv4(p)
	p[0], p[8], p[9] = 0x45, 64, packet.ProtoTCP
	ip.SetTotalLength(uint16(len(p)))
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	ip.SetChecksum()
	t := p[20:]
	binary.BigEndian.PutUint16(t[0:], src.Port())
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], ackn)
	t[12] = byte(th/4) << 4
	t[13] = flags
	binary.BigEndian.PutUint16(t[14:], 65535)
	copy(t[20:], opts)
	copy(t[th:], payload)
	c := ^packet.Checksum(t, packet.PseudoHeaderSum(s[:], d[:], packet.ProtoTCP, len(t)))
	binary.BigEndian.PutUint16(t[16:], c)
	return p
}

// tcpInfo is what the tests look at in a TCP packet read from the device.
type tcpInfo struct {
	src, dst  netip.AddrPort
	seq, ackn uint32
	flags     byte
	payload   []byte
	csumOK    bool
}

func parseTCP(p []byte) (ti tcpInfo, ok bool) {
	ip := packet.IPv4(p)
	if packet.IPVersion(p) != 4 || !ip.IsValid() || ip.Protocol() != packet.ProtoTCP || len(p) < 40 {
		return ti, false
	}
	t := p[ip.HeaderLength():]
	th := int(t[12]>>4) * 4
	if th < 20 || len(t) < th {
		return ti, false
	}
	ti.src = netip.AddrPortFrom(ip.Src(), binary.BigEndian.Uint16(t[0:]))
	ti.dst = netip.AddrPortFrom(ip.Dst(), binary.BigEndian.Uint16(t[2:]))
	ti.seq = binary.BigEndian.Uint32(t[4:])
	ti.ackn = binary.BigEndian.Uint32(t[8:])
	ti.flags = t[13]
	ti.payload = t[th:]
	s, d := ip.Src().As4(), ip.Dst().As4()
	ti.csumOK = ip.ChecksumValid() && packet.Checksum(t, packet.PseudoHeaderSum(s[:], d[:], packet.ProtoTCP, len(t))) == 0xffff
	return ti, true
}

// writeOne writes p to q as a batch of one.
func writeOne(t *testing.T, q *tun.Queue, p []byte) {
	t.Helper()
	b := packet.NewBuf(make([]byte, headroom+len(p)), headroom, 0)
	copy(b.Append(len(p)), p)
	if n, err := q.Write([]*packet.Buf{b}); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

// tcpInCsumErrors reads the TCP InCsumErrors counter of the calling
// thread's network namespace.
func tcpInCsumErrors(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/thread-self/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(fields) {
				v, err := strconv.ParseUint(fields[i], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatal("no Tcp InCsumErrors in /proc/thread-self/net/snmp")
	return 0
}

// A TCP packet written alone goes with a partial checksum
// (VIRTIO_NET_HDR_F_NEEDS_CSUM): the kernel does not verify its TCP
// checksum (ESP's ICV has vouched for the packet). A SYN with a wrong
// checksum is answered with a SYN-ACK because of it, and only because of
// it: without it the kernel counts the SYN in InCsumErrors and drops it,
// while a correct SYN written the same way is answered.
func TestWritePartialChecksum(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(local4.Addr(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := ln.Addr().(*net.TCPAddr).AddrPort()
	c := linktest.Collect(t, q, headroom, slot)
	synAckTo := func(port uint16) func([]byte) bool {
		return func(p []byte) bool {
			ti, ok := parseTCP(p)
			return ok && ti.src == srv && ti.dst.Port() == port && ti.flags&(syn|ack) == syn|ack
		}
	}
	badSYN := func(port uint16) []byte {
		p := tcpPacket(netip.AddrPortFrom(peer4, port), srv, 1000, 0, syn, nil, nil)
		p[20+16] ^= 0x5a // the TCP checksum
		return p
	}

	writeOne(t, q, badSYN(40001))
	c.Next(t, synAckTo(40001))

	tun.SetPartialChecksum(q, false)
	before := tcpInCsumErrors(t)
	writeOne(t, q, badSYN(40002))
	linktest.WaitFor(t, "InCsumErrors to count the SYN without a partial checksum", func() bool { return tcpInCsumErrors(t) > before })
	writeOne(t, q, tcpPacket(netip.AddrPortFrom(peer4, 40003), srv, 1000, 0, syn, nil, nil))
	p := c.Next(t, func(p []byte) bool { return synAckTo(40002)(p) || synAckTo(40003)(p) })
	if synAckTo(40002)(p) {
		t.Fatal("the kernel answered a SYN with a wrong checksum written without a partial checksum")
	}
}

// Consecutive TCP segments of one connection are written as one
// super-packet (one writev, virtio-net GSO TCPv4 with a partial checksum)
// and the local socket receives the bytes in order. Their TCP checksums
// are wrong on purpose: Write does not verify them (ESP has), and the
// kernel does not either, for a super-packet it is told to checksum
// itself.
func TestWriteCoalescedTCP(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(local4.Addr(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := ln.Addr().(*net.TCPAddr).AddrPort()
	cli := netip.AddrPortFrom(peer4, 40010)
	c := linktest.Collect(t, q, headroom, slot)
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		conn, err := ln.AcceptTCP()
		if err == nil {
			accepted <- conn
		}
	}()

	const isn = 5000
	writeOne(t, q, tcpPacket(cli, srv, isn, 0, syn, nil, nil))
	p := c.Next(t, func(p []byte) bool {
		ti, ok := parseTCP(p)
		return ok && ti.dst == cli && ti.flags&(syn|ack) == syn|ack
	})
	sa, _ := parseTCP(p)
	writeOne(t, q, tcpPacket(cli, srv, isn+1, sa.seq+1, ack, nil, nil))
	var conn *net.TCPConn
	select {
	case conn = <-accepted:
	case <-time.After(linktest.Timeout):
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { conn.Close() })

	const segs, size = 8, 1000
	pool := packet.NewPool(segs, slot, headroom)
	bufs := make([]*packet.Buf, segs)
	pool.GetN(bufs)
	var want []byte
	for i, b := range bufs {
		payload := bytes.Repeat([]byte{byte('a' + i)}, size)
		want = append(want, payload...)
		flags := byte(ack)
		if i == segs-1 {
			flags |= psh
		}
		p := tcpPacket(cli, srv, isn+1+uint32(i*size), sa.seq+1, flags, nil, payload)
		p[20+16] ^= 0xff
		copy(b.Append(len(p)), p)
	}
	before := rxPackets(t, q.Name())
	if n, err := q.Write(bufs); n != segs || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := rxPackets(t, q.Name()) - before; got != 1 {
		t.Errorf("the device received %d packets for %d segments written, want 1 super-packet", got, segs)
	}
	conn.SetReadDeadline(time.Now().Add(linktest.Timeout))
	got := make([]byte, len(want))
	for n := 0; n < len(got); {
		k, err := conn.Read(got[n:])
		if err != nil {
			t.Fatalf("read after %d bytes: %v", n, err)
		}
		n += k
	}
	if !bytes.Equal(got, want) {
		t.Error("the socket received other bytes than were written")
	}
}

// A local TCP socket's data leaves through the device as TSO
// super-packets (the device has TSO), which Read splits straight into the
// caller's buffers: several segments come out of one Read, each a packet
// of its own with valid IPv4 and TCP checksums, contiguous sequence
// numbers, the advertised MSS, and the bytes the socket sent.
func TestOffloadSplitTCP(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	peer := netip.AddrPortFrom(peer4, 7777)
	const mss = 1000

	// Answer the SYN as the peer, advertising MSS 1000 and a large window.
	pool := packet.NewPool(q.BatchSize(), slot, headroom)
	bufs := make([]*packet.Buf, q.BatchSize())
	pool.GetN(bufs)
	type readResult struct {
		segs []tcpInfo
		err  error
	}
	reads := make(chan readResult, 64)
	go func() {
		for {
			for _, b := range bufs {
				b.Reset(headroom)
			}
			n, err := q.Read(bufs)
			if err != nil {
				reads <- readResult{err: err}
				return
			}
			var r readResult
			for _, b := range bufs[:n] {
				if ti, ok := parseTCP(b.Bytes()); ok && ti.dst == peer {
					ti.payload = bytes.Clone(ti.payload)
					r.segs = append(r.segs, ti)
				}
			}
			if len(r.segs) > 0 {
				reads <- r
			}
		}
	}()
	t.Cleanup(func() { q.Close() })
	next := func() []tcpInfo {
		t.Helper()
		select {
		case r := <-reads:
			if r.err != nil {
				t.Fatalf("Read: %v", r.err)
			}
			return r.segs
		case <-time.After(linktest.Timeout):
			t.Fatal("nothing read")
		}
		return nil
	}

	dialed := make(chan net.Conn, 1)
	derr := make(chan error, 1)
	// The socket must be made on this goroutine's thread (the test's
	// namespace); net.Dial blocks until the handshake is done, so the
	// SYN is answered from another goroutine.
	go func() {
		segs := next()
		s := segs[0]
		if s.flags&syn == 0 {
			derr <- nil
			return
		}
		opts := []byte{2, 4, mss >> 8, mss & 0xff, 1, 3, 3, 7} // MSS, NOP, window scale 7
		sa := tcpPacket(peer, s.src, 9000, s.seq+1, syn|ack, opts, nil)
		b := packet.NewBuf(make([]byte, headroom+len(sa)), headroom, 0)
		copy(b.Append(len(sa)), sa)
		q.Write([]*packet.Buf{b})
	}()
	conn, err := net.DialTimeout("tcp4", peer.String(), linktest.Timeout)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	close(dialed)
	select {
	case <-derr:
		t.Fatal("the first packet read was not the SYN")
	default:
	}

	data := make([]byte, 8*mss)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	var first uint32
	got := 0
	most := 0
	for got < len(data) {
		segs := next()
		k := 0
		for _, s := range segs {
			if len(s.payload) == 0 {
				continue // the ACK of the handshake
			}
			if got == 0 && first == 0 {
				first = s.seq
			}
			off := int(s.seq - first)
			if off != got {
				t.Fatalf("segment at offset %d, want %d (retransmission or reordering)", off, got)
			}
			if !s.csumOK {
				t.Fatalf("segment at offset %d: checksum does not verify", off)
			}
			if len(s.payload) > mss {
				t.Fatalf("segment at offset %d: %d bytes, MSS %d", off, len(s.payload), mss)
			}
			if s.flags&fin != 0 || (s.flags&psh != 0 && off+len(s.payload) != len(data) && k < len(segs)-1) {
				t.Errorf("segment at offset %d: flags %#x", off, s.flags)
			}
			if !bytes.Equal(s.payload, data[off:off+len(s.payload)]) {
				t.Fatalf("segment at offset %d: payload differs", off)
			}
			got += len(s.payload)
			k++
		}
		most = max(most, k)
	}
	if most < 2 {
		t.Errorf("at most %d segment(s) per Read: the kernel handed over no TSO super-packet", most)
	}
	t.Logf("%d bytes in segments of %d; up to %d segments from one Read", got, mss, most)
}

// Coalesced writes and split reads do not allocate either: 16 packets of
// one UDP flow to a routed address are written as one super-packet (where
// the kernel takes UDP ones), which the kernel forwards back out of the
// device as one, and Read splits it.
func TestAllocsCoalesced(t *testing.T) {
	qs := open(t, 1, false)
	q := qs[0]
	linktest.WriteSysctl(t, "net/ipv4/ip_forward", "1")
	linktest.WriteSysctl(t, "net/ipv4/conf/all/send_redirects", "0")
	linktest.WriteSysctl(t, "net/ipv4/conf/"+q.Name()+"/send_redirects", "0")
	if err := netutil.Configure(q.Name(), []netip.Prefix{local4}, []netip.Prefix{remote4}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-stop:
		case <-time.After(4 * linktest.Timeout):
			q.Close()
		}
	}()
	const n = 16
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.77.1.5"), 7)
	pool := packet.NewPool(n+q.BatchSize(), slot, headroom)
	out := make([]*packet.Buf, n)
	in := make([]*packet.Buf, q.BatchSize())
	pool.GetN(out)
	pool.GetN(in)
	p := linktest.IPUDP(netip.AddrPortFrom(peer4, 2000), dst, make([]byte, 1000))
	before := rxPackets(t, q.Name())
	most := 0
	round := func() {
		for _, b := range out {
			b.Reset(headroom)
			copy(b.Append(len(p)), p)
		}
		if _, err := q.Write(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			for _, b := range in {
				b.Reset(headroom)
			}
			k, err := q.Read(in)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			c := 0
			for _, b := range in[:k] {
				if udpTo(b.Bytes(), dst) {
					c++
				}
			}
			got += c
			most = max(most, c)
		}
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per batch of %d", a, n)
	}
	t.Logf("%d packets written as %d; up to %d from one Read; stats %+v", 101*n, rxPackets(t, q.Name())-before, most, q.Stats().Snapshot())
}

// Over IPv6 too: a USO super-packet a local socket sends is split by Read
// into packets with valid UDP checksums, and a run of UDP packets written
// is coalesced into one super-packet that the local socket receives as
// the datagrams written.
func TestOffloadIPv6(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen6(t)
	const seg, segs = 1000, 4
	rc, _ := sock.SyscallConn()
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg) })
	if serr != nil {
		t.Skipf("no UDP GSO: %v", serr)
	}
	c := linktest.Collect(t, q, headroom, slot)
	msg := make([]byte, seg*segs)
	for i := range msg {
		msg[i] = byte(i/seg + 1)
	}
	dst := netip.AddrPortFrom(peer6, 9)
	if _, err := sock.WriteToUDPAddrPort(msg, dst); err != nil {
		t.Fatal(err)
	}
	for i := range segs {
		p := c.Next(t, func(p []byte) bool { return udpTo(p, dst) })
		ip := packet.IPv6(p)
		if packet.IPv6Header+int(ip.PayloadLength()) != len(p) || len(payloadOf(p)) != seg {
			t.Fatalf("segment %d: bad header %x", i, p[:48])
		}
		u := packet.UDP(p[packet.IPv6Header:])
		if int(u.Length()) != len(u) {
			t.Errorf("segment %d: UDP length %d, want %d", i, u.Length(), len(u))
		}
		if packet.Checksum(u, packet.PseudoHeaderSum(p[8:24], p[24:40], packet.ProtoUDP, len(u))) != 0xffff {
			t.Errorf("segment %d: UDP checksum does not verify", i)
		}
		if !bytes.Equal(payloadOf(p), msg[i*seg:(i+1)*seg]) {
			t.Errorf("segment %d: payload differs", i)
		}
	}

	to := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	from := netip.AddrPortFrom(peer6, 4242)
	const n = 8
	pool := packet.NewPool(n, slot, headroom)
	bufs := make([]*packet.Buf, n)
	pool.GetN(bufs)
	for i, b := range bufs {
		p := linktest.IPUDP(from, to, bytes.Repeat([]byte{byte(i)}, seg))
		copy(b.Append(len(p)), p)
	}
	before := rxPackets(t, q.Name())
	if w, err := q.Write(bufs); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	t.Logf("%d packets written as %d", n, rxPackets(t, q.Name())-before)
	readEach(t, sock, n, func(i int, d []byte) {
		if !bytes.Equal(d, bytes.Repeat([]byte{byte(i)}, seg)) {
			t.Fatalf("datagram %d: %d bytes of %d", i, len(d), d[0])
		}
	})
}

// Read lays its buffers out for a super-packet like the one before it, so
// that segments land in buffers of their own; whatever else comes next
// must arrive whole all the same: a super-packet of another segment size,
// a plain packet longer than the expected segments, and one like the
// first again.
func TestSplitLayoutChanges(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen(t, local4.Addr())
	rc, _ := sock.SyscallConn()
	setSeg := func(seg int) {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg) })
		if serr != nil {
			t.Skipf("no UDP GSO: %v", serr)
		}
	}
	c := linktest.Collect(t, q, headroom, slot)
	dst := netip.AddrPortFrom(peer4, 9)
	n := 0
	send := func(seg, total int) {
		t.Helper()
		setSeg(seg)
		msg := make([]byte, total)
		for i := range msg {
			msg[i] = byte(n + i/seg)
		}
		n++
		if _, err := sock.WriteToUDPAddrPort(msg, dst); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < total; off += seg {
			p := c.Next(t, func(p []byte) bool { return udpTo(p, dst) })
			want := msg[off:min(off+seg, total)]
			ip := packet.IPv4(p)
			u := packet.UDP(p[20:])
			s, d := ip.Src().As4(), ip.Dst().As4()
			switch {
			case !ip.ChecksumValid() || int(ip.TotalLength()) != len(p) || int(u.Length()) != len(u):
				t.Fatalf("segment size %d, offset %d: bad header %x", seg, off, p[:28])
			case packet.Checksum(u, packet.PseudoHeaderSum(s[:], d[:], packet.ProtoUDP, len(u))) != 0xffff:
				t.Fatalf("segment size %d, offset %d: UDP checksum does not verify", seg, off)
			case !bytes.Equal(payloadOf(p), want):
				t.Fatalf("segment size %d, offset %d: %d bytes, want %d, or other bytes", seg, off, len(payloadOf(p)), len(want))
			}
		}
	}
	send(1000, 8000)
	send(1000, 7500) // the same shape, a shorter last segment
	send(700, 4900)  // another segment size
	send(1300, 1300) // one datagram longer than the segments before
	send(700, 4900)
	send(700, 2100)
	send(1000, 3000)
}
