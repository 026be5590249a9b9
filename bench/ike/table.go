package ikebench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Table prints results as fixed-width rows: one per responder and kind.
type Table struct{}

const rowFormat = "%-7s %-7s %7s %6s %6s %9s %11s %8s %8s %10s"

// Header is the table's heading.
func (Table) Header() string {
	return fmt.Sprintf(rowFormat, "system", "auth", "setups", "failed", "inst", "setups/s", "setups/cpus", "p50", "p99", "KiB/IKE SA")
}

// Row is r's line.
func (Table) Row(r Result) string {
	return fmt.Sprintf(rowFormat, r.System, r.Auth, fmt.Sprint(r.Completed), fmt.Sprint(r.Failed), fmt.Sprint(r.Installed),
		fmt.Sprintf("%.0f", r.PerSecond), fmt.Sprintf("%.0f", r.PerCPUSec), ms(r.P50), ms(r.P99), fmt.Sprintf("%.1f", r.RSSPerSAKiB))
}

// ms prints d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// WriteRatios writes, per kind, sluice's figures over charon's.
func WriteRatios(w io.Writer, rs []Result) {
	by := map[string]map[string]Result{}
	var kinds []string
	for _, r := range rs {
		if by[r.Auth] == nil {
			by[r.Auth] = map[string]Result{}
			kinds = append(kinds, r.Auth)
		}
		by[r.Auth][r.System] = r
	}
	var lines []string
	for _, k := range kinds {
		s, ok1 := by[k][Sluice]
		c, ok2 := by[k][Charon]
		if !ok1 || !ok2 || c.PerCPUSec == 0 || c.PerSecond == 0 || c.RSSPerSAKiB == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: sluice/charon setups per second %.2fx, per CPU-second %.2fx, p99 %.2fx, RSS per IKE SA %.2fx",
			k, s.PerSecond/c.PerSecond, s.PerCPUSec/c.PerCPUSec, float64(s.P99)/float64(max(c.P99, 1)), s.RSSPerSAKiB/c.RSSPerSAKiB))
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\n"+strings.Join(lines, "\n"))
	}
}
