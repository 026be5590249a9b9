package tun_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/pktio/tun"
)

// Every test runs in a network namespace of its own (linktest.InNewNetns):
// the device, its addresses and routes, sysctls and sockets vanish with it.

const (
	mtu      = 1420
	headroom = 64
	slot     = 2048
)

var (
	local4  = netip.MustParsePrefix("10.77.0.1/24")
	peer4   = netip.MustParseAddr("10.77.0.2")
	remote4 = netip.MustParsePrefix("10.77.1.0/24") // routed into the device
	local6  = netip.MustParsePrefix("fd77::1/64")
	peer6   = netip.MustParseAddr("fd77::2")
)

// open creates the device with queues queues in a new namespace; if
// configure, it brings it up with addresses and a route.
func open(t *testing.T, queues int, configure bool) []*tun.Queue {
	t.Helper()
	linktest.InNewNetns(t)
	linktest.NoLeaks(t)
	links, err := tun.Open("sluice%d", mtu, queues)
	if err != nil {
		t.Fatal(err)
	}
	qs := make([]*tun.Queue, len(links))
	for i, l := range links {
		qs[i] = l.(*tun.Queue)
		t.Cleanup(func() { l.Close() })
	}
	if len(qs) != queues {
		t.Fatalf("%d queues, want %d", len(qs), queues)
	}
	if configure {
		err := netutil.Configure(qs[0].Name(), []netip.Prefix{local4, local6}, []netip.Prefix{remote4})
		if err != nil {
			t.Fatal(err)
		}
	}
	return qs
}

// collectAll reads every queue and merges what they read, with the queue
// number.
type arrival struct {
	queue int
	pkt   []byte
}

func collectAll(t *testing.T, qs []*tun.Queue) <-chan arrival {
	merged := make(chan arrival, 1024)
	for i, q := range qs {
		c := linktest.Collect(t, q, headroom, slot)
		go func() {
			for {
				select {
				case p := <-c.Packets:
					merged <- arrival{i, p}
				case <-c.Done():
					return
				}
			}
		}()
	}
	return merged
}

// udpTo reports whether p is a UDP packet to dst (version, protocol,
// destination address and port), so that tests can ignore the IPv6
// housekeeping (router solicitations, MLD) a fresh device sends.
func udpTo(p []byte, dst netip.AddrPort) bool {
	var hl int
	switch packet.IPVersion(p) {
	case 4:
		ip := packet.IPv4(p)
		if !ip.IsValid() || ip.Protocol() != packet.ProtoUDP || ip.Dst() != dst.Addr() {
			return false
		}
		hl = ip.HeaderLength()
	case 6:
		ip := packet.IPv6(p)
		if !ip.IsValid() || ip.NextHeader() != packet.ProtoUDP || ip.Dst() != dst.Addr() {
			return false
		}
		hl = packet.IPv6Header
	default:
		return false
	}
	return len(p) >= hl+8 && packet.UDP(p[hl:]).DstPort() == dst.Port()
}

func payloadOf(p []byte) []byte {
	hl := packet.IPv6Header
	if packet.IPVersion(p) == 4 {
		hl = packet.IPv4(p).HeaderLength()
	}
	return p[hl+packet.UDPHeader:]
}

func listen(t *testing.T, addr netip.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen6 is listen on local6 once the address can be bound (IPv6
// duplicate address detection may hold it tentative for a while).
func listen6(t *testing.T) *net.UDPConn {
	t.Helper()
	linktest.WaitFor(t, "IPv6 address usable", func() bool {
		c, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local6.Addr(), 0)))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return listen(t, local6.Addr())
}

// A datagram a local socket sends to an address routed into the device is
// read from the Link; a packet written to the Link reaches a local socket.
// With several queues, every queue can write.
func TestReadWrite(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			qs := open(t, queues, true)
			for _, q := range qs {
				// Every queue has the offloads (virtio-net header) or none has.
				if q.BatchSize() != qs[0].BatchSize() {
					t.Errorf("queue %d: batch size %d, queue 0: %d", q.Index(), q.BatchSize(), qs[0].BatchSize())
				}
			}
			t.Logf("batch size %d", qs[0].BatchSize())
			arrivals := collectAll(t, qs)
			for _, f := range []struct {
				local, peer netip.Addr
			}{{local4.Addr(), peer4}, {local6.Addr(), peer6}} {
				sock := listen(t, f.local)
				// Host to device.
				dst := netip.AddrPortFrom(f.peer, 9)
				msg := []byte("to the tun " + f.peer.String())
				if _, err := sock.WriteToUDPAddrPort(msg, dst); err != nil {
					t.Fatal(err)
				}
				got := next(t, arrivals, func(p []byte) bool { return udpTo(p, dst) })
				if !bytes.Equal(payloadOf(got), msg) {
					t.Errorf("read %x", got)
				}
				// Device to host, through each queue.
				for i, q := range qs {
					msg := []byte(fmt.Sprintf("from queue %d to %s", i, f.local))
					from := netip.AddrPortFrom(f.peer, uint16(1000+i))
					writePacket(t, q, linktest.IPUDP(from, sock.LocalAddr().(*net.UDPAddr).AddrPort(), msg))
					buf := make([]byte, 2048)
					sock.SetReadDeadline(time.Now().Add(linktest.Timeout))
					n, src, err := sock.ReadFromUDPAddrPort(buf)
					if err != nil {
						t.Fatalf("queue %d: %v", i, err)
					}
					if !bytes.Equal(buf[:n], msg) || src != from {
						t.Errorf("queue %d: got %q from %v", i, buf[:n], src)
					}
				}
			}
			var rx, tx uint64
			for _, q := range qs {
				s := q.Stats().Snapshot()
				rx, tx = rx+s.RxPackets, tx+s.TxPackets
				if s.TxDrops() != 0 || s.RxErrors+s.RxShort+s.RxInvalid != 0 {
					t.Errorf("queue %d: %+v", q.Index(), s)
				}
			}
			if rx < 2 || tx != uint64(2*queues) {
				t.Errorf("rx %d tx %d", rx, tx)
			}
		})
	}
}

