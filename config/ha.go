package config

// ha.go reads the [ha] section of the gateway configuration: this
// member of a pair of gateways, the sync channel to the other member, and
// the groups of virtual addresses one member at a time owns.
//
//	[ha]           this member's name, the sync channel (listen, peer,
//	               mutual-TLS files, peer_name), failure detection
//	               (interval, misses, witness), the hook, preference
//	  [[ha.group]] a name, virtual addresses ("PREFIX dev IFNAME") and
//	               this member's preference for the group
//
// A [[tunnel]] or [[connection]] belongs to the group one of whose
// addresses is its local address (Gateway.HAGroupOf); one that matches no
// group is this member's alone. The certificate, key, CA and hook files
// are checked at start and on reload with the TLS sections' files
// (CheckTLSFiles).

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"
)

// Defaults and limits of [ha].
const (
	DefaultHAInterval    = 100 * time.Millisecond
	MinHAInterval        = 10 * time.Millisecond
	MaxHAInterval        = 10 * time.Second
	DefaultHAMisses      = 3
	MinHAMisses          = 2
	MaxHAMisses          = 100
	DefaultHAHookTimeout = 5 * time.Second
	MinHAHookTimeout     = 100 * time.Millisecond
	MaxHAHookTimeout     = time.Minute
	DefaultHAPreference  = 100
	MaxHAPreference      = 255
	// MaxHANameLen bounds member and group names.
	MaxHANameLen = 32
)

// HA is the [ha] section: this member of a pair of gateways.
type HA struct {
	// Name is this member's name; PeerName the other member's, which its
	// certificate must carry (a DNS subjectAltName, or the common name).
	// Both are 1 to MaxHANameLen of a-z, 0-9 and '-', and differ.
	Name, PeerName string
	// Listen is where this member's sync channel listens (the address may
	// be unspecified); Peer is the other member's, dialled. Neither is a
	// virtual address.
	Listen, Peer netip.AddrPort
	// Cert, Key and CA are PEM files of the sync channel's mutual TLS,
	// resolved against the configuration file's directory.
	Cert, Key, CA string
	// Witness is "" or an IP address and TCP port: a member whose TCP
	// connect to it completes is not isolated (a refused one does not
	// count; package ha's doc says what makes a good witness).
	Witness string
	// Hook is "" or an executable, resolved like Cert (and so always
	// with a '/', never looked up in PATH), run as `hook EVENT GROUP` when this member acquires, releases, fences or unfences a
	// group, for at most HookTimeout.
	Hook        string
	Interval    time.Duration // between heartbeats; default DefaultHAInterval
	HookTimeout time.Duration // default DefaultHAHookTimeout
	// Misses is how many heartbeats may be missed before the peer is
	// dead; default DefaultHAMisses.
	Misses int
	// Preference is the default of the groups' preferences, 0..255
	// (higher wins); default DefaultHAPreference.
	Preference int
	// Preempt: a more preferred member that joins takes its groups back by
	// a planned handover.
	Preempt bool
	// Groups are the [[ha.group]] tables, in file order; at least one.
	Groups []HAGroup
}

// HAGroup is a [[ha.group]]: virtual addresses moved together, with the
// tunnels and IKE connections whose local address is one of them.
type HAGroup struct {
	Name string // unique; the form of HA.Name
	// Addresses may be none (addresses = [] or no key): a group that
	// holds nothing yet, as a fleet's gateway whose partner owns no
	// tunnel renders it. A reload may change them (not the name or the
	// preference).
	Addresses []HAAddress
	// Preference is this member's preference for the group: its
	// preference key, else [ha]'s.
	Preference int
}

// HAAddress is a virtual address: an address with its prefix length
// (host bits kept) and the interface it goes on.
type HAAddress struct {
	Prefix netip.Prefix
	Dev    string
}

// String formats a as the file writes it: "192.0.2.10/24 dev wan0".
func (a HAAddress) String() string { return a.Prefix.String() + " dev " + a.Dev }

// HAGroupOf returns the name of the group one of whose addresses is
// local, or "" if none is (or the gateway has no [ha]).
func (g *Gateway) HAGroupOf(local netip.Addr) string {
	if g.HA == nil || !local.IsValid() {
		return ""
	}
	local = local.Unmap()
	for i := range g.HA.Groups {
		for _, a := range g.HA.Groups[i].Addresses {
			if a.Prefix.Addr() == local {
				return g.HA.Groups[i].Name
			}
		}
	}
	return ""
}

// haSide is [ha] being read: its groups are read once its preference,
// their default, is known.
type haSide struct {
	HA
	groups []tableElem
}

