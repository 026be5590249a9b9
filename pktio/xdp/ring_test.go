package xdp

import (
	"bytes"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
)

// fakeLink is a Link whose rings and UMEM are ordinary memory, with no
// kernel behind them: tests play the kernel's part by writing the rings.
func fakeLink(frames int) *Link {
	s := &socket{fd: -1, rxFrames: frames / 2, txFrames: frames / 2, umem: make([]byte, frames*frameSize)}
	mk := func(r *ring, n int, desc bool) {
		r.prod, r.cons, r.flags = new(uint32), new(uint32), new(uint32)
		r.mask = uint32(n - 1)
		if desc {
			r.descs = make([]unix.XDPDesc, n)
		} else {
			r.addrs = make([]uint64, n)
		}
	}
	mk(&s.fill, s.rxFrames, false)
	mk(&s.comp, s.txFrames, false)
	mk(&s.rx, s.rxFrames, true)
	mk(&s.tx, s.txFrames, true)
	l := &Link{s: s, room: HeaderRoom, free: make([]uint64, 0, s.txFrames)}
	return l
}

// A descriptor from the kernel is checked before it is sliced: one whose
// address and length run past the UMEM (even by wrapping around), or out
// of the receive frames, or across a frame's end, is a counted drop, not
// a panic, and only receive frames go back to the fill ring.
func TestBadRxDescriptors(t *testing.T) {
	l := fakeLink(64)
	s := l.s
	bad := []unix.XDPDesc{
		{Addr: 1<<64 - 8, Len: 64},                      // wraps around
		{Addr: uint64(len(s.umem)) - 10, Len: 60},       // past the end
		{Addr: uint64(s.rxFrames * frameSize), Len: 60}, // a TX frame
		{Addr: 256 + frameSize - 300, Len: 400},         // across a frame's end
	}
	for i, d := range bad {
		s.rx.descs[i] = d
	}
	atomic.StoreUint32(s.rx.prod, uint32(len(bad)))
	bufs := make([]*packet.Buf, len(bad))
	for i := range bufs {
		bufs[i] = packet.NewBuf(make([]byte, 2048), HeaderRoom, 0)
	}
	l.rbufs = bufs
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("readRing panicked on a bad descriptor: %v", r)
			}
		}()
		l.readRing(0)
	}()
	if l.rout != 0 {
		t.Errorf("delivered %d packets, want 0", l.rout)
	}
	if got := l.stats.RxErrors.Load(); got != uint64(len(bad)) {
		t.Errorf("RxErrors = %d, want %d", got, len(bad))
	}
	for i := s.fill.cached - 4; i != s.fill.cached; i++ {
		if a := s.fill.addrs[i&s.fill.mask]; a >= uint64(s.rxFrames*frameSize) {
			t.Errorf("fill ring got address %#x, outside the receive frames", a)
		}
	}
}

// The completion ring's addresses are checked too: an address outside the
// TX frames, or more completions than frames, never reaches the free list
// (which would panic in Write's slicing, or grow by allocation).
func TestBadCompletions(t *testing.T) {
	l := fakeLink(64)
	s := l.s
	n := s.txFrames
	for i := range n {
		s.comp.addrs[i] = 1 << 40 // far outside the UMEM
	}
	atomic.StoreUint32(s.comp.prod, uint32(n))
	l.reap()
	for _, a := range l.free {
		if a < uint64(s.rxFrames*frameSize) || a >= uint64(len(s.umem)) {
			t.Fatalf("free list holds %#x, outside the TX frames", a)
		}
	}
	if len(l.free) > s.txFrames || cap(l.free) != s.txFrames {
		t.Fatalf("free list: %d entries, capacity %d, for %d frames", len(l.free), cap(l.free), s.txFrames)
	}
	if got := l.wtally.TxErrors; got != uint64(n) {
		t.Errorf("TxErrors tally = %d, want %d", got, n)
	}
}

// When the kernel takes no TX frame back (a driver that stopped sending,
// an interface gone down), Write waits for a free frame once, not once per
// packet: the packets after the first that found none are dropped at once
// (TxFull), so that a batch costs one txWait, not one per packet.
func TestWriteWaitsOnce(t *testing.T) {
	l := fakeLink(64)
	dst := netip.MustParseAddr("192.0.2.2")
	r := newResolver(nil, 0, slog.New(slog.DiscardHandler))
	d := &dest{}
	r.snap.Store(&map[netip.Addr]hop{dst: {probe: &d.probe, used: &d.used}})
	l.sh = &shared{res: r}
	l.fb = make([]*packet.Buf, 2*l.s.txFrames)
	for i := range l.s.txFrames {
		l.free = append(l.free, uint64((l.s.rxFrames+i)*frameSize))
	}
	pkt := frame(dst, packet.ProtoUDP, 4500, make([]byte, 64))[ethLen:]
	bufs := make([]*packet.Buf, 2*l.s.txFrames)
	for i := range bufs {
		bufs[i] = packet.NewBuf(bytes.Clone(pkt), 0, len(pkt))
	}
	l.wbufs = bufs
	l.writeRing(0)
	if got, want := l.wtally.TxPackets, uint64(l.s.txFrames); got != want {
		t.Errorf("TxPackets = %d, want %d", got, want)
	}
	if got, want := l.wtally.TxFull, uint64(len(bufs)-l.s.txFrames); got != want {
		t.Errorf("TxFull = %d, want %d", got, want)
	}
	if l.stalls != 1 {
		t.Errorf("Write waited %d times for a TX frame that never came, want 1", l.stalls)
	}
}
