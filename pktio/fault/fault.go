// Package fault is a pktio.Link wrapper that damages what is written
// through it, the way a bad network does, for tests: it loses, corrupts,
// duplicates, reorders and delays packets, each with a configured
// probability drawn from a seeded generator, and counts what it did, so a
// test over it can compute exactly what the receiver must see.
//
// Like pktio/pipe it exists for unit tests and in-process tests, never as a
// replacement for the real I/O path (DESIGN.md decision 13).
//
// # What happens to a packet
//
// Faults apply to Write; Read, Close and Stats pass through to the wrapped
// link, so wrapping both ends of a pipe damages both directions. Each packet
// given to Write goes through two stages:
//
//  1. One draw decides whether it is lost, corrupted (one bit flipped, at
//     CorruptFrom or after), duplicated (sent twice), or none of these: the
//     three are exclusive, so a receiver that authenticates what it gets
//     and rejects replays accepts exactly Packets - Lost - Corrupted of
//     them, drops Corrupted as forged and Duplicated as replays.
//  2. Each copy that leaves stage 1 may be held back (Reorder): it is
//     released after 1 to ReorderDepth later copies have passed it, or
//     after Hold if traffic stops first. Then, if Delay is set, every copy
//     waits Delay in a first-in first-out line before it reaches the
//     wrapped link.
//
// # Determinism
//
// Every decision (which packets, which bit, how far back) is drawn from a
// math/rand/v2 PCG generator seeded with Config.Seed, one packet after
// another in the order they are written, so the faults are a function of
// the seed and of the sequence of packets, not of how they were batched or
// of timing. Two things depend on time: the release of a held packet by
// Hold (only when fewer than its count of later packets follow it within
// Hold) and the moment a delayed packet leaves; neither changes which
// packets are damaged, nor the order while traffic flows.
//
// # Memory
//
// Packets that pass straight through (not held, no delay) are handed to the
// wrapped link in the caller's buffers; corruption flips the bit in place,
// which the Link contract allows. Held and delayed packets are copied into
// the link's own slots, Queue of them at most, each reused and grown only
// to the largest packet it has held; a packet that finds them all in use
// passes on at once instead of being held (Overflow counts it). After
// warm-up, Write allocates nothing.
package fault

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// Config says which faults to apply. Probabilities are per packet, in
// [0, 1]; Loss + Corrupt + Duplicate must not exceed 1. The zero value
// passes everything through unchanged.
type Config struct {
	// Seed seeds the generator every decision is drawn from.
	Seed uint64
	// Loss is the probability that a packet is dropped.
	Loss float64
	// Corrupt is the probability that a packet has one bit flipped. The
	// bit is chosen uniformly from byte CorruptFrom to the end; a packet
	// no longer than CorruptFrom is never corrupted.
	Corrupt float64
	// CorruptFrom is the first byte corruption may touch, so that a test
	// can aim it past headers a receiver is free to ignore (an outer IPv4
	// TTL, say) at what a protocol protects: 36 skips the IPv4, UDP and
	// ESP headers of ESP-in-UDP over IPv4 and hits the IV, ciphertext or
	// ICV.
	CorruptFrom int
	// Duplicate is the probability that a packet is sent twice.
	Duplicate float64
	// Reorder is the probability that a copy is held back behind 1 to
	// ReorderDepth later ones (default depth 8).
	Reorder      float64
	ReorderDepth int
	// Hold bounds how long a held copy waits for the later ones that
	// release it; default 5ms.
	Hold time.Duration
	// Delay is how long every copy waits before it reaches the wrapped
	// link; zero passes copies on within Write.
	Delay time.Duration
	// Queue is the number of copies the link holds at once (held and
	// delayed); default 4096.
	Queue int
}

// Defaults of Config's zero fields.
const (
	DefaultReorderDepth = 8
	DefaultHold         = 5 * time.Millisecond
	DefaultQueue        = 4096
)

// maxHeld bounds the copies held back for reordering at once (the rest of
// Queue is the delay line's).
const maxHeld = 64

// Counters are what a Link did. Every packet given to Write is counted in
// Packets and then in at most one of Lost, Corrupted and Duplicated; every
// copy that leaves may be counted in Reordered and Delayed.
type Counters struct {
	Packets    uint64 // packets given to Write
	Lost       uint64 // packets dropped
	Corrupted  uint64 // packets passed on with one bit flipped
	Duplicated uint64 // packets passed on twice (the second copy is counted here)
	Reordered  uint64 // copies held back behind later ones
	Delayed    uint64 // copies that waited Delay
	Overflow   uint64 // copies not held (or not delayed) because every slot was in use
	Discarded  uint64 // copies still held or delayed when the link was closed
	Forwarded  uint64 // copies handed to the wrapped link (whatever it then did with them)
}

