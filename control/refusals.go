package control

// Log lines about refused connections, at most one per interval: a client
// that opens thousands of connections it may not use must not be able to
// fill the log with thousands of lines.

import (
	"log/slog"
	"sync"
	"time"
)

// refusalLog logs refused connections of one kind (another user's, one too
// many): the first refusal after a quiet interval is logged at once, with
// its details; those that follow within the interval are counted, and one
// summary line says how many there were and what the last one was, when
// the interval is over or the server closes. It is safe for concurrent use.
type refusalLog struct {
	log      *slog.Logger
	msg      string
	interval time.Duration

	mu      sync.Mutex // guards the fields below
	last    time.Time  // when the last line was logged
	n       int        // refusals since then that no line has told of
	latest  []any      // the attributes of the latest of them
	pending *time.Timer
	stopped bool
}

func newRefusalLog(log *slog.Logger, msg string, interval time.Duration) *refusalLog {
	return &refusalLog{log: log, msg: msg, interval: interval}
}

// refused records one refusal; args are its attributes, as for slog.
func (r *refusalLog) refused(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.stopped || r.n == 0 && (r.last.IsZero() || now.Sub(r.last) >= r.interval) {
		r.log.Warn(r.msg, args...)
		r.last = now
		return
	}
	r.n++
	r.latest = args
	if r.pending == nil {
		r.pending = time.AfterFunc(r.last.Add(r.interval).Sub(now), r.flush)
	}
}

// flush logs the summary of the refusals counted since the last line.
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = nil
	r.flushLocked()
}

// flushLocked logs the summary, if there is anything to tell. The caller
// holds mu.
func (r *refusalLog) flushLocked() {
	if r.n == 0 {
		return
	}
	r.log.Warn(r.msg+" (summary)", "refused", r.n, "since", r.last.Format(time.RFC3339), slog.Group("last", r.latest...))
	r.last, r.n, r.latest = time.Now(), 0, nil
}

// stop logs the summary of what is counted, if anything, and cancels the
// timer; later refusals are logged one line each (there should be none).
func (r *refusalLog) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending != nil {
		r.pending.Stop()
		r.pending = nil
	}
	r.flushLocked()
	r.stopped = true
}