// haRules are the keys of [ha].
var haRules = newSection(reflect.TypeFor[FileHA](),
	field("name", checkedText(haName("member")), "", func(h *haSide) *string { return &h.Name }).required(`this member's name, e.g. name = "a"`),
	field("listen", parsedText(parseHAListen), netip.AddrPort{}, func(h *haSide) *netip.AddrPort { return &h.Listen }).required(`the address this member's sync channel listens on, e.g. listen = "10.9.0.1:4510"`),
	field("peer", parsedText(func(s string) (netip.AddrPort, string) {
		return parseHADial(s, "address", "the other member's address, e.g. 10.9.0.2:4510")
	}), netip.AddrPort{}, func(h *haSide) *netip.AddrPort { return &h.Peer }).required(`the other member's sync address, e.g. peer = "10.9.0.2:4510"`),
	field("cert", haFile("this member's PEM certificate"), "", func(h *haSide) *string { return &h.Cert }).required("this member's PEM certificate for the sync channel"),
	field("key", haFile("the PEM private key of cert"), "", func(h *haSide) *string { return &h.Key }).required("the PEM private key of cert"),
	field("ca", haFile("the PEM CA certificates both members' certificates chain to"), "", func(h *haSide) *string { return &h.CA }).required("the PEM CA certificates both members' certificates chain to"),
	field("peer_name", checkedText(haName("member")), "", func(h *haSide) *string { return &h.PeerName }).required(`the other member's name, which its certificate carries, e.g. peer_name = "b"`),
	field("interval", durationIn(MinHAInterval, MaxHAInterval, "default "+shortDuration(DefaultHAInterval)), DefaultHAInterval, func(h *haSide) *time.Duration { return &h.Interval }),
	field("misses", intIn[int]("", MinHAMisses, MaxHAMisses, fmt.Sprintf("%d..%d; default %d", MinHAMisses, MaxHAMisses, DefaultHAMisses)), DefaultHAMisses, func(h *haSide) *int { return &h.Misses }),
	field("witness", codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) {
		ap, ok := parsed(&d.decoder, f, e.Value, func(s string) (netip.AddrPort, string) {
			return parseHADial(s, "witness", "an IP address and TCP port such as 10.0.0.254:53, reachable from both members")
		})
		return ap.String(), ok
	}, write: asIs[string]}, "", func(h *haSide) *string { return &h.Witness }),
	field("hook", codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) {
		s, ok := haFile("an executable, or leave the key out for none").read(d, f, e)
		// A name without a '/' would be looked up in PATH when run: it
		// is a file of this directory.
		if ok && !strings.ContainsRune(s, '/') {
			s = "./" + s
		}
		return s, ok
	}, write: asIs[string]}, "", func(h *haSide) *string { return &h.Hook }),
	field("hook_timeout", durationIn(MinHAHookTimeout, MaxHAHookTimeout, "default "+shortDuration(DefaultHAHookTimeout)), DefaultHAHookTimeout, func(h *haSide) *time.Duration { return &h.HookTimeout }),
	field("preference", haPreference(), DefaultHAPreference, func(h *haSide) *int { return &h.Preference }),
	field("preempt", flag(), false, func(h *haSide) *bool { return &h.Preempt }),
	rule[haSide]{key: "group", read: func(d *gwDecoder, f string, e *Entry, h *haSide) bool {
		if _, ok := e.Value.Table(); ok {
			d.errorf(e.Value.Pos, f, "want an array of tables, got table (write [[ha.group]], not [ha.group])")
			return false
		}
		h.groups, _ = d.arrayOfTables(f, e.Value)
		return true
	}, write: func(h *haSide) (any, bool) {
		return tableList(haGroupRules, nil).write(h.Groups), len(h.Groups) > 0
	}},
)

// haGroupRules are the keys of a [[ha.group]]; its preference defaults
// to [ha]'s.
var haGroupRules = newSection(reflect.TypeFor[FileHAGroup](),
	field("name", checkedText(haName("group")), "", func(g *HAGroup) *string { return &g.Name }).required("a name, unique among the groups"),
	field("addresses", codec[[]HAAddress]{read: (*gwDecoder).haAddresses, write: func(as []HAAddress) any {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.String()
		}
		return out
	}}, nil, func(g *HAGroup) *[]HAAddress { return &g.Addresses }),
	field("preference", haPreference(), 0, func(g *HAGroup) *int { return &g.Preference }),
)

// ToFile returns the section as an [ha] that ParseGateway reads back into
// h (a preference of 0, which File leaves out, excepted).
func (h *HA) ToFile() *FileHA {
	f := haRules.encode(&haSide{HA: *h}).Interface().(FileHA)
	return &f
}

// haName checks a member's or group's name (what).
func haName(what string) func(string) string {
	return func(s string) string { return checkHAName(what, s) }
}

