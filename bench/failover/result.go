package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/bench"
)

// The systems a bench compares.
const (
	// SluiceHA is two sluice members with [ha]: the owner is killed, the
	// standby takes over.
	SluiceHA = "sluice-ha"
	// SluiceHASilent is SluiceHA with the owner cut off the network
	// (lab.HATopology.Isolate) before it is killed, as when its box loses
	// power: no TCP reset tells the standby, which must miss its
	// heartbeats.
	SluiceHASilent = "sluice-ha-silent"
	// SluiceHandover is SluiceHA with a planned handover (`sluice ha
	// handover` to the owner) in place of the kill.
	SluiceHandover = "sluice-ha-handover"
	// SluiceRestart is one sluice gateway killed and started again at
	// once, as a supervisor would: what users have today.
	SluiceRestart = "sluice-restart"
	// StrongSwanRestart is strongSwan (charon, kernel-libipsec) as the
	// gateway, killed and started again; the peer finds out by its
	// liveness checks and negotiates again.
	StrongSwanRestart = "strongswan-restart"
)

// Systems lists every system, in the order a bench runs them.
var Systems = []string{SluiceHA, SluiceHASilent, SluiceHandover, SluiceRestart, StrongSwanRestart}

// Sample is what one disruption measured.
type Sample struct {
	System string `json:"system"`
	Run    int    `json:"run"` // 1-based
	// GapUp and GapDown are the longest runs of lost datagrams of the
	// sequence-numbered flows host -> remote and remote -> host, in
	// send time (lab.SeqResult.Gap).
	GapUp   time.Duration `json:"gap_up_ns"`
	GapDown time.Duration `json:"gap_down_ns"`
	// LostUp and LostDown are all the datagrams each flow lost.
	LostUp   uint64 `json:"lost_up"`
	LostDown uint64 `json:"lost_down"`
	// LostBeforeUp and LostBeforeDown are each flow's datagrams sent but
	// not received just before the kill: those in flight, and those lost
	// in the steady state.
	LostBeforeUp   uint64 `json:"lost_before_up"`
	LostBeforeDown uint64 `json:"lost_before_down"`
	// RunsUp and RunsDown are how many runs of consecutive losses there
	// were (lab.SeqResult.Runs): one outage is one run.
	RunsUp   uint64 `json:"loss_runs_up"`
	RunsDown uint64 `json:"loss_runs_down"`
	// Refused is how many of the peer's packets the gateway that carries
	// the tunnel afterwards refused as replays (its inbound SAs' replay
	// drops); -1 where the gateway does not say (strongSwan).
	Refused int64 `json:"refused"`
	// Drops are that gateway's drops by reason since it started (not
	// for strongSwan): where the losses went.
	Drops map[string]uint64 `json:"drops,omitempty"`
	// DropsBefore are the drops of the gateway that carried the tunnel
	// before, read just before the kill (since it started; not for
	// strongSwan): the steady state's.
	DropsBefore map[string]uint64 `json:"drops_before,omitempty"`
	// TCPStall is the longest time the receiver of a paced TCP stream
	// read nothing; TCPMbps what the stream carried over the run.
	TCPStall time.Duration `json:"tcp_stall_ns"`
	TCPMbps  float64       `json:"tcp_mbps"`
	// TCPError says why the TCP stream measured nothing ("" when it
	// did); such a sample has no stall.
	TCPError string `json:"tcp_error,omitempty"`
	// Outage is from the kill to the disruption's end as the bench sees
	// it: the daemon up again (restarts) or the standby holding the
	// virtual address (sluice-ha).
	Outage time.Duration `json:"outage_ns"`
	// GaveUp says that traffic was not back both ways within the
	// bound (Options.GiveUp): the gaps and the stall are at least
	// that bound, not measured to their end.
	GaveUp bool `json:"gave_up,omitempty"`
	// Takeover is the gap the new owner reports (sluice-ha: `sluice ha
	// status`, from the old owner's last frame to the takeover).
	Takeover time.Duration `json:"takeover_ns,omitempty"`
}

// Dist is a distribution of durations over runs: nearest-rank
// percentiles.
type Dist struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// ds, which it does not modify; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	// Nearest rank: the smallest value with at least p% of the values at
	// or below it.
	r := int(float64(len(s))*p/100 + 0.999999999)
	r = min(max(r, 1), len(s))
	return s[r-1]
}

// DistOf returns the distribution of ds.
func DistOf(ds []time.Duration) Dist {
	return Dist{P50: Percentile(ds, 50), P99: Percentile(ds, 99), Max: Percentile(ds, 100)}
}

// Summary is a system's samples summed up.
type Summary struct {
	System  string `json:"system"`
	Runs    int    `json:"runs"`
	GaveUp  int    `json:"gave_up"` // runs that hit the bound
	GapUp   Dist   `json:"gap_up"`
	GapDown Dist   `json:"gap_down"`
	// LostUp and LostDown are the median of the runs' losses, LostMax
	// the most either flow lost in one run.
	LostUp   uint64 `json:"lost_up_p50"`
	LostDown uint64 `json:"lost_down_p50"`
	LostMax  uint64 `json:"lost_max"`
	// Refused is the most packets refused after one disruption, -1
	// when the system does not count them.
	Refused  int64 `json:"refused_max"`
	TCPStall Dist  `json:"tcp_stall"` // over the samples whose stream measured
	// Takeover is the distribution of the gaps the new owner reported
	// (sluice-ha; zero elsewhere).
	Takeover Dist `json:"takeover"`
}

