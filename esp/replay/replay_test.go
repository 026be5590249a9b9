package replay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var testSizes = []int{1, 32, 64, 100, 4096, MaxSize}

func mustNew(t testing.TB, size int) *Window {
	t.Helper()
	w, err := New(size)
	if err != nil {
		t.Fatalf("New(%d): %v", size, err)
	}
	return w
}

func TestNew(t *testing.T) {
	for _, size := range []int{0, 1, 2, 63, 64, 65, 100, 4096, MaxSize - 1, MaxSize} {
		w := mustNew(t, size)
		if w.Size() != size {
			t.Errorf("New(%d).Size() = %d", size, w.Size())
		}
		if w.Highest() != 0 {
			t.Errorf("New(%d).Highest() = %d, want 0", size, w.Highest())
		}
		if size > 0 && 64*(len(w.ring)-1) < size-1 {
			t.Errorf("New(%d): ring of %d words is too small", size, len(w.ring))
		}
	}
	for _, size := range []int{-1, -1 << 40, MaxSize + 1, 1 << 40} {
		w, err := New(size)
		if err == nil || w != nil {
			t.Errorf("New(%d) = %v, %v; want error", size, w, err)
			continue
		}
		if !errors.Is(err, ErrSize) || !strings.HasPrefix(err.Error(), "replay: ") {
			t.Errorf("New(%d) error %q: want ErrSize with prefix \"replay: \"", size, err)
		}
	}
}

type step struct {
	seq  uint64
	want bool
}

func seqRange(from, to uint64, want bool) []step {
	var s []step
	for q := from; q <= to && q >= from; q++ {
		s = append(s, step{q, want})
	}
	return s
}

