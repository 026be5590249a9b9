package spd_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/spd"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

func key(src, dst string, proto uint8, sport, dport uint16) spd.FlowKey {
	return spd.FlowKey{Src: addr(src), Dst: addr(dst), Proto: proto, SPort: sport, DPort: dport}
}

// TestSelectorMatch checks each selector field at its edges, both with
// Policy.Matches and through a one-policy DB and a cache.
func TestSelectorMatch(t *testing.T) {
	tests := []struct {
		name string
		sel  spd.Selector
		k    spd.FlowKey
		want bool
	}{
		{"any v4", spd.Selector{}, key("10.0.0.1", "10.0.0.2", 6, 1, 2), true},
		{"any v6", spd.Selector{}, key("2001:db8::1", "2001:db8::2", 17, 1, 2), true},
		{"any 4in6", spd.Selector{}, key("::ffff:10.0.0.1", "::ffff:10.0.0.2", 17, 1, 2), true},
		{"any opaque", spd.Selector{}, key("10.0.0.1", "10.0.0.2", 1, 0, 0), true},

		{"dst first", spd.Selector{Dst: pfx("10.1.2.0/24")}, key("1.1.1.1", "10.1.2.0", 6, 1, 2), true},
		{"dst last", spd.Selector{Dst: pfx("10.1.2.0/24")}, key("1.1.1.1", "10.1.2.255", 6, 1, 2), true},
		{"dst below", spd.Selector{Dst: pfx("10.1.2.0/24")}, key("1.1.1.1", "10.1.1.255", 6, 1, 2), false},
		{"dst above", spd.Selector{Dst: pfx("10.1.2.0/24")}, key("1.1.1.1", "10.1.3.0", 6, 1, 2), false},
		{"dst host bits set", spd.Selector{Dst: pfx("10.1.2.77/24")}, key("1.1.1.1", "10.1.2.3", 6, 1, 2), true},
		{"src /32 hit", spd.Selector{Src: pfx("192.0.2.7/32")}, key("192.0.2.7", "1.1.1.1", 6, 1, 2), true},
		{"src /32 miss", spd.Selector{Src: pfx("192.0.2.7/32")}, key("192.0.2.8", "1.1.1.1", 6, 1, 2), false},
		{"src 0/0 v4", spd.Selector{Src: pfx("0.0.0.0/0")}, key("255.255.255.255", "0.0.0.0", 6, 1, 2), true},
		{"src 0/0 not v6", spd.Selector{Src: pfx("0.0.0.0/0")}, key("2001:db8::1", "2001:db8::2", 6, 1, 2), false},
		{"src ::/0 not v4", spd.Selector{Src: pfx("::/0")}, key("10.0.0.1", "10.0.0.2", 6, 1, 2), false},
		{"v4 prefix not 4in6", spd.Selector{Dst: pfx("10.0.0.0/8")}, key("::ffff:10.0.0.1", "::ffff:10.0.0.2", 6, 1, 2), false},
		{"4in6 prefix 4in6", spd.Selector{Dst: pfx("::ffff:10.0.0.0/104")}, key("::ffff:10.0.0.1", "::ffff:10.0.0.2", 6, 1, 2), true},
		{"4in6 prefix not v4", spd.Selector{Dst: pfx("::ffff:10.0.0.0/104")}, key("10.0.0.1", "10.0.0.2", 6, 1, 2), false},
		{"v6 /64 last", spd.Selector{Dst: pfx("2001:db8:1:2::/64")}, key("::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", 6, 1, 2), true},
		{"v6 /64 above", spd.Selector{Dst: pfx("2001:db8:1:2::/64")}, key("::1", "2001:db8:1:3::", 6, 1, 2), false},
		{"v6 /65 boundary", spd.Selector{Dst: pfx("2001:db8::/65")}, key("::1", "2001:db8::8000:0:0:0", 6, 1, 2), false},
		{"v6 /63 boundary", spd.Selector{Dst: pfx("2001:db8::/63")}, key("::1", "2001:db8:0:1:ffff:ffff:ffff:ffff", 6, 1, 2), true},
		{"v6 /128", spd.Selector{Src: pfx("2001:db8::1/128")}, key("2001:db8::1", "2001:db8::2", 6, 1, 2), true},
		{"v6 ::/0 all ones", spd.Selector{Src: pfx("::/0"), Dst: pfx("::/0")}, key("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::", 6, 1, 2), true},
		{"v4 prefix v6 key", spd.Selector{Dst: pfx("10.0.0.0/8")}, key("2001:db8::1", "2001:db8::2", 6, 1, 2), false},

		{"proto any icmp", spd.Selector{Proto: 0}, key("10.0.0.1", "10.0.0.2", 1, 0, 0), true},
		{"proto tcp", spd.Selector{Proto: 6}, key("10.0.0.1", "10.0.0.2", 6, 1, 2), true},
		{"proto tcp not udp", spd.Selector{Proto: 6}, key("10.0.0.1", "10.0.0.2", 17, 1, 2), false},
		{"proto icmpv6", spd.Selector{Proto: 58}, key("2001:db8::1", "2001:db8::2", 58, 0, 0), true},

		{"dport lo", spd.Selector{Proto: 6, DPort: spd.PortRange{1000, 2000}}, key("10.0.0.1", "10.0.0.2", 6, 5, 1000), true},
		{"dport hi", spd.Selector{Proto: 6, DPort: spd.PortRange{1000, 2000}}, key("10.0.0.1", "10.0.0.2", 6, 5, 2000), true},
		{"dport below", spd.Selector{Proto: 6, DPort: spd.PortRange{1000, 2000}}, key("10.0.0.1", "10.0.0.2", 6, 5, 999), false},
		{"dport above", spd.Selector{Proto: 6, DPort: spd.PortRange{1000, 2000}}, key("10.0.0.1", "10.0.0.2", 6, 5, 2001), false},
		{"sport single", spd.Selector{SPort: spd.PortRange{53, 53}}, key("10.0.0.1", "10.0.0.2", 17, 53, 9), true},
		{"sport single miss", spd.Selector{SPort: spd.PortRange{53, 53}}, key("10.0.0.1", "10.0.0.2", 17, 54, 9), false},
		{"dport 65535", spd.Selector{DPort: spd.PortRange{65535, 65535}}, key("10.0.0.1", "10.0.0.2", 17, 1, 65535), true},
		{"opaque not range", spd.Selector{DPort: spd.PortRange{1, 65535}}, key("10.0.0.1", "10.0.0.2", 6, 1, 0), false},
		{"opaque not 0-1023", spd.Selector{DPort: spd.PortRange{0, 1023}}, key("10.0.0.1", "10.0.0.2", 6, 1, 0), false},
		{"0-1023 holds 1", spd.Selector{DPort: spd.PortRange{0, 1023}}, key("10.0.0.1", "10.0.0.2", 6, 1, 1), true},
		{"opaque 0-65535 is any", spd.Selector{DPort: spd.PortRange{0, 65535}}, key("10.0.0.1", "10.0.0.2", 6, 1, 0), true},
		{"icmp vs ports", spd.Selector{DPort: spd.PortRange{1, 65535}}, key("10.0.0.1", "10.0.0.2", 1, 0, 0), false},

		{"invalid key", spd.Selector{}, spd.FlowKey{Proto: 6}, false},
		{"mixed families", spd.Selector{}, key("10.0.0.1", "2001:db8::2", 6, 1, 2), false},
		{"zoned key", spd.Selector{}, key("fe80::1%eth0", "fe80::2", 6, 1, 2), false},
	}
	// Unvalidated selectors fail closed: an invalid prefix matches nothing.
	bad := spd.Policy{Sel: spd.Selector{Src: netip.PrefixFrom(addr("10.0.0.0"), 33)}}
	if k := key("10.0.0.1", "10.0.0.2", 6, 1, 2); bad.Matches(&k) {
		t.Error("a selector with an invalid prefix matched")
	}
	c := spd.NewCache(16)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := spd.Policy{Name: tt.name, Sel: tt.sel, Action: spd.Bypass}
			if got := p.Matches(&tt.k); got != tt.want {
				t.Errorf("%v Matches %+v = %v, want %v", tt.sel, tt.k, got, tt.want)
			}
			db, err := spd.New([]spd.Policy{p})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ { // miss, then hit
				if got := c.Lookup(db, &tt.k) != nil; got != tt.want {
					t.Errorf("cache lookup %d of %+v in {%v} = %v, want %v", i, tt.k, tt.sel, got, tt.want)
				}
			}
			if got := db.Lookup(&tt.k) != nil; got != tt.want {
				t.Errorf("lookup %+v in {%v} = %v, want %v", tt.k, tt.sel, got, tt.want)
			}
			if got := db.Policy(0).Matches(&tt.k); got != tt.want {
				t.Errorf("canonical %v Matches %+v = %v, want %v", db.Policy(0).Sel, tt.k, got, tt.want)
			}
		})
	}
}

