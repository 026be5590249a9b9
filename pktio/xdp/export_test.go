package xdp

import "sync/atomic"

// RxPending is how many frames wait in l's RX ring (for tests that must
// not block in Read).
func RxPending(l *Link) int {
	return int(atomic.LoadUint32(l.s.rx.prod) - l.s.rx.cached)
}

// SetGenericOnly makes Open attach the program in generic mode only, and
// returns a function that undoes it.
func SetGenericOnly() (undo func()) {
	genericOnly = true
	return func() { genericOnly = false }
}

// FillNeedsWakeup reports the fill ring's need-wakeup flag.
func FillNeedsWakeup(l *Link) bool { return l.s.fill.needWakeup() }
