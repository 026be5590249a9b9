package ike

// authlog.go: the log lines of refused authentications (IKE_AUTH and
// EAP, task_auth.go and task_eap.go). Each refusal gets one WARN line
// with its reason and the identity tried, but a stranger can cause as
// many as it sends IKE_AUTH requests (one IKE_SA_INIT each), so the
// lines of one Endpoint go through a token bucket (package lograte): a burst of
// authLogBurst, then one every authLogEvery. A line held back is
// counted, and the next line that goes out says how many were
// (suppressed=N). Every refusal is still counted in Stats.AuthFailed.

import (
	"log/slog"
	"time"
)

const (
	authLogBurst = 20
	authLogEvery = 200 * time.Millisecond // 5 lines a second sustained

	// IKE_SA_INIT's NO_PROPOSAL_CHOSEN WARN (task_ikeinit.go): anyone who
	// can send a datagram causes it.
	propWarnBurst = 10
	propWarnEvery = time.Second
)

// authRefused logs a refused authentication (or a failure of ours that
// refused it) at level, through the Endpoint's bucket: msg says what was
// refused, args carry the reason ("err") and the identity tried.
func (e *Endpoint) authRefused(level slog.Level, msg string, args ...any) {
	e.authLog.Log(e.cfg.Log, e.cfg.clock.Now(), level, msg, args...)
}
