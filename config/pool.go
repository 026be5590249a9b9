package config

// pool.go reads [[pool]] tables: the virtual IPs a responder hands out in
// configuration payloads (RFC 7296 section 3.15), named as swanctl.conf's
// pools section names them, and checks what the connections say of them
// (pools, vips) and of EAP.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// parsePoolAddrs parses a pool's addrs: a prefix without host bits
// ("10.3.0.0/24") or a range ("10.3.0.10-10.3.0.200"). It returns the
// prefix (zero for a range) and the first and last address handed out.
func parsePoolAddrs(s string) (Pool, string) {
	const want = "want a prefix such as 10.3.0.0/24 or a range such as 10.3.0.10-10.3.0.200"
	var p Pool
	if lo, hi, isRange := strings.Cut(s, "-"); isRange {
		a, msg := parseAddr(strings.TrimSpace(lo))
		if msg == "" {
			p.Last, msg = parseAddr(strings.TrimSpace(hi))
		}
		switch {
		case msg != "":
			return p, fmt.Sprintf("invalid range %s: %s", shortQuote(s), msg)
		case a.Is4() != p.Last.Is4():
			return p, fmt.Sprintf("range %s mixes IPv4 and IPv6 (%s)", shortQuote(s), want)
		case a.Compare(p.Last) > 0:
			return p, fmt.Sprintf("range %s ends before it starts (want FIRST-LAST, FIRST not after LAST)", shortQuote(s))
		}
		p.First = a
	} else {
		pfx, msg := parsePrefix(s, func(a netip.Addr) string {
			if a.IsValid() {
				return fmt.Sprintf("%s is one address (%s)", shortQuote(s), want)
			}
			return fmt.Sprintf("invalid pool %s (%s)", shortQuote(s), want)
		})
		if msg != "" {
			return p, msg
		}
		if m := pfx.Masked(); m != pfx {
			return p, fmt.Sprintf("prefix %s has host bits set (did you mean %s, or a range starting at %s?)", pfx, m, pfx.Addr())
		}
		p.Prefix, p.First, p.Last = pfx, pfx.Addr(), lastAddr(pfx)
		// strongSwan keeps the first and last address of a block of more
		// than two (the network and broadcast addresses of IPv4).
		if pfx.Bits() < pfx.Addr().BitLen()-1 {
			p.First, p.Last = p.First.Next(), p.Last.Prev()
		}
	}
	if p.First.IsMulticast() || p.Last.IsMulticast() || p.First.IsUnspecified() || p.First.IsLoopback() || p.Last.IsLoopback() {
		return Pool{}, fmt.Sprintf("pool %s holds addresses a host cannot be given (want unicast addresses)", shortQuote(s))
	}
	return p, ""
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 12
	}
	for i := p.Bits(); i < p.Addr().BitLen(); i++ {
		b[off+i/8] |= 0x80 >> (i % 8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// parseDNS parses an element of a pool's dns, as a single-address prefix
// for prefixList.
func parseDNS(s string) (netip.Prefix, string) {
	a, msg := parseAddr(s)
	if msg == "" && (a.IsUnspecified() || a.IsMulticast()) {
		msg = fmt.Sprintf("%s cannot be a DNS server (want a unicast address)", a)
	}
	if msg != "" {
		return netip.Prefix{}, msg
	}
	return netip.PrefixFrom(a, a.BitLen()), ""
}

func (d *gwDecoder) pool(te tableElem) {
	f := te.field
	var p Pool
	seen := map[string]bool{}
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		seen[e.Key] = true
		switch e.Key {
		case "name":
			if s, ok := d.name(kf, v, "empty name (a pool needs a name, unique among pools: connections name it in pools)"); ok {
				p.Name = s
			}
		case "addrs":
			if r, ok := parsed(&d.decoder, kf, v, parsePoolAddrs); ok {
				p.Prefix, p.First, p.Last = r.Prefix, r.First, r.Last
			}
		case "dns":
			if ps, ok := d.prefixList(kf, v, `["10.3.0.1"]`, "DNS server", parseDNS); ok {
				for _, a := range ps {
					p.DNS = append(p.DNS, a.Addr())
				}
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, poolKeys, ""))
		}
	}
	for _, k := range []struct{ key, what string }{
		{"name", "a name, unique among pools"},
		{"addrs", `the addresses to hand out: a prefix such as "10.3.0.0/24" or a range such as "10.3.0.10-10.3.0.200"`},
	} {
		if !seen[k.key] {
			d.errorf(te.pos, f+"."+k.key, "missing required key (%s)", k.what)
		}
	}
	d.g.Pools = append(d.g.Pools, p)
	d.poolFields = append(d.poolFields, f)
}

