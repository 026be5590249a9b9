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
	"net/netip"
	"reflect"
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
	// or child proposes when it names none. They hold nothing RFC 8247
	// discourages, and they accept the IKEv2 clients built into iOS and
	// macOS (aes256-sha256-modp2048, ESP aes256-sha256), Android 11 and
	// later (aes256gcm16-prfsha384-x25519, ESP aes256gcm16), Windows set
	// to aes256-sha256-modp2048 with ESP aes256gcm16 (its defaults,
	// modp1024 and ESP HMAC-SHA-1, are refused: see
	// docs/road-warriors.md), and strongSwan's.
	DefaultIKEProposals = "aes256gcm16-prfsha384-ecp384-x25519,aes256-aes128-sha256-modp2048-ecp256-x25519"
	DefaultESPProposals = "aes256gcm16,aes128gcm16,aes256-sha256,aes128-sha256"
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
	// KeepAlive is keep_alive: how long a NAT's mappings are assumed to
	// live; an IKE SA behind a NAT sends a NAT-keepalive when it sent
	// nothing else for a tenth less (RFC 3948 section 2.3). 0
	// is package ike's default (20s, strongSwan's); "0s" in the file
	// turns them off and is stored as a negative value.
	KeepAlive time.Duration
}

// DefaultIKEPort is the port of IKE_SA_INIT (RFC 7296 section 2).
const DefaultIKEPort = 500

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

// ikeRules are the keys of [ike].
var ikeRules = newSection(reflect.TypeFor[FileIKE](),
	field("port", intIn[uint16]("port", 1, 65535, "1..65535; default 500"), DefaultIKEPort, func(o *IKEOptions) *uint16 { return &o.Port }),
	field("retransmit_timeout", durationIn(MinIKERetransmitTimeout, MaxIKERetransmitTimeout, "default 1s"), 0, func(o *IKEOptions) *time.Duration { return &o.RetransmitTimeout }),
	field("retransmit_tries", intIn[int]("", 1, 20, "1..20; default 5"), 0, func(o *IKEOptions) *int { return &o.RetransmitTries }),
	field("max_child_sas", intIn[int]("", 1, MaxMaxChildSAs, fmt.Sprintf("1..%d; default %d", MaxMaxChildSAs, ike.DefaultMaxChildSAs)), 0, func(o *IKEOptions) *int { return &o.MaxChildSAs }),
	field("block_threshold", intIn[int]("", 1, MaxBlockThreshold, fmt.Sprintf("1..%d half-open IKE SAs per peer address; default %d", MaxBlockThreshold, ike.DefaultBlockThreshold)), 0, func(o *IKEOptions) *int { return &o.BlockThreshold }),
	field("keep_alive", codec[time.Duration]{read: (*gwDecoder).keepAlive, write: writeKeepAlive}, 0, func(o *IKEOptions) *time.Duration { return &o.KeepAlive }),
)

func (d *gwDecoder) ikeSection(f string, v *Value) {
	if t, ok := d.table(f, v); ok {
		ikeRules.decode(d, f, v.Pos, t, &d.g.IKE)
	}
}

// writeKeepAlive writes keep_alive: "0s" for off.
func writeKeepAlive(t time.Duration) any {
	if t < 0 {
		return "0s"
	}
	return t.String()
}

// keepAlive reads keep_alive: "0s" (off, returned as -1) or a duration
// from MinKeepAlive to MaxKeepAlive.
func (d *gwDecoder) keepAlive(f string, e *Entry) (time.Duration, bool) {
	v := e.Value
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
	startActions  = []string{StartNone, StartTrap, StartStart}
	authMethods   = []string{AuthPSK, AuthPubkey}
	remoteMethods = []string{AuthPSK, AuthPubkey, AuthEAPMSCHAPv2, AuthEAPTLS, AuthEAP}
	revocations   = []string{RevocationRelaxed, RevocationStrict}
	secretTypes   = []string{SecretIKE, SecretPrivate, SecretEAP}
)