func cat(parts ...[]step) []step {
	var s []step
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

// TestSequences runs accept/reject sequences without ESN against each window
// size; steps is given the window size W.
func TestSequences(t *testing.T) {
	tests := []struct {
		name  string
		start uint64 // passed to Reset
		steps func(W uint64) []step
	}{
		{"fresh accepts 1, never 0", 0, func(W uint64) []step {
			return []step{{0, false}, {1, true}, {0, false}, {1, false}}
		}},
		{"in order", 0, func(W uint64) []step {
			return seqRange(1, 2*W+3, true)
		}},
		{"duplicates", 0, func(W uint64) []step {
			return []step{{1, true}, {1, false}, {2, true}, {2, false}, {1, false}}
		}},
		{"out of order inside window", 0, func(W uint64) []step {
			h := W + 10
			s := []step{{h, true}, {h - W + 1, W > 1}}
			if W > 2 {
				s = append(s, step{h - 1, true}, step{h - 1, false})
			}
			return append(s, step{h - W + 1, false}, step{h - W, false}, step{h, false}, step{1, false})
		}},
		{"too old", 0, func(W uint64) []step {
			h := 3*W + 7
			return []step{{h, true}, {h - W, false}, {h - W - 1, false}, {h - 2*W, false}, {1, false}, {h + 1, true}}
		}},
		{"big jump forward", 0, func(W uint64) []step {
			j := uint64(1) << 31
			return []step{
				{1, true}, {2, true}, {j, true}, {j - W + 1, W > 1}, {j - W, false},
				{3, false}, {2, false}, {j, false}, {1<<32 - 1, true}, {j, false}, {j + 1, false},
			}
		}},
		{"jump exactly W", 0, func(W uint64) []step {
			return cat(seqRange(1, W, true),
				[]step{{2 * W, true}, {W, false}},
				seqRange(W+1, 2*W-1, true),
				[]step{{2 * W, false}},
				seqRange(W+1, 2*W-1, false))
		}},
		{"jump W-1", 0, func(W uint64) []step {
			return cat(seqRange(1, W, true),
				[]step{{2*W - 1, W > 1}, {W, false}, {W - 1, false}},
				seqRange(W+1, 2*W-2, true),
				seqRange(W, 2*W-1, false))
		}},
		{"jump W+1", 0, func(W uint64) []step {
			return cat(seqRange(1, W, true),
				[]step{{2*W + 1, true}, {W + 1, false}, {W, false}},
				seqRange(W+2, 2*W, true),
				seqRange(W+1, 2*W+1, false))
		}},
		{"jump several words", 0, func(W uint64) []step {
			h := 5*W + 3
			return cat(seqRange(1, W, true),
				[]step{{h, true}},
				seqRange(h-W+1, h-1, true),
				seqRange(h-W, h, false))
		}},
		{"reset start", 100000, func(W uint64) []step {
			const s = 100000
			return []step{{s, false}, {s - W + 1, W > 1}, {s - W, false}, {s + 1, true}, {s + W + 2, true}, {s + 1, false}}
		}},
	}
	for _, tc := range tests {
		for _, size := range testSizes {
			t.Run(fmt.Sprintf("%s/W=%d", tc.name, size), func(t *testing.T) {
				w := mustNew(t, size)
				w.Reset(tc.start)
				for i, st := range tc.steps(uint64(size)) {
					seq, ok := w.Check(uint32(st.seq), false)
					if seq != st.seq || ok != st.want {
						t.Fatalf("step %d: Check(%d) = %d, %v; want %d, %v (highest %d)", i, st.seq, seq, ok, st.seq, st.want, w.Highest())
					}
					if got := w.Update(st.seq); got != st.want {
						t.Fatalf("step %d: Update(%d) = %v, want %v (highest %d)", i, st.seq, got, st.want, w.Highest())
					}
				}
			})
		}
	}
}

// TestWindowEdges checks that the window is exactly W packets wide at every
// alignment of the highest number within a word.
func TestWindowEdges(t *testing.T) {
	for _, size := range []int{1, 2, 63, 64, 65, 100, 127, 128, 129, 4096, MaxSize - 1, MaxSize} {
		w := mustNew(t, size)
		W := uint64(size)
		for off := uint64(0); off < 130; off++ {
			h := uint64(1)<<40 + off
			w.Reset(h)
			if w.Update(h - W) {
				t.Fatalf("W=%d h=%#x: Update(h-W) accepted", size, h)
			}
			if W > 1 {
				if !w.Update(h - W + 1) {
					t.Fatalf("W=%d h=%#x: Update(h-W+1) rejected", size, h)
				}
				if w.Update(h - W + 1) {
					t.Fatalf("W=%d h=%#x: Update(h-W+1) accepted twice", size, h)
				}
			}
			if w.Update(h) {
				t.Fatalf("W=%d h=%#x: Update(h) after Reset(h) accepted", size, h)
			}
		}
	}
}

func TestESN(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		highest uint64
		lo      uint32
		want    uint64
		ok      bool
	}{
		{"behind across 2^32", 64, 0x1_0000_0005, 0xFFFFFFF0, 0x0_FFFF_FFF0, true},
		{"ahead across 2^32", 64, 0x0_FFFF_FFF0, 5, 0x1_0000_0005, true},
		{"same epoch ahead", 64, 0x1_0000_0005, 6, 0x1_0000_0006, true},
		{"same epoch behind", 64, 0x1_0000_0005, 1, 0x1_0000_0001, true},
		{"replay of highest", 64, 0x1_0000_0005, 5, 0x1_0000_0005, false},
		{"below window across 2^32 is ahead", 64, 0x1_0000_0005, 0xFFFFFFC5, 0x1_FFFF_FFC5, true},
		{"oldest in window across 2^32", 64, 0x1_0000_0005, 0xFFFFFFC6, 0x0_FFFF_FFC6, true},

		// RFC 4303 Appendix A, case A: Tl >= W - 1, window within one subspace.
		{"case A bottom", 64, 0x3_0000_1000, 0x1000 - 63, 0x3_0000_0FC1, true},
		{"case A below bottom is next epoch", 64, 0x3_0000_1000, 0x1000 - 64, 0x4_0000_0FC0, true},
		{"case A ahead", 64, 0x3_0000_1000, 0x2000, 0x3_0000_2000, true},
		{"case A Tl = W-1", 64, 0x3_0000_003F, 0, 0x3_0000_0000, true},
		{"case A Tl = W-1 max", 64, 0x3_0000_003F, 0xFFFFFFFF, 0x3_FFFF_FFFF, true},
		{"case A Th max no next epoch", 64, 0xFFFFFFFF_FFFFFF00, 0x10, 0, false},
		{"case A Th max in window", 64, 0xFFFFFFFF_FFFFFF00, 0xFFFFFEF0, 0xFFFFFFFF_FFFFFEF0, true},

		// Case B: Tl < W - 1, window spans two subspaces.
		{"case B previous epoch bottom", 64, 0x3_0000_0010, 0xFFFFFFD1, 0x2_FFFF_FFD1, true},
		{"case B below bottom is this epoch", 64, 0x3_0000_0010, 0xFFFFFFD0, 0x3_FFFF_FFD0, true},
		{"case B this epoch behind", 64, 0x3_0000_0010, 5, 0x3_0000_0005, true},
		{"case B this epoch ahead", 64, 0x3_0000_0010, 0x20, 0x3_0000_0020, true},
		{"case B Tl = W-2", 64, 0x3_0000_003E, 0xFFFFFFFF, 0x2_FFFF_FFFF, true},
		{"case B Th 0 no epoch -1", 64, 0x10, 0xFFFFFFF0, 0, false},
		{"case B fresh no epoch -1", 64, 0, 0xFFFFFFFF, 0, false},
		{"fresh accepts 1", 64, 0, 1, 1, true},
		{"fresh rejects 0", 64, 0, 0, 0, false},
		{"epoch 1 accepts low 0", 64, 0x1_0000_0005, 0, 0x1_0000_0000, true},
		{"W=1 fresh", 1, 0, 0xFFFFFFFF, 0xFFFF_FFFF, true},
		{"W=1 next epoch", 1, 0x0_FFFF_FFFF, 0, 0x1_0000_0000, true},
		{"W=1 same epoch", 1, 0x1_0000_0005, 4, 0x2_0000_0004, true},
		{"MaxSize across 2^32", MaxSize, 0x1_0000_0005, 0xFFFF0006, 0x0_FFFF_0006, true},
		{"MaxSize below window is ahead", MaxSize, 0x1_0000_0005, 0xFFFF0005, 0x1_FFFF_0005, true},

		// Anti-replay off: notional window of 2^31, pick the closest.
		{"off behind across 2^32", 0, 0x1_0000_0005, 0xFFFFFFF0, 0x0_FFFF_FFF0, true},
		{"off ahead across 2^32", 0, 0x0_FFFF_FFF0, 5, 0x1_0000_0005, true},
		{"off replay allowed", 0, 0x1_0000_0005, 5, 0x1_0000_0005, true},
		{"off 2^31 ahead", 0, 0x1_0000_0005, 0x80000005, 0x1_8000_0005, true},
		{"off 2^31-1 behind", 0, 0x1_0000_0005, 0x80000006, 0x0_8000_0006, true},
		{"off case A 2^31 ahead", 0, 0x1_8000_0000, 0, 0x2_0000_0000, true},
		{"off case A 2^31-1 behind", 0, 0x1_8000_0000, 1, 0x1_0000_0001, true},
		{"off fresh no epoch -1", 0, 0, 0x80000001, 0, false},
		{"off fresh", 0, 0, 0x80000000, 0x8000_0000, true},
		{"off Th max", 0, 0xFFFFFFFF_FFFFFFFF, 0x7FFFFFFE, 0, false},
		{"off zero rejected", 0, 0, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := mustNew(t, tc.size)
			w.Reset(tc.highest)
			seq, ok := w.Check(tc.lo, true)
			if seq != tc.want || ok != tc.ok {
				t.Fatalf("Check(%#x, esn) with highest %#x, W=%d = %#x, %v; want %#x, %v", tc.lo, tc.highest, tc.size, seq, ok, tc.want, tc.ok)
			}
			if ms, mok := newModel(tc.size).withHighest(tc.highest).check(tc.lo, true); ms != seq || mok != ok {
				t.Fatalf("model disagrees: %#x, %v", ms, mok)
			}
			if ok && !w.Update(seq) {
				t.Fatalf("Update(%#x) rejected after Check accepted", seq)
			}
		})
	}
}