// crossCheckPools checks the pools against each other (names, overlaps)
// and what connections say of them and of EAP.
func (d *gwDecoder) crossCheckPools() {
	g := d.g
	d.uniqueNames("pool", d.poolFields, func(i int) string { return g.Pools[i].Name })
	for i := range g.Pools {
		a, af := &g.Pools[i], d.poolFields[i]+".addrs"
		if !a.First.IsValid() {
			continue
		}
		for j := range i {
			b, bf := &g.Pools[j], d.poolFields[j]+".addrs"
			if b.First.IsValid() && a.First.BitLen() == b.First.BitLen() && a.First.Compare(b.Last) <= 0 && b.First.Compare(a.Last) <= 0 {
				d.errorf(d.at(af), af, "pool %s overlaps pool %s (%s): an address would be handed out twice", shortQuote(a.Name), shortQuote(b.Name), d.line(bf))
				break
			}
		}
	}
	var names []string
	for i := range g.Pools {
		names = append(names, shortQuote(g.Pools[i].Name))
	}
	for i := range g.Connections {
		c, cf := &g.Connections[i], d.connFields[i]
		for j, name := range c.Pools {
			if g.Pool(name) != nil || d.failed("pool") {
				continue
			}
			pf := elemPath(cf+".pools", j)
			if len(names) == 0 {
				d.errorf(d.at(pf), pf, "no [[pool]] named %s (add one with name = %s and addrs)", shortQuote(name), shortQuote(name))
			} else {
				d.errorf(d.at(pf), pf, "no [[pool]] named %s (pools: %s)", shortQuote(name), strings.Join(names, ", "))
			}
		}
		d.checkEAP(c, cf)
	}
}

// checkEAP checks that what [connection.remote]'s EAP method needs is
// there: a password for EAP-MSCHAPv2, our certificate and the peer's CAs
// for EAP-TLS.
func (d *gwDecoder) checkEAP(c *Connection, cf string) {
	g, r, af := d.g, &c.RemoteAuth, cf+".remote.auth"
	if !IsEAP(r.Auth) || d.failed(cf+".remote") || d.failed("secret") {
		return
	}
	anyID := r.EAPID == "" || r.EAPID == EAPIdentityAny
	hasPassword := g.EAPSecret(r.EAPID) != nil
	if anyID {
		hasPassword = slices.ContainsFunc(g.Secrets, func(s Secret) bool { return s.Type == SecretEAP })
	}
	tls := len(r.CACerts)+len(r.Certs) > 0
	switch {
	case r.Auth == AuthEAPMSCHAPv2 && !hasPassword && anyID:
		d.errorf(d.at(af), af, `auth = "eap-mschapv2", but no [[secret]] with type = "eap" holds a password (add one with id and secret)`)
	case r.Auth == AuthEAPMSCHAPv2 && !hasPassword:
		d.errorf(d.at(af), af, `auth = "eap-mschapv2" with eap_id = %s, but no [[secret]] with type = "eap" has that id`, shortQuote(r.EAPID))
	case r.Auth == AuthEAP && !hasPassword && !tls:
		d.errorf(d.at(af), af, `auth = "eap", but no method can run: EAP-MSCHAPv2 needs a [[secret]] with type = "eap", EAP-TLS cacerts`)
	case (r.Auth == AuthEAPTLS || r.Auth == AuthEAP && tls) && len(c.LocalAuth.Certs) == 0 && !d.failed(cf+".local"):
		d.errorf(d.at(af), af, `auth = %q needs our certificate for EAP-TLS's server side: certs in [connection.local] (with auth = "pubkey")`, r.Auth)
	}
}