// connectionRules are the keys of a [[connection]].
var connectionRules = newSection(reflect.TypeFor[FileConnection](),
	field("name", nameOf("empty name (a connection needs a name, unique in the file)"), "", func(c *Connection) *string { return &c.Name }).required("a name, unique in the file"),
	checkOnly[Connection]("version", intIn[int]("IKE version", 2, 2, "2: sluice speaks IKEv2 only")),
	field("local_addrs", ikeAddr(false), netip.Addr{}, func(c *Connection) *netip.Addr { return &c.Local }).required(`our outer address, e.g. local_addrs = ["192.0.2.1"]`),
	field("remote_addrs", ikeAddr(true), netip.Addr{}, func(c *Connection) *netip.Addr { return &c.Remote }),
	field("proposals", text(), DefaultIKEProposals, func(c *Connection) *string { return &c.Proposals }),
	field("dpd_delay", durationIn(MinDPDDelay, MaxDPDDelay, "leave it out for no liveness checks"), 0, func(c *Connection) *time.Duration { return &c.DPDDelay }),
	field("encap", flag(), false, func(c *Connection) *bool { return &c.Encap }),
	field("rekey_time", durationIn(MinIKELifetime, MaxIKELifetime, "default 4h"), DefaultIKERekeyTime, func(c *Connection) *time.Duration { return &c.RekeyTime }),
	field("over_time", durationIn(MinIKELifetime, MaxIKELifetime, "default 10% of rekey_time"), 0, func(c *Connection) *time.Duration { return &c.OverTime }),
	field("reauth_time", durationOrNone(MinIKELifetime, MaxIKELifetime, `default "0s": none`), 0, func(c *Connection) *time.Duration { return &c.ReauthTime }),
	field("mobike", flag(), true, func(c *Connection) *bool { return &c.MOBIKE }),
	field("pools", poolNames(), nil, func(c *Connection) *[]string { return &c.Pools }),
	field("vips", addrList(`["0.0.0.0"]`, "virtual IP", parseVIP), nil, func(c *Connection) *[]netip.Addr { return &c.VIPs }),
	field("local", authTable(false), AuthConfig{}, func(c *Connection) *AuthConfig { return &c.LocalAuth }).required(`a [connection.local] table with auth = "psk" or "pubkey"`),
	field("remote", authTable(true), AuthConfig{}, func(c *Connection) *AuthConfig { return &c.RemoteAuth }).required(`a [connection.remote] table with auth = "psk" or "pubkey"`),
	field("children", tableList(childRules, (*gwDecoder).childAfter), nil, func(c *Connection) *[]Child { return &c.Children }).required("a [[connection.children]] table with name, local_ts and remote_ts"),
)

// authSide is [connection.local] or [connection.remote] being read or
// written: which one it is decides what it may hold.
type authSide struct {
	AuthConfig
	remote bool
}

// authRules are the keys of [connection.local] and [connection.remote].
var authRules = newSection(reflect.TypeFor[FileAuth](),
	rule[authSide]{key: "auth", read: (*gwDecoder).authMethod, write: func(a *authSide) (any, bool) { return a.Auth, a.Auth != "" }},
	field("id", checkedText(checkID), "", func(a *authSide) *string { return &a.ID }),
	remoteOnly("the EAP identity asked of the peer (sluice is an EAP server)", field("eap_id", checkedText(checkEAPID), "", func(a *authSide) *string { return &a.EAPID })),
	field("certs", fileList(false), nil, func(a *authSide) *[]string { return &a.Certs }),
	remoteOnly("the CAs the peer's certificate must chain to", field("cacerts", fileList(false), nil, func(a *authSide) *[]string { return &a.CACerts })),
	remoteOnly("the revocation lists the peer's certificate is checked against", field("crls", fileList(true), nil, func(a *authSide) *[]string { return &a.CRLs })),
	remoteOnly("how the peer's certificate's revocation is checked", field("revocation", choice("revocation policy", revocations, "relaxed, fail a revoked certificate only (the default); strict, also fail one no CRL of its issuer speaks for"), "", func(a *authSide) *string { return &a.Revocation })),
)

