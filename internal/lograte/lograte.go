// Package lograte bounds the log lines that a stranger can cause (a
// refused connection, authentication or proposal): a token bucket of
// Burst lines that refills one line every Every. A line held back is
// counted, and the next line let through carries how many were
// (suppressed=N), so an operator sees that a flood happened and how big
// it was without the log growing with it. The counters that the callers
// keep beside it still count every event.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Bucket is one kind of line's budget. Burst and Every are set before
// first use (Burst < 1 counts as 1; Every <= 0 lets every line through);
// the zero state is a full bucket. Its methods are safe for concurrent use
// and do not allocate.
type Bucket struct {
	Burst int
	Every time.Duration

	mu     sync.Mutex
	tokens int       // lines that may go out now
	last   time.Time // when tokens was last topped up; zero: never
	held   uint64    // lines held back since the last that went out
}

// Allow reports whether a line may go out at now and, if so, how many
// were held back before it.
func (b *Bucket) Allow(now time.Time) (ok bool, held uint64) {
	if b.Every <= 0 {
		return true, 0
	}
	burst := max(b.Burst, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	} else if d := now.Sub(b.last); d >= b.Every {
		n := d / b.Every
		b.tokens = int(min(int64(b.tokens)+int64(n), int64(burst)))
		b.last = b.last.Add(n * b.Every)
	}
	if b.tokens == 0 {
		b.held++
		return false, 0
	}
	b.tokens--
	held, b.held = b.held, 0
	return true, held
}

// Log writes msg with args at level through the bucket, at now; the line
// says suppressed=N when N lines were held back before it. Nothing is
// counted when log does not write at level. A nil log discards.
func (b *Bucket) Log(log *slog.Logger, now time.Time, level slog.Level, msg string, args ...any) {
	if log == nil || !log.Enabled(context.Background(), level) {
		return
	}
	ok, held := b.Allow(now)
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	log.Log(context.Background(), level, msg, args...)
}