// TestFirstMatchWins checks RFC 4301's ordered SPD: of two policies that
// both match, the earlier decides, whichever is more specific.
func TestFirstMatchWins(t *testing.T) {
	ssh := spd.Policy{Name: "ssh", Sel: spd.Selector{Proto: 6, DPort: spd.PortRange{22, 22}}, Action: spd.Bypass}
	all := spd.Policy{Name: "all", Sel: spd.Selector{Dst: pfx("10.0.0.0/8")}, Action: spd.Protect, Target: "sa-1"}
	deny := spd.Policy{Name: "deny", Action: spd.Discard}
	k22 := key("192.0.2.1", "10.1.1.1", 6, 40000, 22)
	k80 := key("192.0.2.1", "10.1.1.1", 6, 40000, 80)
	kOut := key("192.0.2.1", "11.1.1.1", 6, 40000, 80)
	for _, tt := range []struct {
		ps             []spd.Policy
		k22, k80, kOut string
	}{
		{[]spd.Policy{ssh, all, deny}, "ssh", "all", "deny"},
		{[]spd.Policy{all, ssh, deny}, "all", "all", "deny"},
		{[]spd.Policy{deny, ssh, all}, "deny", "deny", "deny"},
		{[]spd.Policy{ssh, all}, "ssh", "all", ""},
	} {
		db, err := spd.New(tt.ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			k    spd.FlowKey
			want string
		}{{k22, tt.k22}, {k80, tt.k80}, {kOut, tt.kOut}} {
			got := ""
			if p := db.Lookup(&c.k); p != nil {
				got = p.Name
			}
			if got != c.want {
				t.Errorf("order %v: %+v matched %q, want %q", names(tt.ps), c.k, got, c.want)
			}
		}
	}
}

