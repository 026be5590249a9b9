// Package linktest has helpers for the tests of pktio's backends: a
// goroutine that collects what a Link reads with bounded waits, checks
// every Link must pass (Close unblocks Read, Close is idempotent), root and
// network-namespace handling, and builders for ESP-looking packets.
package linktest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// Timeout bounds every wait in these tests.
const Timeout = 10 * time.Second

// RequireRoot skips the test unless it runs as root; under CI=true it
// fails instead, so that CI cannot silently skip the real-I/O tests.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (CI=true: not skipping)")
	}
	t.Skip("needs root")
}

// InNewNetns locks the calling goroutine to its thread and moves that
// thread into a new, anonymous network namespace with lo up, for the rest
// of the test. Sockets and devices created on this goroutine live there;
// other goroutines may use them. Cleanup moves the thread back; the
// namespace disappears with its last socket or device. Call it from the
// test's own goroutine, before anything else is registered with Cleanup.
func InNewNetns(t *testing.T) {
	t.Helper()
	RequireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it dies with the goroutine
			// rather than carry the namespace into other code.
			t.Errorf("restore netns: %v", err)
			return
		}
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread()
	})
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatalf("lo: %v", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatalf("lo up: %v", err)
	}
}

// NoLeaks notes how many goroutines run now and, when the test ends, waits
// (bounded) until no more run: every goroutine the test's Links started
// must end once they are closed. Call it before opening them, so that its
// Cleanup runs after theirs.
func NoLeaks(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(Timeout)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// WriteSysctl writes a sysctl under /proc/sys (e.g. "net/ipv4/ip_forward")
// in the calling thread's network namespace.
func WriteSysctl(t testing.TB, name, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		t.Fatalf("sysctl %s=%s: %v", name, value, err)
	}
}

// Collector reads a Link in a goroutine until it fails and hands copies of
// the packets to the test.
type Collector struct {
	Packets chan []byte
	done    chan struct{}
	err     error
}

// Collect starts reading l with buffers from a pool of its own (headroom
// bytes of headroom, slot bytes each). Cleanup closes l and waits, bounded,
// for the goroutine to end.
func Collect(t testing.TB, l pktio.Link, headroom, slot int) *Collector {
	t.Helper()
	c := &Collector{Packets: make(chan []byte, 4096), done: make(chan struct{})}
	batch := l.BatchSize()
	pool := packet.NewPool(batch, slot, headroom)
	bufs := make([]*packet.Buf, batch)
	if pool.GetN(bufs) != batch {
		t.Fatal("pool too small")
	}
	go func() {
		defer close(c.done)
		for {
			for _, b := range bufs {
				b.Reset(headroom)
			}
			n, err := l.Read(bufs)
			if err != nil {
				c.err = err
				return
			}
			for _, b := range bufs[:n] {
				select {
				case c.Packets <- bytes.Clone(b.Bytes()):
				default: // the test stopped listening
				}
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		select {
		case <-c.done:
		case <-time.After(Timeout):
			t.Errorf("reader did not stop after Close")
		}
	})
	return c
}

// Next returns the next packet for which keep is true (nil: any), or fails
// the test after Timeout.
func (c *Collector) Next(t testing.TB, keep func([]byte) bool) []byte {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for {
		select {
		case p := <-c.Packets:
			if keep == nil || keep(p) {
				return p
			}
		case <-c.done:
			t.Fatalf("reader stopped: %v", c.err)
		case <-deadline.C:
			t.Fatalf("no packet within %v", Timeout)
		}
	}
}

// Done is closed when the reader has stopped.
func (c *Collector) Done() <-chan struct{} { return c.done }

// Err is the error that ended the reader (after it ended).
func (c *Collector) Err() error { return c.err }

// WaitFor polls cond until it is true or fails the test after Timeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// CheckClose checks that Close unblocks a Read blocked on an idle link,
// that the Read returns pktio.ErrClosed, that Close is idempotent, and that
// Read and Write after Close return pktio.ErrClosed. l must receive
// nothing meanwhile.
func CheckClose(t *testing.T, l pktio.Link, headroom int) {
	t.Helper()
	pool := packet.NewPool(4, 2048, headroom)
	bufs := make([]*packet.Buf, 4)
	pool.GetN(bufs)
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := l.Read(bufs)
		errc <- err
	}()
	<-started
	WaitFor(t, "Read to block", func() bool { return Blocked("linktest.CheckClose.func") })
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, pktio.ErrClosed) {
			t.Errorf("Read after Close: %v, want ErrClosed", err)
		}
	case <-time.After(Timeout):
		t.Fatal("Close did not unblock Read")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Read(bufs); !errors.Is(err, pktio.ErrClosed) {
		t.Errorf("Read on closed link: %v", err)
	}
	if _, err := l.Write(bufs[:1]); !errors.Is(err, pktio.ErrClosed) {
		t.Errorf("Write on closed link: %v", err)
	}
}

