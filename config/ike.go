package config

// ike.go reads the IKEv2 sections of the gateway configuration, named as
// strongSwan's swanctl.conf names them so that its users read them at
// sight:
//
//	[[connection]]            an IKE peer: addresses, IKE proposals, DPD,
//	                          encapsulation, the IKE SA's rekey time
//	  [connection.local]      how we authenticate: auth = psk|pubkey, id,
//	                          certs
//	  [connection.remote]     how the peer must: auth, id, certs, cacerts
//	  [[connection.children]] a Child SA: traffic selectors, ESP proposals,
//	                          start action, rekey and life times
//	[[secret]]                type = "ike": a pre-shared key for ids;
//	                          type = "private": a private key file
//
// A child, once negotiated, is a route-based tunnel named after it, as a
// [[tunnel]] with its [[sa]] tables is: its remote_ts are the tunnel's
// routes. Its names are unique among tunnels and children.
//
// The proposals are checked with package ike's parser (strongSwan's
// keywords); the certificate and key files are read at start and on
// reload by the gateway, which reports them at their fields.

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/ike"
)

// Defaults of the IKE sections (swanctl.conf's).
const (
	DefaultIKERekeyTime   = 4 * time.Hour
	DefaultChildRekeyTime = time.Hour
	// DefaultIKEProposals and DefaultESPProposals are what a connection
	// or child proposes when it names none.
	DefaultIKEProposals = "aes256gcm16-prfsha384-ecp384,aes128-sha256-modp2048"
	DefaultESPProposals = "aes256gcm16,aes128gcm16,aes128-sha256"
)

// Authentication methods of [connection.local] and [connection.remote].
const (
	AuthPSK    = "psk"
	AuthPubkey = "pubkey"
)

// Start actions of a child (swanctl.conf's start_action).
const (
	StartNone  = "none"  // wait for the peer (or `sluice ike initiate`)
	StartTrap  = "trap"  // initiate on the first packet routed into the child
	StartStart = "start" // initiate when the gateway starts
)

// Types of a [[secret]].
const (
	SecretIKE     = "ike"
	SecretPrivate = "private"
)

// IKEOptions is the [ike] section: what all connections share, named as
// in strongswan.conf's charon section.
type IKEOptions struct {
	// Port is the IKE port (500) on each connection's local address; the
	// NAT-T port is the [udp] socket's.
	Port uint16
	// RetransmitTimeout is the first retransmission timeout of a request;
	// it doubles with each retransmission. 0 is package ike's default
	// (1s).
	RetransmitTimeout time.Duration
	// RetransmitTries is how many times a request is retransmitted
	// before the peer is given up (0: package ike's default, 5).
	RetransmitTries int
	// MaxChildSAs bounds the Child SAs of one IKE SA (max_child_sas; 0:
	// ike.DefaultMaxChildSAs). strongSwan has no such limit: this one
	// only bounds what a peer can make the gateway hold, and a
	// connection with more children than it is refused.
	MaxChildSAs int
	// BlockThreshold is how many IKE SAs one peer address may hold half
	// open (strongSwan's charon.block_threshold; 0: package ike's
	// default, 5); its further IKE_SA_INITs are dropped, so that one
	// host cannot take the half-open places of all others.
	BlockThreshold int
	// KeepAlive is keep_alive: how often an IKE SA behind a NAT sends a
	// NAT-keepalive when it sent nothing else (RFC 3948 section 2.3). 0
	// is package ike's default (20s, strongSwan's); "0s" in the file
	// turns them off and is stored as a negative value.
	KeepAlive time.Duration
}

// DefaultIKEPort is the port of IKE_SA_INIT (RFC 7296 section 2).
const DefaultIKEPort = 500

var ikeKeys = []string{"port", "retransmit_timeout", "retransmit_tries", "max_child_sas", "block_threshold", "keep_alive"}

