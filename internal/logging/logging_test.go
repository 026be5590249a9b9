package logging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestJSONLines: in JSON, each line is an object with time, level, msg
// and the logger's subsystem, and values stay attributes.
func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(&buf, Options{JSON: true}))
	log.With(Key, "ike").Info("IKE SA established", "peer", "192.0.2.2:500")
	log.With(Key, "tls").Warn("TLS backend connect failed", "listener", "web")
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		for _, k := range []string{"time", "level", "msg", Key} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %q has no %s", sc.Text(), k)
			}
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d lines, want 2:\n%s", n, buf.String())
	}
}

// TestSubsystemLevels: each subsystem's records are filtered at its own
// level, records of no subsystem at the default, and a level set later
// applies to loggers made before.
func TestSubsystemLevels(t *testing.T) {
	var buf bytes.Buffer
	lv := NewLevels(slog.LevelInfo)
	lv.Set("ike", slog.LevelDebug)
	lv.Set("tls", slog.LevelWarn)
	log := slog.New(NewHandler(&buf, Options{Levels: lv}))
	ike, tls := log.With(Key, "ike"), log.With(Key, "tls")
	ike.Debug("ike debug")
	tls.Info("tls info")
	tls.Warn("tls warn")
	log.Debug("root debug")
	log.Info("root info")
	log.With(Key, "dataplane").Debug("dataplane debug")
	got := buf.String()
	for _, want := range []string{"ike debug", "tls warn", "root info"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"tls info", "root debug", "dataplane debug"} {
		if strings.Contains(got, not) {
			t.Errorf("%q logged:\n%s", not, got)
		}
	}
	if !strings.Contains(got, "subsys=ike") {
		t.Errorf("no subsys attribute:\n%s", got)
	}
	buf.Reset()
	lv.Set("tls", slog.LevelDebug)
	tls.Debug("tls debug now")
	if !strings.Contains(buf.String(), "tls debug now") {
		t.Errorf("level change not applied: %q", buf.String())
	}
}

// TestJournal: a process whose stderr is $JOURNAL_STREAM's file writes
// lines without a time (the journal stamps them) and with the syslog
// priority the journal reads.
func TestJournal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "journal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	if !OnJournal(f) {
		t.Fatal("OnJournal false for the journal's stream")
	}
	if OnJournal(os.Stdin) {
		t.Error("OnJournal true for another file")
	}
	log := slog.New(NewHandler(f, Options{Journal: OnJournal(f)}))
	log.Warn("IKE peer dead", "connection", "a")
	log.Info("gateway up")
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "<4>level=WARN msg=\"IKE peer dead\"") || !strings.HasPrefix(lines[1], "<6>level=INFO") {
		t.Errorf("journal lines:\n%s", data)
	}
	if strings.Contains(string(data), "time=") {
		t.Errorf("time in journal lines:\n%s", data)
	}
	t.Setenv("JOURNAL_STREAM", "")
	if OnJournal(f) {
		t.Error("OnJournal true without JOURNAL_STREAM")
	}
}