func TestESNInOrderAcrossBoundary(t *testing.T) {
	for _, size := range append([]int{0}, testSizes...) {
		w := mustNew(t, size)
		start := uint64(1)<<32 - 40
		w.Reset(start)
		for i := uint64(1); i <= 100; i++ {
			want := start + i
			seq, ok := w.Check(uint32(want), true)
			if seq != want || !ok {
				t.Fatalf("W=%d: Check(%#x) = %#x, %v; want %#x, true", size, uint32(want), seq, ok, want)
			}
			if !w.Update(seq) {
				t.Fatalf("W=%d: Update(%#x) = false", size, seq)
			}
		}
		if w.Highest() != start+100 {
			t.Fatalf("W=%d: Highest() = %#x, want %#x", size, w.Highest(), start+100)
		}
	}
}

func TestOff(t *testing.T) {
	for _, w := range []*Window{mustNew(t, 0), new(Window)} {
		if w.Size() != 0 {
			t.Fatalf("Size() = %d", w.Size())
		}
		if _, ok := w.Check(0, false); ok {
			t.Fatal("Check(0) accepted with anti-replay off")
		}
		for _, seq := range []uint64{5, 5, 3, 1, 1 << 31, 2} {
			if s, ok := w.Check(uint32(seq), false); !ok || s != seq {
				t.Fatalf("Check(%d) = %d, %v", seq, s, ok)
			}
			if !w.Update(seq) {
				t.Fatalf("Update(%d) = false", seq)
			}
		}
		if w.Update(0) {
			t.Fatal("Update(0) = true")
		}
		if w.Highest() != 1<<31 {
			t.Fatalf("Highest() = %d, want %d", w.Highest(), uint64(1)<<31)
		}
		w.Reset(7)
		if w.Highest() != 7 {
			t.Fatalf("Highest() after Reset(7) = %d", w.Highest())
		}
		if _, ok := w.Check(7, false); !ok {
			t.Fatal("Check(7) rejected with anti-replay off")
		}
	}
}