// Bounds of the IKE durations: below them the gateway would spend itself
// on rekeys, liveness checks or retransmissions (a rekey_time of 1ns
// rekeys without end); above them a time stops meaning anything, and
// rekey_time plus its margin could overflow.
const (
	MinIKERetransmitTimeout = 100 * time.Millisecond
	MaxIKERetransmitTimeout = time.Minute
	MinDPDDelay             = time.Second
	MaxDPDDelay             = 24 * time.Hour
	MinIKELifetime          = time.Second // rekey_time and life_time, of IKE SAs and children
	MaxIKELifetime          = 365 * 24 * time.Hour
	// MaxMaxChildSAs bounds max_child_sas; MaxBlockThreshold
	// block_threshold.
	MaxMaxChildSAs    = 1 << 16
	MaxBlockThreshold = 1024
	// MinKeepAlive and MaxKeepAlive bound keep_alive (other than "0s"):
	// a NAT forgets an idle UDP mapping after 30 s to a few minutes
	// (RFC 4787 REQ-5 asks for at least two minutes, many keep it for
	// 30 s).
	MinKeepAlive = time.Second
	MaxKeepAlive = time.Hour
)

func (d *gwDecoder) ikeSection(f string, v *Value) {
	t, ok := d.table(f, v)
	if !ok {
		return
	}
	o := &d.g.IKE
	for _, e := range t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		switch e.Key {
		case "port":
			if i, ok := d.intIn(kf, v, "port", 1, 65535, "1..65535; default 500"); ok {
				o.Port = uint16(i)
			}
		case "retransmit_timeout":
			if t, ok := d.durationIn(kf, v, MinIKERetransmitTimeout, MaxIKERetransmitTimeout, "default 1s"); ok {
				o.RetransmitTimeout = t
			}
		case "retransmit_tries":
			if i, ok := d.intIn(kf, v, "", 1, 20, "1..20; default 5"); ok {
				o.RetransmitTries = int(i)
			}
		case "max_child_sas":
			if i, ok := d.intIn(kf, v, "", 1, MaxMaxChildSAs, fmt.Sprintf("1..%d; default %d", MaxMaxChildSAs, ike.DefaultMaxChildSAs)); ok {
				o.MaxChildSAs = int(i)
			}
		case "block_threshold":
			if i, ok := d.intIn(kf, v, "", 1, MaxBlockThreshold, fmt.Sprintf("1..%d half-open IKE SAs per peer address; default %d", MaxBlockThreshold, ike.DefaultBlockThreshold)); ok {
				o.BlockThreshold = int(i)
			}
		case "keep_alive":
			if t, ok := d.keepAlive(kf, v); ok {
				o.KeepAlive = t
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, ikeKeys, ""))
		}
	}
}

// keepAlive reads keep_alive: "0s" (off, returned as -1) or a duration
// from MinKeepAlive to MaxKeepAlive.
func (d *gwDecoder) keepAlive(f string, v *Value) (time.Duration, bool) {
	if i, ok := v.Int(); ok {
		d.errorf(v.Pos, f, "want a duration string such as \"20s\", got the integer %d (a number needs a unit: \"%ds\")", i, i)
		return 0, false
	}
	return parsed(&d.decoder, f, v, func(s string) (time.Duration, string) {
		t, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return 0, fmt.Sprintf("invalid duration %s (want \"0s\" for none, or %v..%v; default 20s)", shortQuote(s), MinKeepAlive, MaxKeepAlive)
		case t == 0:
			return -1, ""
		case t < MinKeepAlive || t > MaxKeepAlive:
			return 0, fmt.Sprintf("keep_alive %s out of range (want \"0s\" for none, or %v..%v; default 20s)", shortQuote(s), MinKeepAlive, MaxKeepAlive)
		}
		return t, ""
	})
}

