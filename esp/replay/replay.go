// Package replay implements the ESP anti-replay window of RFC 4303 section
// 3.4.3, including the inference of the high-order 32 bits of an extended
// sequence number (ESN) described in RFC 4303 Appendix A.
//
// The window is kept as a ring of uint64 words in the style of RFC 6479: the
// bit for sequence number s lives at bit index s modulo the ring's bit count,
// and sliding the window forward clears whole words, so a jump of k words
// costs k word stores and any jump longer than the ring clears the ring in one
// pass, never bit by bit.
//
// A receiver uses a Window in two steps. Check is the cheap pre-check done
// before the ICV is verified and the payload decrypted; it changes nothing.
// Update is the authoritative check-and-advance done after the ICV verified,
// in packet order. Nothing in this package is safe for concurrent use: each
// Window belongs to the one goroutine that owns the SA.
package replay

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxSize is the largest window, in packets.
const MaxSize = 65536

// offWindow is the notional window size used for ESN inference (RFC 4303
// Appendix A) when anti-replay is off: with a window of 2^31 the inferred
// sequence number is the one closest to the highest seen.
const offWindow = 1 << 31

// ErrSize is wrapped by the error New returns for a size outside 0..MaxSize.
var ErrSize = errors.New("replay: window size out of range")

// Window is the anti-replay window of one inbound SA (RFC 4303 section
// 3.4.3). A sequence number s is acceptable when it is not 0, has not been
// received before and is greater than Highest()-Size(); the window is exact,
// so the effective window equals the requested size.
//
// A Window is not safe for concurrent use; the SA's owner (one goroutine)
// calls it. Check and Update do not allocate. The zero Window is a window with
// anti-replay off and nothing received yet.
type Window struct {
	size    uint64   // requested window size in packets; 0 = anti-replay off
	highest uint64   // highest sequence number accepted so far; 0 = none
	mask    uint64   // len(ring)-1; len(ring) is a power of two
	ring    []uint64 // bit s%(64*len(ring)) records whether s was received
}

// New returns a Window of size packets with nothing received yet. Size 0
// turns anti-replay off (see Check and Update); otherwise size must be in
// 1..MaxSize. The bitmap is rounded up to a power-of-two number of uint64
// words with one spare word, so it tracks at least size packets whatever the
// alignment of the highest sequence number. New is safe for concurrent use.
func New(size int) (*Window, error) {
	if size < 0 || size > MaxSize {
		return nil, fmt.Errorf("%w: %d (want 0..%d)", ErrSize, size, MaxSize)
	}
	w := &Window{size: uint64(size)}
	if size > 0 {
		// The ring covers the word of the highest number and the n-1 words
		// before it, so its oldest tracked number is at most
		// highest-64*(n-1); tracking highest-size+1 needs
		// 64*(n-1) >= size-1.
		n := (size-1+63)/64 + 1
		n = 1 << bits.Len(uint(n-1)) // round up to a power of two
		w.ring = make([]uint64, n)
		w.mask = uint64(n - 1)
	}
	w.Reset(0)
	return w, nil
}

// Reset clears the window and starts it with highest as the highest sequence
// number received, which is itself then treated as received; 0 means nothing
// has been received yet. It is used when an SA is installed or rekeyed with a
// known starting point. Reset is not safe for concurrent use.
func (w *Window) Reset(highest uint64) {
	clear(w.ring)
	w.highest = highest
	if w.size > 0 {
		w.ring[(highest>>6)&w.mask] |= 1 << (highest & 63)
	}
}

// ResetSeen is Reset for a receiver that knows only a bound: it starts the
// window with highest as the highest sequence number received and treats
// every number at or below it as received too, so the window accepts
// nothing up to highest. A restarted SA uses it with the bound it recorded
// before the restart (no packet above it was accepted then). ResetSeen is
// not safe for concurrent use.
func (w *Window) ResetSeen(highest uint64) {
	w.highest = highest
	if w.size == 0 {
		return
	}
	for i := range w.ring {
		w.ring[i] = ^uint64(0)
	}
	// Bits above highest in its word stand for numbers not yet received.
	w.ring[(highest>>6)&w.mask] = ^uint64(0) >> (63 - highest&63)
}

// Size returns the requested window size in packets; 0 means anti-replay is
// off. Size is not safe for concurrent use with Reset or Update.
func (w *Window) Size() int { return int(w.size) }

