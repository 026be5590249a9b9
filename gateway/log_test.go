package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer that a logger may write to from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReloadListsLogLevels: a reload that changes log_level or a
// subsystem's log_levels entry lists each change (sluice run applies
// them), and one that changes log_format is refused: the handler is made
// once. The subsystems' lines carry their subsys attribute.
func TestReloadListsLogLevels(t *testing.T) {
	s := newTLSSite(t)
	var buf syncBuffer
	g, err := Start(context.Background(), s.load(t), slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	next := s.load(t)
	next.LogLevel = "warn"
	next.LogLevels = map[string]string{"ike": "debug"}
	changes, err := g.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"log level from=info to=warn",
		"log level subsystem=ike from=info to=debug",
	} {
		if !slices.Contains(changes, want) {
			t.Errorf("changes %q lack %q", changes, want)
		}
	}
	if len(changes) != 2 {
		t.Errorf("changes %q: subsystems that follow log_level are listed with it", changes)
	}
	json := s.load(t)
	json.LogFormat = "json"
	if _, err := g.Reload(json); err == nil || !strings.Contains(err.Error(), "gateway.log_format") {
		t.Errorf("reload to JSON: %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "subsys=tls") || !strings.Contains(out, "subsys=gateway") {
		t.Errorf("no subsystem attributes in:\n%s", out)
	}
}