// childRules are the keys of a [[connection.children]].
var childRules = newSection(reflect.TypeFor[FileChild](),
	field("name", nameOf("empty name (a child needs a name, unique among children and tunnels: it names its tunnel)"), "", func(c *Child) *string { return &c.Name }).required("a name, unique among children and [[tunnel]]s"),
	field("local_ts", trafficSelectors(), nil, func(c *Child) *[]netip.Prefix { return &c.LocalTS }).required(`our networks, e.g. local_ts = ["10.1.0.0/24"]`),
	field("remote_ts", trafficSelectors(), nil, func(c *Child) *[]netip.Prefix { return &c.RemoteTS }).required(`the peer's networks, routed into the child, e.g. remote_ts = ["10.2.0.0/24"]`),
	field("esp_proposals", text(), DefaultESPProposals, func(c *Child) *string { return &c.ESPProposals }),
	field("start_action", choice("start action", startActions, "none, to wait for the peer; trap, to initiate on the first packet into the child; start, to initiate at start-up"), StartNone, func(c *Child) *string { return &c.StartAction }),
	field("rekey_time", durationIn(MinIKELifetime, MaxIKELifetime, "default 1h"), DefaultChildRekeyTime, func(c *Child) *time.Duration { return &c.RekeyTime }),
	field("life_time", durationIn(MinIKELifetime, MaxIKELifetime, "default rekey_time + 10%"), 0, func(c *Child) *time.Duration { return &c.LifeTime }),
	field("rekey_bytes", count("bytes", ""), 0, func(c *Child) *uint64 { return &c.RekeyBytes }),
	field("life_bytes", count("bytes", "; default rekey_bytes + 10%"), 0, func(c *Child) *uint64 { return &c.LifeBytes }),
	field("rekey_packets", count("packets", ""), 0, func(c *Child) *uint64 { return &c.RekeyPackets }),
	field("life_packets", count("packets", "; default rekey_packets + 10%"), 0, func(c *Child) *uint64 { return &c.LifePackets }),
)

// secretSide is a [[secret]] being read: the values whose meaning
// depends on the type, which may come after them.
type secretSide struct {
	Secret
	secretV, fileV, idV, idsV *Value
}

// secretRules are the keys of a [[secret]].
var secretRules = newSection(reflect.TypeFor[FileSecret](),
	field("type", choice("secret type", secretTypes, `ike, a pre-shared key (ids, secret); private, a private key (file); eap, an EAP password (id, secret)`), "", func(s *secretSide) *string { return &s.Type }),
	rule[secretSide]{key: "id", read: func(d *gwDecoder, f string, e *Entry, s *secretSide) bool {
		x, ok := d.checked(f, e.Value, nonEmpty(`empty identity (want the identity the secret is for, e.g. "carol")`))
		if ok {
			s.IDs, s.idV = append(s.IDs, x), e.Value
		}
		return ok
	}}, // written as ids
	rule[secretSide]{key: "ids", read: func(d *gwDecoder, f string, e *Entry, s *secretSide) bool {
		ids, ok := stringList(`["gw-a.example", "gw-b.example"]`).read(d, f, e)
		if ok {
			s.IDs, s.idsV = append(s.IDs, ids...), e.Value
		}
		return ok
	}, write: func(s *secretSide) (any, bool) { return s.IDs, len(s.IDs) > 0 }},
	// How secret reads depends on the type: secretAfter reads it.
	rule[secretSide]{key: "secret", read: func(_ *gwDecoder, _ string, e *Entry, s *secretSide) bool { s.secretV = e.Value; return true },
		write: func(s *secretSide) (any, bool) { return SecretHex(s.Data), len(s.Data) > 0 }},
	rule[secretSide]{key: "file", read: func(d *gwDecoder, f string, e *Entry, s *secretSide) bool {
		x, ok := d.checked(f, e.Value, nonEmpty("empty file name (want a PEM private key file)"))
		if ok {
			s.File, s.fileV = d.path(x), e.Value
		}
		return ok
	}, write: func(s *secretSide) (any, bool) { return s.File, s.File != "" }},
)

