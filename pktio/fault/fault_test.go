package fault_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"slices"
	"testing"
	"time"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/fault"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/pipe"
)

const headroom = 64

// wire is a fault link over one end of a pipe and the pipe's other end,
// where the test reads what got through.
type wire struct {
	l    *fault.Link
	rx   *pipe.End
	pool *packet.Pool
}

func newWire(t *testing.T, cfg fault.Config) *wire {
	t.Helper()
	a, b := pipe.New(1 << 16)
	w := &wire{l: fault.New(a, cfg), rx: b.(*pipe.End), pool: packet.NewPool(512, 2048, headroom)}
	t.Cleanup(func() { w.l.Close() })
	return w
}

// payload is packet i of a test: its number, then bytes that depend on it,
// 40 to 1039 bytes long.
func payload(i int) []byte {
	p := make([]byte, 40+i*37%1000)
	binary.BigEndian.PutUint32(p, uint32(i))
	for j := 4; j < len(p); j++ {
		p[j] = byte(i + j)
	}
	return p
}

// write writes packets first..first+n-1, per at a time.
func (w *wire) write(t *testing.T, first, n, per int) {
	t.Helper()
	bufs := make([]*packet.Buf, per)
	if w.pool.GetN(bufs) != per {
		t.Fatal("pool exhausted")
	}
	defer w.pool.PutN(bufs)
	for i := first; i < first+n; i += per {
		k := min(per, first+n-i)
		for j := range k {
			bufs[j].Write(headroom, payload(i+j))
		}
		if m, err := w.l.Write(bufs[:k]); m != k || err != nil {
			t.Fatalf("Write = %d, %v", m, err)
		}
	}
}

// queued reads every packet queued at the far end, without blocking.
func (w *wire) queued(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	bufs := make([]*packet.Buf, 128)
	if w.pool.GetN(bufs) != len(bufs) {
		t.Fatal("pool exhausted")
	}
	defer w.pool.PutN(bufs)
	for w.rx.Queued() > 0 {
		for _, b := range bufs {
			b.Reset(headroom)
		}
		n, err := w.rx.Read(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			out = append(out, bytes.Clone(b.Bytes()))
		}
	}
	return out
}

// settle waits until nothing is held or delayed any more and returns what
// arrived.
func (w *wire) settle(t *testing.T) [][]byte {
	t.Helper()
	linktest.WaitFor(t, "the fault link to release everything", func() bool { return w.l.Pending() == 0 })
	return w.queued(t)
}

func number(p []byte) int { return int(binary.BigEndian.Uint32(p)) }

// TestPassThrough: with no faults configured, every packet arrives
// unchanged and in order, and the link starts no goroutine.
func TestPassThrough(t *testing.T) {
	linktest.NoLeaks(t)
	w := newWire(t, fault.Config{Seed: 1})
	w.write(t, 0, 1000, 64)
	got := w.queued(t)
	if len(got) != 1000 {
		t.Fatalf("got %d packets, want 1000", len(got))
	}
	for i, p := range got {
		if !bytes.Equal(p, payload(i)) {
			t.Fatalf("packet %d changed or out of order", i)
		}
	}
	if f := w.l.Faults(); f != (fault.Counters{Packets: 1000, Forwarded: 1000}) {
		t.Fatalf("counters %+v", f)
	}
}

// TestAccounting: loss, corruption and duplication happen at about their
// rates, exclusively, and the counters say exactly what arrived: every
// packet arrives once, twice (Duplicated), with one bit flipped at or
// after CorruptFrom (Corrupted), or not at all (Lost).
func TestAccounting(t *testing.T) {
	const n = 20000
	cfg := fault.Config{Seed: 7, Loss: 0.05, Corrupt: 0.04, Duplicate: 0.03, CorruptFrom: 20}
	w := newWire(t, cfg)
	w.write(t, 0, n, 100)
	got := w.queued(t)
	f := w.l.Faults()

	seen := make([]int, n)
	var corrupted uint64
	for _, p := range got {
		i := number(p)
		if i >= n {
			t.Fatalf("packet number %d out of range", i)
		}
		seen[i]++
		want := payload(i)
		if bytes.Equal(p, want) {
			continue
		}
		if len(p) != len(want) {
			t.Fatalf("packet %d: length %d, want %d", i, len(p), len(want))
		}
		flipped, first := 0, -1
		for j := range p {
			if d := bits.OnesCount8(p[j] ^ want[j]); d > 0 {
				flipped += d
				if first < 0 {
					first = j
				}
			}
		}
		if flipped != 1 || first < cfg.CorruptFrom {
			t.Fatalf("packet %d: %d bits flipped, the first in byte %d; want one at or after %d", i, flipped, first, cfg.CorruptFrom)
		}
		corrupted++
	}
	var lost, twice uint64
	for i, k := range seen {
		switch k {
		case 0:
			lost++
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("packet %d arrived %d times", i, k)
		}
	}
	if f.Packets != n || f.Lost != lost || f.Corrupted != corrupted || f.Duplicated != twice ||
		f.Forwarded != uint64(len(got)) || uint64(len(got)) != n-f.Lost+f.Duplicated {
		t.Fatalf("counters %+v; counted %d lost, %d corrupted, %d twice, %d arrived", f, lost, corrupted, twice, len(got))
	}
	near := func(what string, v uint64, p float64) {
		if want := p * n; float64(v) < 0.8*want || float64(v) > 1.2*want {
			t.Errorf("%s: %d of %d, want about %.0f", what, v, n, want)
		}
	}
	near("lost", f.Lost, cfg.Loss)
	near("corrupted", f.Corrupted, cfg.Corrupt)
	near("duplicated", f.Duplicated, cfg.Duplicate)
}

