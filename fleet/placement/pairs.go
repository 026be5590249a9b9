// Package placement decides which gateways serve which tunnels: members
// are organised in HA pairs (the gateway's sync channel joins exactly
// two), and each tunnel is placed by rendezvous hashing on the member
// that scores highest for it, its standby that member's partner. It is
// pure: no clock, no I/O, the same answer for the same input, so that two
// controllers agree.
package placement

import (
	"cmp"
	"slices"
)

// Member is a live gateway of a pool.
type Member struct {
	Name string
	Zone string
}

// Pair is two members that share a sync channel. A member alone has B
// "". A member whose partner was lost names it in Lost until it is paired
// again: the pair keeps the lost member's tunnels, which the survivor
// took over by itself.
type Pair struct {
	A, B string // A < B when both are set
	Lost string // only when B is ""
}

// Names returns the pair's live members, A first.
func (p Pair) Names() []string {
	if p.B == "" {
		return []string{p.A}
	}
	return []string{p.A, p.B}
}

// Partner returns the other live member of the pair, "" if none.
func (p Pair) Partner(name string) string {
	switch name {
	case p.A:
		return p.B
	case p.B:
		return p.A
	}
	return ""
}

// Pairs pairs the live members. A pair of prev whose members both live is
// kept; a member whose partner is gone, a member alone and a new member
// are paired among themselves, in another zone where one is left (the
// zone with the most unpaired members is served first, so the number of
// pairs within one zone is the least possible). A survivor left alone
// keeps its lost partner's name. The result is sorted by A and does not
// depend on the order of members or prev.
func Pairs(members []Member, prev []Pair) []Pair {
	zone := make(map[string]string, len(members))
	for _, m := range members {
		zone[m.Name] = m.Zone
	}
	paired := make(map[string]bool, len(members))
	lost := make(map[string]string)
	var out []Pair
	sortedPrev := slices.Clone(prev)
	slices.SortFunc(sortedPrev, func(x, y Pair) int { return cmp.Compare(x.A, y.A) })
	for _, p := range sortedPrev {
		_, okA := zone[p.A]
		_, okB := zone[p.B]
		switch {
		case p.B != "" && okA && okB && !paired[p.A] && !paired[p.B]:
			out = append(out, mkPair(p.A, p.B))
			paired[p.A], paired[p.B] = true, true
		case p.B != "" && okA && !okB:
			lost[p.A] = p.B
		case p.B != "" && okB && !okA:
			lost[p.B] = p.A
		case p.B == "" && okA && p.Lost != "":
			if _, back := zone[p.Lost]; !back {
				lost[p.A] = p.Lost
			}
		}
	}
	// The unpaired, by zone, each zone's list sorted by name.
	byZone := make(map[string][]string)
	for _, m := range members {
		if !paired[m.Name] {
			byZone[m.Zone] = append(byZone[m.Zone], m.Name)
		}
	}
	for z := range byZone {
		slices.Sort(byZone[z])
		byZone[z] = slices.Compact(byZone[z])
	}
	// largest returns the zone with the most unpaired members other than
	// skip (ties to the lower zone name), "" and false if none.
	largest := func(skip string, skipOK bool) (string, bool) {
		best, found := "", false
		for z, names := range byZone {
			if len(names) == 0 || (skipOK && z == skip) {
				continue
			}
			if !found || len(names) > len(byZone[best]) || (len(names) == len(byZone[best]) && z < best) {
				best, found = z, true
			}
		}
		return best, found
	}
	take := func(z string) string {
		n := byZone[z][0]
		byZone[z] = byZone[z][1:]
		return n
	}
	for {
		z1, ok := largest("", false)
		if !ok {
			break
		}
		a := take(z1)
		z2, ok := largest(z1, true)
		if !ok {
			if len(byZone[z1]) == 0 {
				out = append(out, Pair{A: a, Lost: lost[a]})
				break
			}
			z2 = z1
		}
		out = append(out, mkPair(a, take(z2)))
	}
	slices.SortFunc(out, func(x, y Pair) int { return cmp.Compare(x.A, y.A) })
	return out
}

func mkPair(a, b string) Pair {
	if b < a {
		a, b = b, a
	}
	return Pair{A: a, B: b}
}