// Blocked reports whether a goroutine whose stack mentions fn is parked
// (waiting on I/O, a condition variable, a channel or a lock) rather than
// running: how a test knows a Read has reached its blocking point without
// sleeping.
func Blocked(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte(fn)) {
			continue
		}
		hdr, _, _ := bytes.Cut(g, []byte("\n"))
		for _, s := range []string{"[IO wait", "[sync.Cond.Wait", "[select", "[chan receive", "[semacquire", "[sync.Mutex.Lock"} {
			if bytes.Contains(hdr, []byte(s)) {
				return true
			}
		}
	}
	return false
}

// ESP is an ESP-looking packet: an SPI, a sequence number and a payload of
// n bytes whose content is derived from seq.
func ESP(spi, seq uint32, n int) []byte {
	p := make([]byte, 8+n)
	binary.BigEndian.PutUint32(p, spi)
	binary.BigEndian.PutUint32(p[4:], seq)
	for i := range n {
		p[8+i] = byte(int(seq) + i)
	}
	return p
}

// Outer writes, in b's headroom in front of its data, the outer IP header
// (from src to dst, with tos) and, if the ports are not zero, the UDP
// header the ESP layer would write, as esp.SA.PrepareOutbound does.
func Outer(b *packet.Buf, src, dst netip.AddrPort, tos uint8) {
	udp := src.Port() != 0 || dst.Port() != 0
	n := b.Len()
	proto := uint8(packet.ProtoESP)
	if udp {
		packet.UDP(b.Prepend(packet.UDPHeader)).Encode(src.Port(), dst.Port(), uint16(packet.UDPHeader+n))
		n += packet.UDPHeader
		proto = packet.ProtoUDP
	}
	if src.Addr().Is4() {
		packet.IPv4(b.Prepend(packet.IPv4MinHeader)).Encode(&packet.IPv4Fields{
			TOS: tos, Length: uint16(packet.IPv4MinHeader + n), TTL: 64,
			Protocol: proto, Src: src.Addr().As4(), Dst: dst.Addr().As4(),
		})
		return
	}
	packet.IPv6(b.Prepend(packet.IPv6Header)).Encode(&packet.IPv6Fields{
		TrafficClass: tos, PayloadLength: uint16(n), NextHeader: proto,
		HopLimit: 64, Src: src.Addr().As16(), Dst: dst.Addr().As16(),
	})
	if udp {
		u := packet.UDP(b.Bytes()[packet.IPv6Header:])
		s, d := src.Addr().As16(), dst.Addr().As16()
		u.SetChecksumIPv6(s[:], d[:])
	}
}

// IPUDP builds a whole IPv4 or IPv6 UDP packet with a valid UDP checksum,
// as a host would send it into a TUN device.
func IPUDP(src, dst netip.AddrPort, payload []byte) []byte {
	b := packet.NewBuf(make([]byte, 64+len(payload)), 64, len(payload))
	copy(b.Bytes(), payload)
	Outer(b, src, dst, 0)
	if src.Addr().Is4() {
		u := packet.UDP(b.Bytes()[packet.IPv4MinHeader:])
		s, d := src.Addr().As4(), dst.Addr().As4()
		u.SetChecksumIPv4(s[:], d[:])
	}
	return bytes.Clone(b.Bytes())
}