// Connection is a [[connection]]: one IKE peer.
type Connection struct {
	Name string // unique among connections
	// Local is our outer address (local_addrs, one address); Remote the
	// peer's (remote_addrs), or the zero Addr for "%any" (the connection
	// then only responds).
	Local, Remote netip.Addr
	// Proposals are the IKE proposals in order of preference, as given
	// and as parsed.
	Proposals string
	IKE       []ike.Proposal
	DPDDelay  time.Duration // 0: no liveness checks
	Encap     bool          // force ESP in UDP even without a NAT
	RekeyTime time.Duration // of the IKE SA; default DefaultIKERekeyTime
	// OverTime is how long past RekeyTime the IKE SA may live while its
	// rekey has not completed (swanctl's over_time); 0 is 10% of
	// RekeyTime. The rekey comes up to OverTime before RekeyTime.
	OverTime time.Duration
	// LocalAuth and RemoteAuth are [connection.local] and
	// [connection.remote].
	LocalAuth, RemoteAuth AuthConfig
	Children              []Child
	Pos                   Pos
}

// AuthConfig is [connection.local] or [connection.remote].
type AuthConfig struct {
	Auth string // AuthPSK or AuthPubkey
	// ID is the identity as swanctl.conf writes it: an address,
	// "user@domain", "@fqdn" or a name. Locally it defaults to the local
	// address (or, with certificates, the first subjectAltName is the
	// gateway's to choose); remotely "" accepts any.
	ID string
	// Certs are PEM certificate files, resolved against the
	// configuration's directory: ours (the first is the end entity) in
	// [connection.local]; certificates the peer's must chain to in
	// [connection.remote], together with CACerts.
	Certs, CACerts []string
}

// Child is a [[connection.children]] table: one Child SA, which becomes
// the route-based tunnel named Name.
type Child struct {
	Name string // unique among children and [[tunnel]]s
	// LocalTS and RemoteTS are the traffic selectors; RemoteTS are the
	// routes into the tunnel.
	LocalTS, RemoteTS []netip.Prefix
	ESPProposals      string
	ESP               []ike.Proposal
	StartAction       string        // StartNone (default), StartTrap or StartStart
	RekeyTime         time.Duration // default DefaultChildRekeyTime
	LifeTime          time.Duration // default RekeyTime + 10%
	Pos               Pos
}

// Secret is a [[secret]].
type Secret struct {
	Type string // SecretIKE or SecretPrivate
	// IDs are the identities a pre-shared key is for (empty: any).
	IDs []string
	// Data is the pre-shared key: the string as given, or its bytes when
	// written 0x... (hex) or 0s... (base64), as swanctl.conf reads it.
	Data []byte
	// File is a private key file (PEM, PKCS#8, PKCS#1 or SEC 1),
	// resolved against the configuration's directory; it goes with the
	// [connection.local] certificate whose public key it is.
	File string
	Pos  Pos
}

// Connection returns the connection with the given name, or nil.
func (g *Gateway) Connection(name string) *Connection {
	for i := range g.Connections {
		if g.Connections[i].Name == name {
			return &g.Connections[i]
		}
	}
	return nil
}

// ChildRef finds the child named name: its connection and itself.
func (g *Gateway) ChildRef(name string) (*Connection, *Child) {
	for i := range g.Connections {
		c := &g.Connections[i]
		for j := range c.Children {
			if c.Children[j].Name == name {
				return c, &c.Children[j]
			}
		}
	}
	return nil, nil
}

// PSK returns the pre-shared key of the [[secret]] with type "ike" that
// fits the identities best: one that names both, then one that names the
// remote, then the local, then one with no ids. nil if none.
func (g *Gateway) PSK(local, remote string) []byte {
	best, score := []byte(nil), -1
	for i := range g.Secrets {
		s := &g.Secrets[i]
		if s.Type != SecretIKE {
			continue
		}
		sc := 0
		hasL, hasR := slices.Contains(s.IDs, local), remote != "" && slices.Contains(s.IDs, remote)
		switch {
		case len(s.IDs) == 0:
			sc = 0
		case hasL && hasR:
			sc = 3
		case hasR:
			sc = 2
		case hasL:
			sc = 1
		default:
			continue
		}
		if sc > score {
			best, score = s.Data, sc
		}
	}
	return best
}

