package esp

// Durable reservations of sequence numbers (DESIGN.md decision 7). An
// outbound SA records, before it uses a number, a bound above it, so a
// restarted SA starts above every number used before. An inbound SA
// records, before its replay window moves past a number, a bound above it,
// so a restarted SA's window starts at the bound and accepts nothing it may
// have accepted before. Both go through one reservation.

import "time"

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

// Each inbound record is a synchronous write and fsync in the data path,
// with the SA's lock held: the step grows until a record lasts at least
// reserveGrowBelow, so that many tunnels at moderate rates (200 tunnels
// at 180 packets/s each in `sluice bench tunnel`) do not spend their time
// in fsync (with 100 ms and 1 s here, 200 tunnels carried 0.34 of one
// tunnel's rate; with these, 0.83).
const (
	reserveGrowBelow   = time.Second
	reserveShrinkAbove = 10 * time.Second
)

// reservation is a durable upper bound on the sequence numbers an SA has
// used (outbound) or may have accepted (inbound). The SA's owner calls it.
type reservation struct {
	record   func(upTo uint64) error // nil: no reservations
	upTo     uint64                  // the bound last recorded (or the start)
	step     uint64
	min, max uint64    // bounds of the step; equal for a fixed step
	at       time.Time // when upTo was last recorded
}

func newReservation(record func(uint64) error, start, min, max uint64) reservation {
	if record == nil {
		return reservation{upTo: 1<<64 - 1} // nothing to record: always covered
	}
	return reservation{record: record, upTo: start, step: min, min: min, max: max}
}

// cover records a bound that covers seq, step numbers from seq on (or up
// to limit), if seq is above the current one. It reports whether seq is
// covered; when recording fails it is not, and the caller must not use or
// accept seq. It does not allocate (record aside).
func (r *reservation) cover(seq, limit uint64) bool {
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
	r.upTo, r.at = upTo, now
	return true
}