// TestDeterministic: one seed gives the same faults whatever the batch
// sizes; another seed gives others.
func TestDeterministic(t *testing.T) {
	cfg := fault.Config{Loss: 0.05, Corrupt: 0.05, Duplicate: 0.05, Reorder: 0.1, ReorderDepth: 5,
		Hold: time.Hour} // released by later packets only, never by time
	run := func(seed uint64, per int) ([][]byte, int) {
		c := cfg
		c.Seed = seed
		w := newWire(t, c)
		w.write(t, 0, 3000, per)
		return w.queued(t), w.l.Pending()
	}
	a, pa := run(42, 1)
	b, pb := run(42, 128)
	if pa != pb || len(a) != len(b) {
		t.Fatalf("seed 42: %d arrived and %d held one by one, %d and %d in batches", len(a), pa, len(b), pb)
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("seed 42: packet %d differs between batch sizes", i)
		}
	}
	c, _ := run(43, 128)
	if slices.EqualFunc(a, c, bytes.Equal) {
		t.Fatal("seeds 42 and 43 gave the same faults")
	}
}

// TestReorder: held copies arrive behind at least one and at most
// ReorderDepth later ones; nothing else moves, nothing is lost, and a copy
// that nothing follows is released after Hold.
func TestReorder(t *testing.T) {
	const n, depth = 5000, 6
	w := newWire(t, fault.Config{Seed: 3, Reorder: 0.2, ReorderDepth: depth, Hold: time.Hour})
	w.write(t, 0, n, 64)
	got := w.queued(t)
	f := w.l.Faults()
	pending := uint64(w.l.Pending())
	if uint64(len(got))+pending != n || f.Forwarded != uint64(len(got)) {
		t.Fatalf("%d arrived and %d are held, of %d; counters %+v", len(got), pending, n, f)
	}
	highest, late := -1, uint64(0)
	seen := map[int]bool{}
	for k, p := range got {
		i := number(p)
		if seen[i] {
			t.Fatalf("packet %d arrived twice", i)
		}
		seen[i] = true
		if i > highest {
			highest = i
			continue
		}
		late++
		// Copies that passed it: the ones before it with higher numbers
		// that were not late themselves.
		passed, top := 0, -1
		for _, q := range got[:k] {
			if j := number(q); j > top {
				top = j
				if j > i {
					passed++
				}
			}
		}
		if passed < 1 || passed > depth {
			t.Fatalf("packet %d arrived behind %d later ones, want 1 to %d", i, passed, depth)
		}
	}
	if late == 0 || late != f.Reordered-pending {
		t.Fatalf("%d packets arrived late, %d were held and %d still are", late, f.Reordered, pending)
	}

	// Alone, a held copy waits Hold.
	const hold = 30 * time.Millisecond
	w = newWire(t, fault.Config{Seed: 3, Reorder: 1, Hold: hold})
	start := time.Now()
	w.write(t, 0, 1, 1)
	got = w.settle(t)
	if d := time.Since(start); len(got) != 1 || d < hold {
		t.Fatalf("%d packets after %v; want the one, after at least %v", len(got), d, hold)
	}
}