// stats are the atomic Counters; the writer of each is the goroutine that
// holds Link.mu.
type stats struct {
	packets, lost, corrupted, duplicated  atomic.Uint64
	reordered, delayed, overflow, discard atomic.Uint64
	forwarded                             atomic.Uint64
}

// tally is one Write's (or one release's) counts, added to stats once.
type tally struct {
	packets, lost, corrupted, duplicated  uint64
	reordered, delayed, overflow, discard uint64
	forwarded                             uint64
}

func (t *tally) addTo(s *stats) {
	add := func(c *atomic.Uint64, v uint64) {
		if v != 0 {
			c.Add(v)
		}
	}
	add(&s.packets, t.packets)
	add(&s.lost, t.lost)
	add(&s.corrupted, t.corrupted)
	add(&s.duplicated, t.duplicated)
	add(&s.reordered, t.reordered)
	add(&s.delayed, t.delayed)
	add(&s.overflow, t.overflow)
	add(&s.discard, t.discard)
	add(&s.forwarded, t.forwarded)
	*t = tally{}
}

// held is a copy held back for reordering.
type held struct {
	buf   *packet.Buf // one of the link's slots
	ord   uint64      // the copy's number (Mark)
	left  int         // later copies still to pass it
	since time.Time
}

// delayed is a copy in the delay line.
type delayed struct {
	buf *packet.Buf // one of the link's slots
	ord uint64
	due time.Time
}

// Link applies faults to what is written through it; see the package
// documentation.
type Link struct {
	inner pktio.Link
	cfg   Config
	loss  float64 // thresholds of the exclusive draw
	corr  float64
	dup   float64
	step  time.Duration // the least time a copy is held or delayed

	mu    sync.Mutex // guards everything below, and serialises inner.Write
	rng   *rand.Rand
	next  uint64        // number of the next copy
	slots int           // slots made so far, at most cfg.Queue
	free  []*packet.Buf // slots not in use
	held  []held        // in the order they were held
	line  []delayed     // ring, in due order
	lhead int
	ln    int
	out   []*packet.Buf // the batch being made for inner.Write
	used  []*packet.Buf // slots in out, freed after the write
	t     tally
	err   error     // inner.Write's error, returned by the next Write
	until time.Time // when the releaser wakes by itself; zero: it waits to be woken

	closed atomic.Bool
	wake   chan struct{}
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when the releaser returns
	stats  stats
}

// New wraps inner. It panics if the configuration is invalid (a
// probability outside [0, 1], or loss, corruption and duplication adding up
// to more than 1). The Link owns inner: Close closes it.
func New(inner pktio.Link, cfg Config) *Link {
	for _, p := range []float64{cfg.Loss, cfg.Corrupt, cfg.Duplicate, cfg.Reorder} {
		if !(p >= 0 && p <= 1) {
			panic("fault: probabilities must be in [0, 1]")
		}
	}
	if cfg.Loss+cfg.Corrupt+cfg.Duplicate > 1 {
		panic("fault: Loss + Corrupt + Duplicate exceeds 1")
	}
	if cfg.CorruptFrom < 0 || cfg.ReorderDepth < 0 || cfg.Hold < 0 || cfg.Delay < 0 || cfg.Queue < 0 {
		panic("fault: negative size or duration")
	}
	if cfg.ReorderDepth == 0 {
		cfg.ReorderDepth = DefaultReorderDepth
	}
	if cfg.Hold == 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	l := &Link{
		inner: inner, cfg: cfg,
		loss: cfg.Loss, corr: cfg.Loss + cfg.Corrupt, dup: cfg.Loss + cfg.Corrupt + cfg.Duplicate,
		rng:  rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		held: make([]held, 0, maxHeld),
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}),
	}
	if cfg.Delay > 0 {
		l.line = make([]delayed, cfg.Queue)
		l.step = cfg.Delay
	}
	if cfg.Reorder > 0 && (l.step == 0 || cfg.Hold < l.step) {
		l.step = cfg.Hold
	}
	n := inner.BatchSize()
	l.out = make([]*packet.Buf, 0, 2*n+maxHeld)
	l.used = make([]*packet.Buf, 0, 2*n+maxHeld)
	if cfg.Reorder > 0 || cfg.Delay > 0 {
		go l.releaser()
	} else {
		close(l.exited)
	}
	return l
}

