package placement

import (
	"cmp"
	"slices"
)

// Item is a tunnel or listener to place.
type Item struct {
	// Key is the object's "namespace/name".
	Key string
	// Redundancy is 2 for an owner and a standby, 1 for an owner alone.
	Redundancy int
}

// Placement is where an item is served.
type Placement struct {
	// Owner serves the item; "" when no member lives.
	Owner string
	// Standby takes the item over if the owner is lost; "" without one.
	Standby string
	// Epoch is bumped on every change of Owner and never decreases; the
	// first placement has epoch 1.
	Epoch int64
	// Group is the member whose [[ha.group]] the item lives in: the
	// member that won it, live or lost. It is Owner until that member is
	// lost; then Owner is the partner, which took the group over by
	// itself, and the item stays in the lost member's group (moving it
	// to the survivor's own would renegotiate it).
	Group string
}

// Degraded reports whether the placement lacks the standby its item wants.
func (p Placement) Degraded(it Item) bool {
	return p.Owner != "" && it.Redundancy > 1 && p.Standby == ""
}

// Place places every item on pairs: the item goes to the pair holding the
// member (live or lost) with the highest rendezvous weight for it. Within
// the pair the owner is that member when it lives, else its surviving
// partner (which took the item over by itself); the standby is the owner's
// live partner when the item wants one. So a member joining or leaving
// moves the items of about one pair. prev carries the previous epochs;
// the result maps every item's key to its placement.
func Place(items []Item, pairs []Pair, prev map[string]Placement) map[string]Placement {
	type cand struct {
		name  string
		h     uint64
		owner string // who owns what this candidate wins
		other string // the owner's live partner
	}
	var cands []cand
	for _, p := range pairs {
		cands = append(cands, cand{name: p.A, owner: p.A, other: p.B})
		if p.B != "" {
			cands = append(cands, cand{name: p.B, owner: p.B, other: p.A})
		} else if p.Lost != "" {
			cands = append(cands, cand{name: p.Lost, owner: p.A})
		}
	}
	// A name appears once only: a lost member named by two survivors (it
	// cannot be, but prev is input) counts for the first.
	slices.SortFunc(cands, func(x, y cand) int { return cmp.Compare(x.name, y.name) })
	cands = slices.CompactFunc(cands, func(x, y cand) bool { return x.name == y.name })
	for i := range cands {
		cands[i].h = mix(hashString(cands[i].name))
	}
	out := make(map[string]Placement, len(items))
	for _, it := range items {
		var best *cand
		var bestW uint64
		ht := hashString(it.Key)
		for i := range cands {
			w := mix(ht ^ cands[i].h)
			// Equal weights (a 2^-64 chance) go to the lower name.
			if best == nil || w > bestW {
				best, bestW = &cands[i], w
			}
		}
		var p Placement
		if best != nil {
			p.Owner, p.Group = best.owner, best.name
			if it.Redundancy > 1 {
				p.Standby = best.other
			}
		}
		old, seen := prev[it.Key]
		switch {
		case !seen || old.Epoch == 0:
			p.Epoch = 1
		case old.Owner != p.Owner:
			p.Epoch = old.Epoch + 1
		default:
			p.Epoch = old.Epoch
		}
		out[it.Key] = p
	}
	return out
}

// hashString is 64-bit FNV-1a.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is a 64-bit finaliser (splitmix64's): it spreads the FNV hash's
// bits so that weights of one key over many members are independent.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
