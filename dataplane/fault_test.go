package dataplane_test

// Two data planes over a faulty wire (pktio/fault): what the wire delivers
// intact is delivered exactly once, and everything else is counted.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/fault"
	"github.com/sluicegw/sluice/pktio/pipe"
)

// espFrom is where corruption may start in the data planes' ESP packets:
// past the outer IPv4 (20) and UDP (8) headers and the ESP header (8), so
// that every flipped bit lands in the IV, the ciphertext or the ICV, which
// the receiver must refuse. (A flipped outer TTL or IP ID would be
// delivered, rightly, and make the arithmetic of these tests inexact.)
const espFrom = 20 + 8 + 8

// faultyWire returns a pairOptions.wire that puts fault links with cfgAB
// (A's ESP to B) and cfgBA on the wire, and the links it made.
func faultyWire(cfgAB, cfgBA fault.Config) (wire func(a, b pktio.Link) (pktio.Link, pktio.Link), ab, ba **fault.Link) {
	ab, ba = new(*fault.Link), new(*fault.Link)
	return func(a, b pktio.Link) (pktio.Link, pktio.Link) {
		*ab, *ba = fault.New(a, cfgAB), fault.New(b, cfgBA)
		return *ab, *ba
	}, ab, ba
}

// checkExactlyOnce checks that got holds each of want's packets at most
// once, unchanged, and returns how many distinct ones it holds.
func checkExactlyOnce(t *testing.T, got, want [][]byte) int {
	t.Helper()
	seen := make([]bool, len(want))
	for _, p := range got {
		i := int(binary.BigEndian.Uint32(p[28:]))
		if i >= len(want) || !bytes.Equal(p, want[i]) {
			t.Fatalf("delivered a packet that was not sent (number %d)", i)
		}
		if seen[i] {
			t.Fatalf("packet %d delivered twice", i)
		}
		seen[i] = true
	}
	return len(got)
}

// TestFaultyWire: A sends through a wire that loses, corrupts, duplicates,
// reorders and delays. B delivers every packet the wire carried intact
// exactly once, unchanged; drops each duplicate as a replay and each
// corrupted packet as an authentication failure; and loses nothing else.
func TestFaultyWire(t *testing.T) {
	for _, eng := range engines(t) {
		t.Run(eng.Name(), func(t *testing.T) {
			cfg := fault.Config{Seed: 2026, Loss: 0.02, Corrupt: 0.02, CorruptFrom: espFrom, Duplicate: 0.03,
				Reorder: 0.1, ReorderDepth: 16, Delay: 200 * time.Microsecond}
			back := cfg
			back.Seed++
			wire, ab, _ := faultyWire(cfg, back)
			a, b, _, _ := pairWith(t, eng, pairOptions{wire: wire})

			const n = 4000
			sent := make([][]byte, n)
			for i := range sent {
				sent[i] = udpPacket("10.1.0.5", "10.2.0.7", uint32(i), 10+i*7%1300)
			}
			for i := 0; i < n; i += 100 {
				a.send(t, sent[i:i+100])
			}
			waitFor(t, func() bool { return (*ab).Faults().Packets == n && (*ab).Pending() == 0 })
			f := (*ab).Faults()
			intact := n - f.Lost - f.Corrupted
			got := b.recv(t, int(intact))
			checkExactlyOnce(t, got, sent)
			waitFor(t, func() bool {
				d := b.dp.Stats().Drops()
				return d["replay"] >= f.Duplicated && d["auth_failed"] >= f.Corrupted
			})
			d := b.dp.Stats().Drops()
			if d["replay"] != f.Duplicated || d["auth_failed"] != f.Corrupted || len(d) != 2 {
				t.Fatalf("B dropped %v; the wire duplicated %d and corrupted %d", d, f.Duplicated, f.Corrupted)
			}
			if q := b.user.(*pipe.End).Queued(); q != 0 {
				t.Fatalf("%d packets delivered beyond the %d the wire carried intact", q, intact)
			}
			if s := (*ab).Stats().Snapshot(); s.TxFull != 0 || f.Overflow != 0 {
				t.Fatalf("the wire's queues overflowed: pipe %+v, fault %+v", s, f)
			}
			if f.Lost == 0 || f.Corrupted == 0 || f.Duplicated == 0 || f.Reordered == 0 || f.Delayed == 0 {
				t.Fatalf("some fault never happened: %+v", f)
			}
			t.Logf("%d sent: %d delivered once; the wire lost %d, corrupted %d, duplicated %d, reordered %d",
				n, len(got), f.Lost, f.Corrupted, f.Duplicated, f.Reordered)
		})
	}
}