// Inner returns the wrapped link.
func (l *Link) Inner() pktio.Link { return l.inner }

// Read reads the wrapped link.
func (l *Link) Read(bufs []*packet.Buf) (int, error) { return l.inner.Read(bufs) }

// BatchSize is the wrapped link's.
func (l *Link) BatchSize() int { return l.inner.BatchSize() }

// Stats returns the wrapped link's counters; Faults has the link's own.
func (l *Link) Stats() *pktio.LinkStats { return l.inner.Stats() }

// Faults returns what the link did so far. Each counter is read
// atomically; the set is consistent once writes have stopped and Pending
// is zero.
func (l *Link) Faults() Counters {
	s := &l.stats
	return Counters{
		Packets: s.packets.Load(), Lost: s.lost.Load(), Corrupted: s.corrupted.Load(),
		Duplicated: s.duplicated.Load(), Reordered: s.reordered.Load(), Delayed: s.delayed.Load(),
		Overflow: s.overflow.Load(), Discarded: s.discard.Load(), Forwarded: s.forwarded.Load(),
	}
}

// Write applies the faults to bufs and hands what survives, now or later,
// to the wrapped link (see the package documentation). It returns
// len(bufs) unless the link is closed; an error of the wrapped link's
// Write is returned by this call or, for copies released later, the next.
func (l *Link) Write(bufs []*packet.Buf) (int, error) {
	if l.closed.Load() {
		return 0, pktio.ErrClosed
	}
	l.mu.Lock()
	if l.closed.Load() {
		// Close has discarded what was pending, or is about to.
		l.mu.Unlock()
		return 0, pktio.ErrClosed
	}
	var now time.Time
	if l.cfg.Reorder > 0 || l.cfg.Delay > 0 {
		now = time.Now()
	}
	for _, b := range bufs {
		l.t.packets++
		u := l.rng.Float64()
		switch {
		case u < l.loss:
			l.t.lost++
		case u < l.corr:
			if l.corrupt(b) {
				l.t.corrupted++
			}
			l.pass(b, now)
		case u < l.dup:
			l.t.duplicated++
			l.pass(b, now)
			l.pass(b, now)
		default:
			l.pass(b, now)
		}
	}
	l.flushLocked()
	err := l.err
	l.err = nil
	// Wake the releaser only if what this call left pending may be due
	// before it wakes by itself: with traffic flowing it is already
	// sleeping until the oldest copy is due.
	wake := (len(l.held) > 0 || l.ln > 0) && (l.until.IsZero() || now.Add(l.step).Before(l.until))
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return len(bufs), err
}

// corrupt flips one bit of b at or after CorruptFrom, in place, and
// reports whether it could.
func (l *Link) corrupt(b *packet.Buf) bool {
	p := b.Bytes()
	if len(p) <= l.cfg.CorruptFrom {
		return false
	}
	bit := l.cfg.CorruptFrom*8 + l.rng.IntN((len(p)-l.cfg.CorruptFrom)*8)
	p[bit/8] ^= 1 << (bit % 8)
	return true
}

// pass takes one copy of b through the reorder stage. l.mu is held.
func (l *Link) pass(b *packet.Buf, now time.Time) {
	ord := l.next
	l.next++
	if l.cfg.Reorder > 0 && l.rng.Float64() < l.cfg.Reorder {
		left := 1 + l.rng.IntN(l.cfg.ReorderDepth)
		if len(l.held) < maxHeld {
			if s := l.copyToSlot(b); s != nil {
				l.held = append(l.held, held{buf: s, ord: ord, left: left, since: now})
				l.t.reordered++
				return
			}
		}
		l.t.overflow++
	}
	l.forward(b, false, ord, now)
	// The copy that passed counts for every one held before it.
	if len(l.held) == 0 {
		return
	}
	kept := l.held[:0]
	for _, h := range l.held {
		if h.left--; h.left > 0 {
			kept = append(kept, h)
			continue
		}
		l.forward(h.buf, true, h.ord, now)
	}
	clear(l.held[len(kept):])
	l.held = kept
}

