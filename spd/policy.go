// Package spd is the security policy database of RFC 4301 section 4.4.1
// for policy-based mode: an ordered list of policies, each a selector (source
// and destination prefixes, next-layer protocol, source and destination port
// ranges) and an action (PROTECT through an SA, BYPASS, DISCARD).
//
// The pieces, in the order a packet meets them:
//
//  1. ExtractFlowKey reads the selector fields of an IPv4 or IPv6 packet
//     (flowkey.go).
//  2. Cache, one per data-plane worker, remembers the decision for recent
//     flows (cache.go).
//  3. DB, immutable once built by New, finds the first policy that matches,
//     as a linear scan of the ordered SPD would, in time that grows with
//     log n rather than n (db.go, classify.go).
//  4. After an inbound packet is decrypted, Policy.Matches checks it against
//     the selectors of the policy its SA was negotiated for (RFC 4301
//     section 5.2).
//
// A policy change builds a new DB and publishes it (e.g. with an
// atomic.Pointer); every DB has its own generation, so every worker's cache
// drops what it learned from the old one without locks (DESIGN.md: per-packet
// lookups are cached per worker).
package spd

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Action is what a policy does with the packets it selects (RFC 4301
// section 4.4.1: PROTECT, BYPASS, DISCARD). The zero value is not an action,
// so that a policy that forgot to say is rejected by New rather than
// silently given one.
type Action uint8

const (
	// Protect sends the packet through IPsec: Policy.Target names the SA (or
	// tunnel) to use.
	Protect Action = iota + 1
	// Bypass lets the packet through without IPsec.
	Bypass
	// Discard drops the packet.
	Discard
)

// String returns "protect", "bypass" or "discard" (the keywords of RFC
// 4301), or "action(N)" for anything else.
func (a Action) String() string {
	switch a {
	case Protect:
		return "protect"
	case Bypass:
		return "bypass"
	case Discard:
		return "discard"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// IP protocol numbers whose first four bytes are a source and a destination
// port, the protocols whose packets port selectors apply to.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// hasPorts reports whether packets of IP protocol p carry ports that
// selectors look at.
func hasPorts(p uint8) bool { return p == protoTCP || p == protoUDP || p == protoSCTP }

// PortRange is an inclusive range of ports, Lo through Hi. The zero value,
// and 0-65535, mean ANY.
//
// Port 0 in a FlowKey stands for OPAQUE (RFC 4301 section 4.4.1.1): the
// packet has no ports (ICMP, ESP, ...) or they cannot be read (a non-first
// fragment). OPAQUE matches ANY and nothing else, so a range that is not
// ANY never matches port 0, even when Lo is 0.
type PortRange struct{ Lo, Hi uint16 }

// IsAny reports whether r is ANY: the zero value or 0-65535.
func (r PortRange) IsAny() bool { return r.Lo == 0 && (r.Hi == 0 || r.Hi == 0xffff) }

// Contains reports whether port p is in r (see the type's doc for port 0).
func (r PortRange) Contains(p uint16) bool {
	if r.IsAny() {
		return true
	}
	return p != 0 && r.Lo <= p && p <= r.Hi
}

// String returns "any", "N" or "LO-HI".
func (r PortRange) String() string {
	switch {
	case r.IsAny():
		return "any"
	case r.Lo == r.Hi:
		return strconv.Itoa(int(r.Lo))
	}
	return strconv.Itoa(int(r.Lo)) + "-" + strconv.Itoa(int(r.Hi))
}

// Selector chooses packets by the fields of RFC 4301 section 4.4.1.1. Every
// field's zero value means ANY; a packet matches when every field matches.
//
// Src and Dst are prefixes of IPv4 or IPv6 addresses: an IPv4 prefix (0/0
// included) matches only IPv4 packets and an IPv6 prefix only IPv6 packets
// (an IPv4-mapped IPv6 address is IPv6). A selector with both prefixes zero
// matches both families. Proto is the next-layer protocol: for IPv6, the
// header after any extension headers (see ExtractFlowKey). SPort and DPort
// apply only to TCP, UDP and SCTP; New rejects them with any other nonzero
// Proto.
//
// ICMP and ICMPv6 message types and codes, which RFC 4301 lets an SPD select
// on through the port fields, are not selectors here: ICMP is chosen by
// protocol only, and its packets have OPAQUE ports. The same goes for the
// IPv6 Mobility Header type.
type Selector struct {
	Src, Dst     netip.Prefix
	Proto        uint8
	SPort, DPort PortRange
}

// Matches reports whether the packet described by k matches s. A key whose
// addresses are invalid, of different families or carry an IPv6 zone matches
// nothing.
//
// Matches is a direct reading of the fields, for checking one policy; DB
// finds the first of many without trying each.
func (s *Selector) Matches(k *FlowKey) bool {
	if k.family() == famNone {
		return false
	}
	// An invalid prefix (which New rejects) matches nothing: Contains says
	// false.
	if s.Src != (netip.Prefix{}) && !s.Src.Contains(k.Src) || s.Dst != (netip.Prefix{}) && !s.Dst.Contains(k.Dst) {
		return false
	}
	if s.Proto != 0 && s.Proto != k.Proto {
		return false
	}
	return s.SPort.Contains(k.SPort) && s.DPort.Contains(k.DPort)
}

// String formats s as "SRC -> DST proto P sport S dport D", writing "any"
// for ANY.
func (s Selector) String() string {
	var b strings.Builder
	pfx := func(p netip.Prefix) {
		if p == (netip.Prefix{}) {
			b.WriteString("any")
		} else {
			b.WriteString(p.String())
		}
	}
	pfx(s.Src)
	b.WriteString(" -> ")
	pfx(s.Dst)
	b.WriteString(" proto ")
	if s.Proto == 0 {
		b.WriteString("any")
	} else {
		b.WriteString(strconv.Itoa(int(s.Proto)))
	}
	b.WriteString(" sport " + s.SPort.String() + " dport " + s.DPort.String())
	return b.String()
}

// Policy is one entry of the ordered SPD.
type Policy struct {
	// Name identifies the policy in errors, counters and listings. It may be
	// empty; names that are not empty must be unique within a DB.
	Name   string
	Sel    Selector
	Action Action
	// Target is the data plane's handle for Protect (its outbound SA or
	// tunnel), opaque to spd and never nil for Protect; it must be nil for
	// Bypass and Discard.
	Target any
}

// Matches reports whether k matches p's selector. It is the check of RFC
// 4301 section 5.2 that an inbound packet, once decrypted, is one the SA it
// arrived on was negotiated for: the caller passes the policy whose Target is
// that SA.
func (p *Policy) Matches(k *FlowKey) bool { return p.Sel.Matches(k) }

// PolicyError is the error New returns for a policy it rejects. Field is
// "name", "src", "dst", "sport", "dport", "action" or "target", so
// that a configuration layer can point at the line that set it.
type PolicyError struct {
	Index int    // position in the slice given to New, from 0
	Name  string // the policy's Name, possibly empty
	Field string
	Msg   string
}

// Error returns "spd: policies[INDEX] (NAME): FIELD: MSG".
func (e *PolicyError) Error() string {
	var b strings.Builder
	b.WriteString("spd: policies[")
	b.WriteString(strconv.Itoa(e.Index))
	b.WriteString("]")
	if e.Name != "" {
		b.WriteString(" (" + strconv.Quote(e.Name) + ")")
	}
	b.WriteString(": " + e.Field + ": " + e.Msg)
	return b.String()
}

// validate checks p (at index i) and returns it in canonical form: prefixes
// masked, 0-65535 written as the zero PortRange. Canonical form does not
// change what the policy matches.
func validate(i int, p Policy) (Policy, error) {
	fail := func(field, format string, args ...any) (Policy, error) {
		return Policy{}, &PolicyError{Index: i, Name: p.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name string
		pfx  *netip.Prefix
	}{{"src", &p.Sel.Src}, {"dst", &p.Sel.Dst}} {
		if *f.pfx == (netip.Prefix{}) {
			continue
		}
		if !f.pfx.IsValid() {
			return fail(f.name, "invalid prefix %v (want an IPv4 or IPv6 address with a length in range, or the zero Prefix for any)", *f.pfx)
		}
		*f.pfx = f.pfx.Masked()
	}
	if s, d := p.Sel.Src, p.Sel.Dst; s.IsValid() && d.IsValid() && s.Addr().Is4() != d.Addr().Is4() {
		return fail("dst", "%v and source %v are of different address families", d, s)
	}
	for _, f := range []struct {
		name string
		r    *PortRange
	}{{"sport", &p.Sel.SPort}, {"dport", &p.Sel.DPort}} {
		if f.r.IsAny() {
			*f.r = PortRange{}
			continue
		}
		if f.r.Lo > f.r.Hi {
			return fail(f.name, "range %d-%d is reversed (want LO <= HI)", f.r.Lo, f.r.Hi)
		}
		if p.Sel.Proto != 0 && !hasPorts(p.Sel.Proto) {
			return fail(f.name, "ports %v with protocol %d, which has none (ports need tcp (6), udp (17), sctp (132) or any protocol (0))", *f.r, p.Sel.Proto)
		}
	}
	switch p.Action {
	case Protect:
		if p.Target == nil {
			return fail("target", "protect needs a target (the SA or tunnel to use)")
		}
	case Bypass, Discard:
		if p.Target != nil {
			return fail("target", "%v takes no target (only protect does)", p.Action)
		}
	default:
		return fail("action", "%v is not an action (want protect, bypass or discard)", p.Action)
	}
	return p, nil
}