// ConnectionField returns the field path of g.Connections[i] ("connection[2]"),
// for positions of errors found after parsing.
func ConnectionField(i int) string { return elemPath("connection", i) }

// ChildField returns the field path of child j of connection i.
func ChildField(i, j int) string { return elemPath(ConnectionField(i)+".children", j) }

// SecretField returns the field path of g.Secrets[i].
func SecretField(i int) string { return elemPath("secret", i) }

var (
	connectionKeys = []string{"name", "version", "local_addrs", "remote_addrs", "proposals", "dpd_delay", "encap", "rekey_time", "over_time", "local", "remote", "children"}
	authKeys       = []string{"auth", "id", "certs", "cacerts"}
	childKeys      = []string{"name", "local_ts", "remote_ts", "esp_proposals", "start_action", "rekey_time", "life_time"}
	secretKeys     = []string{"type", "ids", "secret", "file"}
	startActions   = []string{StartNone, StartTrap, StartStart}
	authMethods    = []string{AuthPSK, AuthPubkey}
	secretTypes    = []string{SecretIKE, SecretPrivate}
)

func (d *gwDecoder) connection(te tableElem) {
	f := te.field
	c := Connection{Pos: te.pos, RekeyTime: DefaultIKERekeyTime, Proposals: DefaultIKEProposals}
	seen := map[string]bool{}
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		seen[e.Key] = true
		switch e.Key {
		case "name":
			if s, ok := d.name(kf, v, "empty name (a connection needs a name, unique in the file)"); ok {
				c.Name = s
			}
		case "version":
			if _, ok := d.intIn(kf, v, "IKE version", 2, 2, "2: sluice speaks IKEv2 only"); !ok {
				break
			}
		case "local_addrs", "remote_addrs":
			a, ok := d.ikeAddrs(kf, v, e.Key == "remote_addrs")
			if !ok {
				break
			}
			if e.Key == "local_addrs" {
				c.Local = a
			} else {
				c.Remote = a
			}
		case "proposals":
			if s, ok := d.str(kf, v); ok {
				c.Proposals = s
			}
		case "dpd_delay":
			if t, ok := d.durationIn(kf, v, MinDPDDelay, MaxDPDDelay, "leave it out for no liveness checks"); ok {
				c.DPDDelay = t
			}
		case "encap":
			if b, ok := d.boolean(kf, v); ok {
				c.Encap = b
			}
		case "rekey_time":
			if t, ok := d.durationIn(kf, v, MinIKELifetime, MaxIKELifetime, "default 4h"); ok {
				c.RekeyTime = t
			}
		case "over_time":
			if t, ok := d.durationIn(kf, v, MinIKELifetime, MaxIKELifetime, "default 10% of rekey_time"); ok {
				c.OverTime = t
			}
		case "local", "remote":
			a, ok := d.authSection(kf, v, e.Key == "remote")
			if !ok {
				break
			}
			if e.Key == "local" {
				c.LocalAuth = a
			} else {
				c.RemoteAuth = a
			}
		case "children":
			tables, _ := d.arrayOfTables(kf, v)
			for _, ce := range tables {
				c.Children = append(c.Children, d.child(ce))
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, connectionKeys, ""))
		}
	}
	for _, k := range []struct{ key, what string }{
		{"name", "a name, unique in the file"},
		{"local_addrs", `our outer address, e.g. local_addrs = ["192.0.2.1"]`},
		{"local", `a [connection.local] table with auth = "psk" or "pubkey"`},
		{"remote", `a [connection.remote] table with auth = "psk" or "pubkey"`},
		{"children", "a [[connection.children]] table with name, local_ts and remote_ts"},
	} {
		if !seen[k.key] {
			d.errorf(te.pos, f+"."+k.key, "missing required key (%s)", k.what)
		}
	}
	pf := f + ".proposals"
	if ps, err := ike.ParseProposals(ike.ProtoIKE, c.Proposals); err != nil {
		d.errorf(d.at(pf), pf, "%s (want strongSwan IKE proposals such as %q)", strings.TrimPrefix(err.Error(), "ike: "), "aes256gcm16-prfsha384-ecp384")
	} else {
		c.IKE = ps
	}
	if c.Local.IsValid() && c.Remote.IsValid() {
		switch {
		case c.Local.Is4() != c.Remote.Is4():
			d.errorf(d.at(f+".remote_addrs"), f+".remote_addrs", "address family of %s (%s) differs from local_addrs %s (%s)", c.Remote, family(c.Remote), c.Local, family(c.Local))
		case c.Local == c.Remote:
			d.errorf(d.at(f+".remote_addrs"), f+".remote_addrs", "remote %s is the local address too (%s)", c.Remote, d.line(f+".local_addrs"))
		}
	}
	d.g.Connections = append(d.g.Connections, c)
	d.connFields = append(d.connFields, f)
}

