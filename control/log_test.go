package control

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logRecorder is a slog.Handler that keeps every record, for tests that
// count log lines.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// The server's logger has no attributes or groups of its own.
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// records returns the records whose message starts with prefix (all of
// them for "") and whose level is at least min.
func (h *logRecorder) records(prefix string, min slog.Level) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if r.Level >= min && strings.HasPrefix(r.Message, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// attr returns the value of r's attribute key ("" if it has none).
func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}
