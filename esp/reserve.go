package esp

// Durable reservations of sequence numbers (DESIGN.md decision 7). An
// outbound SA records, before it uses a number, a bound above it, so a
// restarted SA starts above every number used before. An inbound SA
// records, before its replay window moves past a number, a bound above it,
// so a restarted SA's window starts at the bound and accepts nothing it may
// have accepted before. Both go through one reservation.

import (
	"sync/atomic"
	"time"
)

// ReplayReserveMin and ReplayReserveMax bound the step of an inbound
// reservation. The step adapts to the traffic: it doubles when the last
// one was used up in less than a second and halves when it lasted more
// than ten, so in steady traffic an SA records a bound every one to ten
// seconds. Numbers between the last one accepted and the bound are refused
// after a restart: a restart of the receiver costs at most one step of
// legitimate packets from the peer, at most ReplayReserveMax and in steady
// traffic one to ten seconds' worth (two at most when the rate is steady),
// ReplayReserveMin at low rates.
const (
	ReplayReserveMin = 64
	ReplayReserveMax = SeqReserveBlock
)

// A record through Config.SeqReserve is a synchronous write and fsync in
// the data path, with the SA's lock held: the step grows until a record
// lasts at least reserveGrowBelow, so that many tunnels at moderate rates
// (200 tunnels at 180 packets/s each in `sluice bench tunnel`) do not
// spend their time in fsync (with 100 ms and 1 s here, 200 tunnels
// carried 0.34 of one tunnel's rate; with these, 0.83). The gateway leases
// its inbound SAs' reservations instead (Lease, LeaseOptions), recorded
// ahead by a writer off the data path; outbound ones record once per
// SeqReserveBlock.
const (
	reserveGrowBelow   = time.Second
	reserveShrinkAbove = 10 * time.Second
)

// LeaseStep is the time an inbound lease's step aims to cover at the
// current packet rate, and LeaseAskAhead the share of a step left when the
// next one is asked for. A takeover treats every number up to the
// replicated bound as received, so it refuses at most the peer's packets
// between the last one accepted and the bound: the step ahead and the
// unspent part of the one before, about 1.5 steps, under 5 ms of traffic.
//
// The step also covers LeaseLeadFactor times the time grants take, as
// measured, up to LeaseStepMax: a standby that answers slowly (a loaded
// machine, a long sync link) makes the steps longer rather than the SA
// wait, and a takeover then refuses that much more, at most about 1.5
// LeaseStepMax of traffic. Grants slower than half of LeaseStepMax make
// packets wait (dropped as seq_reserve_failed) rather than the steps
// longer still.
const (
	LeaseStep       = 3 * time.Millisecond
	LeaseStepMax    = 20 * time.Millisecond
	LeaseAskAhead   = 2 // ask when 1/LeaseAskAhead of the bound is left
	LeaseLeadFactor = 4
)

// A Lease grants an SA sequence-number bounds from outside and
// asynchronously, in place of Config.SeqReserve: a hot standby records
// each bound before the owner goes past it (package ha), or a writer
// records it in a file and fsyncs it, several SAs' bounds at once (the
// gateway's state directory). The SA asks for the next bound (ask, which
// must not block) when half of the current one is left, so that while the
// grantor answers in time the data path never waits and no record is
// written with the SA's lock held; a packet beyond the granted bound is
// dropped (ReasonSeqReserve), or, with LeaseOptions.Wait, waits that long
// for the grant first.
type Lease struct {
	ask     func(upTo uint64)
	granted atomic.Uint64
	failing atomic.Bool // the grantor cannot record (Fail): nothing waits
	opts    LeaseOptions
}

// LeaseOptions set how a lease's SA asks. The zero value is a standby's:
// inbound steps of LeaseStep of traffic, up to LeaseStepMax, and no wait.
type LeaseOptions struct {
	// Step is the time of traffic an inbound step aims to cover, and
	// StepMax the most it covers however slow the grants are: a grantor
	// that writes each bound to disk asks for longer steps than a
	// standby, so that it writes less often. Zero means LeaseStep and
	// LeaseStepMax.
	Step, StepMax time.Duration
	// Wait is how long a packet that reaches an ungranted bound waits for
	// its grant (the SA's lock held) before it is dropped; zero drops it
	// at once. Nothing waits while the grantor reports failure (Fail),
	// nor for an ask a packet has already waited for in vain: a run of
	// packets past the bound stalls its lane one Wait, not one each.
	Wait time.Duration
}