// ToFile returns the connection as a [[connection]] that ParseGateway
// reads back into c (its version, 2, left out).
func (c *Connection) ToFile() FileConnection {
	return connectionRules.encode(c).Interface().(FileConnection)
}

// ToFile returns the secret as a [[secret]] that ParseGateway reads back
// into s: its key in hex, its ids as ids.
func (s *Secret) ToFile() FileSecret {
	return secretRules.encode(&secretSide{Secret: *s}).Interface().(FileSecret)
}

// ToFile returns the [ike] section that ParseGateway reads back into o, or
// nil when every key has its default.
func (o *IKEOptions) ToFile() *FileIKE {
	f := ikeRules.encode(o).Interface().(FileIKE)
	if f == (FileIKE{}) {
		return nil
	}
	return &f
}

func (d *gwDecoder) connection(te tableElem) {
	c := decodeElem(d, connectionRules, te, (*gwDecoder).connectionAfter)
	d.g.Connections = append(d.g.Connections, c)
	d.connFields = append(d.connFields, te.field)
}

// connectionAfter checks a connection once its keys are read: its
// proposals, and its addresses against each other.
func (d *gwDecoder) connectionAfter(te tableElem, _ map[string]bool, c *Connection) {
	f := te.field
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
}

// ikeAddr reads local_addrs (remote false) or remote_addrs.
func ikeAddr(remote bool) codec[netip.Addr] {
	return codec[netip.Addr]{
		read:  func(d *gwDecoder, f string, e *Entry) (netip.Addr, bool) { return d.ikeAddrs(f, e.Value, remote) },
		write: func(a netip.Addr) any { return []string{a.String()} },
	}
}

// poolNames reads a connection's pools: names, each once.
func poolNames() codec[[]string] {
	c := stringList(`["rw"]`)
	read := c.read
	c.read = func(d *gwDecoder, f string, e *Entry) ([]string, bool) {
		names, ok := read(d, f, e)
		var out []string
		for i, s := range names {
			if j := slices.Index(out, s); j >= 0 {
				d.errorf(e.Value.Pos, elemPath(f, i), "duplicate pool %s (also %s)", shortQuote(s), elemPath(f, j))
				continue
			}
			out = append(out, s)
		}
		return out, ok
	}
	return c
}

// fileList reads certs, cacerts or crls (crl): file names, resolved
// against the configuration's directory.
func fileList(crl bool) codec[[]string] {
	return codec[[]string]{
		read:  func(d *gwDecoder, f string, e *Entry) ([]string, bool) { return d.files(f, e.Value, crl) },
		write: asIs[[]string],
	}
}

// trafficSelectors reads local_ts or remote_ts.
func trafficSelectors() codec[[]netip.Prefix] {
	return prefixes(`["10.1.0.0/24"]`, "selector", parseTS, `no traffic selector (want prefixes, e.g. ["10.1.0.0/24"])`)
}

// remoteOnly makes r a key of [connection.remote] only; why says what it
// is, for the message about one in [connection.local].
func remoteOnly(why string, r rule[authSide]) rule[authSide] {
	read := r.read
	r.read = func(d *gwDecoder, f string, e *Entry, a *authSide) bool {
		if !a.remote {
			d.errorf(e.KeyPos, f, "%s belongs in [connection.remote]: %s", e.Key, why)
			return false
		}
		return read(d, f, e, a)
	}
	return r
}

// authMethod reads auth: psk or pubkey, and remotely an EAP method.
func (d *gwDecoder) authMethod(f string, e *Entry, a *authSide) bool {
	v := e.Value
	if s, isStr := v.Str(); isStr && !a.remote && IsEAP(s) {
		d.errorf(v.Pos, f, "auth = %q belongs in [connection.remote]: sluice is an EAP server and authenticates itself with psk or pubkey", s)
		return false
	}
	valid, help := authMethods, "psk, a pre-shared key from a [[secret]] with type = \"ike\"; pubkey, certificates"
	if a.remote {
		valid, help = remoteMethods, help+"; eap-mschapv2, a password from a [[secret]] with type = \"eap\"; eap-tls, a client certificate; eap, either"
	}
	s, ok := d.oneOf(f, v, "authentication", valid, help)
	a.Auth = s
	return ok
}