func names(ps []spd.Policy) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return s
}

func TestNewRejects(t *testing.T) {
	ok := spd.Policy{Name: "p", Action: spd.Bypass}
	with := func(f func(*spd.Policy)) spd.Policy {
		p := ok
		f(&p)
		return p
	}
	tests := []struct {
		p     spd.Policy
		field string
		msg   string
	}{
		{with(func(p *spd.Policy) { p.Sel.Src = netip.PrefixFrom(addr("10.0.0.0"), 33) }), "src", "invalid prefix"},
		{with(func(p *spd.Policy) { p.Sel.Dst = netip.PrefixFrom(addr("2001:db8::"), 129) }), "dst", "invalid prefix"},
		{with(func(p *spd.Policy) { p.Sel.Src, p.Sel.Dst = pfx("10.0.0.0/8"), pfx("2001:db8::/32") }), "dst", "different address families"},
		{with(func(p *spd.Policy) { p.Sel.Src, p.Sel.Dst = pfx("::ffff:10.0.0.0/104"), pfx("10.0.0.0/8") }), "dst", "different address families"},
		{with(func(p *spd.Policy) { p.Sel.Proto, p.Sel.DPort = 6, spd.PortRange{80, 79} }), "dport", "reversed"},
		{with(func(p *spd.Policy) { p.Sel.SPort = spd.PortRange{2, 1} }), "sport", "reversed"},
		{with(func(p *spd.Policy) { p.Sel.Proto, p.Sel.DPort = 1, spd.PortRange{8, 8} }), "dport", "protocol 1, which has none"},
		{with(func(p *spd.Policy) { p.Sel.Proto, p.Sel.SPort = 50, spd.PortRange{1, 2} }), "sport", "protocol 50"},
		{with(func(p *spd.Policy) { p.Action = 0 }), "action", "action(0) is not an action"},
		{with(func(p *spd.Policy) { p.Action = 9 }), "action", "want protect, bypass or discard"},
		{with(func(p *spd.Policy) { p.Action = spd.Protect }), "target", "protect needs a target"},
		{with(func(p *spd.Policy) { p.Target = 1 }), "target", "bypass takes no target"},
	}
	for _, tt := range tests {
		_, err := spd.New([]spd.Policy{{Name: "first", Action: spd.Discard}, tt.p})
		var pe *spd.PolicyError
		if !errors.As(err, &pe) {
			t.Errorf("New(%+v) = %v, want a *PolicyError", tt.p, err)
			continue
		}
		if pe.Index != 1 || pe.Name != "p" || pe.Field != tt.field || !strings.Contains(pe.Msg, tt.msg) {
			t.Errorf("New(%+v) = %+v, want index 1, name p, field %s, message with %q", tt.p, pe, tt.field, tt.msg)
		}
		if want := `spd: policies[1] ("p"): ` + tt.field + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q does not start with %q", err, want)
		}
	}

	_, err := spd.New([]spd.Policy{{Name: "a", Action: spd.Bypass}, {Action: spd.Bypass}, {Action: spd.Bypass}, {Name: "a", Action: spd.Discard}})
	if err == nil || err.Error() != `spd: policies[3] ("a"): name: already used by policies[0] (names must be unique)` {
		t.Errorf("duplicate name: %v", err)
	}
	if _, err := spd.New(make([]spd.Policy, spd.MaxPolicies+1)); err == nil {
		t.Error("New accepted more than MaxPolicies")
	}
}