// seqTap records the low 32 bits of the sequence number of each ESP packet
// written through it (ESP in UDP over IPv4, as the pair sends), in order.
type seqTap struct {
	pktio.Link
	mu   sync.Mutex
	seqs []uint32
}

func (s *seqTap) Write(bufs []*packet.Buf) (int, error) {
	s.mu.Lock()
	for _, b := range bufs {
		if p := b.Bytes(); len(p) >= espFrom {
			s.seqs = append(s.seqs, binary.BigEndian.Uint32(p[32:]))
		}
	}
	s.mu.Unlock()
	return s.Link.Write(bufs)
}

// TestESNWrapReordered: an SA with extended sequence numbers starts just
// below 2^32 and its packets cross the wrap on a wire that reorders and
// duplicates them, so that packets with high bits 1 arrive before packets
// with high bits 0 and after. The receiver must infer the high bits of
// each (RFC 4303 Appendix A; a wrong guess fails the ICV, which covers
// them), deliver every packet once and drop every duplicate as a replay.
func TestESNWrapReordered(t *testing.T) {
	const (
		n     = 120
		start = 1<<32 - n/2 // the last number "sent" before the test
	)
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			tap := &seqTap{}
			// Held copies are released by later ones, not by time
			// (packets go one at a time here), but for the last few.
			cfg := fault.Config{Seed: seed, Reorder: 0.3, ReorderDepth: 12, Duplicate: 0.05, Hold: 200 * time.Millisecond}
			var ab *fault.Link
			wire := func(a, b pktio.Link) (pktio.Link, pktio.Link) {
				tap.Link = a
				ab = fault.New(tap, cfg)
				return ab, b
			}
			a, b, _, _ := pairWith(t, engines(t)[0], pairOptions{wire: wire, esn: true, seq: start})

			// One packet at a time, each opened (or dropped) by B before
			// the next is sent, so that B's replay window has moved past
			// the wrap when a packet from below it comes late: B guesses
			// its high bits from a window that straddles the wrap, not
			// from one still below it (as it would for a packet in the
			// same read, checked before the read's window update).
			settled := func() bool {
				st := b.dp.Stats()
				var done uint64
				for _, w := range st.Workers {
					done += w.Opened
				}
				for _, v := range st.Drops() {
					done += v
				}
				return done == ab.Faults().Forwarded
			}
			sent := make([][]byte, n)
			for i := range sent {
				sent[i] = udpPacket("10.1.0.5", "10.2.0.7", uint32(i), 64)
				a.send(t, sent[i:i+1])
				waitFor(t, func() bool { return ab.Faults().Packets == uint64(i+1) && settled() })
			}
			waitFor(t, func() bool { return ab.Pending() == 0 && settled() })
			f := ab.Faults()
			if d := b.dp.Stats().Drops(); d["replay"] != f.Duplicated || len(d) > 1 {
				t.Fatalf("B dropped %v; the wire duplicated %d", d, f.Duplicated)
			}
			got := b.recv(t, n)
			checkExactlyOnce(t, got, sent)

			// The wire mixed the two sides of the wrap: a packet from
			// above 2^32 went before one from below.
			tap.mu.Lock()
			seqs := tap.seqs
			tap.mu.Unlock()
			mixed := false
			after := false
			for _, s := range seqs {
				if s < 1<<31 {
					after = true
				} else if after {
					mixed = true
				}
			}
			if !mixed {
				t.Fatalf("the wire did not reorder across the wrap: %d", seqs)
			}
			want := uint64(start + n)
			if out, in := a.store.Load().Tunnel("t").Out().SA.Seq(), b.store.Load().Inbound(0x1001).SA.Seq(); out != want || in != want {
				t.Fatalf("A sent up to %#x and B accepted up to %#x; want %#x", out, in, want)
			}
		})
	}
}