// authTable reads [connection.local] (remote false) or
// [connection.remote].
func authTable(remote bool) codec[AuthConfig] {
	return codec[AuthConfig]{
		read: func(d *gwDecoder, f string, e *Entry) (AuthConfig, bool) {
			a := authSide{remote: remote}
			t, ok := d.table(f, e.Value)
			if !ok {
				return a.AuthConfig, false
			}
			_, ok = authRules.decode(d, f, d.at(f), t, &a)
			return a.AuthConfig, d.authAfter(f, &a, ok)
		},
		write: func(a AuthConfig) any {
			if a.Revocation == RevocationRelaxed {
				a.Revocation = "" // the default
			}
			return authRules.encode(&authSide{AuthConfig: a, remote: remote}).Interface()
		},
	}
}

// authAfter checks [connection.local] or [connection.remote] once its
// keys are read (ok: they all read): what its method needs, and what
// only some methods take.
func (d *gwDecoder) authAfter(f string, a *authSide, ok bool) bool {
	if a.remote && a.Revocation == "" {
		a.Revocation = RevocationRelaxed
	}
	if a.Auth == "" {
		if !d.failed(f + ".auth") {
			d.errorf(d.at(f), f+".auth", `missing required key (auth = "psk" or "pubkey")`)
		}
		return false
	}
	if ok && (a.Auth == AuthPubkey || a.Auth == AuthEAPTLS) {
		switch {
		case !a.remote && len(a.Certs) == 0:
			d.errorf(d.at(f), f+".certs", `auth = "pubkey" needs our certificate: certs = ["gw.pem"] (its key in a [[secret]] with type = "private")`)
			ok = false
		case a.remote && len(a.Certs)+len(a.CACerts) == 0:
			d.errorf(d.at(f), f+".cacerts", `auth = %q needs what the peer's certificate must chain to: cacerts = ["ca.pem"] (or certs, to trust the peer's own)`, a.Auth)
			ok = false
		}
	}
	if !ok || !a.remote {
		return ok
	}
	certs := a.Auth == AuthPubkey || a.Auth == AuthEAPTLS || a.Auth == AuthEAP
	switch {
	case a.EAPID != "" && !IsEAP(a.Auth):
		d.errorf(d.at(f+".eap_id"), f+".eap_id", "eap_id with auth = %q: only EAP asks for an EAP identity (auth = \"eap-mschapv2\", \"eap-tls\" or \"eap\")", a.Auth)
	case len(a.CRLs) > 0 && !certs:
		d.errorf(d.at(f+".crls"), f+".crls", "crls with auth = %q: the peer shows no certificate to check (auth = \"pubkey\", \"eap-tls\" or \"eap\" do)", a.Auth)
	case a.Revocation == RevocationStrict && !certs:
		d.errorf(d.at(f+".revocation"), f+".revocation", "revocation with auth = %q: the peer shows no certificate to check (auth = \"pubkey\", \"eap-tls\" or \"eap\" do)", a.Auth)
	case a.Revocation == RevocationStrict && len(a.CRLs) == 0:
		d.errorf(d.at(f+".revocation"), f+".revocation", `revocation = "strict" without crls: no certificate's status would be known, and every one would fail (add crls = ["ca.crl"], or use "relaxed")`)
	default:
		return true
	}
	return false
}

