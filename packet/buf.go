// Package packet holds sluice's packet memory: buffers carved from large
// arenas with headroom and tailroom, so that headers are written in place in
// front of the payload and trailers behind it, never by copying the payload.
// It also has wire-header views in the style of gVisor's header package
// (type IPv4 []byte with accessors).
package packet

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Buf is one packet buffer: a fixed slot of an arena with a data window
// inside it. The bytes before the window are headroom, the bytes after it
// tailroom. A Buf has one owner at a time; it is not safe for concurrent use.
type Buf struct {
	slot  []byte // len == cap == slot size
	off   int    // start of data within slot
	end   int    // end of data within slot
	pool  *Pool
	index int32 // slot number in the pool's arena
}

// Bytes returns the data window. The slice aliases the buffer.
func (b *Buf) Bytes() []byte { return b.slot[b.off:b.end] }

// Len is the data length.
func (b *Buf) Len() int { return b.end - b.off }

// Headroom is the free space before the data.
func (b *Buf) Headroom() int { return b.off }

// Tailroom is the free space after the data.
func (b *Buf) Tailroom() int { return len(b.slot) - b.end }

// Cap is the slot size.
func (b *Buf) Cap() int { return len(b.slot) }

// Reset empties the buffer and leaves headroom bytes in front of the data.
func (b *Buf) Reset(headroom int) {
	if headroom < 0 || headroom > len(b.slot) {
		panic("packet: headroom out of range")
	}
	b.off, b.end = headroom, headroom
}

// SetWindow sets the data window to slot[off:off+n].
func (b *Buf) SetWindow(off, n int) {
	if off < 0 || n < 0 || off+n > len(b.slot) {
		panic("packet: window out of range")
	}
	b.off, b.end = off, off+n
}

// Offset is the start of the data within the slot.
func (b *Buf) Offset() int { return b.off }

// Slot returns the whole slot, headroom and tailroom included.
func (b *Buf) Slot() []byte { return b.slot }

// Prepend grows the data by n bytes at the front and returns them. It
// panics if the headroom is short: callers check Headroom first.
func (b *Buf) Prepend(n int) []byte {
	if n > b.off {
		panic("packet: headroom exhausted")
	}
	b.off -= n
	return b.slot[b.off : b.off+n]
}

// Append grows the data by n bytes at the back and returns them. It panics
// if the tailroom is short: callers check Tailroom first.
func (b *Buf) Append(n int) []byte {
	if n > len(b.slot)-b.end {
		panic("packet: tailroom exhausted")
	}
	b.end += n
	return b.slot[b.end-n : b.end]
}

// TrimFront drops n bytes from the front of the data.
func (b *Buf) TrimFront(n int) {
	if n > b.end-b.off {
		panic("packet: trim past end")
	}
	b.off += n
}

// TrimBack drops n bytes from the back of the data.
func (b *Buf) TrimBack(n int) {
	if n > b.end-b.off {
		panic("packet: trim past start")
	}
	b.end -= n
}

// Write replaces the data with p after headroom bytes. It returns false if
// p does not fit.
func (b *Buf) Write(headroom int, p []byte) bool {
	if headroom+len(p) > len(b.slot) {
		return false
	}
	b.off, b.end = headroom, headroom+len(p)
	copy(b.slot[b.off:], p)
	return true
}

// ArenaOffset names the data window as (arena index, byte offset, length),
// the form a batch gives an engine written in C (DESIGN.md decision 11).
func (b *Buf) ArenaOffset() (arena int, off int, n int) {
	if b.pool == nil {
		return -1, b.off, b.Len()
	}
	return b.pool.arenaOf(b), int(b.index)*b.pool.slotSize + b.off, b.Len()
}

// Pool hands out Bufs from arenas allocated once, pinned for the pool's
// life so that engines written in C can take their addresses (PinArena). It never grows past the
// count it was made with: Get returns nil when every buffer is out, and the
// caller drops and counts (DESIGN.md decision 8). It is safe for concurrent
// use.
type Pool struct {
	slotSize int
	headroom int
	perArena int
	arenas   [][]byte
	bufs     []Buf
	mu       sync.Mutex
	free     []*Buf
}