// NewLease makes a lease whose SA calls ask, on its owner's goroutine with
// its lock held, for each new bound. ask must not block and must not take
// the SA's lock; Grant may be called from within it.
func NewLease(ask func(upTo uint64)) *Lease { return &Lease{ask: ask} }

// NewLeaseWith is NewLease with options.
func NewLeaseWith(ask func(upTo uint64), o LeaseOptions) *Lease {
	if o.Step <= 0 {
		o.Step = LeaseStep
	}
	if o.StepMax < o.Step {
		o.StepMax = max(o.Step, LeaseStepMax)
	}
	return &Lease{ask: ask, opts: o}
}

// Fail tells the lease that its grantor cannot record bounds for now
// (failing) or can again: while it fails, a packet at an ungranted bound
// is dropped at once instead of waiting (LeaseOptions.Wait). Any
// goroutine may call it.
func (l *Lease) Fail(failing bool) { l.failing.Store(failing) }

// Grant raises the bound the SA may use (outbound) or accept (inbound) up
// to upTo. Any goroutine may call it; a lower bound than the current one
// changes nothing.
func (l *Lease) Grant(upTo uint64) {
	for {
		g := l.granted.Load()
		if upTo <= g || l.granted.CompareAndSwap(g, upTo) {
			return
		}
	}
}

// Granted returns the bound granted so far: what the SA may have used.
func (l *Lease) Granted() uint64 { return l.granted.Load() }

// reservation is an upper bound on the sequence numbers an SA has used
// (outbound) or may have accepted (inbound): recorded durably by record,
// or granted by a lease. The SA's owner calls it.
type reservation struct {
	record func(upTo uint64) error // nil: no durable reservations
	lease  *Lease                  // nil: not leased
	upTo   uint64                  // the bound last recorded or granted (or the start)
	// next is the number above which cover must be called: upTo when
	// recording, the point to ask for more when leased. The data path
	// compares with it and nothing else.
	next   uint64
	asked  uint64 // leased: the highest bound asked for
	fenced bool   // leased: nothing is covered (SA.Fence)
	// gaveUp is the ask a packet last waited for in vain
	// (LeaseOptions.Wait): while it is outstanding, no packet waits
	// again, so a batch stalls its lane (the SA's lock held) one Wait,
	// not one per packet.
	gaveUp uint64
	// lat is how long grants take (leased): the largest recent time from
	// an ask to its grant, decaying slowly. A step covers at least
	// LeaseLeadFactor of it, so that the next ask, made when half a step
	// is left, is granted before the SA gets there.
	lat time.Duration
	// durable, on a leased reservation, is a recorded one beside it
	// (Config.SeqReserve with Config.Lease): a number must be covered by
	// both, so that a member restarted alone starts above what it used.
	durable  *reservation
	step     uint64
	min, max uint64    // bounds of the step; equal for a fixed step
	at       time.Time // when upTo was last recorded, or the last ask
}

func newReservation(record func(uint64) error, start, min, max uint64) reservation {
	if record == nil {
		return reservation{upTo: 1<<64 - 1, next: 1<<64 - 1} // nothing to record: always covered
	}
	return reservation{record: record, upTo: start, next: start, step: min, min: min, max: max}
}

// newLeased makes a reservation granted by l, starting at start. An
// inbound one's step adapts to LeaseStep of traffic; an outbound one's is
// fixed (numbers skipped at a takeover cost nothing).
func newLeased(l *Lease, record func(uint64) error, start uint64, out, fenced bool) reservation {
	r := reservation{lease: l, upTo: start, asked: start, fenced: fenced, step: SeqReserveBlock,
		min: SeqReserveBlock, max: SeqReserveBlock}
	if !out {
		r.step, r.min = ReplayReserveMin, ReplayReserveMin
	}
	if record != nil {
		d := newReservation(record, start, r.min, r.max)
		r.durable = &d
	}
	l.Grant(start)
	return r
}