// TestDelay: every copy waits at least Delay and order is kept; Drained
// tells when the copies written before a mark have all left.
func TestDelay(t *testing.T) {
	const delay = 40 * time.Millisecond
	w := newWire(t, fault.Config{Seed: 5, Delay: delay})
	start := time.Now()
	w.write(t, 0, 200, 50)
	mark := w.l.Mark()
	if w.l.Drained(mark) {
		t.Fatal("Drained before the delay passed")
	}
	linktest.WaitFor(t, "the delayed packets", func() bool { return w.l.Drained(mark) })
	if d := time.Since(start); d < delay {
		t.Fatalf("delivered after %v, want at least %v", d, delay)
	}
	got := w.queued(t)
	if len(got) != 200 {
		t.Fatalf("got %d packets, want 200", len(got))
	}
	for i, p := range got {
		if !bytes.Equal(p, payload(i)) {
			t.Fatalf("packet %d changed or out of order", i)
		}
	}
	if f := w.l.Faults(); f.Delayed != 200 || f.Forwarded != 200 || f.Overflow != 0 {
		t.Fatalf("counters %+v", f)
	}
}

// TestOverflow: a full link passes copies on at once instead of holding
// them, and counts them.
func TestOverflow(t *testing.T) {
	w := newWire(t, fault.Config{Seed: 9, Delay: time.Hour, Queue: 16})
	w.write(t, 0, 40, 40)
	if f := w.l.Faults(); f.Delayed != 16 || f.Overflow != 24 || f.Forwarded != 24 {
		t.Fatalf("counters %+v", f)
	}
	if got := w.queued(t); len(got) != 24 || number(got[0]) != 16 {
		t.Fatalf("got %d packets, the first %d; want 24 from 16", len(got), number(got[0]))
	}
}

// TestClose: Close discards what is pending, ends the link's goroutine,
// closes the wrapped link and is idempotent; Write fails after it.
func TestClose(t *testing.T) {
	linktest.NoLeaks(t)
	w := newWire(t, fault.Config{Seed: 1, Delay: time.Hour, Reorder: 0.5})
	w.write(t, 0, 10, 10)
	if err := w.l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if f := w.l.Faults(); f.Discarded != 10 || f.Forwarded != 0 {
		t.Fatalf("counters %+v", f)
	}
	if w.l.Pending() != 0 {
		t.Fatal("copies still pending after Close")
	}
	b := w.pool.Get()
	b.Write(headroom, payload(1))
	if _, err := w.l.Write([]*packet.Buf{b}); !errors.Is(err, pktio.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
	if _, err := w.rx.Write([]*packet.Buf{b}); !errors.Is(err, pktio.ErrClosed) {
		t.Fatalf("the wrapped link is open after Close: %v", err)
	}

	a, _ := pipe.New(4)
	linktest.CheckClose(t, fault.New(a, fault.Config{Reorder: 0.1}), headroom)
}

// TestBadConfig: probabilities out of range panic.
func TestBadConfig(t *testing.T) {
	for _, c := range []fault.Config{{Loss: -0.1}, {Corrupt: 1.5}, {Loss: 0.6, Duplicate: 0.6}, {Delay: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", c)
				}
			}()
			a, _ := pipe.New(4)
			defer a.Close()
			fault.New(a, c)
		}()
	}
}

// TestNoAllocations: with every fault that does not depend on the clock
// on, Write allocates nothing once its slots exist. Delay and the hold's
// time limit are left out: how many copies they keep in flight, and so how
// many slots exist, depends on how the machine schedules the releaser, and
// a loaded machine needed more slots during the measurement than during
// the warm-up.
func TestNoAllocations(t *testing.T) {
	a, b := pipe.New(1 << 12)
	l := fault.New(a, fault.Config{Seed: 11, Loss: 0.02, Corrupt: 0.02, CorruptFrom: 8, Duplicate: 0.02,
		Reorder: 0.1, Hold: time.Hour, Queue: 1024})
	defer l.Close()
	rx := b.(*pipe.End)
	pool := packet.NewPool(256, 2048, headroom)
	out, in := make([]*packet.Buf, 64), make([]*packet.Buf, 128)
	pool.GetN(out)
	pool.GetN(in)
	pkts := make([][]byte, len(out))
	for i := range pkts {
		// One size, so that the pipe's slots (which grow to the largest
		// packet each has held) stop growing during the warm-up.
		pkts[i] = append(payload(i), make([]byte, 1100)...)[:1100]
	}
	round := func() {
		for i, o := range out {
			o.Write(headroom, pkts[i])
		}
		if _, err := l.Write(out); err != nil {
			t.Fatal(err)
		}
		for rx.Queued() > 0 {
			for _, p := range in {
				p.Reset(headroom)
			}
			if _, err := rx.Read(in); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 200 { // warm up: every slot made and grown
		round()
	}
	if allocs := testing.AllocsPerRun(200, round); allocs > 0.05 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, len(out))
	}
}
