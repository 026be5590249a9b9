package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func items(n int) []Item {
	its := make([]Item, n)
	for i := range its {
		its[i] = Item{Key: fmt.Sprintf("ns/tunnel-%05d", i), Redundancy: 2}
	}
	return its
}

func members(n, zones int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("gw-%03d", i), Zone: fmt.Sprintf("zone-%c", 'a'+i%zones)}
	}
	return ms
}

// ownerMoves counts the items whose owner differs between a and b.
func ownerMoves(a, b map[string]Placement) int {
	n := 0
	for k, p := range a {
		if b[k].Owner != p.Owner {
			n++
		}
	}
	return n
}

// moveBound is the most owner moves a join or leave among n members may
// cause for t items: the items of about two members (a pair), 2t/n, with
// four standard deviations of slack.
func moveBound(t, n int) int {
	mean := 2 * float64(t) / float64(n)
	return int(mean + 4*math.Sqrt(mean) + 1)
}

func checkOwned(t *testing.T, its []Item, pairs []Pair, pl map[string]Placement) {
	t.Helper()
	live := map[string]string{}
	for _, p := range pairs {
		live[p.A] = p.B
		if p.B != "" {
			live[p.B] = p.A
		}
	}
	for _, it := range its {
		p, ok := pl[it.Key]
		if !ok {
			t.Fatalf("%s not placed", it.Key)
		}
		partner, isLive := live[p.Owner]
		if len(live) > 0 && !isLive {
			t.Fatalf("%s owned by %q, not a live member", it.Key, p.Owner)
		}
		if p.Standby != partner {
			t.Fatalf("%s: owner %s, standby %q, want the owner's partner %q", it.Key, p.Owner, p.Standby, partner)
		}
	}
}

func TestPlaceLeaveMovesOnlyTheLostMembersItems(t *testing.T) {
	const T = 1000
	its := items(T)
	for n := 2; n <= 20; n++ {
		ms := members(n, 3)
		pairs := Pairs(ms, nil)
		before := Place(its, pairs, nil)
		checkOwned(t, its, pairs, before)
		lost := ms[n/2]
		rest := slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m == lost })
		var partner string
		for _, p := range pairs {
			if p.A == lost.Name || p.B == lost.Name {
				partner = p.Partner(lost.Name)
			}
		}
		pairs2 := Pairs(rest, pairs)
		// The survivor keeps the lost member's items unless it was
		// paired again at once (with a member that was alone).
		if !slices.Contains(pairs2, Pair{A: partner, Lost: lost.Name}) {
			partner = ""
		}
		after := Place(its, pairs2, before)
		checkOwned(t, its, pairs2, after)
		moved := 0
		for k, p := range before {
			q := after[k]
			if p.Group != p.Owner {
				t.Fatalf("n=%d: %s is in group %q but owned by %s with every member live", n, k, p.Group, p.Owner)
			}
			if p.Owner == q.Owner {
				if q.Epoch != p.Epoch || q.Group != p.Group {
					t.Fatalf("n=%d: %s kept its owner but its epoch went %d -> %d, its group %q -> %q", n, k, p.Epoch, q.Epoch, p.Group, q.Group)
				}
				continue
			}
			moved++
			if p.Owner != lost.Name {
				t.Fatalf("n=%d: %s moved from %s, a live member, to %s", n, k, p.Owner, q.Owner)
			}
			if partner != "" && q.Owner != partner {
				t.Fatalf("n=%d: %s of lost %s went to %s, not to its partner %s", n, k, lost.Name, q.Owner, partner)
			}
			// Taken over, it stays in the lost member's HA group.
			if partner != "" && q.Group != lost.Name {
				t.Fatalf("n=%d: %s of lost %s is in group %q after the takeover", n, k, lost.Name, q.Group)
			}
			if q.Epoch != p.Epoch+1 {
				t.Fatalf("n=%d: %s changed owner, epoch %d -> %d", n, k, p.Epoch, q.Epoch)
			}
		}
		if b := moveBound(T, n); moved > b {
			t.Errorf("n=%d: a leave moved %d of %d items, more than %d", n, moved, T, b)
		}
		t.Logf("n=%d leave: %d of %d moved (1/n = %d)", n, moved, T, T/n)
	}
}

func TestPlaceJoinMovesAboutTwoOverN(t *testing.T) {
	const T = 1000
	its := items(T)
	for n := 1; n < 20; n++ {
		for _, afterLoss := range []bool{false, true} {
			ms := members(n, 3)
			pairs := Pairs(ms, nil)
			pl := Place(its, pairs, nil)
			if afterLoss && n >= 2 {
				// A member is lost first: the new member pairs with
				// its survivor and takes the lost one's place.
				ms = ms[1:]
				pairs = Pairs(ms, pairs)
				pl = Place(its, pairs, pl)
			}
			joined := append(slices.Clone(ms), Member{Name: "gw-new", Zone: "zone-z"})
			pairs2 := Pairs(joined, pairs)
			after := Place(its, pairs2, pl)
			checkOwned(t, its, pairs2, after)
			moved := ownerMoves(pl, after)
			if b := moveBound(T, len(joined)); moved > b {
				t.Errorf("n=%d afterLoss=%v: a join moved %d of %d items, more than %d", len(joined), afterLoss, moved, T, b)
			}
		}
	}
}

