package gateway

// Per-tunnel counters that survive rekeys. A tunnel's SAs come and go (a
// rekey replaces them, an IKE child is negotiated again), but an operator
// watches the tunnel: its packets, bytes and drops must be one series each
// that never goes backwards. So the counters of every SA the gateway opened
// are summed by tunnel and direction, and when an SA ends its final counts
// are kept in the tunnel's total.
//
// Monotonicity: each SA is registered when it is opened and leaves the
// registry only when it ends (sad.SA.End, after the data plane has let go
// of it), at which moment, under the same lock, its final counts move into
// the ended totals. A reader holds that lock, so at every read an SA is
// counted either live or ended, never both. An SA is attributed to a
// tunnel once a read has seen it in a snapshot (or when it ends): one that
// a read has not seen yet is not counted, which only delays its counts.

import (
	"sort"
	"sync"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/sad"
)

// TunnelStats are the counters of one tunnel in one direction, summed
// over its SAs, those already retired included.
type TunnelStats struct {
	Tunnel    string `json:"tunnel"`    // the [[tunnel]] name, or the IKE child's
	Direction string `json:"direction"` // "in" or "out"
	Packets   uint64 `json:"packets"`   // sealed (out) or opened and accepted (in)
	Bytes     uint64 `json:"bytes"`     // their plaintext bytes
	// Drops has every reason an SA of this direction counts, zeros
	// included, and any other that is not zero.
	Drops map[string]uint64 `json:"drops"`
	// NeedsRekey and StateFailing are true when one of the tunnel's
	// current SAs in this direction is so (SAInfo).
	NeedsRekey    bool   `json:"needs_rekey"`
	StateFailing  bool   `json:"state_failing"`
	StateFailures uint64 `json:"state_failures"`
}

// DropReasons are the reasons an SA counts drops for in direction dir
// ("in" or "out"): the keys TunnelStats.Drops always has.
func DropReasons(dir string) []string {
	rs := outReasons
	if dir == "in" {
		rs = inReasons
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.String()
	}
	return names
}

var (
	inReasons = []esp.Reason{esp.ReasonMalformed, esp.ReasonUnsupported, esp.ReasonReplay, esp.ReasonTakeover, esp.ReasonAuthFailed,
		esp.ReasonBadLength, esp.ReasonBadPadding, esp.ReasonBadInner, esp.ReasonDummy,
		esp.ReasonSeqReserve, esp.ReasonFenced, esp.ReasonLifetime, esp.ReasonQueueFull, esp.ReasonCryptoError}
	outReasons = []esp.Reason{esp.ReasonMalformed, esp.ReasonUnsupported, esp.ReasonSeqExhausted, esp.ReasonNoRoom,
		esp.ReasonSeqReserve, esp.ReasonFenced, esp.ReasonLifetime, esp.ReasonQueueFull, esp.ReasonCryptoError}
)

type totalsKey struct{ tunnel, dir string }

// saCounts are the counters of one or more SAs.
type saCounts struct {
	packets, bytes, stateFailures uint64
	drops                         [esp.NumReasons]uint64
}

func (c *saCounts) add(s *sad.SA) {
	ct := &s.SA.Counters
	c.packets += ct.Packets.Load()
	c.bytes += ct.Bytes.Load()
	for r := range c.drops {
		c.drops[r] += ct.Drops[r].Load()
	}
	if h := s.State; h != nil {
		c.stateFailures += h.Failures.Load()
	}
}

// tunnelTotals is the registry of open SAs and the ended totals.
type tunnelTotals struct {
	mu    sync.Mutex
	live  map[*sad.SA]*totalsKey // every SA opened and not ended; tunnel "" until seen installed
	ended map[totalsKey]*saCounts
}

