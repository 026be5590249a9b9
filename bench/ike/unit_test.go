package ikebench

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestPercentile: nearest rank, as the other benches count.
func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 100 * time.Millisecond}, {99, 198 * time.Millisecond}, {100, 200 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("p%v of 1..200 ms = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
	if got := percentile(ds[:1], 99); got != time.Millisecond {
		t.Errorf("p99 of one = %v", got)
	}
}

// TestParseStat: the fields after the last ')', whatever the name holds.
func TestParseStat(t *testing.T) {
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 125 0 0 20 0 3 0 1 1 1"
	ppid, cpu, err := parseStat([]byte(line))
	if err != nil || ppid != 17 || cpu != 3750*time.Millisecond {
		t.Errorf("parseStat = %d, %v, %v; want 17, 3.75s", ppid, cpu, err)
	}
	if _, _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short line parsed")
	}
}

// TestAddresses: the workers' sources and the road warriors' inner
// addresses are distinct for every index the options allow.
func TestAddresses(t *testing.T) {
	if got := nth(sluiceNet, 10); got != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("nth = %v", got)
	}
	if nth(sluiceNet, 10+MaxConcurrency-1).As4()[2] != 2 || nth(charonNet, 10+MaxConcurrency-1).As4()[2] != 100 {
		t.Error("a worker's address leaves its /24")
	}
	seen := map[netip.Addr]bool{}
	for i := range MaxCount {
		a := innerAddr(i)
		if seen[a] || !inner.Contains(a) {
			t.Fatalf("road warrior %d: inner address %v repeated or outside %v", i, a, inner)
		}
		seen[a] = true
	}
}

// TestTable: a row per result, and ratios only for kinds both ran.
func TestTable(t *testing.T) {
	rs := []Result{
		{System: Sluice, Auth: AuthPSK, Completed: 100, PerSecond: 400, PerCPUSec: 1000, P50: 5 * time.Millisecond, P99: 20 * time.Millisecond, RSSPerSAKiB: 40},
		{System: Charon, Auth: AuthPSK, Completed: 100, PerSecond: 200, PerCPUSec: 400, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond, RSSPerSAKiB: 20},
		{System: Sluice, Auth: AuthRSA, Completed: 100, PerSecond: 100, PerCPUSec: 200},
	}
	row := Table{}.Row(rs[0])
	for _, want := range []string{"sluice", "psk", "400", "1000", "5.0ms", "20.0ms", "40.0"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q lacks %q", row, want)
		}
	}
	var b strings.Builder
	WriteRatios(&b, rs)
	if got := b.String(); !strings.Contains(got, "psk: sluice/charon setups per second 2.00x, per CPU-second 2.50x, p99 0.50x, RSS per IKE SA 2.00x") || strings.Contains(got, AuthRSA) {
		t.Errorf("ratios:\n%s", got)
	}
}