// ikeAddrs reads local_addrs or remote_addrs: a list of one address (a
// string is taken too), or for remote_addrs "%any" or nothing for any.
func (d *gwDecoder) ikeAddrs(f string, v *Value, remote bool) (netip.Addr, bool) {
	var elems []*Value
	if _, ok := v.Str(); ok {
		elems = []*Value{v}
	} else {
		var ok bool
		if elems, ok = d.strList(f, v, `["192.0.2.1"]`); !ok {
			return netip.Addr{}, false
		}
	}
	if len(elems) == 0 {
		if remote {
			return netip.Addr{}, true
		}
		d.errorf(v.Pos, f, "no address (want our outer address, e.g. [\"192.0.2.1\"])")
		return netip.Addr{}, false
	}
	if len(elems) > 1 {
		d.errorf(elems[1].Pos, elemPath(f, 1), "one address only: sluice binds a connection to one address on each side")
		return netip.Addr{}, false
	}
	s, _ := elems[0].Str()
	if remote && (s == "%any" || s == "%any4" || s == "%any6") {
		return netip.Addr{}, true
	}
	a, msg := parseEndpoint(s)
	if msg != "" {
		if remote {
			msg += ` (or "%any" to accept any peer, as responder only)`
		}
		d.errorf(elems[0].Pos, f, "%s", msg)
		return netip.Addr{}, false
	}
	return a, true
}

func (d *gwDecoder) authSection(f string, v *Value, remote bool) (AuthConfig, bool) {
	var a AuthConfig
	t, ok := d.table(f, v)
	if !ok {
		return a, false
	}
	ok = true
	for _, e := range t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		switch e.Key {
		case "auth":
			s, good := d.oneOf(kf, v, "authentication", authMethods, "psk, a pre-shared key from a [[secret]] with type = \"ike\"; pubkey, certificates")
			a.Auth, ok = s, ok && good
		case "id":
			if s, good := d.checked(kf, v, checkID); good {
				a.ID = s
			}
		case "certs", "cacerts":
			if e.Key == "cacerts" && !remote {
				d.errorf(e.KeyPos, kf, "cacerts belongs in [connection.remote]: the CAs the peer's certificate must chain to")
				ok = false
				break
			}
			elems, good := d.strList(kf, v, `["gw.pem"]`)
			if !good {
				ok = false
				break
			}
			var paths []string
			for i, ev := range elems {
				s, _ := ev.Str()
				if s == "" {
					d.errorf(ev.Pos, elemPath(kf, i), "empty file name (want a PEM certificate file)")
					ok = false
					continue
				}
				paths = append(paths, d.path(s))
			}
			if e.Key == "certs" {
				a.Certs = paths
			} else {
				a.CACerts = paths
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, authKeys, ""))
		}
	}
	if a.Auth == "" && !d.failed(f+".auth") {
		d.errorf(d.at(f), f+".auth", `missing required key (auth = "psk" or "pubkey")`)
		return a, false
	}
	if ok && a.Auth == AuthPubkey {
		switch {
		case !remote && len(a.Certs) == 0:
			d.errorf(d.at(f), f+".certs", `auth = "pubkey" needs our certificate: certs = ["gw.pem"] (its key in a [[secret]] with type = "private")`)
			ok = false
		case remote && len(a.Certs)+len(a.CACerts) == 0:
			d.errorf(d.at(f), f+".cacerts", `auth = "pubkey" needs what the peer's certificate must chain to: cacerts = ["ca.pem"] (or certs, to trust the peer's own)`)
			ok = false
		}
	}
	return a, ok
}