// TestCheckThenUpdateRace models two packets checked before either is
// verified: both with the same number pass Check, only the first Update wins;
// and a packet that Check accepted can fall out of the window before its
// Update.
func TestCheckThenUpdateRace(t *testing.T) {
	for _, esn := range []bool{false, true} {
		w := mustNew(t, 64)
		w.Reset(100)
		s1, ok1 := w.Check(90, esn)
		s2, ok2 := w.Check(90, esn)
		if !ok1 || !ok2 || s1 != 90 || s2 != 90 {
			t.Fatalf("esn=%v: Check(90) twice = %d,%v %d,%v", esn, s1, ok1, s2, ok2)
		}
		if !w.Update(s1) {
			t.Fatalf("esn=%v: first Update(90) = false", esn)
		}
		if w.Update(s2) {
			t.Fatalf("esn=%v: second Update(90) = true", esn)
		}

		s, ok := w.Check(50, esn)
		if !ok || s != 50 {
			t.Fatalf("esn=%v: Check(50) = %d, %v", esn, s, ok)
		}
		if !w.Update(200) {
			t.Fatalf("esn=%v: Update(200) = false", esn)
		}
		if w.Update(s) {
			t.Fatalf("esn=%v: Update(50) after window moved to 200 = true", esn)
		}
		if w.Highest() != 200 {
			t.Fatalf("esn=%v: Highest() = %d", esn, w.Highest())
		}
	}
}

func TestAllocs(t *testing.T) {
	for _, size := range []int{0, 64, MaxSize} {
		w := mustNew(t, size)
		var n uint64
		allocs := testing.AllocsPerRun(1000, func() {
			n++
			seq, ok := w.Check(uint32(n), true)
			if ok {
				w.Update(seq)
			}
			seq, ok = w.Check(uint32(n/2), false)
			if ok {
				w.Update(seq)
			}
			w.Update(n + 100000)
		})
		if allocs != 0 {
			t.Errorf("W=%d: %v allocations per Check+Update, want 0", size, allocs)
		}
	}
}

// model is a reference anti-replay window: a set of received numbers and an
// explicit lowest acceptable number.
type model struct {
	size    uint64
	highest uint64
	seen    map[uint64]bool
}

func newModel(size int) *model {
	return &model{size: uint64(size), seen: map[uint64]bool{0: true}}
}

func (m *model) withHighest(h uint64) *model {
	m.highest = h
	m.seen = map[uint64]bool{h: true}
	return m
}

// lowest returns the lowest sequence number the window accepts.
func (m *model) lowest() uint64 {
	if m.size == 0 || m.highest < m.size {
		return 1
	}
	return m.highest - m.size + 1
}

func (m *model) acceptable(seq uint64) bool {
	if seq == 0 {
		return false
	}
	if m.size == 0 {
		return true
	}
	return seq >= m.lowest() && !m.seen[seq]
}

// infer picks, among the full numbers with low bits lo, the one in the 2^32
// numbers starting at highest-W+1 (RFC 4303 Appendix A restated).
func (m *model) infer(lo uint32) (uint64, bool) {
	win := int64(m.size)
	if win == 0 {
		win = 1 << 31
	}
	th := int64(m.highest >> 32)
	found, res := 0, uint64(0)
	for c := th - 1; c <= th+1; c++ {
		if c < 0 || c > 1<<32-1 {
			continue
		}
		s := uint64(c)<<32 | uint64(lo)
		d := int64(s - m.highest) // exact: |s-highest| < 2^33
		if d >= -(win-1) && d <= 1<<32-win {
			found++
			res = s
		}
	}
	if found > 1 {
		panic("model: ambiguous inference")
	}
	return res, found == 1
}