// Highest returns the highest sequence number accepted so far, or given to
// Reset since (the full 64 bits when ESN is in use). It is not safe for
// concurrent use with Reset or Update.
func (w *Window) Highest() uint64 { return w.highest }

// Check is the anti-replay pre-check of RFC 4303 section 3.4.3, done before
// the ICV is verified. seqLo is the 32-bit sequence number from the wire.
//
// With esn false the full sequence number is seqLo, with the high 32 bits 0.
// With esn true Check infers the high 32 bits as RFC 4303 Appendix A
// describes, relative to Highest and the window size (2^31 when anti-replay
// is off), and returns the full 64-bit number; that number is what the ICV
// must be computed over and what Update takes. If the inference would need
// high bits below 0 or above 2^32-1, Check returns 0, false.
//
// ok is false when the sequence number is 0 (never sent), was already
// received, or is older than the window. With anti-replay off only 0 is
// rejected. Check does not change the Window and does not allocate; it is not
// safe for concurrent use with Reset or Update.
func (w *Window) Check(seqLo uint32, esn bool) (seq uint64, ok bool) {
	if esn {
		win := w.size
		if win == 0 {
			win = offWindow
		}
		seq, ok = inferESN(w.highest, win, seqLo)
		if !ok {
			return 0, false
		}
	} else {
		seq = uint64(seqLo)
	}
	return seq, w.acceptable(seq)
}

// inferESN returns the full sequence number whose low 32 bits are lo, per RFC
// 4303 Appendix A, given the highest number received so far and the window
// size win (1 <= win <= 2^31). The result lies in the 2^32 numbers starting at
// the bottom of the window, highest-win+1. ok is false when that would need
// high bits outside 0..2^32-1.
func inferESN(highest, win uint64, lo uint32) (seq uint64, ok bool) {
	th := uint32(highest >> 32)
	tl := uint32(highest)
	bottom := tl - uint32(win-1) // Tl - W + 1, modulo 2^32
	if uint64(tl) >= win-1 {
		// Case A: the window lies within one 2^32 subspace.
		if lo >= bottom {
			return uint64(th)<<32 | uint64(lo), true
		}
		if th == 1<<32-1 {
			return 0, false // would need Th + 1 = 2^32
		}
		return uint64(th+1)<<32 | uint64(lo), true
	}
	// Case B: the window spans two subspaces; bottom wrapped around.
	if lo >= bottom {
		if th == 0 {
			return 0, false // would need Th - 1 = -1
		}
		return uint64(th-1)<<32 | uint64(lo), true
	}
	return uint64(th)<<32 | uint64(lo), true
}

// acceptable reports whether seq is neither 0, nor received, nor older than
// the window.
func (w *Window) acceptable(seq uint64) bool {
	if seq == 0 {
		return false
	}
	if seq > w.highest || w.size == 0 {
		return true
	}
	if w.highest-seq >= w.size {
		return false
	}
	return w.ring[(seq>>6)&w.mask]&(1<<(seq&63)) == 0
}

// Update is the authoritative anti-replay check and window update of RFC 4303
// section 3.4.3, called after the ICV verified and in packet order, with the
// full sequence number Check returned. It returns false, changing nothing, if
// seq is 0, was already received, or is now older than the window (another
// packet may have moved the window since Check). Otherwise it marks seq
// received, slides the window forward when seq is greater than Highest, and
// returns true. With anti-replay off it only keeps Highest as the largest
// number seen and returns true for any seq but 0.
//
// Update does not allocate and is not safe for concurrent use.
func (w *Window) Update(seq uint64) bool {
	if seq == 0 {
		return false
	}
	if w.size == 0 {
		if seq > w.highest {
			w.highest = seq
		}
		return true
	}
	bit := uint64(1) << (seq & 63)
	if seq > w.highest {
		// Slide forward: clear the words entered since the highest
		// number's word, at most the whole ring once (RFC 6479).
		hw, nw := w.highest>>6, seq>>6
		if nw-hw > w.mask {
			clear(w.ring)
		} else {
			for i := hw + 1; i <= nw; i++ {
				w.ring[i&w.mask] = 0
			}
		}
		w.ring[nw&w.mask] |= bit
		w.highest = seq
		return true
	}
	if w.highest-seq >= w.size {
		return false
	}
	p := &w.ring[(seq>>6)&w.mask]
	if *p&bit != 0 {
		return false
	}
	*p |= bit
	return true
}
