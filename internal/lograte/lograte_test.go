package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBucket: Burst lines at once, then one per Every; the next line
// after some were held back says how many; a long quiet refills to the
// burst, no more.
func TestBucket(t *testing.T) {
	b := Bucket{Burst: 20, Every: 200 * time.Millisecond}
	now := time.Unix(1_700_000_000, 0)
	for i := range b.Burst {
		if ok, held := b.Allow(now); !ok || held != 0 {
			t.Fatalf("line %d of the burst: %v, %d held", i, ok, held)
		}
	}
	for range 7 {
		if ok, _ := b.Allow(now); ok {
			t.Fatal("a line beyond the burst went out")
		}
	}
	if ok, _ := b.Allow(now.Add(b.Every - time.Nanosecond)); ok {
		t.Fatal("a line went out before the bucket refilled")
	}
	now = now.Add(b.Every)
	if ok, held := b.Allow(now); !ok || held != 8 {
		t.Fatalf("after %v: %v, %d held; want a line saying 8", b.Every, ok, held)
	}
	if ok, _ := b.Allow(now); ok {
		t.Fatal("two lines for one refill")
	}
	now = now.Add(time.Hour)
	n := 0
	for ok := true; ok; n++ {
		ok, _ = b.Allow(now)
	}
	if n-1 != b.Burst {
		t.Fatalf("%d lines after an hour, want %d", n-1, b.Burst)
	}
	if a := testing.AllocsPerRun(100, func() { b.Allow(now) }); a != 0 {
		t.Fatalf("Allow: %v allocations", a)
	}
}

// TestBucketOne: Burst 1 (and below) is one line per Every, the count of
// the held ones on the next.
func TestBucketOne(t *testing.T) {
	b := Bucket{Every: 10 * time.Second}
	now := time.Unix(1_700_000_000, 0)
	if ok, _ := b.Allow(now); !ok {
		t.Fatal("the first line was held")
	}
	for range 99 {
		if ok, _ := b.Allow(now.Add(9 * time.Second)); ok {
			t.Fatal("a second line within Every")
		}
	}
	if ok, held := b.Allow(now.Add(10 * time.Second)); !ok || held != 99 {
		t.Fatalf("after Every: %v, %d held, want 99", ok, held)
	}
}

// TestLog: the line let through after a hold carries suppressed=N; a
// level the logger does not write counts nothing; nil discards.
func TestLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := Bucket{Burst: 1, Every: time.Second}
	now := time.Unix(1_700_000_000, 0)
	for range 5 {
		b.Log(log, now, slog.LevelWarn, "refused", "remote", "192.0.2.1")
	}
	b.Log(log, now, slog.LevelDebug, "not written")
	b.Log(nil, now, slog.LevelWarn, "discarded")
	b.Log(log, now.Add(time.Second), slog.LevelWarn, "refused", "remote", "192.0.2.2")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "suppressed") || !strings.HasSuffix(lines[1], "remote=192.0.2.2 suppressed=4") {
		t.Fatalf("lines:\n%s", buf.String())
	}
}