func (d *gwDecoder) child(te tableElem) Child {
	f := te.field
	c := Child{Pos: te.pos, StartAction: StartNone, RekeyTime: DefaultChildRekeyTime, ESPProposals: DefaultESPProposals}
	seen := map[string]bool{}
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		seen[e.Key] = true
		switch e.Key {
		case "name":
			if s, ok := d.name(kf, v, "empty name (a child needs a name, unique among children and tunnels: it names its tunnel)"); ok {
				c.Name = s
			}
		case "local_ts", "remote_ts":
			ps, ok := d.prefixList(kf, v, `["10.1.0.0/24"]`, "selector", parseTS)
			if !ok {
				break
			}
			if len(ps) == 0 {
				d.errorf(v.Pos, kf, "no traffic selector (want prefixes, e.g. [\"10.1.0.0/24\"])")
				break
			}
			if e.Key == "local_ts" {
				c.LocalTS = ps
			} else {
				c.RemoteTS = ps
			}
		case "esp_proposals":
			if s, ok := d.str(kf, v); ok {
				c.ESPProposals = s
			}
		case "start_action":
			if s, ok := d.oneOf(kf, v, "start action", startActions, "none, to wait for the peer; trap, to initiate on the first packet into the child; start, to initiate at start-up"); ok {
				c.StartAction = s
			}
		case "rekey_time":
			if t, ok := d.durationIn(kf, v, MinIKELifetime, MaxIKELifetime, "default 1h"); ok {
				c.RekeyTime = t
			}
		case "life_time":
			if t, ok := d.durationIn(kf, v, MinIKELifetime, MaxIKELifetime, "default rekey_time + 10%"); ok {
				c.LifeTime = t
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, childKeys, ""))
		}
	}
	for _, k := range []struct{ key, what string }{
		{"name", "a name, unique among children and [[tunnel]]s"},
		{"local_ts", `our networks, e.g. local_ts = ["10.1.0.0/24"]`},
		{"remote_ts", `the peer's networks, routed into the child, e.g. remote_ts = ["10.2.0.0/24"]`},
	} {
		if !seen[k.key] {
			d.errorf(te.pos, f+"."+k.key, "missing required key (%s)", k.what)
		}
	}
	pf := f + ".esp_proposals"
	if ps, err := ike.ParseProposals(ike.ProtoESP, c.ESPProposals); err != nil {
		d.errorf(d.at(pf), pf, "%s (want strongSwan ESP proposals such as %q)", strings.TrimPrefix(err.Error(), "ike: "), "aes128gcm16-esn")
	} else {
		c.ESP = ps
	}
	if c.LifeTime == 0 {
		c.LifeTime = c.RekeyTime + c.RekeyTime/10
	} else if c.LifeTime <= c.RekeyTime && !d.failed(f+".rekey_time") {
		d.errorf(d.at(f+".life_time"), f+".life_time", "life_time %v is not after rekey_time %v (%s): the child would expire before it is rekeyed", c.LifeTime, c.RekeyTime, d.where(f+".rekey_time"))
	}
	return c
}

// checkID checks an identity as ike.ParseIdentity reads it: a
// distinguished name must be a good one.
func checkID(s string) string {
	if _, err := ike.ReadIdentity(s); err != nil {
		return strings.TrimPrefix(err.Error(), "ike: ") + ` (a distinguished name is written "C=CH, O=Example, CN=gw.example"; "fqdn:" before the id makes it a name)`
	}
	return ""
}