// haFile reads a file name of [ha] (what it is), resolved against the
// configuration's directory.
func haFile(what string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) {
		s, ok := d.checked(f, e.Value, nonEmpty("empty file name (want "+what+")"))
		return d.path(s), ok
	}, write: asIs[string]}
}

func (d *gwDecoder) haSection(f string, v *Value) {
	t, ok := d.table(f, v)
	if !ok {
		return
	}
	h := haRules.defaults()
	seen, _ := haRules.decode(d, f, d.at(f), t, &h)
	gf := fieldPath(f, "group")
	for _, te := range h.groups {
		grp := haGroupRules.defaults()
		grp.Preference = h.Preference
		haGroupRules.decode(d, te.field, te.pos, te.t, &grp)
		h.Groups = append(h.Groups, grp)
		d.haGroupFields = append(d.haGroupFields, te.field)
	}
	switch {
	case !seen["group"]:
		d.errorf(d.at(f), gf, `missing required [[ha.group]] (at least one, with name and addresses = ["192.0.2.10/24 dev wan0"])`)
	case len(h.Groups) == 0 && !d.failed(gf):
		d.errorf(d.at(gf), gf, `no group (want at least one [[ha.group]] with name and addresses = ["192.0.2.10/24 dev wan0"])`)
	}
	d.g.HA = &h.HA
}

// haAddresses reads a group's addresses ("192.0.2.10/24 dev wan0").
func (d *gwDecoder) haAddresses(f string, e *Entry) ([]HAAddress, bool) {
	elems, ok := d.strList(f, e.Value, `addresses = ["192.0.2.10/24 dev wan0"]`)
	if !ok {
		return nil, false
	}
	var out []HAAddress
	for i, ev := range elems {
		s, _ := ev.Str()
		a, msg := parseHAAddress(s)
		if msg != "" {
			d.errorf(ev.Pos, elemPath(f, i), "%s", msg)
			continue
		}
		out = append(out, a)
	}
	return out, true
}

// haPreference reads a preference, 0..MaxHAPreference.
func haPreference() codec[int] {
	return codec[int]{read: func(d *gwDecoder, f string, e *Entry) (int, bool) { return d.haPreference(f, e.Value) }, write: asIs[int]}
}

// haPreference reads a preference, 0..MaxHAPreference.
func (d *gwDecoder) haPreference(f string, v *Value) (int, bool) {
	i, ok := d.intIn(f, v, "", 0, MaxHAPreference, fmt.Sprintf("0..%d, higher wins; default %d", MaxHAPreference, DefaultHAPreference))
	return int(i), ok
}

// checkHAName returns what is wrong with a member's or group's name, or
// "": what names which.
func checkHAName(what, s string) string {
	valid := len(s) > 0 && len(s) <= MaxHANameLen && s[0] != '-'
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		valid = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !valid {
		return fmt.Sprintf("invalid %s name %s (want 1 to %d of a-z, 0-9 and '-', not starting with '-')", what, shortQuote(s), MaxHANameLen)
	}
	return ""
}

// parseHAListen parses listen: an IP address, which may be unspecified,
// and a port.
func parseHAListen(s string) (netip.AddrPort, string) {
	ap, msg := parseHAAddrPort(s, "address", "an IP address and port such as 10.9.0.1:4510, or 0.0.0.0:4510 for every address")
	if msg == "" && ap.Addr().IsMulticast() {
		msg = fmt.Sprintf("cannot listen on multicast address %s", ap.Addr())
	}
	return ap, msg
}

// parseHADial parses an address to connect to (peer, witness): an IP
// address that is neither unspecified nor multicast, and a port. what
// names the key in messages, want says what is valid.
func parseHADial(s, what, want string) (netip.AddrPort, string) {
	ap, msg := parseHAAddrPort(s, what, want)
	if msg == "" && (ap.Addr().IsUnspecified() || ap.Addr().IsMulticast()) {
		return netip.AddrPort{}, fmt.Sprintf("%s is not an address to connect to (want %s)", ap.Addr(), want)
	}
	return ap, msg
}

// parseHAAddrPort parses an IP address and a port other than 0.
func parseHAAddrPort(s, what, want string) (netip.AddrPort, string) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		if a, msg := parseAddr(s); msg == "" {
			return netip.AddrPort{}, fmt.Sprintf("%s has no port (want address:port, e.g. %s)", shortQuote(s), netip.AddrPortFrom(a, 4510))
		}
		return netip.AddrPort{}, fmt.Sprintf("invalid %s %s (want %s)", what, shortQuote(s), want)
	}
	if _, msg := parseAddr(ap.Addr().String()); msg != "" {
		return netip.AddrPort{}, msg
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Sprintf("port 0 (want 1..65535: %s)", want)
	}
	return ap, ""
}