// forward takes a copy through the delay stage to the batch for the
// wrapped link. slot says b is one of the link's slots (else the caller's
// buffer, which must be written before Write returns). l.mu is held.
func (l *Link) forward(b *packet.Buf, slot bool, ord uint64, now time.Time) {
	if l.cfg.Delay > 0 {
		s := b
		if !slot {
			s = l.copyToSlot(b)
		}
		if s != nil && l.ln < len(l.line) {
			l.line[(l.lhead+l.ln)%len(l.line)] = delayed{buf: s, ord: ord, due: now.Add(l.cfg.Delay)}
			l.ln++
			l.t.delayed++
			return
		}
		if s != nil && !slot {
			l.free = append(l.free, s)
		}
		l.t.overflow++
	}
	l.out = append(l.out, b)
	if slot {
		l.used = append(l.used, b)
	}
	if len(l.out) == cap(l.out) {
		l.flushLocked()
	}
}

// copyToSlot copies b's data window into a free slot, or returns nil when
// every slot is in use. l.mu is held.
func (l *Link) copyToSlot(b *packet.Buf) *packet.Buf {
	var s *packet.Buf
	if n := len(l.free); n > 0 {
		s = l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
	} else if l.slots < l.cfg.Queue {
		l.slots++
		s = packet.NewBuf(make([]byte, max(2048, b.Len())), 0, 0)
	} else {
		return nil
	}
	p := b.Bytes()
	if s.Cap() < len(p) {
		s = packet.NewBuf(make([]byte, len(p)), 0, 0) // grown: the old slot is dropped
	}
	copy(s.Slot(), p)
	s.SetWindow(0, len(p))
	return s
}

// flushLocked writes the batch to the wrapped link and frees its slots.
// l.mu is held.
func (l *Link) flushLocked() {
	if len(l.out) > 0 {
		n, err := l.inner.Write(l.out)
		l.t.forwarded += uint64(n)
		if err != nil && l.err == nil {
			l.err = err
		}
		clear(l.out)
		l.out = l.out[:0]
	}
	l.free = append(l.free, l.used...)
	clear(l.used)
	l.used = l.used[:0]
	l.t.addTo(&l.stats)
}

// releaser passes on held copies whose Hold has run out and delayed copies
// whose time has come, and sleeps until the next one is due.
func (l *Link) releaser() {
	defer close(l.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		l.mu.Lock()
		now := time.Now()
		var next time.Time
		if len(l.held) > 0 {
			kept := l.held[:0]
			for _, h := range l.held {
				if now.Sub(h.since) < l.cfg.Hold {
					kept = append(kept, h)
					continue
				}
				l.forward(h.buf, true, h.ord, now)
			}
			clear(l.held[len(kept):])
			l.held = kept
			if len(kept) > 0 {
				next = kept[0].since.Add(l.cfg.Hold)
			}
		}
		for l.ln > 0 {
			d := &l.line[l.lhead]
			if d.due.After(now) {
				if next.IsZero() || d.due.Before(next) {
					next = d.due
				}
				break
			}
			l.out = append(l.out, d.buf)
			l.used = append(l.used, d.buf)
			*d = delayed{}
			l.lhead = (l.lhead + 1) % len(l.line)
			l.ln--
			if len(l.out) == cap(l.out) {
				l.flushLocked()
			}
		}
		l.flushLocked()
		l.until = next
		l.mu.Unlock()

		var fire <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			fire = timer.C
		}
		select {
		case <-fire:
		case <-l.wake:
		case <-l.done:
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// Pending is the number of copies held back or waiting in the delay line.
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held) + l.ln
}

// Mark numbers the copies written so far: every copy that entered the
// link before the call has a number below the mark. Drained tells when
// they have all left.
func (l *Link) Mark() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Drained reports whether every copy numbered below mark has left the
// link (handed to the wrapped link, or discarded by Close). A test waits
// on it to know that what a sender wrote before some event has reached the
// wrapped link, whatever was held or delayed.
func (l *Link) Drained(mark uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.held {
		if h.ord < mark {
			return false
		}
	}
	for i := range l.ln {
		if l.line[(l.lhead+i)%len(l.line)].ord < mark {
			return false
		}
	}
	return true
}

// Close discards the copies held or delayed (counted in Discarded), stops
// the link's goroutine and closes the wrapped link. It is idempotent.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	<-l.exited
	l.mu.Lock()
	l.t.discard += uint64(len(l.held) + l.ln)
	clear(l.held)
	l.held = l.held[:0]
	for l.ln > 0 {
		l.line[l.lhead] = delayed{}
		l.lhead = (l.lhead + 1) % len(l.line)
		l.ln--
	}
	l.t.addTo(&l.stats)
	l.mu.Unlock()
	return l.inner.Close()
}

var _ pktio.Link = (*Link)(nil)