func (m *model) check(lo uint32, esn bool) (uint64, bool) {
	seq := uint64(lo)
	if esn {
		var ok bool
		if seq, ok = m.infer(lo); !ok {
			return 0, false
		}
	}
	return seq, m.acceptable(seq)
}

func (m *model) update(seq uint64) bool {
	if !m.acceptable(seq) {
		return false
	}
	if seq > m.highest {
		m.highest = seq
	}
	if m.size > 0 {
		m.seen[seq] = true
		if uint64(len(m.seen)) > 2*m.size+256 {
			low := m.lowest()
			for s := range m.seen {
				if s < low {
					delete(m.seen, s)
				}
			}
		}
	}
	return true
}

// harness drives a Window and a model side by side. Packets are checked
// as they arrive and updated in arrival order when the batch is flushed, as
// a receiver that verifies ICVs in batches would.
type harness struct {
	t       testing.TB
	w       *Window
	m       *model
	esn     bool
	pending []uint64
}

func newHarness(t testing.TB, size int, esn bool) *harness {
	return &harness{t: t, w: mustNew(t, size), m: newModel(size), esn: esn}
}

func (h *harness) reset(v uint64) {
	h.flush()
	h.w.Reset(v)
	h.m.withHighest(v)
}

// packet delivers a packet whose full number would be target; icvOK false
// means its ICV fails, so it is never updated.
func (h *harness) packet(target uint64, icvOK bool) {
	lo := uint32(target)
	seq, ok := h.w.Check(lo, h.esn)
	ms, mok := h.m.check(lo, h.esn)
	if seq != ms || ok != mok {
		h.t.Fatalf("W=%d esn=%v highest=%#x: Check(%#x) = %#x, %v; model %#x, %v",
			h.m.size, h.esn, h.m.highest, lo, seq, ok, ms, mok)
	}
	if ok && icvOK {
		h.pending = append(h.pending, seq)
	} else if !ok && seq != 0 && h.w.Update(seq) != h.m.update(seq) {
		// A rejected packet that reached Update anyway must be rejected.
		h.t.Fatalf("W=%d: Update(%#x) of rejected packet disagrees with model", h.m.size, seq)
	}
	if len(h.pending) >= 8 {
		h.flush()
	}
}

func (h *harness) flush() {
	for _, seq := range h.pending {
		got, want := h.w.Update(seq), h.m.update(seq)
		if got != want {
			h.t.Fatalf("W=%d esn=%v highest=%#x: Update(%#x) = %v, model %v", h.m.size, h.esn, h.m.highest, seq, got, want)
		}
		if h.w.Highest() != h.m.highest {
			h.t.Fatalf("W=%d: Highest() = %#x, model %#x", h.m.size, h.w.Highest(), h.m.highest)
		}
	}
	h.pending = h.pending[:0]
}