// durationIn reads a duration in lo..hi; help says more of what is
// valid (the default).
func (d *decoder) durationIn(f string, v *Value, lo, hi time.Duration, help string) (time.Duration, bool) {
	t, ok := d.duration(f, v)
	if !ok {
		return 0, false
	}
	if t < lo || t > hi {
		rel := "below " + lo.String()
		if t > hi {
			rel = "above " + hi.String()
		}
		d.errorf(v.Pos, f, "duration %v is %s (want %v..%v; %s)", t, rel, lo, hi, help)
		return 0, false
	}
	return t, true
}

// parseTS parses a traffic selector: a prefix without host bits, or an
// address.
func parseTS(s string) (netip.Prefix, string) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), ""
	}
	return parseRoute(s)
}

func (d *gwDecoder) secret(te tableElem) {
	f := te.field
	s := Secret{Pos: te.pos}
	var secretV, fileV *Value
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		switch e.Key {
		case "type":
			if t, ok := d.oneOf(kf, v, "secret type", secretTypes, `ike, a pre-shared key (ids, secret); private, a private key (file)`); ok {
				s.Type = t
			}
		case "ids":
			elems, ok := d.strList(kf, v, `["gw-a.example", "gw-b.example"]`)
			if !ok {
				break
			}
			for _, ev := range elems {
				x, _ := ev.Str()
				s.IDs = append(s.IDs, x)
			}
		case "secret":
			if x, ok := parsed(&d.decoder, kf, v, parseSecret); ok {
				s.Data = x
				secretV = v
			}
		case "file":
			if x, ok := d.checked(kf, v, nonEmpty("empty file name (want a PEM private key file)")); ok {
				s.File = d.path(x)
				fileV = v
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, secretKeys, ""))
		}
	}
	switch s.Type {
	case "":
		if !d.failed(f + ".type") {
			d.errorf(te.pos, f+".type", `missing required key (type = "ike" for a pre-shared key, "private" for a private key file)`)
		}
	case SecretIKE:
		if secretV == nil && !d.failed(f+".secret") {
			d.errorf(te.pos, f+".secret", "missing required key (the pre-shared key: a string, 0x followed by hex, or 0s followed by base64)")
		}
		if fileV != nil {
			d.errorf(fileV.Pos, f+".file", `file belongs to a secret with type = "private"`)
		}
	case SecretPrivate:
		if fileV == nil && !d.failed(f+".file") {
			d.errorf(te.pos, f+".file", "missing required key (the PEM private key file of a [connection.local] certificate)")
		}
		if secretV != nil {
			d.errorf(secretV.Pos, f+".secret", `secret belongs to a secret with type = "ike"`)
		}
	}
	d.g.Secrets = append(d.g.Secrets, s)
	d.secretFields = append(d.secretFields, f)
}

// parseSecret reads a pre-shared key as swanctl.conf does: 0x... is hex,
// 0s... base64, anything else the string's bytes.
func parseSecret(s string) ([]byte, string) {
	var b []byte
	var err error
	switch {
	case strings.HasPrefix(s, "0x"):
		b, err = hex.DecodeString(s[2:])
	case strings.HasPrefix(s, "0s"):
		b, err = base64.StdEncoding.DecodeString(s[2:])
	default:
		b = []byte(s)
	}
	switch {
	case err != nil && strings.HasPrefix(s, "0x"):
		// The decoder's error quotes the bad character: a secret's text
		// is never shown.
		return nil, "invalid hex secret (want 0x followed by an even number of hex digits; its characters are not shown)"
	case err != nil:
		return nil, "invalid base64 secret (want 0s followed by standard base64 with padding; its characters are not shown)"
	case len(b) == 0:
		return nil, "empty secret (want the pre-shared key: a string, 0x followed by hex, or 0s followed by base64)"
	case len(b) < 16:
		return nil, fmt.Sprintf("secret of %d bytes is too short to be safe (want at least 16; strongSwan's pki --gen or openssl rand -base64 32 make one)", len(b))
	}
	return b, ""
}