// cover makes sure seq is covered, step numbers from seq on (or up to
// limit), if seq is above the current bound. It reports whether seq is
// covered; when it is not, the caller must not use or accept seq. It does
// not allocate (record and ask aside).
func (r *reservation) cover(seq, limit uint64) bool {
	if r.lease != nil {
		return r.coverLeased(seq, limit)
	}
	if r.record == nil || seq <= r.upTo {
		return true
	}
	now := time.Now()
	if r.min != r.max && !r.at.IsZero() {
		switch d := now.Sub(r.at); {
		case d < reserveGrowBelow && r.step < r.max:
			r.step *= 2
		case d > reserveShrinkAbove && r.step > r.min:
			r.step /= 2
		}
	}
	upTo := limit
	if limit-seq >= r.step {
		upTo = seq - 1 + r.step
	}
	if r.record(upTo) != nil {
		return false
	}
	r.upTo, r.next, r.at = upTo, upTo, now
	return true
}

// coverLeased is cover for a leased SA: it takes what was granted, asks
// for the next bound when less than half a step is left above seq and no
// ask is outstanding, and sets next so that the data path calls it again
// at the next such point (or at every packet while an ask is
// outstanding, which costs an atomic load).
func (r *reservation) coverLeased(seq, limit uint64) bool {
	ok := r.coverLeasedOnce(seq, limit)
	if ok || r.fenced || r.lease.opts.Wait <= 0 || r.gaveUp == r.asked {
		return ok
	}
	// Wait for the grant (LeaseOptions.Wait): in steady traffic the ask
	// made half a step ago is granted before the SA gets here, so only a
	// burst much faster than the step was sized for waits.
	deadline := time.Now().Add(r.lease.opts.Wait)
	for range r.lease.opts.Wait / leasePoll {
		if r.lease.failing.Load() {
			return false
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(leasePoll)
		if r.coverLeasedOnce(seq, limit) {
			return true
		}
	}
	r.gaveUp = r.asked
	return false
}

// leasePoll is how often a packet waiting for a grant looks at it.
const leasePoll = 50 * time.Microsecond

// coverLeasedOnce is coverLeased without the wait.
func (r *reservation) coverLeasedOnce(seq, limit uint64) bool {
	if r.fenced {
		r.next = 0
		return false
	}
	if g := r.lease.granted.Load(); g > r.upTo {
		if r.asked > r.upTo && g >= r.asked && !r.at.IsZero() {
			r.noteLatency(leaseNow().Sub(r.at)) // the ask outstanding is granted
		}
		r.upTo = g
	}
	if r.asked <= r.upTo && (seq > r.upTo || r.upTo-seq < r.step/LeaseAskAhead) && r.upTo < limit {
		now := leaseNow()
		if r.min != r.max && !r.at.IsZero() {
			step, stepMax := LeaseStep, LeaseStepMax
			if o := &r.lease.opts; o.Step > 0 {
				step, stepMax = o.Step, o.StepMax
			}
			target := min(max(step, LeaseLeadFactor*r.lat), stepMax)
			switch d := now.Sub(r.at); {
			case d < target/2 && r.step < r.max:
				r.step *= 2
			case d > 2*target && r.step > r.min:
				r.step /= 2
			}
		}
		base := max(r.upTo, seq-1)
		upTo := limit
		if limit-base > r.step {
			upTo = base + r.step
		}
		r.asked, r.at = upTo, now
		r.lease.ask(upTo)
		if g := r.lease.granted.Load(); g > r.upTo { // granted at once (no standby)
			r.upTo = g
			r.noteLatency(0)
		}
	}
	switch {
	case r.asked > r.upTo:
		r.next = seq - 1 // outstanding: look at the grant at every packet
	case r.upTo >= r.step/LeaseAskAhead && r.upTo-r.step/LeaseAskAhead > seq:
		r.next = r.upTo - r.step/LeaseAskAhead
	default:
		r.next = seq
	}
	if seq > r.upTo {
		return false
	}
	if d := r.durable; d != nil {
		if seq > d.upTo && !d.cover(seq, limit) {
			r.next = seq - 1
			return false
		}
		r.next = min(r.next, d.next)
	}
	return true
}

// refusal is the reason a packet cover refused is dropped for.
func (r *reservation) refusal() Reason {
	if r.fenced {
		return ReasonFenced
	}
	return ReasonSeqReserve
}

// leaseNow is the leases' clock; tests replace it (export_test.go).
var leaseNow = time.Now

// noteLatency takes the time one grant took: the estimate rises to a
// slower grant at once and comes down by an eighth of the difference per
// faster one, so a burst of slow answers lengthens the steps for a while.
func (r *reservation) noteLatency(d time.Duration) {
	if d >= r.lat {
		r.lat = d
		return
	}
	r.lat -= (r.lat - d) / 8
}
