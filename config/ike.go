package config

// ike.go reads the IKEv2 sections of the gateway configuration, named as
// strongSwan's swanctl.conf names them so that its users read them at
// sight:
//
//	[[connection]]            an IKE peer: addresses, IKE proposals, DPD,
//	                          encapsulation, the IKE SA's rekey and
//	                          reauthentication times, MOBIKE, virtual IPs
//	                          (pools as responder, vips as initiator)
//	  [connection.local]      how we authenticate: auth = psk|pubkey, id,
//	                          certs
//	  [connection.remote]     how the peer must: auth (also EAP: sluice is
//	                          an EAP server), id, eap_id, certs, cacerts,
//	                          crls, revocation
//	  [[connection.children]] a Child SA: traffic selectors, ESP proposals,
//	                          start action, rekey and life times, in time,
//	                          bytes and packets
//	[[pool]]                  virtual IPs to hand out (RFC 7296 section
//	                          3.15): a prefix or a range, and DNS servers
//	[[secret]]                type = "ike": a pre-shared key for ids;
//	                          type = "private": a private key file;
//	                          type = "eap": an EAP password for id
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
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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
// The EAP methods (AuthEAP*) are the remote side's only: sluice is an EAP
// server (RFC 7296 section 2.16) and authenticates itself with psk or
// pubkey.
const (
	AuthPSK    = "psk"
	AuthPubkey = "pubkey"
	// AuthEAP is any EAP method the gateway offers: EAP-TLS when
	// [connection.remote] has cacerts or certs, EAP-MSCHAPv2 when a
	// [[secret]] with type = "eap" exists.
	AuthEAP         = "eap"
	AuthEAPMSCHAPv2 = "eap-mschapv2"
	AuthEAPTLS      = "eap-tls"
)

// IsEAP reports whether auth is one of the EAP methods.
func IsEAP(auth string) bool {
	return auth == AuthEAP || auth == AuthEAPMSCHAPv2 || auth == AuthEAPTLS
}

// Revocation policies of [connection.remote] (swanctl.conf's revocation).
const (
	// RevocationRelaxed fails a certificate only when a CRL lists it as
	// revoked (the default).
	RevocationRelaxed = "relaxed"
	// RevocationStrict also fails one whose status is unknown: no CRL of
	// its issuer is configured.
	RevocationStrict = "strict"
)

// EAPIdentityAny is the eap_id that asks the peer for its EAP identity
// (EAP-Identity, RFC 3748 section 5.1); "" does the same.
const EAPIdentityAny = "%any"

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
	SecretEAP     = "eap" // an EAP-MSCHAPv2 password for an identity
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
	// Pools name the [[pool]]s this connection hands virtual IPs out of
	// as responder (swanctl's pools), in order; each names a pool of
	// Gateway.Pools.
	Pools []string
	// VIPs are the virtual IPs asked for as initiator (swanctl's vips):
	// 0.0.0.0 or :: asks for any address of that family, another address
	// for that one.
	VIPs []netip.Addr
	// MOBIKE allows RFC 4555 (swanctl's mobike); true unless the file
	// says mobike = false.
	MOBIKE bool
	// ReauthTime is when the IKE SA is reauthenticated (swanctl's
	// reauth_time): a new IKE SA with a full IKE_AUTH replaces it. 0, the
	// default, never.
	ReauthTime time.Duration
	Pos        Pos
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
	// EAPID is the EAP identity asked of the peer (swanctl's eap_id):
	// "" or EAPIdentityAny asks with EAP-Identity; another identity is
	// the one the peer must authenticate as. Remote side, EAP only.
	EAPID string
	// CRLs are certificate revocation list files (PEM or DER), resolved
	// against the configuration's directory, that the peer's certificate
	// is checked against. Remote side only; the gateway reads them.
	CRLs []string
	// Revocation is RevocationRelaxed (the default on the remote side)
	// or RevocationStrict; "" on the local side.
	Revocation string
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
	// RekeyBytes and RekeyPackets rekey the Child SA once either
	// direction has carried that many bytes or packets; LifeBytes and
	// LifePackets delete it then. 0 is no limit. A life left out is its
	// rekey + 10% when the rekey is set (swanctl's defaults).
	RekeyBytes, LifeBytes     uint64
	RekeyPackets, LifePackets uint64
	Pos                       Pos
}