// crossCheckIKE checks what the IKE sections say about each other and
// about the rest: unique names (children share the tunnels' name space),
// pre-shared keys and private keys for what the connections need, local
// addresses on the sockets, and the children's routes against other
// routes.
func (d *gwDecoder) crossCheckIKE() {
	g := d.g
	d.uniqueNames("connection", d.connFields, func(i int) string { return g.Connections[i].Name })
	// Children and tunnels share one name space: a child is a tunnel.
	type named struct{ field, name string }
	var all []named
	for i := range g.Tunnels {
		all = append(all, named{d.tunnelFields[i], g.Tunnels[i].Name})
	}
	for i := range g.Connections {
		for j := range g.Connections[i].Children {
			all = append(all, named{elemPath(d.connFields[i]+".children", j), g.Connections[i].Children[j].Name})
		}
	}
	seen := map[string]int{}
	for i, n := range all {
		f := n.field + ".name"
		if n.name == "" || d.failed(f) {
			continue
		}
		if j, dup := seen[n.name]; dup {
			if i >= len(g.Tunnels) { // tunnel duplicates are uniqueTunnelNames'
				d.errorf(d.at(f), f, "duplicate name %s: %s (line %d) and %s (line %d); a child names its tunnel, so names are unique among children and [[tunnel]]s",
					shortQuote(n.name), all[j].field, d.at(all[j].field+".name").Line, n.field, d.at(f).Line)
			}
			continue
		}
		seen[n.name] = i
	}
	for i := range g.Connections {
		c, cf := &g.Connections[i], d.connFields[i]
		for _, side := range []struct {
			key string
			a   *AuthConfig
		}{{"local", &c.LocalAuth}, {"remote", &c.RemoteAuth}} {
			if side.a.Auth != AuthPSK || d.failed(cf+"."+side.key) {
				continue
			}
			if g.PSK(c.LocalID(), side.a.ID) == nil && g.PSK(c.LocalID(), c.RemoteAuth.ID) == nil {
				d.errorf(d.at(cf+"."+side.key+".auth"), cf+"."+side.key+".auth", "auth = \"psk\", but no [[secret]] with type = \"ike\" has ids %s (or no ids)",
					idList(c.LocalID(), c.RemoteAuth.ID))
			}
		}
		if max := maxChildSAs(g); len(c.Children) > max && !d.failed(cf+".children") {
			d.errorf(d.at(cf+".children"), cf+".children", "%d children, but one IKE SA carries at most %d Child SAs (ike.max_child_sas: %s)",
				len(c.Children), max, d.where("ike.max_child_sas"))
		}
		if c.LocalAuth.Auth == AuthPubkey && !d.failed(cf+".local") && !slices.ContainsFunc(g.Secrets, func(s Secret) bool { return s.Type == SecretPrivate }) {
			d.errorf(d.at(cf+".local.auth"), cf+".local.auth", `auth = "pubkey", but no [[secret]] with type = "private" holds a key (add one with file = "gw.key")`)
		}
	}
}

// maxChildSAs is [ike] max_child_sas, or its default.
func maxChildSAs(g *Gateway) int {
	if g.IKE.MaxChildSAs > 0 {
		return g.IKE.MaxChildSAs
	}
	return ike.DefaultMaxChildSAs
}

func idList(local, remote string) string {
	if remote == "" {
		return shortQuote(local)
	}
	return shortQuote(local) + " or " + shortQuote(remote)
}

// LocalID is the identity we send: [connection.local] id, else the local
// address.
func (c *Connection) LocalID() string {
	if c.LocalAuth.ID != "" {
		return c.LocalAuth.ID
	}
	if c.Local.IsValid() {
		return c.Local.String()
	}
	return ""
}

// HasField reports whether the file gives field ("ike.port"), rather
// than leaving it to its default.
func (g *Gateway) HasField(field string) bool {
	_, ok := g.fields[field]
	return ok
}

// IKEOnly reports whether the gateway's tunnels all come from connections
// (no [[tunnel]]).
func (g *Gateway) IKEOnly() bool { return len(g.Tunnels) == 0 && len(g.Connections) > 0 }
