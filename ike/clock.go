package ike

import "time"

// clock is where the Endpoint takes the time and its timers from: the
// real one, or a test's fake one that moves only when the test says
// (Config's unexported clock field), so that lifetimes, liveness checks
// and retransmissions are tested without waiting for them.
type clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d has passed, unless
	// the timer is stopped first.
	AfterFunc(d time.Duration, f func()) stopper
}

// stopper is a timer that can be stopped; Stop reports whether it
// stopped the timer before it fired.
type stopper interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// stop stops t if there is one.
func stop(t stopper) {
	if t != nil {
		t.Stop()
	}
}
