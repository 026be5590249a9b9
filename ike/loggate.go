package ike

import "time"

// logGate bounds a log line that anyone who can send a datagram can
// cause (the IKE_SA_INIT refusals of task_ikeinit.go): Burst lines at
// once, then one per Interval; the lines it holds back are counted, and
// the next line let through says how many. The caller holds the lock
// that guards it (the Endpoint's); it does not allocate.
type logGate struct {
	tokens     float64
	last       time.Time
	suppressed uint64
}

const (
	logGateBurst    = 10
	logGateInterval = time.Second
)

// allow reports whether a line may be written at now and, if so, how many
// were held back since the last one.
func (g *logGate) allow(now time.Time) (ok bool, suppressed uint64) {
	if g.last.IsZero() {
		g.tokens = logGateBurst
	} else if d := now.Sub(g.last); d > 0 {
		g.tokens = min(logGateBurst, g.tokens+float64(d)/float64(logGateInterval))
	}
	g.last = now
	if g.tokens < 1 {
		g.suppressed++
		return false, 0
	}
	g.tokens--
	suppressed, g.suppressed = g.suppressed, 0
	return true, suppressed
}
