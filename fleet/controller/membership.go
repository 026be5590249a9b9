package controller

import (
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/placement"
)

// defaultLeaseSeconds is the lease duration of a Lease that names none.
const defaultLeaseSeconds = 10

// member is a gateway as its Lease shows it.
type member struct {
	name, zone, address string
	live                bool
	// expires is when the Lease lapses unless renewed.
	expires time.Time
}

// membersFromLeases reads the pool's gateways from their Leases: a member
// is live while renewTime + leaseDurationSeconds is after now and the
// Lease is not being deleted. The result is sorted by name.
func membersFromLeases(leases []coordinationv1.Lease, now time.Time) []member {
	var out []member
	for i := range leases {
		l := &leases[i]
		// The name, not the label, says whose Lease it is: the admission
		// policy holds an agent to the Lease named after its node.
		name := leaseGateway(l)
		if name == "" {
			continue
		}
		m := member{name: name, zone: l.Annotations[fleetv1.AnnotationZone], address: l.Annotations[fleetv1.AnnotationAddress]}
		d := time.Duration(defaultLeaseSeconds) * time.Second
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		var renewed time.Time
		switch {
		case l.Spec.RenewTime != nil:
			renewed = l.Spec.RenewTime.Time
		case l.Spec.AcquireTime != nil:
			renewed = l.Spec.AcquireTime.Time
		}
		m.expires = renewed.Add(d)
		m.live = !renewed.IsZero() && m.expires.After(now) && l.DeletionTimestamp == nil
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.name, b.name) })
	return slices.CompactFunc(out, func(a, b member) bool { return a.name == b.name })
}

// prevPairs reconstructs the pairs the controller last wrote: the
// partners the pool's status records, overridden by those the
// assignments name (they are written first, so a reconcile that failed
// before the pool's status does not lose a pairing). Two members naming
// each other are a pair; a member naming one that does not name it back
// keeps it as Lost (Pairs drops that if the other is live).
func prevPairs(st []fleetv1.PoolMember, assigns map[string]*fleetv1.GatewayAssignment) []placement.Pair {
	partnerOf := map[string]string{}
	for _, m := range st {
		if m.Live {
			partnerOf[m.Name] = m.Partner
		}
	}
	for _, a := range assigns {
		partnerOf[a.Spec.Gateway] = a.Spec.Partner
	}
	var out []placement.Pair
	for g, p := range partnerOf {
		switch {
		case p == "":
			out = append(out, placement.Pair{A: g})
		case partnerOf[p] == g:
			if g < p {
				out = append(out, placement.Pair{A: g, B: p})
			}
		default:
			out = append(out, placement.Pair{A: g, Lost: p})
		}
	}
	return out
}
