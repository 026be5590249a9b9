package ike

// authlog.go: the log lines of refused authentications (IKE_AUTH and
// EAP, task_auth.go and task_eap.go). Each refusal gets one WARN line
// with its reason and the identity tried, but a stranger can cause as
// many as it sends IKE_AUTH requests (one IKE_SA_INIT each), so the
// lines of one Endpoint go through a token bucket: a burst of
// authLogBurst, then one every authLogEvery. A line held back is
// counted, and the next line that goes out says how many were
// (suppressed=N). Every refusal is still counted in Stats.AuthFailed.

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

const (
	authLogBurst = 20
	authLogEvery = 200 * time.Millisecond // 5 lines a second sustained
)

// authLog is an Endpoint's bucket for the lines of refused
// authentications. Its zero value is a full bucket. It is safe for
// concurrent use and does not allocate.
type authLog struct {
	mu     sync.Mutex
	tokens int       // lines that may go out now
	last   time.Time // when tokens was last topped up; zero: never
	held   uint64    // lines held back since the last that went out
}

// take reports whether a line may go out at now and, if so, how many
// were held back before it.
func (l *authLog) take(now time.Time) (ok bool, held uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens, l.last = authLogBurst, now
	} else if d := now.Sub(l.last); d >= authLogEvery {
		n := d / authLogEvery
		l.tokens = int(min(int64(l.tokens)+int64(n), authLogBurst))
		l.last = l.last.Add(n * authLogEvery)
	}
	if l.tokens == 0 {
		l.held++
		return false, 0
	}
	l.tokens--
	held, l.held = l.held, 0
	return true, held
}

// authRefused logs a refused authentication (or a failure of ours that
// refused it) at level, through the Endpoint's bucket: msg says what was
// refused, args carry the reason ("err") and the identity tried.
func (e *Endpoint) authRefused(level slog.Level, msg string, args ...any) {
	log := e.cfg.Log
	if !log.Enabled(context.Background(), level) {
		return
	}
	ok, held := e.authLog.take(e.cfg.clock.Now())
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	log.Log(context.Background(), level, msg, args...)
}