func TestRandomAgainstModel(t *testing.T) {
	ops := 20000
	if testing.Short() {
		ops = 2000
	}
	for _, size := range []int{0, 1, 2, 32, 63, 64, 65, 100, 1000, 4096, MaxSize} {
		for _, esn := range []bool{false, true} {
			t.Run(fmt.Sprintf("W=%d/esn=%v", size, esn), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(42, uint64(size)<<1|b2u(esn)))
				h := newHarness(t, size, esn)
				W := uint64(size)
				if W == 0 {
					W = 64
				}
				if esn {
					h.reset(1<<32 - 3*W)
				}
				for range ops {
					hi := h.m.highest
					var target uint64
					switch r := rng.IntN(1000); {
					case r < 450:
						target = hi + 1 + rng.Uint64N(4)
					case r < 750:
						target = hi - rng.Uint64N(W+W/2+2)
					case r < 850:
						target = hi - rng.Uint64N(8)
					case r < 950:
						target = hi + rng.Uint64N(3*W+200)
					case r < 990:
						target = hi + rng.Uint64N(1<<33) - 1<<32
					case r < 995:
						h.flush()
						continue
					default:
						v := rng.Uint64()
						if !esn {
							v = uint64(uint32(v))
						} else if rng.IntN(2) == 0 {
							v = uint64(rng.IntN(4))<<32 | uint64(rng.Uint32N(2*uint32(W)))
						}
						h.reset(v)
						continue
					}
					h.packet(target, rng.IntN(20) != 0)
				}
				h.flush()
			})
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// FuzzWindow drives a Window and the reference model with operations decoded
// from ops, four bytes each.
func FuzzWindow(f *testing.F) {
	f.Add(64, uint64(0), false, []byte{0, 1, 0, 0, 0, 1, 0, 0, 3, 1, 0, 0})
	f.Add(1, uint64(0), true, []byte{0, 0, 0, 0, 2, 5, 0, 0, 4, 0, 0, 0})
	f.Add(MaxSize, uint64(1)<<32-10, true, []byte{0, 20, 0, 0, 0x82, 3, 0, 0, 7, 0xF0, 0xFF, 0xFF})
	f.Add(100, uint64(0xFFFFFFFF_FFFFFF00), true, []byte{1 | 8<<3, 0xFF, 0, 0, 3, 0x80, 0, 0})
	f.Add(0, uint64(5), true, []byte{1 | 31<<3, 1, 0, 0, 6, 7, 0, 0, 5, 0, 0, 1})
	f.Fuzz(func(t *testing.T, size int, start uint64, esn bool, ops []byte) {
		size = int(uint(size) % (MaxSize + 1))
		h := newHarness(t, size, esn)
		if !esn {
			start = uint64(uint32(start))
		}
		h.reset(start)
		for i := 0; i+4 <= len(ops); i += 4 {
			k := ops[i]
			mag := uint64(ops[i+1]) | uint64(ops[i+2])<<8 | uint64(ops[i+3])<<16
			shift := (k >> 3) & 31
			hi := h.m.highest
			switch k & 7 {
			case 0:
				h.packet(hi+1+mag&7, true)
			case 1:
				h.packet(hi+mag<<shift, true)
			case 2:
				h.packet(hi-mag<<shift, true)
			case 3:
				h.packet(hi-mag&0xFFFF, true)
			case 4:
				h.flush()
			case 5:
				v := mag << shift
				if !esn {
					v = uint64(uint32(v))
				}
				h.reset(v)
			case 6:
				h.packet(hi-mag&0xFF+(mag>>8)&0xFF, false)
			case 7:
				h.packet(hi&^0xFFFFFFFF|uint64(uint32(mag<<shift)), true)
			}
		}
		h.flush()
	})
}

func BenchmarkCheckUpdate(b *testing.B) {
	for _, size := range []int{64, 1024, MaxSize} {
		b.Run(fmt.Sprintf("W=%d", size), func(b *testing.B) {
			w := mustNew(b, size)
			var n uint64
			for b.Loop() {
				n++
				seq, ok := w.Check(uint32(n), true)
				if !ok || !w.Update(seq) {
					b.Fatalf("packet %d rejected", n)
				}
			}
		})
	}
}

func BenchmarkCheckUpdateReordered(b *testing.B) {
	// Packets arrive in blocks of 32 in a fixed shuffled order, so most are
	// behind the highest number and hit the bitmap.
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(32)
	for _, size := range []int{64, 1024, MaxSize} {
		b.Run(fmt.Sprintf("W=%d", size), func(b *testing.B) {
			w := mustNew(b, size)
			var n uint64
			for b.Loop() {
				want := n&^31 + uint64(perm[n&31]) + 1
				n++
				seq, ok := w.Check(uint32(want), true)
				if !ok || !w.Update(seq) {
					b.Fatalf("packet %d rejected", want)
				}
			}
		})
	}
}

// TestResetSeen: after ResetSeen(h) nothing at or below h is acceptable,
// whatever h's position in its word, and everything above it is.
func TestResetSeen(t *testing.T) {
	for _, size := range []int{1, 64, 100, 1024} {
		for _, h := range []uint64{0, 1, 63, 64, 65, 1000, 1<<32 - 1, 1<<40 + 17} {
			w := mustNew(t, size)
			w.Update(5) // state from before the reset must not matter
			w.ResetSeen(h)
			if w.Highest() != h {
				t.Fatalf("size %d: highest %d after ResetSeen(%d)", size, w.Highest(), h)
			}
			for d := uint64(0); d < 2*uint64(size)+130 && d <= h; d++ {
				if w.acceptable(h - d) {
					t.Fatalf("size %d: %d acceptable after ResetSeen(%d)", size, h-d, h)
				}
			}
			for d := uint64(1); d < 130; d++ {
				if !w.Update(h + d) {
					t.Fatalf("size %d: %d refused after ResetSeen(%d)", size, h+d, h)
				}
			}
		}
	}
}