func next(t *testing.T, c <-chan arrival, keep func([]byte) bool) []byte {
	t.Helper()
	timeout := time.After(linktest.Timeout)
	for {
		select {
		case a := <-c:
			if keep(a.pkt) {
				return a.pkt
			}
		case <-timeout:
			t.Fatal("no packet")
		}
	}
}

func writePacket(t *testing.T, l pktio.Link, p []byte) {
	t.Helper()
	b := packet.NewBuf(make([]byte, slot), headroom, len(p))
	copy(b.Bytes(), p)
	if n, err := l.Write([]*packet.Buf{b}); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if s := l.Stats().Snapshot(); s.TxDrops() != 0 {
		t.Fatalf("Write dropped: %+v", s)
	}
}

// With several queues the kernel spreads flows across them: 64 flows
// (source ports) arrive exactly once each, on more than one queue.
func TestMultiQueueSpread(t *testing.T) {
	const queues, flows = 4, 64
	qs := open(t, queues, true)
	arrivals := collectAll(t, qs)
	dst := netip.AddrPortFrom(peer4, 9)
	for i := range flows {
		c := listen(t, local4.Addr())
		if _, err := c.WriteToUDPAddrPort([]byte{byte(i)}, dst); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[byte]int)
	perQueue := make([]int, queues)
	timeout := time.After(linktest.Timeout)
	for n := 0; n < flows; {
		select {
		case a := <-arrivals:
			if !udpTo(a.pkt, dst) {
				continue
			}
			seen[payloadOf(a.pkt)[0]]++
			perQueue[a.queue]++
			n++
		case <-timeout:
			t.Fatalf("%d of %d flows arrived", n, flows)
		}
	}
	used := 0
	for i, n := range perQueue {
		t.Logf("queue %d: %d flows", i, n)
		if n > 0 {
			used++
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("flow %d arrived %d times", k, n)
		}
	}
	if len(seen) != flows || used < 2 {
		t.Errorf("%d flows on %d queues", len(seen), used)
	}
}

// A UDP GSO datagram sent into the device (USO, where the kernel offloads
// it to the TUN) comes out of Read as separate packets with their own
// headers and checksummed payloads.
func TestOffloadSplit(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen(t, local4.Addr())
	const seg, segs = 1000, 4
	rc, _ := sock.SyscallConn()
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg) })
	if serr != nil {
		t.Skipf("no UDP GSO: %v", serr)
	}
	msg := make([]byte, seg*segs)
	for i := range msg {
		msg[i] = byte(i / seg)
	}
	dst := netip.AddrPortFrom(peer4, 9)
	if _, err := sock.WriteToUDPAddrPort(msg, dst); err != nil {
		if errors.Is(err, syscall.EIO) {
			t.Skip("route refuses UDP GSO")
		}
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-stop:
		case <-time.After(linktest.Timeout):
			q.Close()
		}
	}()
	pool := packet.NewPool(q.BatchSize(), slot, headroom)
	bufs := make([]*packet.Buf, q.BatchSize())
	pool.GetN(bufs)
	var got [][]byte
	maxBatch := 0
	for len(got) < segs {
		for _, b := range bufs {
			b.Reset(headroom)
		}
		n, err := q.Read(bufs)
		if err != nil {
			t.Fatalf("Read: %v (got %d segments)", err, len(got))
		}
		k := 0
		for _, b := range bufs[:n] {
			if udpTo(b.Bytes(), dst) {
				got = append(got, bytes.Clone(b.Bytes()))
				k++
			}
		}
		maxBatch = max(maxBatch, k)
	}
	for i, p := range got {
		ip := packet.IPv4(p)
		if !ip.IsValid() || !ip.ChecksumValid() || int(ip.TotalLength()) != len(p) || len(payloadOf(p)) != seg {
			t.Fatalf("segment %d: bad header %x", i, p[:28])
		}
		u := packet.UDP(p[20:])
		s, d := ip.Src().As4(), ip.Dst().As4()
		if packet.Checksum(u, packet.PseudoHeaderSum(s[:], d[:], packet.ProtoUDP, len(u))) != 0xffff {
			t.Errorf("segment %d: UDP checksum does not verify", i)
		}
		if !bytes.Equal(payloadOf(p), msg[i*seg:(i+1)*seg]) {
			t.Errorf("segment %d: payload differs", i)
		}
	}
	t.Logf("batch size %d; %d segments came out of one Read (4: the kernel handed over one USO super-packet)", q.BatchSize(), maxBatch)
}

