package spd

import (
	"fmt"
	"sync/atomic"
)

// MaxPolicies bounds the size of a DB, and with it the memory of its
// classifier, which grows with the square of the number of policies at worst
// (see classify.go): at most 33 MiB at this many, 2 MiB at 1000; real SPDs
// take a small part of that. Deployments with more policies than this want
// route-based tunnels.
const MaxPolicies = 4096

// generation numbers DBs: every successful New takes the next one, so no two
// DBs in a process share one and 0 is never used.
var generation atomic.Uint64

// DB is an ordered SPD (RFC 4301 section 4.4.1): the policy for a packet is
// the first one, in the order given to New, whose selector matches it.
//
// A DB is immutable: safe for concurrent use by any number of goroutines
// without locks. To change policies, build a new DB and publish it (for
// example through an atomic.Pointer); packets classified while the swap
// happens see either the old DB or the new one.
type DB struct {
	policies []Policy
	gen      uint64
	v4, v6   table
}

// New validates policies and builds a DB of copies of them, in the same
// order. The first invalid policy is reported as a *PolicyError naming it
// and the field at fault. Policies are stored in canonical form (prefixes
// masked, 0-65535 as the zero PortRange), which matches the same packets.
// New(nil) is an empty DB: it matches nothing.
func New(policies []Policy) (*DB, error) {
	if len(policies) > MaxPolicies {
		return nil, fmt.Errorf("spd: %d policies, more than the %d a DB holds", len(policies), MaxPolicies)
	}
	ps := make([]Policy, len(policies))
	names := make(map[string]int, len(policies))
	for i, p := range policies {
		if j, dup := names[p.Name]; dup && p.Name != "" {
			return nil, &PolicyError{Index: i, Name: p.Name, Field: "name", Msg: fmt.Sprintf("already used by policies[%d] (names must be unique)", j)}
		}
		names[p.Name] = i
		var err error
		if ps[i], err = validate(i, p); err != nil {
			return nil, err
		}
	}
	return &DB{
		policies: ps,
		gen:      generation.Add(1),
		v4:       buildTable(ps, false),
		v6:       buildTable(ps, true),
	}, nil
}

// Generation returns db's generation: nonzero, and greater than that of
// every DB this process built before it (each successful New takes the next
// number). A nil DB has generation 0.
func (db *DB) Generation() uint64 {
	if db == nil {
		return 0
	}
	return db.gen
}

// Len returns the number of policies in db.
func (db *DB) Len() int {
	if db == nil {
		return 0
	}
	return len(db.policies)
}

// Policy returns the i'th policy of db, in the order given to New. It
// points into db and must not be modified.
func (db *DB) Policy(i int) *Policy { return &db.policies[i] }

// Lookup returns the first policy whose selector matches k, or nil if none
// does (the data plane then discards the packet and counts it, as RFC 4301
// section 5.1 says for a packet no policy matches). The result points into
// db and must not be modified. A nil DB matches nothing. Lookup does not
// allocate.
func (db *DB) Lookup(k *FlowKey) *Policy {
	if i := db.lookup(k); i >= 0 {
		return &db.policies[i]
	}
	return nil
}

// lookup returns the index of the first policy that matches k, or -1.
func (db *DB) lookup(k *FlowKey) int {
	if db == nil {
		return -1
	}
	return db.lookupPoints(k.family(), addrPoint(k.Src), addrPoint(k.Dst), k)
}

// lookupPoints is lookup for a key whose family and address points the
// caller has computed.
func (db *DB) lookupPoints(fam int, src, dst u128, k *FlowKey) int {
	t := &db.v4
	switch fam {
	case fam4:
	case fam6:
		t = &db.v6
	default:
		return -1
	}
	return t.lookup(src, dst, k.Proto, k.SPort, k.DPort)
}