func TestPairsZoneAntiAffinity(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		n := 1 + r.IntN(20)
		zones := 1 + r.IntN(4)
		ms := make([]Member, n)
		count := map[string]int{}
		for i := range ms {
			z := fmt.Sprintf("z%d", r.IntN(zones))
			ms[i] = Member{Name: fmt.Sprintf("gw-%02d", i), Zone: z}
			count[z]++
		}
		m := 0
		for _, c := range count {
			m = max(m, c)
		}
		want := 0
		if 2*m > n {
			want = (2*m - n) / 2
		}
		zoneOf := map[string]string{}
		for _, mm := range ms {
			zoneOf[mm.Name] = mm.Zone
		}
		pairs := Pairs(ms, nil)
		same, seen := 0, map[string]bool{}
		for _, p := range pairs {
			for _, x := range p.Names() {
				if seen[x] {
					t.Fatalf("%s in two pairs: %v", x, pairs)
				}
				seen[x] = true
			}
			if p.B != "" && zoneOf[p.A] == zoneOf[p.B] {
				same++
			}
		}
		if len(seen) != n {
			t.Fatalf("%d of %d members paired: %v", len(seen), n, pairs)
		}
		if same != want {
			t.Fatalf("members %v: %d pairs within one zone, the least possible is %d: %v", ms, same, want, pairs)
		}
	}
}

func TestPlaceDeterministic(t *testing.T) {
	its := items(300)
	ms := members(9, 3)
	pairs := Pairs(ms, nil)
	want := Place(its, pairs, nil)
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		ms2 := slices.Clone(ms)
		r.Shuffle(len(ms2), func(i, j int) { ms2[i], ms2[j] = ms2[j], ms2[i] })
		its2 := slices.Clone(its)
		r.Shuffle(len(its2), func(i, j int) { its2[i], its2[j] = its2[j], its2[i] })
		pairs2 := Pairs(ms2, nil)
		if !slices.Equal(pairs, pairs2) {
			t.Fatalf("pairs depend on the members' order: %v vs %v", pairs, pairs2)
		}
		got := Place(its2, pairs2, nil)
		for k, p := range want {
			if got[k] != p {
				t.Fatalf("%s: %+v, then %+v", k, p, got[k])
			}
		}
	}
}

// TestPlaceSequence runs random joins and leaves: pairs whose members
// both live are kept, every item is owned while a member lives, epochs
// never decrease and go up exactly when the owner changes, and no step
// moves more than about two members' share.
func TestPlaceSequence(t *testing.T) {
	const T = 1000
	its := items(T)
	r := rand.New(rand.NewPCG(5, 6))
	var live []Member
	var pairs []Pair
	var pl map[string]Placement
	next := 0
	for step := 0; step < 300; step++ {
		before := len(live)
		if len(live) == 0 || (len(live) < 20 && r.IntN(2) == 0) {
			live = append(live, Member{Name: fmt.Sprintf("gw-%03d", next), Zone: fmt.Sprintf("z%d", r.IntN(3))})
			next++
		} else {
			i := r.IntN(len(live))
			live = slices.Delete(live, i, i+1)
		}
		isLive := map[string]bool{}
		for _, m := range live {
			isLive[m.Name] = true
		}
		pairs2 := Pairs(live, pairs)
		for _, p := range pairs {
			if p.B != "" && isLive[p.A] && isLive[p.B] && !slices.Contains(pairs2, p) {
				t.Fatalf("step %d: pair %v of live members broken up: %v", step, p, pairs2)
			}
		}
		pl2 := Place(its, pairs2, pl)
		if len(live) > 0 {
			checkOwned(t, its, pairs2, pl2)
		}
		for k, q := range pl2 {
			p, ok := pl[k]
			if !ok {
				continue
			}
			if q.Epoch < p.Epoch || (q.Owner != p.Owner) != (q.Epoch == p.Epoch+1) {
				t.Fatalf("step %d: %s: owner %q epoch %d -> owner %q epoch %d", step, k, p.Owner, p.Epoch, q.Owner, q.Epoch)
			}
		}
		if pl != nil && before > 0 && len(live) > 0 {
			if moved, b := ownerMoves(pl, pl2), moveBound(T, min(before, len(live))); moved > b {
				t.Fatalf("step %d (%d -> %d members): %d moved, more than %d", step, before, len(live), moved, b)
			}
		}
		pairs, pl = pairs2, pl2
	}
}

func TestPlaceNoMembers(t *testing.T) {
	its := items(3)
	pl := Place(its, Pairs(members(2, 1), nil), nil)
	pl2 := Place(its, Pairs(nil, nil), pl)
	for _, it := range its {
		if p := pl2[it.Key]; p.Owner != "" || p.Epoch != pl[it.Key].Epoch+1 {
			t.Fatalf("%s with no member: %+v (was %+v)", it.Key, p, pl[it.Key])
		}
	}
}

func TestPlaceRedundancyOne(t *testing.T) {
	its := []Item{{Key: "ns/a", Redundancy: 1}}
	pl := Place(its, Pairs(members(2, 2), nil), nil)
	if p := pl["ns/a"]; p.Owner == "" || p.Standby != "" {
		t.Fatalf("redundancy 1: %+v, want an owner and no standby", p)
	}
}

// BenchmarkPlace places 10,000 tunnels over 100 gateways (50 pairs).
func BenchmarkPlace(b *testing.B) {
	its := items(10000)
	ms := members(100, 3)
	pairs := Pairs(ms, nil)
	prev := Place(its, pairs, nil)
	b.ReportAllocs()
	for b.Loop() {
		Place(its, Pairs(ms, pairs), prev)
	}
}
