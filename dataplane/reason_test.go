package dataplane

import (
	"strings"
	"testing"
)

// TestReasonNames: every reason and link drop has one name, listed once,
// so that an exporter can show each before it counts.
func TestReasonNames(t *testing.T) {
	names := ReasonNames()
	if want := int(numReasons) - 1 + len(linkDropNames); len(names) != want {
		t.Fatalf("%d names, want %d", len(names), want)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] || n == "" || strings.HasPrefix(n, "reason(") || n == "none" {
			t.Errorf("name %q empty, unnamed or listed twice", n)
		}
		seen[n] = true
	}
	for _, n := range []string{"no_route", "unknown_spi", "replay", "too_long", "read_error"} {
		if !seen[n] {
			t.Errorf("no %q", n)
		}
	}
}