// Write coalesces packets of one flow (GRO) when buffers have tailroom;
// the socket still receives each datagram as it was written.
func TestWriteCoalesced(t *testing.T) {
	qs := open(t, 1, true)
	sock := listen(t, local4.Addr())
	to := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	from := netip.AddrPortFrom(peer4, 4242)
	const n = 8
	pool := packet.NewPool(n, 1<<16, headroom)
	bufs := make([]*packet.Buf, n)
	pool.GetN(bufs)
	for i, b := range bufs {
		msg := bytes.Repeat([]byte{byte(i)}, 1000)
		p := linktest.IPUDP(from, to, msg)
		copy(b.Append(len(p)), p)
	}
	if w, err := qs[0].Write(bufs); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	// The device counts one received packet per write: fewer than n
	// means wireguard-go coalesced them.
	if l, err := netlink.LinkByName(qs[0].Name()); err == nil && l.Attrs().Statistics != nil {
		t.Logf("%d packets written as %d", n, l.Attrs().Statistics.RxPackets)
	}
	readEach(t, sock, n, func(i int, d []byte) {
		if !bytes.Equal(d, bytes.Repeat([]byte{byte(i)}, 1000)) {
			t.Fatalf("datagram %d: %d bytes of %d", i, len(d), d[0])
		}
	})
}

// readEach reads n datagrams from sock, each within linktest.Timeout, and
// hands each to check with its index.
func readEach(t *testing.T, sock *net.UDPConn, n int, check func(i int, d []byte)) {
	t.Helper()
	buf := make([]byte, 1<<16)
	for i := range n {
		sock.SetReadDeadline(time.Now().Add(linktest.Timeout))
		k, _, err := sock.ReadFromUDPAddrPort(buf)
		if err != nil || k == 0 {
			t.Fatalf("datagram %d: %d bytes, %v", i, k, err)
		}
		check(i, buf[:k])
	}
}

func TestBadInput(t *testing.T) {
	qs := open(t, 1, false)
	q := qs[0]
	good := linktest.IPUDP(netip.AddrPortFrom(peer4, 1), netip.AddrPortFrom(local4.Addr(), 2), []byte("x"))
	noRoom := packet.NewBuf(bytes.Clone(good), 0, len(good))
	garbage := packet.NewBuf(make([]byte, 256), headroom, 40)
	truncated := packet.NewBuf(make([]byte, 256), headroom, 0)
	copy(truncated.Append(len(good)-1), good)
	if n, err := q.Write([]*packet.Buf{noRoom, garbage, truncated}); n != 3 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if s := q.Stats().Snapshot(); s.TxInvalid != 3 || s.TxPackets != 0 {
		t.Errorf("stats %+v", s)
	}
	small := packet.NewBuf(make([]byte, mtu), headroom, 0)
	if _, err := q.Read([]*packet.Buf{small}); !errors.Is(err, pktio.ErrShortBuffer) {
		t.Errorf("Read with less than MTU tailroom: %v", err)
	}
	if _, err := tun.Open("x", 20, 1); err == nil {
		t.Error("Open accepted MTU 20")
	}
	if _, err := tun.Open("x", mtu, 0); err == nil {
		t.Error("Open accepted 0 queues")
	}
}