// arenaBytes is the size of one arena: large and long-lived.
const arenaBytes = 4 << 20

// NewPool makes count buffers of slotSize bytes each; Get resets each to
// the given headroom.
func NewPool(count, slotSize, headroom int) *Pool {
	if count <= 0 || slotSize <= 0 || headroom < 0 || headroom > slotSize {
		panic(fmt.Sprintf("packet: bad pool shape count=%d slot=%d headroom=%d", count, slotSize, headroom))
	}
	p := &Pool{slotSize: slotSize, headroom: headroom, bufs: make([]Buf, count), free: make([]*Buf, 0, count)}
	p.perArena = max(1, arenaBytes/slotSize)
	var unpins []func()
	for i := 0; i < count; i += p.perArena {
		n := min(p.perArena, count-i)
		a := make([]byte, n*slotSize)
		p.arenas = append(p.arenas, a)
		unpins = append(unpins, PinArena(a))
	}
	// The arenas are pinned for engines written in C (see PinArena) until
	// the pool is garbage.
	runtime.AddCleanup(p, func(unpins []func()) {
		for _, u := range unpins {
			u()
		}
	}, unpins)
	for i := range p.bufs {
		a := p.arenas[i/p.perArena]
		o := (i % p.perArena) * slotSize
		p.bufs[i] = Buf{slot: a[o : o+slotSize : o+slotSize], pool: p, index: int32(i % p.perArena)}
		p.free = append(p.free, &p.bufs[i])
	}
	// Hand out low slots first.
	for i, j := 0, len(p.free)-1; i < j; i, j = i+1, j-1 {
		p.free[i], p.free[j] = p.free[j], p.free[i]
	}
	return p
}

func (p *Pool) arenaOf(b *Buf) int {
	base := uintptr(unsafe.Pointer(&p.bufs[0]))
	i := (uintptr(unsafe.Pointer(b)) - base) / unsafe.Sizeof(Buf{})
	return int(i) / p.perArena
}

// Arena returns arena i, for engines that take (arena, offset, length).
func (p *Pool) Arena(i int) []byte { return p.arenas[i] }

// SlotSize is the size of every buffer.
func (p *Pool) SlotSize() int { return p.slotSize }

// Headroom is the headroom Get leaves.
func (p *Pool) Headroom() int { return p.headroom }

// Available is the number of buffers not handed out.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Get returns an empty buffer with the pool's headroom, or nil if none is
// free.
func (p *Pool) Get() *Buf {
	p.mu.Lock()
	n := len(p.free)
	if n == 0 {
		p.mu.Unlock()
		return nil
	}
	b := p.free[n-1]
	p.free = p.free[:n-1]
	p.mu.Unlock()
	b.off, b.end = p.headroom, p.headroom
	return b
}

// GetN fills bufs with up to len(bufs) buffers under one lock and returns
// how many it got.
func (p *Pool) GetN(bufs []*Buf) int {
	p.mu.Lock()
	n := min(len(bufs), len(p.free))
	copy(bufs, p.free[len(p.free)-n:])
	p.free = p.free[:len(p.free)-n]
	p.mu.Unlock()
	for _, b := range bufs[:n] {
		b.off, b.end = p.headroom, p.headroom
	}
	return n
}

// Release returns b to its pool. b must not be used afterwards.
func (b *Buf) Release() {
	p := b.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	if len(p.free) == cap(p.free) {
		p.mu.Unlock()
		panic("packet: buffer released twice")
	}
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// PutN returns several buffers under one lock.
func (p *Pool) PutN(bufs []*Buf) {
	p.mu.Lock()
	if len(p.free)+len(bufs) > cap(p.free) {
		p.mu.Unlock()
		panic("packet: buffer released twice")
	}
	for _, b := range bufs {
		if b.pool != p {
			p.mu.Unlock()
			panic("packet: buffer returned to the wrong pool")
		}
		p.free = append(p.free, b)
	}
	p.mu.Unlock()
}

// NewBuf wraps a caller's slice as a standalone Buf (no pool), with the data
// window at slot[off:off+n]. For tests and tools.
func NewBuf(slot []byte, off, n int) *Buf {
	b := &Buf{slot: slot[:len(slot):len(slot)]}
	b.SetWindow(off, n)
	return b
}
