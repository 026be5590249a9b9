package gateway

// Policy-based mode: when the configuration has [[policy]] tables, outbound
// packets are classified by the SPD (first match wins, through a per-receiver
// flow cache) instead of by the tunnels' routes, and decrypted packets must
// match the reverse of a protect policy of their tunnel (RFC 4301 section
// 5.2).

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// policyState is one immutable version of the policies.
type policyState struct {
	db *spd.DB
	// reverse holds, per tunnel name, the selectors inbound packets of the
	// tunnel must match (source and destination swapped).
	reverse map[string][]spd.Selector
}

type policySet struct {
	cur atomic.Pointer[policyState]
}

func buildPolicies(cfg *config.Gateway) (*policyState, error) {
	ps := make([]spd.Policy, 0, len(cfg.Policies))
	st := &policyState{reverse: map[string][]spd.Selector{}}
	for _, p := range cfg.Policies {
		sel := spd.Selector{Src: p.Src, Dst: p.Dst, Proto: p.Proto,
			SPort: spd.PortRange{Lo: p.SPort[0], Hi: p.SPort[1]}, DPort: spd.PortRange{Lo: p.DPort[0], Hi: p.DPort[1]}}
		pol := spd.Policy{Name: p.Name, Sel: sel}
		switch p.Action {
		case "protect":
			pol.Action, pol.Target = spd.Protect, p.Tunnel
			st.reverse[p.Tunnel] = append(st.reverse[p.Tunnel], spd.Selector{Src: sel.Dst, Dst: sel.Src, Proto: sel.Proto, SPort: sel.DPort, DPort: sel.SPort})
		case "bypass":
			pol.Action = spd.Bypass
		default:
			pol.Action = spd.Discard
		}
		ps = append(ps, pol)
	}
	db, err := spd.New(ps)
	if err != nil {
		return nil, fmt.Errorf("gateway: %s: %w", cfg.File, err)
	}
	st.db = db
	return st, nil
}

func newPolicySet(cfg *config.Gateway) (*policySet, error) {
	st, err := buildPolicies(cfg)
	if err != nil {
		return nil, err
	}
	s := &policySet{}
	s.cur.Store(st)
	return s, nil
}

// bind checks that every protect policy names a tunnel that exists.
func (s *policySet) bind(db *sad.DB) error {
	for name := range s.cur.Load().reverse {
		if db.Tunnel(name) == nil {
			return fmt.Errorf("gateway: a policy protects through tunnel %q, which does not exist", name)
		}
	}
	return nil
}

// update swaps in the policies of next. Every receiver's cache sees the new
// generation and forgets the old decisions.
func (s *policySet) update(next *config.Gateway, db *sad.DB) error {
	if s == nil {
		if len(next.Policies) > 0 {
			return fmt.Errorf("gateway: switching from route-based to policy-based mode needs a restart")
		}
		return nil
	}
	st, err := buildPolicies(next)
	if err != nil {
		return err
	}
	s.cur.Store(st)
	return s.bind(db)
}

// Policies returns the policies in force, in order.
func (s *policySet) Policies() []spd.Policy {
	db := s.cur.Load().db
	out := make([]spd.Policy, db.Len())
	for i := range out {
		out[i] = *db.Policy(i)
	}
	return out
}

// classifier is one receiver's view of the SPD with its flow cache.
type classifier struct {
	s     *policySet
	cache *spd.Cache
	key   spd.FlowKey
}

func (s *policySet) classifier() dataplane.Classifier {
	return &classifier{s: s, cache: spd.NewCache(4096)}
}

func (c *classifier) Classify(db *sad.DB, pkt []byte) (*sad.Tunnel, dataplane.Reason) {
	if !spd.ExtractFlowKey(pkt, &c.key) {
		return nil, dataplane.Reason(esp.ReasonMalformed)
	}
	p := c.cache.Lookup(c.s.cur.Load().db, &c.key)
	if p == nil {
		return nil, dataplane.ReasonPolicyDiscard
	}
	switch p.Action {
	case spd.Protect:
		name, _ := p.Target.(string)
		if t := db.Tunnel(name); t != nil {
			return t, 0
		}
		return nil, dataplane.ReasonNoSA
	case spd.Bypass:
		// The plaintext side is a TUN: traffic routed into it has nowhere
		// to go unprotected. Count it.
		return nil, dataplane.ReasonBypass
	}
	return nil, dataplane.ReasonPolicyDiscard
}

// inboundCheck accepts a decrypted packet of tunnel t if it matches the
// reverse of one of t's protect policies. It passes the packets of
// tunnels no policy names: the data plane checks every packet against its
// SA's traffic selectors (sad.SA.TS) before this.
func (s *policySet) inboundCheck(t *sad.Tunnel, inner []byte) bool {
	sels, ok := s.cur.Load().reverse[t.Name]
	if !ok {
		return true
	}
	var k spd.FlowKey
	if !spd.ExtractFlowKey(inner, &k) {
		return false
	}
	for i := range sels {
		if sels[i].Matches(&k) {
			return true
		}
	}
	return false
}
