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
		name := l.Labels[fleetv1.LabelGateway]
		if name == "" {
			name = strings.TrimPrefix(l.Name, fleetv1.LeasePrefix)
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

// prevPairs reconstructs the pairs the pool's status records: a live
// member with a live partner is a pair, one whose partner was lost keeps
// it as Lost.
func prevPairs(st []fleetv1.PoolMember) []placement.Pair {
	live := map[string]bool{}
	for _, m := range st {
		live[m.Name] = m.Live
	}
	var out []placement.Pair
	for _, m := range st {
		if !m.Live {
			continue
		}
		switch {
		case m.Partner == "":
			out = append(out, placement.Pair{A: m.Name})
		case live[m.Partner]:
			if m.Name < m.Partner {
				out = append(out, placement.Pair{A: m.Name, B: m.Partner})
			}
		default:
			out = append(out, placement.Pair{A: m.Name, Lost: m.Partner})
		}
	}
	return out
}