// Summarize sums up the samples of one system.
func Summarize(system string, ss []Sample) Summary {
	s := Summary{System: system, Runs: len(ss), Refused: -1}
	var up, down, stall, takeover []time.Duration
	var lu, ld []time.Duration // losses, sorted like durations
	for _, x := range ss {
		up, down = append(up, x.GapUp), append(down, x.GapDown)
		if x.TCPError == "" {
			stall = append(stall, x.TCPStall)
		}
		lu, ld = append(lu, time.Duration(x.LostUp)), append(ld, time.Duration(x.LostDown))
		s.LostMax = max(s.LostMax, x.LostUp, x.LostDown)
		if x.Takeover > 0 {
			takeover = append(takeover, x.Takeover)
		}
		if x.GaveUp {
			s.GaveUp++
		}
		if x.Refused >= 0 {
			s.Refused = max(s.Refused, x.Refused)
		}
	}
	s.GapUp, s.GapDown, s.TCPStall, s.Takeover = DistOf(up), DistOf(down), DistOf(stall), DistOf(takeover)
	s.LostUp, s.LostDown = uint64(Percentile(lu, 50)), uint64(Percentile(ld, 50))
	return s
}

// Throughput is the steady-state cost of a standby: one TCP stream
// through the owner with the standby absent (no [ha]) and present.
type Throughput struct {
	// Without and With are Mbit/s, the median of the repetitions.
	Without float64 `json:"without_mbps"`
	With    float64 `json:"with_mbps"`
	Repeat  int     `json:"repeat"`
	Seconds float64 `json:"seconds"`
}

// Ratio is With over Without (0 without a baseline).
func (t Throughput) Ratio() float64 {
	if t.Without <= 0 {
		return 0
	}
	return t.With / t.Without
}

// Document is a run's JSON output.
type Document struct {
	Env     bench.Env `json:"env"`
	Options struct {
		Runs    int     `json:"runs"`
		Rate    int     `json:"rate"`
		TCPMbps float64 `json:"tcp_mbps"`
		GiveUp  float64 `json:"give_up_s"`
		DPD     float64 `json:"dpd_delay_s"`
	} `json:"options"`
	Samples    []Sample    `json:"samples"`
	Summaries  []Summary   `json:"summaries"`
	Throughput *Throughput `json:"throughput,omitempty"`
	Notes      []string    `json:"notes"`
}

// WriteJSON writes the document, indented.
func (d *Document) WriteJSON(w io.Writer) error {
	if d.Notes == nil {
		d.Notes = []string{}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(d)
}

// Table renders summaries as text. GiveUp is the bound of the runs: a
// distribution that reached it is shown as ">bound".
type Table struct {
	GiveUp time.Duration
}

// Header is the table's column line.
func (Table) Header() string {
	return fmt.Sprintf("%-19s %4s  %-23s %-23s %-13s %8s  %-17s", "system", "runs",
		"gap up p50/p99/max", "gap down p50/p99/max", "lost up/down", "refused", "TCP stall p50/max")
}

// Row is a summary's line.
func (t Table) Row(s Summary) string {
	refused := "-"
	if s.Refused >= 0 {
		refused = fmt.Sprint(s.Refused)
	}
	return fmt.Sprintf("%-19s %4d  %-23s %-23s %-13s %8s  %-17s", s.System, s.Runs,
		t.dist(s.GapUp, true), t.dist(s.GapDown, true), fmt.Sprintf("%d/%d", s.LostUp, s.LostDown), refused,
		t.dur(s.TCPStall.P50)+"/"+t.dur(s.TCPStall.Max))
}

func (t Table) dist(d Dist, p99 bool) string {
	parts := []string{t.dur(d.P50)}
	if p99 {
		parts = append(parts, t.dur(d.P99))
	}
	return strings.Join(append(parts, t.dur(d.Max)), "/")
}

// dur formats a duration in seconds, 3 decimals under 10 s; one at the
// bound is ">bound".
func (t Table) dur(d time.Duration) string {
	if t.GiveUp > 0 && d >= t.GiveUp {
		return fmt.Sprintf(">%gs", t.GiveUp.Seconds())
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// WriteThroughput writes the throughput lines.
func WriteThroughput(w io.Writer, tp *Throughput) {
	if tp == nil {
		return
	}
	fmt.Fprintf(w, "\nsteady state, one TCP stream through the owner (%gs, median of %d): without a standby %.0f Mbit/s, with one %.0f Mbit/s (%.1f%%)\n",
		tp.Seconds, tp.Repeat, tp.Without, tp.With, 100*tp.Ratio())
}

// WriteRatios writes how the gap p99 (the worse direction) of each
// sluice-ha system compares with each restart's (the target: at
// least 20 times shorter than a restart and a new negotiation).
func WriteRatios(w io.Writer, ss []Summary, giveUp time.Duration) {
	worst := func(s Summary) time.Duration { return max(s.GapUp.P99, s.GapDown.P99) }
	isHA := func(s Summary) bool {
		return s.System == SluiceHA || s.System == SluiceHASilent || s.System == SluiceHandover
	}
	for _, h := range ss {
		if !isHA(h) || h.Runs == 0 || worst(h) <= 0 {
			continue
		}
		for _, r := range ss {
			if isHA(r) || r.Runs == 0 {
				continue
			}
			op, rs := "", Table{GiveUp: giveUp}.dur(worst(r))
			if giveUp > 0 && worst(r) >= giveUp {
				op = ">="
			}
			fmt.Fprintf(w, "gap p99 (worse direction): %s %s, %s %s: %s/%s = %s%.1f (target >= 20)\n",
				r.System, rs, h.System, Table{}.dur(worst(h)), r.System, h.System, op, float64(worst(r))/float64(worst(h)))
		}
	}
}