// Pool is a [[pool]]: virtual IPs that connections naming it hand out to
// their peers in configuration payloads (RFC 7296 section 3.15).
type Pool struct {
	Name string // unique among pools
	// Prefix is addrs when written as a prefix ("10.3.0.0/24"), the zero
	// Prefix when written as a range.
	Prefix netip.Prefix
	// First and Last are the addresses handed out, both included: a
	// range as written ("10.3.0.10-10.3.0.200"), or a prefix less its
	// first and last addresses when it holds more than two, as
	// strongSwan hands them out.
	First, Last netip.Addr
	// DNS are the DNS servers sent with an address (INTERNAL_IP4_DNS,
	// INTERNAL_IP6_DNS).
	DNS []netip.Addr
}

// Contains reports whether a is one of the pool's addresses.
func (p *Pool) Contains(a netip.Addr) bool {
	return a.BitLen() == p.First.BitLen() && p.First.Compare(a) <= 0 && a.Compare(p.Last) <= 0
}

// Secret is a [[secret]].
type Secret struct {
	Type string // SecretIKE, SecretPrivate or SecretEAP
	// IDs are the identities a pre-shared key is for (empty: any), or
	// the EAP identities a password is for (id or ids; at least one).
	IDs []string
	// Data is the pre-shared key or EAP password: the string as given,
	// or its bytes when written 0x... (hex) or 0s... (base64), as
	// swanctl.conf reads it.
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

// EAPSecret returns the password of the [[secret]] with type "eap" that
// names id, or nil.
func (g *Gateway) EAPSecret(id string) []byte {
	for i := range g.Secrets {
		if s := &g.Secrets[i]; s.Type == SecretEAP && slices.Contains(s.IDs, id) {
			return s.Data
		}
	}
	return nil
}

// Pool returns the pool with the given name, or nil.
func (g *Gateway) Pool(name string) *Pool {
	for i := range g.Pools {
		if g.Pools[i].Name == name {
			return &g.Pools[i]
		}
	}
	return nil
}

// PoolField returns the field path of g.Pools[i].
func PoolField(i int) string { return elemPath("pool", i) }

// ConnectionField returns the field path of g.Connections[i] ("connection[2]"),
// for positions of errors found after parsing.
func ConnectionField(i int) string { return elemPath("connection", i) }

// ChildField returns the field path of child j of connection i.
func ChildField(i, j int) string { return elemPath(ConnectionField(i)+".children", j) }

// SecretField returns the field path of g.Secrets[i].
func SecretField(i int) string { return elemPath("secret", i) }

var (
	connectionKeys = []string{"name", "version", "local_addrs", "remote_addrs", "proposals", "dpd_delay", "encap", "rekey_time", "over_time", "reauth_time", "mobike", "pools", "vips", "local", "remote", "children"}
	authKeys       = []string{"auth", "id", "eap_id", "certs", "cacerts", "crls", "revocation"}
	childKeys      = []string{"name", "local_ts", "remote_ts", "esp_proposals", "start_action", "rekey_time", "life_time", "rekey_bytes", "life_bytes", "rekey_packets", "life_packets"}
	secretKeys     = []string{"type", "id", "ids", "secret", "file"}
	poolKeys       = []string{"name", "addrs", "dns"}
	startActions   = []string{StartNone, StartTrap, StartStart}
	authMethods    = []string{AuthPSK, AuthPubkey}
	remoteMethods  = []string{AuthPSK, AuthPubkey, AuthEAPMSCHAPv2, AuthEAPTLS, AuthEAP}
	revocations    = []string{RevocationRelaxed, RevocationStrict}
	secretTypes    = []string{SecretIKE, SecretPrivate, SecretEAP}
)

func (d *gwDecoder) connection(te tableElem) {
	f := te.field
	c := Connection{Pos: te.pos, RekeyTime: DefaultIKERekeyTime, Proposals: DefaultIKEProposals, MOBIKE: true}
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
		case "reauth_time":
			if t, ok := d.durationOrNone(kf, v, MinIKELifetime, MaxIKELifetime, "default \"0s\": none"); ok {
				c.ReauthTime = t
			}
		case "mobike":
			if b, ok := d.boolean(kf, v); ok {
				c.MOBIKE = b
			}
		case "pools":
			elems, ok := d.strList(kf, v, `["rw"]`)
			if !ok {
				break
			}
			for i, ev := range elems {
				s, _ := ev.Str()
				if j := slices.Index(c.Pools, s); j >= 0 {
					d.errorf(ev.Pos, elemPath(kf, i), "duplicate pool %s (also %s)", shortQuote(s), elemPath(kf, j))
					continue
				}
				c.Pools = append(c.Pools, s)
			}
		case "vips":
			ps, ok := d.prefixList(kf, v, `["0.0.0.0"]`, "virtual IP", parseVIP)
			if !ok {
				break
			}
			for _, p := range ps {
				c.VIPs = append(c.VIPs, p.Addr())
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

// remoteOnly says why a key of [connection.remote] is not one of
// [connection.local].
var remoteOnly = map[string]string{
	"cacerts":    "the CAs the peer's certificate must chain to",
	"crls":       "the revocation lists the peer's certificate is checked against",
	"revocation": "how the peer's certificate's revocation is checked",
	"eap_id":     "the EAP identity asked of the peer (sluice is an EAP server)",
}

func (d *gwDecoder) authSection(f string, v *Value, remote bool) (AuthConfig, bool) {
	var a AuthConfig
	if remote {
		a.Revocation = RevocationRelaxed
	}
	t, ok := d.table(f, v)
	if !ok {
		return a, false
	}
	ok = true
	for _, e := range t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		if why, only := remoteOnly[e.Key]; only && !remote {
			d.errorf(e.KeyPos, kf, "%s belongs in [connection.remote]: %s", e.Key, why)
			ok = false
			continue
		}
		switch e.Key {
		case "auth":
			if s, isStr := v.Str(); isStr && !remote && IsEAP(s) {
				d.errorf(v.Pos, kf, "auth = %q belongs in [connection.remote]: sluice is an EAP server and authenticates itself with psk or pubkey", s)
				ok = false
				break
			}
			valid, help := authMethods, "psk, a pre-shared key from a [[secret]] with type = \"ike\"; pubkey, certificates"
			if remote {
				valid, help = remoteMethods, help+"; eap-mschapv2, a password from a [[secret]] with type = \"eap\"; eap-tls, a client certificate; eap, either"
			}
			s, good := d.oneOf(kf, v, "authentication", valid, help)
			a.Auth, ok = s, ok && good
		case "id":
			if s, good := d.checked(kf, v, checkID); good {
				a.ID = s
			}
		case "eap_id":
			if s, good := d.checked(kf, v, checkEAPID); good {
				a.EAPID = s
			}
		case "revocation":
			s, good := d.oneOf(kf, v, "revocation policy", revocations, "relaxed, fail a revoked certificate only (the default); strict, also fail one no CRL of its issuer speaks for")
			if good {
				a.Revocation = s
			}
			ok = ok && good
		case "certs", "cacerts", "crls":
			paths, good := d.files(kf, v, e.Key == "crls")
			if !good {
				ok = false
				break
			}
			switch e.Key {
			case "certs":
				a.Certs = paths
			case "cacerts":
				a.CACerts = paths
			default:
				a.CRLs = paths
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, authKeys, ""))
		}
	}
	if a.Auth == "" && !d.failed(f+".auth") {
		d.errorf(d.at(f), f+".auth", `missing required key (auth = "psk" or "pubkey")`)
		return a, false
	}
	if ok && (a.Auth == AuthPubkey || a.Auth == AuthEAPTLS) {
		switch {
		case !remote && len(a.Certs) == 0:
			d.errorf(d.at(f), f+".certs", `auth = "pubkey" needs our certificate: certs = ["gw.pem"] (its key in a [[secret]] with type = "private")`)
			ok = false
		case remote && len(a.Certs)+len(a.CACerts) == 0:
			d.errorf(d.at(f), f+".cacerts", `auth = %q needs what the peer's certificate must chain to: cacerts = ["ca.pem"] (or certs, to trust the peer's own)`, a.Auth)
			ok = false
		}
	}
	if !ok || !remote {
		return a, ok
	}
	// What only some methods use.
	certs := a.Auth == AuthPubkey || a.Auth == AuthEAPTLS || a.Auth == AuthEAP
	switch {
	case a.EAPID != "" && !IsEAP(a.Auth):
		d.errorf(d.at(f+".eap_id"), f+".eap_id", "eap_id with auth = %q: only EAP asks for an EAP identity (auth = \"eap-mschapv2\", \"eap-tls\" or \"eap\")", a.Auth)
		ok = false
	case len(a.CRLs) > 0 && !certs:
		d.errorf(d.at(f+".crls"), f+".crls", "crls with auth = %q: the peer shows no certificate to check (auth = \"pubkey\", \"eap-tls\" or \"eap\" do)", a.Auth)
		ok = false
	case a.Revocation == RevocationStrict && !certs:
		d.errorf(d.at(f+".revocation"), f+".revocation", "revocation with auth = %q: the peer shows no certificate to check (auth = \"pubkey\", \"eap-tls\" or \"eap\" do)", a.Auth)
		ok = false
	case a.Revocation == RevocationStrict && len(a.CRLs) == 0:
		d.errorf(d.at(f+".revocation"), f+".revocation", `revocation = "strict" without crls: no certificate's status would be known, and every one would fail (add crls = ["ca.crl"], or use "relaxed")`)
		ok = false
	}
	return a, ok
}

// files reads a list of file names (certs, cacerts, crls), resolved
// against the configuration's directory; the gateway reads them.
func (d *gwDecoder) files(f string, v *Value, crl bool) ([]string, bool) {
	example, what := `["gw.pem"]`, "a PEM certificate file"
	if crl {
		example, what = `["ca.crl"]`, "a CRL file, PEM or DER"
	}
	elems, ok := d.strList(f, v, example)
	if !ok {
		return nil, false
	}
	var paths []string
	for i, ev := range elems {
		s, _ := ev.Str()
		if s == "" {
			d.errorf(ev.Pos, elemPath(f, i), "empty file name (want %s)", what)
			ok = false
			continue
		}
		paths = append(paths, d.path(s))
	}
	return paths, ok
}

// checkEAPID checks an eap_id: "%any" or an identity.
func checkEAPID(s string) string {
	if s == EAPIdentityAny {
		return ""
	}
	if s == "" {
		return `empty EAP identity (want "%any" to ask the peer for it, or the identity it must use)`
	}
	return checkID(s)
}

// parseVIP parses an element of vips: an address, 0.0.0.0 or :: for any
// of that family. It is returned as a single-address prefix for
// prefixList.
func parseVIP(s string) (netip.Prefix, string) {
	a, msg := parseAddr(s)
	if msg != "" {
		return netip.Prefix{}, msg + ` (0.0.0.0 or :: asks for any virtual IP of that family)`
	}
	if a.IsMulticast() || a.IsLoopback() {
		return netip.Prefix{}, fmt.Sprintf("%s cannot be a virtual IP (want a unicast address, or 0.0.0.0 or :: for any)", a)
	}
	return netip.PrefixFrom(a, a.BitLen()), ""
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
		case "rekey_bytes", "life_bytes", "rekey_packets", "life_packets":
			help := "0 for none, or a count of " + e.Key[strings.IndexByte(e.Key, '_')+1:]
			if strings.HasPrefix(e.Key, "life") {
				help += "; default rekey" + e.Key[4:] + " + 10%"
			}
			if i, ok := d.intIn(kf, v, "", 0, math.MaxInt64, help); ok {
				*c.volume(e.Key) = uint64(i)
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
	for _, unit := range []string{"bytes", "packets"} {
		rk, lk := "rekey_"+unit, "life_"+unit
		rekey, life := *c.volume(rk), c.volume(lk)
		switch {
		case rekey == 0 || d.failed(f+"."+rk) || d.failed(f+"."+lk):
		case !seen[lk]:
			*life = rekey + rekey/10
		case *life != 0 && *life <= rekey:
			d.errorf(d.at(f+"."+lk), f+"."+lk, "%s %d is not above %s %d (%s): the child would expire before it is rekeyed", lk, *life, rk, rekey, d.line(f+"."+rk))
		}
	}
	return c
}

// volume returns the field of a byte or packet limit by its key.
func (c *Child) volume(key string) *uint64 {
	switch key {
	case "rekey_bytes":
		return &c.RekeyBytes
	case "life_bytes":
		return &c.LifeBytes
	case "rekey_packets":
		return &c.RekeyPackets
	}
	return &c.LifePackets
}

// durationOrNone is durationIn that also takes "0s" for none (0).
func (d *decoder) durationOrNone(f string, v *Value, lo, hi time.Duration, help string) (time.Duration, bool) {
	if s, ok := v.Str(); ok {
		if t, err := time.ParseDuration(s); err == nil && t == 0 {
			return 0, true
		}
	}
	return d.durationIn(f, v, lo, hi, help)
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
	var secretV, fileV, idV, idsV *Value
	for _, e := range te.t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		switch e.Key {
		case "type":
			if t, ok := d.oneOf(kf, v, "secret type", secretTypes, `ike, a pre-shared key (ids, secret); private, a private key (file); eap, an EAP password (id, secret)`); ok {
				s.Type = t
			}
		case "id":
			if x, ok := d.checked(kf, v, nonEmpty("empty identity (want the identity the secret is for, e.g. \"carol\")")); ok {
				s.IDs = append(s.IDs, x)
				idV = v
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
			idsV = v
		case "secret":
			// Which check applies depends on the type, which may come
			// after: keep the value and read it below.
			secretV = v
		case "file":
			if x, ok := d.checked(kf, v, nonEmpty("empty file name (want a PEM private key file)")); ok {
				s.File = d.path(x)
				fileV = v
			}
		default:
			d.errs = append(d.errs, unknownKey(e, kf, secretKeys, ""))
		}
	}
	if secretV != nil {
		parse := parseSecret
		if s.Type == SecretEAP {
			parse = parsePassword
		}
		if x, ok := parsed(&d.decoder, f+".secret", secretV, parse); ok {
			s.Data = x
		} else {
			secretV = nil
		}
	}
	if idV != nil && idsV != nil {
		d.errorf(idV.Pos, f+".id", "id and ids both given (%s): write one", d.line(f+".ids"))
	}
	switch s.Type {
	case "":
		if !d.failed(f + ".type") {
			d.errorf(te.pos, f+".type", `missing required key (type = "ike" for a pre-shared key, "private" for a private key file, "eap" for an EAP password)`)
		}
	case SecretEAP:
		if secretV == nil && !d.failed(f+".secret") {
			d.errorf(te.pos, f+".secret", "missing required key (the EAP password: a string, 0x followed by hex, or 0s followed by base64)")
		}
		if len(s.IDs) == 0 && !d.failed(f+".id") && !d.failed(f+".ids") {
			d.errorf(te.pos, f+".id", `missing required key (the EAP identity the password is for, e.g. id = "carol"; an EAP password is never for anyone)`)
		}
		if fileV != nil {
			d.errorf(fileV.Pos, f+".file", `file belongs to a secret with type = "private"`)
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
			d.errorf(secretV.Pos, f+".secret", `secret belongs to a secret with type = "ike" or "eap"`)
		}
	}
	d.g.Secrets = append(d.g.Secrets, s)
	d.secretFields = append(d.secretFields, f)
}

// parseSecret reads a pre-shared key as swanctl.conf does: 0x... is hex,
// 0s... base64, anything else the string's bytes.
func parseSecret(s string) ([]byte, string) {
	b, msg := decodeSecret(s)
	switch {
	case msg != "":
		return nil, msg
	case len(b) == 0:
		return nil, "empty secret (want the pre-shared key: a string, 0x followed by hex, or 0s followed by base64)"
	case len(b) < 16:
		return nil, fmt.Sprintf("secret of %d bytes is too short to be safe (want at least 16; strongSwan's pki --gen or openssl rand -base64 32 make one)", len(b))
	}
	return b, ""
}

// MaxEAPPassword is the longest EAP password in characters: MS-CHAPv2
// takes up to 256 (RFC 2759 section 8.2).
const MaxEAPPassword = 256

// parsePassword reads an EAP password as parseSecret reads a pre-shared
// key, without its minimum length: a user's password is what it is.
func parsePassword(s string) ([]byte, string) {
	b, msg := decodeSecret(s)
	switch {
	case msg != "":
		return nil, msg
	case len(b) == 0:
		return nil, "empty password (want the EAP password: a string, 0x followed by hex, or 0s followed by base64)"
	case utf8.RuneCount(b) > MaxEAPPassword:
		return nil, fmt.Sprintf("password of %d characters is too long (want at most %d, MS-CHAPv2's limit)", utf8.RuneCount(b), MaxEAPPassword)
	}
	return b, ""
}

// decodeSecret decodes a secret as swanctl.conf writes it: 0x... is hex,
// 0s... base64, anything else the string's bytes.
func decodeSecret(s string) ([]byte, string) {
	switch {
	case strings.HasPrefix(s, "0x"):
		b, err := hex.DecodeString(s[2:])
		if err != nil {
			// The decoder's error quotes the bad character: a secret's
			// text is never shown.
			return nil, "invalid hex secret (want 0x followed by an even number of hex digits; its characters are not shown)"
		}
		return b, ""
	case strings.HasPrefix(s, "0s"):
		b, err := base64.StdEncoding.DecodeString(s[2:])
		if err != nil {
			return nil, "invalid base64 secret (want 0s followed by standard base64 with padding; its characters are not shown)"
		}
		return b, ""
	}
	return []byte(s), ""
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
	d.crossCheckPools()
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