// The queues follow the device's MTU when it changes (Read's room check
// uses it).
func TestMTUTracking(t *testing.T) {
	qs := open(t, 2, false)
	if err := netutil.SetMTU(qs[0].Name(), 1280); err != nil {
		t.Fatal(err)
	}
	linktest.WaitFor(t, "MTU 1280", func() bool { return qs[1].MTU() == 1280 })
	small := packet.NewBuf(make([]byte, headroom+1300), headroom, 0)
	// 1300 bytes of tailroom now suffice: Read takes the buffer and
	// blocks (nothing arrives on a device that is down) until Close.
	errc := make(chan error, 1)
	go func() { _, err := qs[1].Read([]*packet.Buf{small}); errc <- err }()
	linktest.WaitFor(t, "Read to block", func() bool { return linktest.Blocked("tun_test.TestMTUTracking.func") })
	qs[1].Close()
	if err := <-errc; !errors.Is(err, pktio.ErrClosed) {
		t.Errorf("Read: %v", err)
	}
}

func TestClose(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			qs := open(t, queues, false) // down: nothing arrives
			for _, q := range qs {
				linktest.CheckClose(t, q, headroom)
			}
		})
	}
}

// Read and Write do not allocate per batch: packets written to the device
// towards a routed address are forwarded by the kernel back out of it.
func TestAllocs(t *testing.T) {
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
	for i, b := range out {
		p := linktest.IPUDP(netip.AddrPortFrom(peer4, uint16(2000+i)), dst, make([]byte, 1000))
		copy(b.Append(len(p)), p)
	}
	pkts := make([][]byte, n)
	for i, b := range out {
		pkts[i] = bytes.Clone(b.Bytes())
	}
	round := func() {
		for i, b := range out { // Write may modify the packets (GRO)
			b.Reset(headroom)
			copy(b.Append(len(pkts[i])), pkts[i])
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
			for _, b := range in[:k] {
				if udpTo(b.Bytes(), dst) {
					got++
				}
			}
		}
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per batch of %d", a, n)
	}
	s := q.Stats().Snapshot()
	t.Logf("stats %+v", s)
}

// TestExistingDeviceRefused: a second Open of a name in use fails instead of
// joining the first device's queues and sharing its traffic.
func TestExistingDeviceRefused(t *testing.T) {
	qs := open(t, 2, false)
	if _, err := tun.Open(qs[0].Name(), mtu, 2); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second open of %s: %v", qs[0].Name(), err)
	}
}

// TestWriteCoalescedSmallSlots writes runs of one flow from 2 KiB slots, the
// data plane's size, with no tailroom to coalesce into: Write must still
// hand the kernel fewer packets than it was given (it moves each run's
// first packet to a large buffer), and every datagram must arrive whole and
// in order, also when two flows alternate.
func TestWriteCoalescedSmallSlots(t *testing.T) {
	qs := open(t, 1, true)
	sockA := listen(t, local4.Addr())
	sockB := listen(t, local4.Addr())
	toA := sockA.LocalAddr().(*net.UDPAddr).AddrPort()
	toB := sockB.LocalAddr().(*net.UDPAddr).AddrPort()
	from := netip.AddrPortFrom(peer4, 4242)
	// Flow A: a run of 8, then A and B alternating, then a run of 8 of B.
	var dsts []netip.AddrPort
	for range 8 {
		dsts = append(dsts, toA)
	}
	for range 4 {
		dsts = append(dsts, toA, toB)
	}
	for range 8 {
		dsts = append(dsts, toB)
	}
	pool := packet.NewPool(len(dsts), 2048, headroom)
	bufs := make([]*packet.Buf, len(dsts))
	pool.GetN(bufs)
	for i, b := range bufs {
		p := linktest.IPUDP(from, dsts[i], bytes.Repeat([]byte{byte(i)}, 1000))
		copy(b.Append(len(p)), p)
	}
	before := rxPackets(t, qs[0].Name())
	if w, err := qs[0].Write(bufs); w != len(bufs) || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	if got := rxPackets(t, qs[0].Name()) - before; got >= uint64(len(bufs)) {
		t.Errorf("the device received %d packets for %d written: nothing was coalesced", got, len(bufs))
	}
	buf := make([]byte, 1<<16)
	for _, c := range []struct {
		sock *net.UDPConn
		to   netip.AddrPort
	}{{sockA, toA}, {sockB, toB}} {
		for i, d := range dsts {
			if d != c.to {
				continue
			}
			c.sock.SetReadDeadline(time.Now().Add(linktest.Timeout))
			k, _, err := c.sock.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("datagram %d to %v: %v", i, d, err)
			}
			if !bytes.Equal(buf[:k], bytes.Repeat([]byte{byte(i)}, 1000)) {
				t.Fatalf("datagram %d to %v: %d bytes of %d", i, d, k, buf[0])
			}
		}
	}
}

func rxPackets(t *testing.T, name string) uint64 {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil || l.Attrs().Statistics == nil {
		t.Fatalf("link %s statistics: %v", name, err)
	}
	return l.Attrs().Statistics.RxPackets
}