func TestNewAccepts(t *testing.T) {
	ps := []spd.Policy{
		{Name: "udp any ports", Sel: spd.Selector{Proto: 17, SPort: spd.PortRange{0, 65535}}, Action: spd.Bypass},
		{Name: "sctp", Sel: spd.Selector{Proto: 132, DPort: spd.PortRange{0, 1023}}, Action: spd.Discard},
		{Name: "proto any ports", Sel: spd.Selector{DPort: spd.PortRange{443, 443}}, Action: spd.Protect, Target: struct{}{}},
		{Name: "icmp any ports", Sel: spd.Selector{Proto: 1, DPort: spd.PortRange{0, 65535}}, Action: spd.Discard},
		{Name: "host bits", Sel: spd.Selector{Src: pfx("10.1.2.3/8"), Dst: pfx("10.9.9.9/16")}, Action: spd.Discard},
	}
	db, err := spd.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	if got := db.Policy(0).Sel.SPort; got != (spd.PortRange{}) {
		t.Errorf("0-65535 stored as %v, want the zero PortRange", got)
	}
	if got := db.Policy(4).Sel; got.Src != pfx("10.0.0.0/8") || got.Dst != pfx("10.9.0.0/16") {
		t.Errorf("prefixes stored as %v, want masked", got)
	}
	if ps[4].Sel.Src != pfx("10.1.2.3/8") {
		t.Error("New changed its argument")
	}
	if db.Len() != len(ps) {
		t.Errorf("Len = %d, want %d", db.Len(), len(ps))
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{spd.Protect.String(), "protect"},
		{spd.Bypass.String(), "bypass"},
		{spd.Discard.String(), "discard"},
		{spd.Action(7).String(), "action(7)"},
		{spd.Selector{}.String(), "any -> any proto any sport any dport any"},
		{spd.Selector{Src: pfx("10.0.0.0/8"), Dst: pfx("10.1.0.0/16"), Proto: 6, SPort: spd.PortRange{1024, 65535}, DPort: spd.PortRange{443, 443}}.String(),
			"10.0.0.0/8 -> 10.1.0.0/16 proto 6 sport 1024-65535 dport 443"},
		{(&spd.PolicyError{Index: 2, Field: "dst", Msg: "bad"}).Error(), "spd: policies[2]: dst: bad"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