// ParseHAAddress parses a [[ha.group]] address, "PREFIX dev IFNAME", as
// the configuration does (for the fleet's agent, which renders them).
func ParseHAAddress(s string) (HAAddress, error) {
	a, msg := parseHAAddress(s)
	if msg != "" {
		return HAAddress{}, errors.New(msg)
	}
	return a, nil
}

// parseHAAddress parses a virtual address, "PREFIX dev IFNAME" as
// keepalived and iproute2 write it.
func parseHAAddress(s string) (HAAddress, string) {
	const want = `want "PREFIX dev IFNAME", such as "192.0.2.10/24 dev wan0"`
	w := strings.Fields(s)
	switch {
	case len(w) == 1:
		p, msg := parseIfAddr(w[0])
		if msg != "" {
			return HAAddress{}, msg
		}
		return HAAddress{}, fmt.Sprintf("%s names no device (want %s: the interface the address goes on)", shortQuote(s), shortQuote(p.String()+" dev IFNAME"))
	case len(w) != 3 || w[1] != "dev":
		return HAAddress{}, fmt.Sprintf("invalid virtual address %s (%s)", shortQuote(s), want)
	}
	p, msg := parseIfAddr(w[0])
	if msg != "" {
		return HAAddress{}, msg
	}
	if msg := checkIfName(w[2]); msg != "" {
		return HAAddress{}, msg
	}
	return HAAddress{Prefix: p, Dev: w[2]}, ""
}

// crossCheckHA checks what [ha] says across its groups and against its
// own addresses: unique group names, each address in one group once, and
// the sync channel on addresses that are not virtual.
func (d *gwDecoder) crossCheckHA() {
	h := d.g.HA
	if h == nil {
		return
	}
	if h.Name != "" && h.Name == h.PeerName {
		d.errorf(d.at("ha.peer_name"), "ha.peer_name", "peer_name %s is this member's name too (%s): the two members need different names",
			shortQuote(h.PeerName), d.line("ha.name"))
	}
	if h.Listen.IsValid() && h.Listen == h.Peer {
		d.errorf(d.at("ha.peer"), "ha.peer", "peer %s is listen too (%s): peer is the other member's sync address", h.Peer, d.line("ha.listen"))
	}
	d.uniqueNames("group", d.haGroupFields, func(i int) string { return h.Groups[i].Name })
	// Each address in one group, once. A group with an address that did
	// not decode is left out: its Addresses are not its elements.
	type at struct {
		group int
		field string
	}
	seen := map[netip.Addr]at{}
	for gi := range h.Groups {
		af := d.haGroupFields[gi] + ".addresses"
		if d.failed(af) {
			continue
		}
		for i, a := range h.Groups[gi].Addresses {
			f := elemPath(af, i)
			if prev, dup := seen[a.Prefix.Addr()]; dup {
				d.errorf(d.at(f), f, "address %s is also %s: an address belongs to one group, once", a.Prefix.Addr(), d.paren(prev.field))
				continue
			}
			seen[a.Prefix.Addr()] = at{gi, f}
		}
	}
	for _, k := range []struct {
		key string
		ap  netip.AddrPort
	}{{"listen", h.Listen}, {"peer", h.Peer}} {
		if !k.ap.IsValid() {
			continue
		}
		if prev, ok := seen[k.ap.Addr().Unmap()]; ok {
			f := "ha." + k.key
			d.errorf(d.at(f), f, "%s is a virtual address of group %s (%s): the sync channel needs an address of this member's own, which stays when the group moves",
				k.ap.Addr(), shortQuote(h.Groups[prev.group].Name), d.line(prev.field))
		}
	}
}

// paren describes where field is: "ha.group[1].addresses[1] (line 11)".
func (d *gwDecoder) paren(field string) string {
	return fmt.Sprintf("%s (line %d)", field, d.at(field).Line)
}

// checkHAFiles adds to CheckTLSFiles the files of [ha]: cert, key and ca
// as a TLS section's, and the hook, which must be an executable file.
func (g *Gateway) checkHAFiles(pair func(certField, keyField string, c TLSCert), ca func(field, path string), fail func(field, msg string)) {
	h := g.HA
	if h == nil {
		return
	}
	pair("ha.cert", "ha.key", TLSCert{Cert: h.Cert, Key: h.Key})
	ca("ha.ca", h.CA)
	if h.Hook == "" {
		return
	}
	switch fi, err := os.Stat(h.Hook); {
	case err != nil:
		fail("ha.hook", err.Error())
	case fi.IsDir():
		fail("ha.hook", fmt.Sprintf("%s is a directory, not a file", h.Hook))
	case fi.Mode().Perm()&0o111 == 0:
		fail("ha.hook", fmt.Sprintf("%s is not executable (chmod +x it)", h.Hook))
	}
}