// childAfter checks a child once its keys are read: its proposals, and
// its lives against its rekeys, filling in the lives left out.
func (d *gwDecoder) childAfter(te tableElem, seen map[string]bool, c *Child) {
	f := te.field
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
	for _, v := range []struct {
		unit        string
		rekey, life *uint64
	}{{"bytes", &c.RekeyBytes, &c.LifeBytes}, {"packets", &c.RekeyPackets, &c.LifePackets}} {
		rk, lk := "rekey_"+v.unit, "life_"+v.unit
		switch {
		case *v.rekey == 0 || d.failed(f+"."+rk) || d.failed(f+"."+lk):
		case !seen[lk]:
			*v.life = *v.rekey + *v.rekey/10
		case *v.life != 0 && *v.life <= *v.rekey:
			d.errorf(d.at(f+"."+lk), f+"."+lk, "%s %d is not above %s %d (%s): the child would expire before it is rekeyed", lk, *v.life, rk, *v.rekey, d.line(f+"."+rk))
		}
	}
}

func (d *gwDecoder) secret(te tableElem) {
	s := decodeElem(d, secretRules, te, (*gwDecoder).secretAfter)
	d.g.Secrets = append(d.g.Secrets, s.Secret)
	d.secretFields = append(d.secretFields, te.field)
}

// secretAfter reads a secret's secret as its type wants it, and checks
// that it has the keys of its type and no others.
func (d *gwDecoder) secretAfter(te tableElem, _ map[string]bool, s *secretSide) {
	f := te.field
	if s.secretV != nil {
		parse := parseSecret
		if s.Type == SecretEAP {
			parse = parsePassword
		}
		if x, ok := parsed(&d.decoder, f+".secret", s.secretV, parse); ok {
			s.Data = x
		} else {
			s.secretV = nil
		}
	}
	if s.idV != nil && s.idsV != nil {
		d.errorf(s.idV.Pos, f+".id", "id and ids both given (%s): write one", d.line(f+".ids"))
	}
	switch s.Type {
	case "":
		if !d.failed(f + ".type") {
			d.errorf(te.pos, f+".type", `missing required key (type = "ike" for a pre-shared key, "private" for a private key file, "eap" for an EAP password)`)
		}
	case SecretEAP:
		if s.secretV == nil && !d.failed(f+".secret") {
			d.errorf(te.pos, f+".secret", "missing required key (the EAP password: a string, 0x followed by hex, or 0s followed by base64)")
		}
		if len(s.IDs) == 0 && !d.failed(f+".id") && !d.failed(f+".ids") {
			d.errorf(te.pos, f+".id", `missing required key (the EAP identity the password is for, e.g. id = "carol"; an EAP password is never for anyone)`)
		}
		if s.fileV != nil {
			d.errorf(s.fileV.Pos, f+".file", `file belongs to a secret with type = "private"`)
		}
	case SecretIKE:
		if s.secretV == nil && !d.failed(f+".secret") {
			d.errorf(te.pos, f+".secret", "missing required key (the pre-shared key: a string, 0x followed by hex, or 0s followed by base64)")
		}
		if s.fileV != nil {
			d.errorf(s.fileV.Pos, f+".file", `file belongs to a secret with type = "private"`)
		}
	case SecretPrivate:
		if s.fileV == nil && !d.failed(f+".file") {
			d.errorf(te.pos, f+".file", "missing required key (the PEM private key file of a [connection.local] certificate)")
		}
		if s.secretV != nil {
			d.errorf(s.secretV.Pos, f+".secret", `secret belongs to a secret with type = "ike" or "eap"`)
		}
	}
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

// Warnings are what the configuration holds that is valid but weak, each
// with its file, line and field: the proposals that name algorithms RFC
// 8247 discourages (sha1, prfsha1, modp1024, modp1536). sluice check
// prints them and sluice run logs them at WARN; the defaults never hold
// them, so only a file that writes them gets one.
func (g *Gateway) Warnings() Errors {
	var ws Errors
	warn := func(field string, ps []ike.Proposal) {
		for _, w := range ike.Weak(ps) {
			ws = append(ws, &Error{Pos: g.FieldPos(field), Field: field, Msg: "weak algorithm " + w})
		}
	}
	for i := range g.Connections {
		c := &g.Connections[i]
		f := elemPath("connection", i)
		warn(f+".proposals", c.IKE)
		for j := range c.Children {
			warn(elemPath(f+".children", j)+".esp_proposals", c.Children[j].ESP)
		}
	}
	return ws
}
