package dataplane

import (
	"sync/atomic"

	"github.com/sluicegw/sluice/esp"
)

// Reason extends esp.Reason with the data plane's own drop reasons; the
// values below esp.NumReasons are esp's.
type Reason uint8

const (
	ReasonNoRoute        = Reason(esp.NumReasons) + iota // no tunnel for the destination
	ReasonNoSA                                           // the tunnel has no outbound SA
	ReasonNoBuffer                                       // the buffer pool was empty
	ReasonTooBig                                         // larger than the tunnel MTU; ICMP sent
	ReasonPolicyDiscard                                  // a discard policy matched, or none did
	ReasonPolicyMismatch                                 // a decrypted packet outside its SA's selectors or policy
	ReasonBypass                                         // a bypass policy matched (not forwarded)
	ReasonLinkError                                      // the link refused the packet
	ReasonTSMismatch                                     // a packet to seal outside its SA's traffic selectors
	numReasons
)

var extraNames = [...]string{"no_route", "no_sa", "no_buffer", "too_big", "policy_discard", "policy_mismatch", "bypass", "link_error", "ts_mismatch"}

func (r Reason) String() string {
	if r < Reason(esp.NumReasons) {
		return esp.Reason(r).String()
	}
	if i := int(r) - int(esp.NumReasons); i < len(extraNames) {
		return extraNames[i]
	}
	return "reason(?)"
}

// ReasonNames lists every name a drop may be counted under in
// WorkerStats.Drops and RxStats.Drops: esp's reasons, the data plane's and
// the link's own (addLinkDrops), so that an exporter can show each at zero
// before the first drop.
func ReasonNames() []string {
	var names []string
	for r := Reason(1); r < numReasons; r++ {
		names = append(names, r.String())
	}
	return append(names, linkDropNames...)
}

// linkDropNames are the names addLinkDrops adds that are no Reason.
var linkDropNames = []string{"too_long", "read_error"}

// counter is a statistic with one writer (the lane that owns it) and any
// number of readers: the writer adds without a locked instruction.
type counter struct{ v atomic.Uint64 }

func (c *counter) add(n uint64) { c.v.Store(c.v.Load() + n) }
func (c *counter) inc()         { c.add(1) }
func (c *counter) load() uint64 { return c.v.Load() }

// drops counts drops by reason; one writer per instance.
type drops [numReasons]counter

func (d *drops) inc(r Reason) { d[r].inc() }

// Map returns the non-zero counters by name.
func (d *drops) Map() map[string]uint64 {
	m := map[string]uint64{}
	for r := Reason(1); r < numReasons; r++ {
		if v := d[r].load(); v != 0 {
			m[r.String()] = v
		}
	}
	return m
}