// register records s, opened for direction dir, and makes its end move
// its counts into the ended totals. It runs before s is installed.
func (tt *tunnelTotals) register(s *sad.SA, dir esp.Direction) {
	k := &totalsKey{dir: "out"}
	if dir == esp.Inbound {
		k.dir = "in"
	}
	tt.mu.Lock()
	if tt.live == nil {
		tt.live, tt.ended = map[*sad.SA]*totalsKey{}, map[totalsKey]*saCounts{}
	}
	tt.live[s] = k
	tt.mu.Unlock()
	retired := s.Retired
	s.Retired = func() {
		if retired != nil {
			retired()
		}
		tt.end(s)
	}
}

// end moves the final counts of s into its tunnel's total. s.Tunnel is
// read here, after the data plane let go of s, which its install happened
// before; an SA never installed has none and counted nothing.
func (tt *tunnelTotals) end(s *sad.SA) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	k := tt.live[s]
	delete(tt.live, s)
	if k == nil || s.Tunnel == nil {
		return
	}
	k.tunnel = s.Tunnel.Name
	c := tt.ended[*k]
	if c == nil {
		c = new(saCounts)
		tt.ended[*k] = c
	}
	c.add(s)
}

// read sums the counters by tunnel and direction: the SAs of db and the
// other live ones already attributed, plus the ended totals. Every tunnel
// of db has both directions, and tunnels that ended keep theirs.
func (tt *tunnelTotals) read(db *sad.DB) []TunnelStats {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	sums := map[totalsKey]*saCounts{}
	flags := map[totalsKey]*TunnelStats{}
	sum := func(k totalsKey) *saCounts {
		c := sums[k]
		if c == nil {
			c = new(saCounts)
			sums[k] = c
		}
		return c
	}
	current := func(s *sad.SA, t *sad.Tunnel, dir string) {
		k := totalsKey{t.Name, dir}
		if lk := tt.live[s]; lk != nil {
			lk.tunnel = t.Name
		} else {
			sum(k).add(s) // not opened by this gateway (a test's store); count it as it is
		}
		f := flags[k]
		f.NeedsRekey = f.NeedsRekey || s.SA.NeedsRekey()
		if s.State != nil {
			f.StateFailing = f.StateFailing || s.State.Failing.Load()
		}
	}
	for _, t := range db.Tunnels() {
		for _, dir := range []string{"in", "out"} {
			sum(totalsKey{t.Name, dir})
			flags[totalsKey{t.Name, dir}] = &TunnelStats{}
		}
		if s := t.Out(); s != nil {
			current(s, t, "out")
		}
		for _, s := range t.Inbound() {
			current(s, t, "in")
		}
	}
	for s, k := range tt.live {
		if k.tunnel != "" {
			sum(*k).add(s)
		}
	}
	for k, c := range tt.ended {
		sc := sum(k)
		sc.packets += c.packets
		sc.bytes += c.bytes
		sc.stateFailures += c.stateFailures
		for r := range c.drops {
			sc.drops[r] += c.drops[r]
		}
	}
	out := make([]TunnelStats, 0, len(sums))
	for k, c := range sums {
		ts := TunnelStats{Tunnel: k.tunnel, Direction: k.dir, Packets: c.packets, Bytes: c.bytes,
			StateFailures: c.stateFailures, Drops: map[string]uint64{}}
		if f := flags[k]; f != nil {
			ts.NeedsRekey, ts.StateFailing = f.NeedsRekey, f.StateFailing
		}
		for _, r := range DropReasons(k.dir) {
			ts.Drops[r] = 0
		}
		for r, v := range c.drops {
			if v != 0 {
				ts.Drops[esp.Reason(r).String()] = v
			}
		}
		out = append(out, ts)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tunnel != out[j].Tunnel {
			return out[i].Tunnel < out[j].Tunnel
		}
		return out[i].Direction < out[j].Direction
	})
	return out
}

// TunnelStats reads the counters of every tunnel, as Stats.Tunnels.
func (g *Gateway) TunnelStats() []TunnelStats {
	if g.store == nil {
		return nil
	}
	return g.totals.read(g.store.Load())
}
