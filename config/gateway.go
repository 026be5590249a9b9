package config

// gateway.go reads the gateway configuration, the file `sluice run -c FILE`
// takes:
//
//	[gateway]    workers, default crypto engine, control socket, metrics,
//	             log level, what to do with oversize packets
//	[tun]        the TUN device that carries plaintext
//	[udp]        the ESP-in-UDP socket (RFC 3948)
//	[rawesp]     the IP protocol 50 socket
//	[[tunnel]]   a peer: outer addresses, inner routes, its SAs by name
//	[[policy]]   optional SPD (RFC 4301 section 4.4.1), first match wins
//	[[sa]]       the SAs, in the SA file's syntax (DecodeSAs)
//	[[connection]], [[secret]]
//	             IKEv2 peers whose children become tunnels (ike.go)
//	[[tls]]      TLS termination listeners, [[tls_origin]] TLS
//	             origination (tls.go)
//	[ha]         this member of a pair of gateways, and the groups of
//	             virtual addresses the pair moves (ha.go)
//
// A file with TLS sections and no [[tunnel]] is a TLS-only gateway
// (Gateway.TLSOnly): it needs no [tun], sockets or SAs, and may not have
// them. A file with a [udp] or [rawesp] section and no [[tunnel]] or
// [[connection]] is an IPsec gateway with nothing in it yet
// (Gateway.EmptyIPsec), which a reload or config.apply fills.
//
// Decoding has two passes. The first decodes each table on its own; the
// second checks what the tables say about each other: tunnels and their SAs,
// policies and their tunnels, routes of different tunnels, the sockets and
// the tunnels' outer addresses. The second pass skips every check whose
// inputs already failed, so one mistake gives one error.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Defaults and limits of the gateway configuration.
const (
	DefaultControlSocket = "/run/sluice/sluice.sock"
	DefaultTUNName       = "sluice0"
	DefaultLogLevel      = "info"
	LogFormatText        = "text"
	LogFormatJSON        = "json"
	DefaultStateDir      = "/var/lib/sluice"
	DefaultOversize      = OversizeFragment
	// DefaultUnderlayMTU is the MTU of the outer path that a plaintext MTU
	// of 0 (TUN.MTU, Tunnel.MTU) is computed from: this less the ESP
	// overhead of the tunnel (esp.TunnelMTU).
	DefaultUnderlayMTU = 1500
	MaxWorkers         = 1024
	MaxTUNQueues       = 256 // Linux's limit for a multi-queue TUN device
	MaxInboundSAs      = 4   // the current SA and those of rekeys still draining
	MinMTU             = 576 // RFC 791: the datagram every IPv4 host accepts
	MinIPv6MTU         = 1280
	MaxMTU             = 65535
)

// What Gateway.Oversize may be.
const (
	// OversizeFragment fragments IPv4 packets without DF before encryption
	// (RFC 4459 section 3).
	OversizeFragment = "fragment"
	// OversizeDrop drops them, answering ICMP "fragmentation needed".
	OversizeDrop = "drop"
)

// The actions of a policy (RFC 4301 section 4.4.1).
const (
	ActionProtect = "protect"
	ActionBypass  = "bypass"
	ActionDiscard = "discard"
)

// IP protocol numbers that policies name.
const (
	ProtoAny    = 0 // any protocol; also protocol 0, which a selector never sees (RFC 4301 section 4.4.1.1)
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
	ProtoSCTP   = 132
)

// Gateway is a gateway configuration. It is only returned once every check
// has passed: names resolve (Gateway.SA, Gateway.Tunnel), defaults are
// filled in, and [udp] and [rawesp] are present when a tunnel needs them.
type Gateway struct {
	File string // the file name given to ParseGateway, used in positions

	Workers       int    // data-plane workers; 0 = one per core
	Engine        string // default crypto engine; "" = the registry's choice
	ControlSocket string // Unix socket path; default DefaultControlSocket
	Metrics       string // Prometheus listen address "host:port"; "" = off
	LogLevel      string // "debug", "info" (default), "warn" or "error"
	// LogFormat is LogFormatText (default: logfmt lines) or LogFormatJSON
	// (one JSON object a line).
	LogFormat string
	// LogLevels overrides LogLevel for a subsystem (LogSubsystems), as
	// charon's filelog takes "ike = 2": log_levels = { ike = "debug" }.
	// It holds only the subsystems the file names; LevelOf fills in the
	// rest.
	LogLevels map[string]string
	Oversize  string // OversizeFragment (default) or OversizeDrop
	// StateDir holds the durable sequence-number bounds of the SAs: outbound
	// reservations, so a restarted gateway never reuses a sequence number
	// under a configured key, and inbound replay bounds, so it never accepts
	// a packet twice. The gateway refuses to start when it cannot write
	// there. (AEAD nonces do not depend on it: see package esp.)
	StateDir string

	TUN TUN
	// UDP is nil when no tunnel uses encap = "udp" and the file has no
	// [udp]. When a tunnel needs it and the file has none, it is
	// {Listen: 0.0.0.0:4500}, or [::]:4500 if such a tunnel has an IPv6
	// local address.
	UDP *UDP
	// RawESP is nil when no tunnel uses encap = "none" and the file has no
	// [rawesp]; when a tunnel needs it and the file has none, it listens on
	// 0.0.0.0, or :: if such a tunnel has an IPv6 local address.
	RawESP *RawESP

	Tunnels []Tunnel
	// Policies, in file order, make the gateway policy-based: outbound
	// traffic is classified by the first policy that matches instead of by
	// the tunnels' Remote routes.
	Policies []Policy
	// SAs are every [[sa]] of the file, including any no tunnel uses.
	SAs []SA

	// Connections are the [[connection]] tables: IKE peers whose
	// children, once negotiated, are route-based tunnels beside Tunnels
	// (ike.go). Secrets are the [[secret]] tables.
	Connections []Connection
	Secrets     []Secret
	// Pools are the [[pool]] tables: virtual IPs for the connections
	// that name them (pool.go).
	Pools []Pool
	// IKE is the [ike] section; its Port is DefaultIKEPort when left out.
	IKE IKEOptions

	// TLS are the [[tls]] termination listeners and TLSOrigins the
	// [[tls_origin]] origination listeners, in file order (tls.go).
	TLS        []TLSListener
	TLSOrigins []TLSOrigin

	// HA is the [ha] section, nil without one (ha.go).
	HA *HA

	fields map[string]Pos // where each key's value is, by field path
}

// TUN is the [tun] section: the device that carries plaintext.
type TUN struct {
	Name string // interface name; default DefaultTUNName
	// MTU is the plaintext MTU. 0 means DefaultUnderlayMTU less the
	// largest ESP overhead of the tunnels and of what the IKE children's
	// ESP proposals may be negotiated with, in UDP (esp.TunnelMTU),
	// computed at start-up and at each reload.
	MTU int
	// Addresses are assigned to the device, host bits kept: 10.1.0.1/24.
	Addresses []netip.Prefix
	Queues    int // TUN queues; 0 = one per worker
}

// UDP is the [udp] section: the socket of ESP in UDP (RFC 3948).
type UDP struct {
	// Listen is the address and port the socket is bound to; tunnels with
	// encap = "udp" send from it. The unspecified IPv6 address :: takes both
	// families (a dual-stack socket); 0.0.0.0 takes IPv4 only.
	Listen netip.AddrPort
	// GSO and GRO turn on UDP segmentation and receive offload; both are
	// on unless set to false (the gateway falls back, and says so once,
	// where the kernel lacks them).
	GSO, GRO bool
	// Link is how ESP in UDP is received and sent: LinkAuto (the
	// default), LinkXDP or LinkSocket. The socket is open with every
	// link: IKE, NAT-keepalives and what AF_XDP cannot send use it.
	Link string
}

// The values of [udp] link.
const (
	// LinkAuto uses AF_XDP on the interface(s) that carry the gateway's
	// ESP where its program loads and its sockets bind zero-copy, and the
	// UDP sockets elsewhere (copy mode costs one-stream TCP more than it
	// saves); the gateway logs which it chose and why.
	LinkAuto = "auto"
	// LinkXDP uses AF_XDP, in copy mode where zero-copy does not bind, or
	// fails to start.
	LinkXDP = "xdp"
	// LinkSocket uses the UDP sockets only (recvmmsg/sendmmsg).
	LinkSocket = "socket"
)

// RawESP is the [rawesp] section: the socket of IP protocol 50.
type RawESP struct {
	// Listen is the address the socket is bound to; tunnels with encap =
	// "none" send from it. :: takes both families (the runtime opens a
	// socket for each); 0.0.0.0 takes IPv4 only.
	Listen netip.Addr
}

// Tunnel is a [[tunnel]]: one peer, with one outbound SA and up to
// MaxInboundSAs inbound SAs (more than one while a rekey drains).
type Tunnel struct {
	Name        string     // unique
	Local, Peer netip.Addr // outer addresses, of one family
	Encap       Encap      // EncapUDP (default) or EncapNone
	PeerPort    uint16     // the peer's UDP port with EncapUDP (default 4500); 0 with EncapNone
	// Remote are the inner prefixes routed into the tunnel (route-based
	// mode), masked. No prefix overlaps another tunnel's.
	Remote []netip.Prefix
	Out    string   // name of the outbound SA
	In     []string // names of the inbound SAs, 1 to MaxInboundSAs
	Engine string   // crypto engine for the tunnel's SAs; "" = Gateway.Engine
	// MTU is the tunnel's plaintext MTU; 0 means TUN.MTU if that is set,
	// else DefaultUnderlayMTU less the tunnel's ESP overhead, computed at
	// start-up. A packet larger than it is fragmented or answered with an
	// ICMP error (gateway.oversize).
	MTU int
}

// Policy is a [[policy]]: a selector and an action (RFC 4301 section
// 4.4.1). Every selector field's zero value means ANY.
type Policy struct {
	Name     string       // optional; unique when given
	Src, Dst netip.Prefix // masked; the zero Prefix is any
	Proto    uint8        // IP protocol number; ProtoAny (0) is any
	// SPort and DPort are inclusive ranges, low then high; {0, 65535} is
	// any. They are narrower than any only for TCP, UDP, SCTP or any
	// protocol.
	SPort, DPort [2]uint16
	Action       string // ActionProtect, ActionBypass or ActionDiscard
	Tunnel       string // with ActionProtect, the tunnel whose outbound SA protects; "" otherwise
}

// anyPorts is the port range that matches every port.
var anyPorts = [2]uint16{0, 65535}

// SA returns the SA with the given name, or nil. Unnamed SAs are not found.
func (g *Gateway) SA(name string) *SA {
	if name == "" {
		return nil
	}
	for i := range g.SAs {
		if g.SAs[i].Name == name {
			return &g.SAs[i]
		}
	}
	return nil
}

// Tunnel returns the tunnel with the given name, or nil.
func (g *Gateway) Tunnel(name string) *Tunnel {
	for i := range g.Tunnels {
		if g.Tunnels[i].Name == name {
			return &g.Tunnels[i]
		}
	}
	return nil
}

// FieldPos returns where the value of a field is in the file, for errors
// found after parsing (an engine that is not registered, an address that
// cannot be bound). field is a path as in Error.Field: "gateway.engine",
// "tunnel[2].local", "tunnel[1].remote[3]". For a key the file leaves out
// it is the position of the nearest table that is there, so a defaulted
// value is reported at its table.
func (g *Gateway) FieldPos(field string) Pos {
	return lookupPos(g.fields, g.File, field)
}

// CheckEngines reports, with their positions, the engines the configuration
// names that valid rejects. At start-up valid is cryptodev.CheckEngine: an
// engine that is not registered, or a composition such as "sched:ipsecmb"
// whose outer engine does not run over others or whose inner engine is
// unknown. An error's "cryptodev: " prefix is dropped.
func (g *Gateway) CheckEngines(valid func(name string) error) error {
	var errs Errors
	check := func(field, name string) {
		if name == "" {
			return
		}
		if err := valid(name); err != nil {
			errs = append(errs, &Error{Pos: g.FieldPos(field), Field: field,
				Msg: strings.TrimPrefix(err.Error(), "cryptodev: ")})
		}
	}
	check("gateway.engine", g.Engine)
	for i := range g.Tunnels {
		check(elemPath("tunnel", i)+".engine", g.Tunnels[i].Engine)
	}
	for i := range g.TLS {
		check(elemPath("tls", i)+".engine", g.TLS[i].Engine)
	}
	for i := range g.TLSOrigins {
		check(elemPath("tls_origin", i)+".engine", g.TLSOrigins[i].Engine)
	}
	return errs.Err()
}

// LoadGateway reads and parses a gateway configuration. See ParseGateway; a
// file that cannot be read gives the os error unchanged.
func LoadGateway(path string) (*Gateway, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseGateway(path, data)
}

// ParseGateway parses a gateway configuration; filename is used in
// positions. On failure it returns nil and an Errors holding every error
// found, in file order, each with its line, column and field.
func ParseGateway(filename string, data []byte) (*Gateway, error) {
	doc, err := ParseDocument(filename, data)
	if err != nil {
		return nil, err
	}
	g := gatewayRules.defaults()
	g.File, g.TUN, g.IKE = filename, tunRules.defaults(), ikeRules.defaults()
	d := &gwDecoder{g: &g, fields: fieldPositions(doc)}
	d.g.fields = d.fields
	d.document(doc.Root)
	d.crossCheck()
	if len(d.errs) > 0 {
		d.errs.Sort()
		return nil, d.errs
	}
	return d.g, nil
}

// fieldPositions maps the path of every value in doc to its position:
// "tun.addresses" and "tun.addresses[1]", "sa[2]" and "sa[2].spi".
func fieldPositions(doc *Document) map[string]Pos {
	m := make(map[string]Pos)
	var walk func(field string, v *Value)
	walk = func(field string, v *Value) {
		m[field] = v.Pos
		if t, ok := v.Table(); ok {
			for _, e := range t.Entries() {
				walk(fieldPath(field, e.Key), e.Value)
			}
		}
		if elems, ok := v.Array(); ok {
			for i, ev := range elems {
				walk(elemPath(field, i), ev)
			}
		}
	}
	for _, e := range doc.Root.Entries() {
		walk(fieldPath("", e.Key), e.Value)
	}
	return m
}

// lookupPos finds field in m, falling back to its parents and finally to
// the start of the file.
func lookupPos(m map[string]Pos, file, field string) Pos {
	for field != "" {
		if p, ok := m[field]; ok {
			return p
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return Pos{File: file, Line: 1, Col: 1}
}

// gwDecoder decodes one gateway configuration.
type gwDecoder struct {
	decoder
	g      *Gateway
	fields map[string]Pos

	tunnelFields  []string    // "tunnel[2]" of g.Tunnels[i]
	policyFields  []string    // "policy[1]" of g.Policies[i]
	saTables      []tableElem // the table of g.SAs[i]
	tlsFields     []string    // "tls[1]" of g.TLS[i]
	originFields  []string    // "tls_origin[1]" of g.TLSOrigins[i]
	connFields    []string    // "connection[1]" of g.Connections[i]
	secretFields  []string    // "secret[1]" of g.Secrets[i]
	poolFields    []string    // "pool[1]" of g.Pools[i]
	haGroupFields []string    // "ha.group[1]" of g.HA.Groups[i]
	refs          []saRef     // every SA name a tunnel gives

	failedFields map[string]bool // see failed
	indexed      int             // errors in failedFields
}

// saRef is an SA named by a tunnel's out or in.
type saRef struct {
	tunnel int    // index into g.Tunnels
	field  string // "tunnel[1].out", "tunnel[1].in[2]"
	name   string
	out    bool
}

// at returns the position of field's value, or of its nearest table.
func (d *gwDecoder) at(field string) Pos { return lookupPos(d.fields, d.g.File, field) }

// has reports whether the file gives field.
func (d *gwDecoder) has(field string) bool {
	_, ok := d.fields[field]
	return ok
}

// failed reports whether an error was found in field or inside it.
func (d *gwDecoder) failed(field string) bool {
	if d.failedFields == nil {
		d.failedFields = make(map[string]bool)
	}
	// Index the errors found since the last call under their field and
	// every field that contains it.
	for ; d.indexed < len(d.errs); d.indexed++ {
		for f := d.errs[d.indexed].Field; f != ""; {
			d.failedFields[f] = true
			i := strings.LastIndexAny(f, ".[")
			if i < 0 {
				break
			}
			f = f[:i]
		}
	}
	return d.failedFields[field]
}

// line describes where field is for a message about another field:
// "tunnel[1].out, line 12".
func (d *gwDecoder) line(field string) string {
	return fmt.Sprintf("%s, line %d", field, d.at(field).Line)
}

// where is line for a field that may have been left out and defaulted:
// "udp.listen, line 7", "the default", or "the default; [udp] at line 5".
func (d *gwDecoder) where(field string) string {
	if d.has(field) {
		return d.line(field)
	}
	if i := strings.LastIndexByte(field, '.'); i > 0 && d.has(field[:i]) {
		return fmt.Sprintf("the default; [%s] at line %d", field[:i], d.at(field[:i]).Line)
	}
	return "the default"
}

// sectionRule is the rule of a top-level key: read decodes its section
// into the gateway (the decoder's), write encodes g's.
func sectionRule(key string, read func(d *gwDecoder, f string, v *Value), write func(g *Gateway) (any, bool)) rule[Gateway] {
	return rule[Gateway]{key: key, read: func(d *gwDecoder, f string, e *Entry, _ *Gateway) bool {
		read(d, f, e.Value)
		return true
	}, write: write}
}

// tables is sectionRule for an array of tables: read decodes one table.
func tables(key string, read func(d *gwDecoder, te tableElem), write func(g *Gateway) (any, bool)) rule[Gateway] {
	return sectionRule(key, func(d *gwDecoder, f string, v *Value) {
		ts, _ := d.arrayOfTables(f, v)
		for _, te := range ts {
			read(d, te)
		}
	}, write)
}

// each encodes the elements of xs with toFile.
func each[T, F any](xs []T, toFile func(*T) F) (any, bool) {
	out := make([]F, len(xs))
	for i := range xs {
		out[i] = toFile(&xs[i])
	}
	return out, len(xs) > 0
}

// gatewayFileRules are the top-level keys, in documentation order: the
// sections.
var gatewayFileRules = newSection(reflect.TypeFor[File](),
	sectionRule("gateway", (*gwDecoder).gatewaySection, func(g *Gateway) (any, bool) { return gatewayRules.encode(g).Interface(), true }),
	sectionRule("tun", (*gwDecoder).tunSection, func(g *Gateway) (any, bool) {
		return tunRules.encode(&g.TUN).Interface(), !reflect.DeepEqual(g.TUN, tunRules.defaults())
	}),
	sectionRule("udp", (*gwDecoder).udpSection, func(g *Gateway) (any, bool) {
		if g.UDP == nil {
			return nil, false
		}
		return udpRules.encode(g.UDP).Interface(), true
	}),
	sectionRule("rawesp", (*gwDecoder).rawESPSection, func(g *Gateway) (any, bool) {
		if g.RawESP == nil {
			return nil, false
		}
		return rawESPRules.encode(g.RawESP).Interface(), true
	}),
	tables("tunnel", (*gwDecoder).tunnel, func(g *Gateway) (any, bool) { return each(g.Tunnels, (*Tunnel).ToFile) }),
	tables("policy", (*gwDecoder).policy, func(g *Gateway) (any, bool) { return each(g.Policies, (*Policy).ToFile) }),
	sectionRule("sa", func(d *gwDecoder, f string, v *Value) { d.g.SAs, d.saTables = d.decodeSAs(f, v) },
		func(g *Gateway) (any, bool) { return each(g.SAs, (*SA).ToFile) }),
	sectionRule("ike", (*gwDecoder).ikeSection, func(g *Gateway) (any, bool) { f := g.IKE.ToFile(); return f, f != nil }),
	tables("connection", (*gwDecoder).connection, func(g *Gateway) (any, bool) { return each(g.Connections, (*Connection).ToFile) }),
	tables("pool", (*gwDecoder).pool, func(g *Gateway) (any, bool) { return each(g.Pools, (*Pool).ToFile) }),
	tables("secret", (*gwDecoder).secret, func(g *Gateway) (any, bool) { return each(g.Secrets, (*Secret).ToFile) }),
	tables("tls", (*gwDecoder).tlsListener, func(g *Gateway) (any, bool) { return each(g.TLS, (*TLSListener).ToFile) }),
	tables("tls_origin", (*gwDecoder).tlsOrigin, func(g *Gateway) (any, bool) { return each(g.TLSOrigins, (*TLSOrigin).ToFile) }),
	sectionRule("ha", (*gwDecoder).haSection, func(g *Gateway) (any, bool) {
		if g.HA == nil {
			return nil, false
		}
		return g.HA.ToFile(), true
	}),
)

// gatewaySections are the top-level keys, in documentation order.
var gatewaySections = gatewayFileRules.keys

// ToFile returns the configuration as a File that File.Encode writes and
// ParseGateway reads back into g (positions aside): the encoder of the
// rule tables. Paths are written as resolved against the file's directory,
// defaults filled in by ParseGateway are written out, and File's
// limits hold (an [ha] preference of 0 is left out).
func (g *Gateway) ToFile() *File {
	f := gatewayFileRules.encode(g).Interface().(File)
	return &f
}

func (d *gwDecoder) document(root *Table) {
	gatewayFileRules.decode(d, "", Pos{}, root, d.g)
}

// mtu reads a plaintext MTU (see decoder.mtu).
func mtu() codec[int] {
	return codec[int]{read: func(d *gwDecoder, f string, e *Entry) (int, bool) { return d.mtu(f, e.Value) }, write: asIs[int]}
}

// mtu reads a plaintext MTU: 0 for computed, or MinMTU..MaxMTU.
func (d *decoder) mtu(f string, v *Value) (int, bool) {
	i, ok := d.integer(f, v)
	if ok && i != 0 && (i < MinMTU || i > MaxMTU) {
		d.errorf(v.Pos, f, "MTU %d out of range (want 0 to compute it from the underlay MTU %d, or %d..%d)", i, DefaultUnderlayMTU, MinMTU, MaxMTU)
		return 0, false
	}
	return int(i), ok
}

// [gateway]

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{LogFormatText, LogFormatJSON}
	// LogSubsystems are the parts of a gateway whose log level
	// log_levels sets on its own: IKE negotiations, TLS listeners and
	// origins, the ESP data plane, the control socket, and the gateway's
	// own lines (start, reload, tunnels).
	LogSubsystems = []string{"ike", "tls", "dataplane", "control", "gateway"}
	oversizes     = []string{OversizeFragment, OversizeDrop}
)

// gatewayRules are the keys of [gateway].
var gatewayRules = newSection(reflect.TypeFor[FileGateway](),
	field("workers", intIn[int]("", 0, MaxWorkers, fmt.Sprintf("0..%d; 0 = one per core", MaxWorkers)), 0, func(g *Gateway) *int { return &g.Workers }),
	field("engine", engineName(`"" lets the registry choose`), "", func(g *Gateway) *string { return &g.Engine }),
	field("control_socket", checkedText(checkSocketPath), DefaultControlSocket, func(g *Gateway) *string { return &g.ControlSocket }),
	field("metrics", checkedText(checkHostPort), "", func(g *Gateway) *string { return &g.Metrics }),
	field("log_level", choice("log level", logLevels, ""), DefaultLogLevel, func(g *Gateway) *string { return &g.LogLevel }),
	field("log_format", choice("log format", logFormats, "text, for logfmt lines; json, for one JSON object a line"), LogFormatText, func(g *Gateway) *string { return &g.LogFormat }),
	field("log_levels", codec[map[string]string]{read: (*gwDecoder).logLevels, write: asIs[map[string]string]}, nil, func(g *Gateway) *map[string]string { return &g.LogLevels }),
	field("oversize", choice("oversize action", oversizes, `fragment, to fragment IPv4 packets without DF before encryption; drop, to drop them; DF-set IPv4 and IPv6 packets always get ICMP "too big"`), DefaultOversize, func(g *Gateway) *string { return &g.Oversize }),
	field("state_dir", checkedText(nonEmpty(`empty state directory (want a path, e.g. "/var/lib/sluice")`)), DefaultStateDir, func(g *Gateway) *string { return &g.StateDir }),
)

func (d *gwDecoder) gatewaySection(f string, v *Value) {
	if t, ok := d.table(f, v); ok {
		gatewayRules.decode(d, f, v.Pos, t, d.g)
	}
}

// logLevels reads log_levels, a table from subsystem to level:
// log_levels = { ike = "debug", tls = "warn" }.
func (d *gwDecoder) logLevels(f string, e *Entry) (map[string]string, bool) {
	t, ok := d.table(f, e.Value)
	if !ok {
		return nil, false
	}
	var m map[string]string
	for _, e := range t.Entries() {
		kf, v := fieldPath(f, e.Key), e.Value
		if !slices.Contains(LogSubsystems, e.Key) {
			d.errs = append(d.errs, unknownKey(e, kf, LogSubsystems, ""))
			continue
		}
		if s, ok := d.oneOf(kf, v, "log level", logLevels, ""); ok {
			if m == nil {
				m = map[string]string{}
			}
			m[e.Key] = s
		}
	}
	return m, true
}

// LevelOf returns the log level of subsystem sub: its log_levels entry,
// else log_level, else DefaultLogLevel.
func (g *Gateway) LevelOf(sub string) string {
	if l := g.LogLevels[sub]; l != "" {
		return l
	}
	if g.LogLevel != "" {
		return g.LogLevel
	}
	return DefaultLogLevel
}

// engine reads a crypto engine name, or two joined by a colon (an engine
// that runs over another: "sched:ipsecmb"); empty says what "" means.
func (d *decoder) engine(f string, v *Value, empty string) (string, bool) {
	s, ok := d.str(f, v)
	if !ok || s == "" {
		return s, ok
	}
	outer, inner, composite := strings.Cut(s, ":")
	if len(s) > 65 || !isEngineName(outer) || composite && !isEngineName(inner) {
		d.errorf(v.Pos, f, "invalid engine name %s (want a registered engine's lowercase name, such as soft or sched, or sched:ENGINE to schedule another engine's work over all cores; %s)", shortQuote(s), empty)
		return "", false
	}
	return s, true
}

// engineName reads an engine name (see decoder.engine).
func engineName(empty string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) { return d.engine(f, e.Value, empty) }, write: asIs[string]}
}

// isEngineName reports whether s has the shape of a registered engine's name.
func isEngineName(s string) bool {
	valid := len(s) > 0 && len(s) <= 32 && s[0] >= 'a' && s[0] <= 'z'
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		valid = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	return valid
}

// checkSocketPath returns what is wrong with a Unix socket path, or "".
func checkSocketPath(s string) string {
	switch {
	case s == "":
		return "empty path (want the path of the control socket, e.g. " + DefaultControlSocket + ")"
	case strings.IndexByte(s, 0) >= 0:
		return "path contains a NUL byte"
	case len(s) > 107:
		return fmt.Sprintf("path is %d bytes long; a Unix socket path holds at most 107", len(s))
	}
	return ""
}

// checkHostPort returns what is wrong with a listen address for metrics,
// or "". "" (off), ":9100", "127.0.0.1:9100", "[::1]:9100" and
// "localhost:9100" are valid.
func checkHostPort(s string) string {
	if s == "" {
		return ""
	}
	const want = `want "host:port" such as "127.0.0.1:9100" or ":9100", or "" for no metrics`
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("invalid listen address %s (%s)", shortQuote(s), want)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("invalid port %s in %s (want 1..65535)", shortQuote(port), shortQuote(s))
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	for _, label := range strings.Split(host, ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
		}
		if !ok {
			return fmt.Sprintf("invalid host %s in %s (%s)", shortQuote(host), shortQuote(s), want)
		}
	}
	return ""
}

// [tun]

// tunRules are the keys of [tun].
var tunRules = newSection(reflect.TypeFor[FileTUN](),
	field("name", checkedText(checkIfName), DefaultTUNName, func(t *TUN) *string { return &t.Name }),
	field("mtu", mtu(), 0, func(t *TUN) *int { return &t.MTU }),
	field("addresses", prefixes(`addresses = ["10.1.0.1/24"]`, "address", parseIfAddr, ""), nil, func(t *TUN) *[]netip.Prefix { return &t.Addresses }),
	field("queues", intIn[int]("", 0, MaxTUNQueues, fmt.Sprintf("0..%d; 0 = one per worker", MaxTUNQueues)), 0, func(t *TUN) *int { return &t.Queues }),
)

func (d *gwDecoder) tunSection(f string, v *Value) {
	if t, ok := d.table(f, v); ok {
		tunRules.decode(d, f, v.Pos, t, &d.g.TUN)
	}
}

// checkIfName returns what is wrong with a Linux interface name, or "".
func checkIfName(s string) string {
	if s == "" {
		return "empty interface name (leave the key out for " + DefaultTUNName + ")"
	}
	if len(s) > 15 {
		return fmt.Sprintf("interface name %s is %d bytes long (Linux allows at most 15)", shortQuote(s), len(s))
	}
	if s == "." || s == ".." {
		return fmt.Sprintf("invalid interface name %s", shortQuote(s))
	}
	for _, r := range s {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f {
			return fmt.Sprintf("invalid interface name %s (no '/', ':', spaces or control characters)", shortQuote(s))
		}
	}
	return ""
}

// parseIfAddr parses an address to assign to an interface, with its prefix
// length: 10.1.0.1/24.
func parseIfAddr(s string) (netip.Prefix, string) {
	p, msg := parsePrefix(s, func(a netip.Addr) string {
		if a.IsValid() {
			return fmt.Sprintf("address %s has no prefix length (want address/length such as 10.1.0.1/24)", shortQuote(s))
		}
		return fmt.Sprintf("invalid address %s (want address/length such as 10.1.0.1/24 or 2001:db8:1::1/64)", shortQuote(s))
	})
	if msg == "" && (p.Addr().IsUnspecified() || p.Addr().IsMulticast()) {
		return netip.Prefix{}, fmt.Sprintf("%s cannot be assigned to an interface", p)
	}
	return p, msg
}

// parseRoute parses a route's prefix, which must have no host bits set.
func parseRoute(s string) (netip.Prefix, string) {
	p, msg := parsePrefix(s, func(a netip.Addr) string {
		if a.IsValid() {
			return fmt.Sprintf("%s is an address, not a prefix (write %s/%d for the single address)", shortQuote(s), a, a.BitLen())
		}
		return fmt.Sprintf("invalid prefix %s (want a prefix such as 10.2.0.0/24 or 2001:db8:2::/64)", shortQuote(s))
	})
	if m := p.Masked(); msg == "" && m != p {
		return netip.Prefix{}, fmt.Sprintf("prefix %s has host bits set (did you mean %s?)", p, m)
	}
	return p, msg
}

// parsePrefix parses an address with its prefix length, for parseIfAddr
// and parseRoute, rejecting the IPv4-mapped prefixes netip accepts, which
// a route or selector cannot use. For s that netip does not accept it
// returns the message of notPrefix, given the address s is if s is a
// single address, and the zero Addr otherwise.
func parsePrefix(s string, notPrefix func(a netip.Addr) string) (netip.Prefix, string) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, _ := parseAddr(s) // the zero Addr unless s is an address
		return netip.Prefix{}, notPrefix(a)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Sprintf("IPv4-mapped IPv6 prefix %s: write an IPv4 prefix", shortQuote(s))
	}
	return p, ""
}

// parseSelector parses a policy's src or dst: "", "any", a prefix without
// host bits, or a single address.
func parseSelector(s string) (netip.Prefix, string) {
	if s == "" || s == "any" {
		return netip.Prefix{}, ""
	}
	if a, msg := parseAddr(s); msg == "" {
		return netip.PrefixFrom(a, a.BitLen()), ""
	}
	p, msg := parseRoute(s)
	if msg != "" && strings.HasPrefix(msg, "invalid prefix") {
		msg = fmt.Sprintf("invalid selector %s (want a prefix such as 10.2.0.0/24, an address, or \"any\")", shortQuote(s))
	}
	return p, msg
}

// [udp] and [rawesp]

// udpRules are the keys of [udp]; a listen left out is chosen by
// sockets.
var udpRules = newSection(reflect.TypeFor[FileUDP](),
	field("listen", parsedText(parseListenPort), netip.AddrPort{}, func(u *UDP) *netip.AddrPort { return &u.Listen }),
	field("gso", flag(), true, func(u *UDP) *bool { return &u.GSO }),
	field("gro", flag(), true, func(u *UDP) *bool { return &u.GRO }),
	field("link", choice("ESP link", udpLinks, "auto, AF_XDP where its sockets bind zero-copy and the UDP sockets elsewhere (the default); xdp, AF_XDP in any mode or no start; socket, the UDP sockets only"), LinkAuto, func(u *UDP) *string { return &u.Link }),
)

// udpLinks are the values of [udp] link.
var udpLinks = []string{LinkAuto, LinkXDP, LinkSocket}

// rawESPRules are the keys of [rawesp]; a listen left out is chosen by
// sockets.
var rawESPRules = newSection(reflect.TypeFor[FileRawESP](),
	field("listen", parsedText(parseListenAddr), netip.Addr{}, func(r *RawESP) *netip.Addr { return &r.Listen }),
)

func (d *gwDecoder) udpSection(f string, v *Value) {
	if t, ok := d.table(f, v); ok {
		u := udpRules.defaults()
		udpRules.decode(d, f, v.Pos, t, &u)
		d.g.UDP = &u
	}
}

func (d *gwDecoder) rawESPSection(f string, v *Value) {
	if t, ok := d.table(f, v); ok {
		var r RawESP
		rawESPRules.decode(d, f, v.Pos, t, &r)
		d.g.RawESP = &r
	}
}

// parseListenAddr parses the [rawesp] listen address: an IP address, no
// port.
func parseListenAddr(s string) (netip.Addr, string) {
	a, msg := parseAddr(s)
	if msg != "" {
		if _, err := netip.ParseAddrPort(s); err == nil {
			msg = fmt.Sprintf("%s has a port, but IP protocol 50 has none (want an address such as 0.0.0.0)", shortQuote(s))
		}
		return netip.Addr{}, msg
	}
	if msg := checkListen(a); msg != "" {
		return netip.Addr{}, msg
	}
	return a, ""
}

// checkListen returns what is wrong with an address to listen on, or "".
func checkListen(a netip.Addr) string {
	if a.IsMulticast() {
		return fmt.Sprintf("cannot listen on multicast address %s", a)
	}
	return ""
}

// parseListenPort parses the [udp] listen address: an IP address and a
// port, "0.0.0.0:4500" or "[::]:4500".
func parseListenPort(s string) (netip.AddrPort, string) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		if a, msg := parseAddr(s); msg == "" {
			return netip.AddrPort{}, fmt.Sprintf("%s has no port (want address:port, e.g. %s)", shortQuote(s), netip.AddrPortFrom(a, DefaultUDPPort))
		}
		return netip.AddrPort{}, fmt.Sprintf("invalid listen address %s (want an IP address and port such as 0.0.0.0:4500 or [::]:4500)", shortQuote(s))
	}
	if _, msg := parseAddr(ap.Addr().String()); msg != "" {
		return netip.AddrPort{}, msg
	}
	if msg := checkListen(ap.Addr()); msg != "" {
		return netip.AddrPort{}, msg
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, "port 0: the peers need a fixed port (want 1..65535, usually 4500)"
	}
	return ap, ""
}

// [[tunnel]]

// tunnelSide is a [[tunnel]] being read: what the checks across its keys
// need.
type tunnelSide struct {
	Tunnel
	peerPortE, peerE *Entry
	localOK, peerOK  bool
	encapBad         bool
}

// tunnelRules are the keys of a [[tunnel]].
var tunnelRules = newSection(reflect.TypeFor[FileTunnel](),
	field("name", nameOf("empty name (a tunnel needs a name, unique in the file)"), "", func(t *tunnelSide) *string { return &t.Name }).required("a name, unique in the file"),
	rule[tunnelSide]{key: "local", read: func(d *gwDecoder, f string, e *Entry, t *tunnelSide) bool {
		t.Local, t.localOK = parsed(&d.decoder, f, e.Value, parseEndpoint)
		return t.localOK
	}, write: func(t *tunnelSide) (any, bool) { return t.Local.String(), t.Local.IsValid() }}.required("our outer address, e.g. 192.0.2.1"),
	rule[tunnelSide]{key: "peer", read: func(d *gwDecoder, f string, e *Entry, t *tunnelSide) bool {
		t.Peer, t.peerOK = parsed(&d.decoder, f, e.Value, parseEndpoint)
		t.peerE = e
		return t.peerOK
	}, write: func(t *tunnelSide) (any, bool) { return t.Peer.String(), t.Peer.IsValid() }}.required("the peer's outer address, e.g. 192.0.2.2"),
	rule[tunnelSide]{key: "encap", read: func(d *gwDecoder, f string, e *Entry, t *tunnelSide) bool {
		s, ok := d.oneOf(f, e.Value, "encapsulation", encaps, "udp for RFC 3948 UDP encapsulation, the default; none for IP protocol 50")
		if ok {
			t.Encap = Encap(s)
		}
		t.encapBad = !ok
		return ok
	}, init: func(t *tunnelSide) { t.Encap = EncapUDP }, write: func(t *tunnelSide) (any, bool) { return string(t.Encap), t.Encap != EncapUDP }},
	// peer_port depends on encap, which may come after it: tunnelAfter
	// reads it.
	rule[tunnelSide]{key: "peer_port", read: func(_ *gwDecoder, _ string, e *Entry, t *tunnelSide) bool { t.peerPortE = e; return true },
		write: func(t *tunnelSide) (any, bool) { return t.PeerPort, t.PeerPort != 0 && t.PeerPort != DefaultUDPPort }},
	field("remote", prefixes(`remote = ["10.2.0.0/24"]`, "prefix", parseRoute, ""), nil, func(t *tunnelSide) *[]netip.Prefix { return &t.Remote }),
	rule[tunnelSide]{key: "out", read: func(d *gwDecoder, f string, e *Entry, t *tunnelSide) bool {
		s, ok := d.checked(f, e.Value, nonEmpty("empty SA name (want the name of the tunnel's outbound [[sa]])"))
		if ok {
			t.Out = s
			d.refs = append(d.refs, saRef{tunnel: len(d.g.Tunnels), field: f, name: s, out: true})
		}
		return ok
	}, write: func(t *tunnelSide) (any, bool) { return t.Out, t.Out != "" }}.required("the name of the outbound [[sa]]"),
	rule[tunnelSide]{key: "in", read: (*gwDecoder).tunnelIn, write: func(t *tunnelSide) (any, bool) { return t.In, len(t.In) > 0 }}.required(`the names of the inbound [[sa]] tables, e.g. ["b-to-a"]`),
	field("engine", engineName(`"" uses the [gateway] engine`), "", func(t *tunnelSide) *string { return &t.Engine }),
	field("mtu", mtu(), 0, func(t *tunnelSide) *int { return &t.MTU }),
)

// ToFile returns the tunnel as a [[tunnel]] that ParseGateway reads back
// into t.
func (t *Tunnel) ToFile() FileTunnel {
	return tunnelRules.encode(&tunnelSide{Tunnel: *t}).Interface().(FileTunnel)
}

func (d *gwDecoder) tunnel(te tableElem) {
	tn := decodeElem(d, tunnelRules, te, (*gwDecoder).tunnelAfter)
	d.g.Tunnels = append(d.g.Tunnels, tn.Tunnel)
	d.tunnelFields = append(d.tunnelFields, te.field)
}

// tunnelIn reads a tunnel's in: 1 to MaxInboundSAs names of SAs.
func (d *gwDecoder) tunnelIn(f string, e *Entry, tn *tunnelSide) bool {
	v := e.Value
	elems, ok := d.strList(f, v, `in = ["b-to-a"]`)
	if !ok {
		return false
	}
	if len(elems) == 0 {
		d.errorf(v.Pos, f, "no inbound SA (want 1 to %d names of [[sa]] tables)", MaxInboundSAs)
		return false
	}
	for i, ev := range elems {
		ef := elemPath(f, i)
		s, _ := ev.Str()
		switch {
		case i == MaxInboundSAs:
			d.errorf(ev.Pos, ef, "too many inbound SAs: a tunnel has at most %d (the current one and those of rekeys still draining)", MaxInboundSAs)
		case i > MaxInboundSAs:
		case s == "":
			d.errorf(ev.Pos, ef, "empty SA name (want the name of an inbound [[sa]])")
		default:
			tn.In = append(tn.In, s)
			d.refs = append(d.refs, saRef{tunnel: len(d.g.Tunnels), field: ef, name: s})
		}
	}
	return true
}

// tunnelAfter checks a tunnel once its keys are read: its addresses
// against each other, its peer_port against its encap, its MTU against
// its IPv6 routes.
func (d *gwDecoder) tunnelAfter(te tableElem, _ map[string]bool, tn *tunnelSide) {
	f := te.field
	if tn.localOK && tn.peerOK {
		switch {
		case tn.Local.Is4() != tn.Peer.Is4():
			d.errorf(tn.peerE.Value.Pos, f+".peer", "address family of %s (%s) differs from local %s (%s)", tn.Peer, family(tn.Peer), tn.Local, family(tn.Local))
		case tn.Local == tn.Peer:
			d.errorf(tn.peerE.Value.Pos, f+".peer", "peer %s is the local address too (%s)", tn.Peer, d.line(f+".local"))
		}
	}

	if tn.peerPortE != nil {
		if p, ok := d.udpPort(f+".peer_port", tn.peerPortE.Value, tn.Encap, !tn.encapBad, "peer_port", "a port is"); ok {
			tn.PeerPort = p
		}
	} else if tn.Encap == EncapUDP {
		tn.PeerPort = DefaultUDPPort
	}

	for _, ip := range tn.Remote {
		if ip.Addr().Is6() && tn.MTU != 0 && tn.MTU < MinIPv6MTU {
			d.errorf(d.at(f+".mtu"), f+".mtu", "MTU %d is too small for the IPv6 prefix %s in remote (IPv6 needs at least %d, RFC 8200 section 5)", tn.MTU, ip, MinIPv6MTU)
			break
		}
	}
}

// parseEndpoint parses a tunnel's local or peer address.
func parseEndpoint(s string) (netip.Addr, string) {
	a, msg := parseAddr(s)
	if msg == "" && (a.IsUnspecified() || a.IsMulticast()) {
		return netip.Addr{}, fmt.Sprintf("%s cannot be a tunnel endpoint (want a unicast address)", a)
	}
	return a, msg
}

// [[policy]]

var (
	actions    = []string{ActionProtect, ActionBypass, ActionDiscard}
	protoNames = []struct {
		name  string
		proto uint8
	}{{"any", ProtoAny}, {"tcp", ProtoTCP}, {"udp", ProtoUDP}, {"icmp", ProtoICMP}, {"icmpv6", ProtoICMPv6}, {"sctp", ProtoSCTP}}
)

// policySide is a [[policy]] being read: what the checks across its keys
// need.
type policySide struct {
	Policy
	tunnelE, protoE          *Entry
	srcBad, dstBad, protoBad bool
	actionOK                 bool
}

// policyRules are the keys of a [[policy]].
var policyRules = newSection(reflect.TypeFor[FilePolicy](),
	field("name", nameOf("empty name (leave the key out for an unnamed policy)"), "", func(p *policySide) *string { return &p.Name }),
	rule[policySide]{key: "src", read: func(d *gwDecoder, f string, e *Entry, p *policySide) bool {
		var ok bool
		p.Src, ok = parsed(&d.decoder, f, e.Value, parseSelector)
		p.srcBad = !ok
		return ok
	}, write: func(p *policySide) (any, bool) { return p.Src.String(), p.Src.IsValid() }},
	rule[policySide]{key: "dst", read: func(d *gwDecoder, f string, e *Entry, p *policySide) bool {
		var ok bool
		p.Dst, ok = parsed(&d.decoder, f, e.Value, parseSelector)
		p.dstBad = !ok
		return ok
	}, write: func(p *policySide) (any, bool) { return p.Dst.String(), p.Dst.IsValid() }},
	rule[policySide]{key: "proto", read: func(d *gwDecoder, f string, e *Entry, p *policySide) bool {
		var ok bool
		p.protoE = e
		p.Proto, ok = d.proto(f, e.Value)
		p.protoBad = !ok
		return ok
	}, write: func(p *policySide) (any, bool) { return protoName(p.Proto), p.Proto != ProtoAny }},
	field("sport", portRange(), anyPorts, func(p *policySide) *[2]uint16 { return &p.SPort }),
	field("dport", portRange(), anyPorts, func(p *policySide) *[2]uint16 { return &p.DPort }),
	rule[policySide]{key: "action", read: func(d *gwDecoder, f string, e *Entry, p *policySide) bool {
		p.Action, p.actionOK = d.oneOf(f, e.Value, "action", actions, "")
		return p.actionOK
	}, write: func(p *policySide) (any, bool) { return p.Action, p.Action != "" }}.required("protect, bypass or discard"),
	rule[policySide]{key: "tunnel", read: func(d *gwDecoder, f string, e *Entry, p *policySide) bool {
		p.tunnelE = e
		s, ok := d.checked(f, e.Value, nonEmpty("empty tunnel name (want the name of a [[tunnel]])"))
		if ok {
			p.Tunnel = s
		}
		return ok
	}, write: func(p *policySide) (any, bool) { return p.Tunnel, p.Tunnel != "" }},
)

// ToFile returns the policy as a [[policy]] that ParseGateway reads back
// into p.
func (p *Policy) ToFile() FilePolicy {
	return policyRules.encode(&policySide{Policy: *p}).Interface().(FilePolicy)
}

// portRange reads sport or dport (see decoder.ports).
func portRange() codec[[2]uint16] {
	return codec[[2]uint16]{
		read: func(d *gwDecoder, f string, e *Entry) ([2]uint16, bool) { return d.ports(f, e.Value) },
		write: func(r [2]uint16) any {
			if r[0] == r[1] {
				return strconv.Itoa(int(r[0]))
			}
			return fmt.Sprintf("%d-%d", r[0], r[1])
		},
	}
}

func (d *gwDecoder) policy(te tableElem) {
	p := decodeElem(d, policyRules, te, (*gwDecoder).policyAfter)
	d.g.Policies = append(d.g.Policies, p.Policy)
	d.policyFields = append(d.policyFields, te.field)
}

// policyAfter checks a policy once its keys are read: its tunnel against
// its action, its addresses and protocol against each other, its ports
// against its protocol.
func (d *gwDecoder) policyAfter(te tableElem, _ map[string]bool, p *policySide) {
	f := te.field
	if p.actionOK {
		switch {
		case p.Action == ActionProtect && p.tunnelE == nil:
			d.errorf(te.pos, f+".tunnel", "missing required key for action = \"protect\" (the name of the [[tunnel]] whose outbound SA protects the traffic)")
		case p.Action != ActionProtect && p.tunnelE != nil:
			d.errorf(p.tunnelE.Value.Pos, f+".tunnel", "action %q takes no tunnel (only protect does)", p.Action)
			p.Tunnel = ""
		}
	}

	srcOK, dstOK := !p.srcBad, !p.dstBad
	if srcOK && dstOK && p.Src.IsValid() && p.Dst.IsValid() && p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
		d.errorf(d.at(f+".dst"), f+".dst", "address family of %s (%s) differs from src %s (%s)", p.Dst, family(p.Dst.Addr()), p.Src, family(p.Src.Addr()))
		srcOK = false
	}
	if !p.protoBad && srcOK && dstOK {
		v6 := p.Src.IsValid() && p.Src.Addr().Is6() || p.Dst.IsValid() && p.Dst.Addr().Is6()
		v4 := p.Src.IsValid() && p.Src.Addr().Is4() || p.Dst.IsValid() && p.Dst.Addr().Is4()
		switch {
		case p.Proto == ProtoICMP && v6:
			d.errorf(p.protoE.Value.Pos, f+".proto", "proto icmp (1) with IPv6 addresses, whose ICMP is icmpv6 (58)")
		case p.Proto == ProtoICMPv6 && v4:
			d.errorf(p.protoE.Value.Pos, f+".proto", "proto icmpv6 (58) with IPv4 addresses, whose ICMP is icmp (1)")
		}
	}
	if !p.protoBad && p.Proto != ProtoAny && !hasPorts(p.Proto) {
		for _, k := range []string{"sport", "dport"} {
			r := p.SPort
			if k == "dport" {
				r = p.DPort
			}
			if r != anyPorts {
				d.errorf(d.at(f+"."+k), f+"."+k, "ports with proto %s, which has none (ports need tcp, udp, sctp or any)", protoName(p.Proto))
			}
		}
	}
}

func hasPorts(proto uint8) bool {
	return proto == ProtoTCP || proto == ProtoUDP || proto == ProtoSCTP
}

func protoName(proto uint8) string {
	for _, pn := range protoNames {
		if pn.proto == proto {
			return pn.name
		}
	}
	return strconv.Itoa(int(proto))
}

// proto reads a policy's protocol: a name, or a number as an integer or a
// string.
func (d *decoder) proto(f string, v *Value) (uint8, bool) {
	const want = "valid: any, tcp, udp, icmp, icmpv6, sctp, or a protocol number 0..255"
	if i, ok := v.Int(); ok {
		if i < 0 || i > 255 {
			d.errorf(v.Pos, f, "protocol %d out of range (%s)", i, want)
			return 0, false
		}
		return uint8(i), true
	}
	s, ok := d.str(f, v)
	if !ok {
		return 0, false
	}
	for _, pn := range protoNames {
		if pn.name == s {
			return pn.proto, true
		}
	}
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return uint8(n), true
	}
	for _, pn := range protoNames {
		if strings.EqualFold(pn.name, s) {
			d.errorf(v.Pos, f, "unknown protocol %s (names are lowercase: did you mean %s?)", shortQuote(s), pn.name)
			return 0, false
		}
	}
	d.errorf(v.Pos, f, "unknown protocol %s (%s)", shortQuote(s), want)
	return 0, false
}

// ports reads a policy's port selector: "any", "443", "1024-65535", or an
// integer.
func (d *decoder) ports(f string, v *Value) ([2]uint16, bool) {
	const want = `want "any", a port such as "443", or a range such as "1024-65535"`
	if i, ok := v.Int(); ok {
		if i < 0 || i > 65535 {
			d.errorf(v.Pos, f, "port %d out of range (want 0..65535)", i)
			return anyPorts, false
		}
		return [2]uint16{uint16(i), uint16(i)}, true
	}
	s, ok := d.str(f, v)
	if !ok {
		return anyPorts, false
	}
	if s == "any" {
		return anyPorts, true
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	h, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil {
		d.errorf(v.Pos, f, "invalid port selector %s (%s; ports are 0..65535)", shortQuote(s), want)
		return anyPorts, false
	}
	if l > h {
		d.errorf(v.Pos, f, "port range %s is reversed (want low-high, e.g. %d-%d)", shortQuote(s), h, l)
		return anyPorts, false
	}
	return [2]uint16{uint16(l), uint16(h)}, true
}

// The second pass.

func (d *gwDecoder) crossCheck() {
	g := d.g
	hasTLS := len(g.TLS) > 0 || len(g.TLSOrigins) > 0 || d.failed("tls") || d.failed("tls_origin")
	switch {
	case len(g.Tunnels) > 0 || d.failed("tunnel") || len(g.Connections) > 0 || d.failed("connection"):
	case g.EmptyIPsec():
		// An IPsec gateway with nothing in it yet: tunnels come by a
		// reload or config.apply.
	case hasTLS:
		d.tlsOnlySections()
	default:
		pos := d.at("tunnel")
		d.errorf(pos, "tunnel", "no [[tunnel]] or [[connection]]: the gateway needs at least one (a [[tunnel]] with name, local, peer, out, in; or an IKE [[connection]]), or TLS sections ([[tls]], [[tls_origin]]) for a TLS-only gateway, or a [udp] or [rawesp] section for an IPsec gateway whose tunnels come later")
	}
	d.crossCheckTLS()
	d.uniqueTunnelNames()
	d.crossCheckIKE()
	d.crossCheckHA()
	d.sockets()
	d.linkSAs()
	d.routes()
	d.linkPolicies()
	d.tunMTU()
}

// uniqueTunnelNames reports tunnels and policies that share a name.
func (d *gwDecoder) uniqueTunnelNames() {
	d.uniqueNames("tunnel", d.tunnelFields, func(i int) string { return d.g.Tunnels[i].Name })
	d.uniqueNames("policy", d.policyFields, func(i int) string { return d.g.Policies[i].Name })
}

// uniqueNames reports the tables of one kind (what), whose fields are
// fields, that share a name; name(i) is the name of fields[i].
func (d *gwDecoder) uniqueNames(what string, fields []string, name func(i int) string) {
	seen := make(map[string]int)
	for i, tf := range fields {
		f := tf + ".name"
		n := name(i)
		if n == "" || d.failed(f) {
			continue
		}
		if j, dup := seen[n]; dup {
			d.errorf(d.at(f), f, "duplicate %s name %s: %s (line %d) and %s (line %d)",
				what, shortQuote(n), fields[j], d.at(fields[j]+".name").Line, tf, d.at(f).Line)
			continue
		}
		seen[n] = i
	}
}

// sockets supplies [udp] and [rawesp] when tunnels need them and the file
// has none, and checks that each tunnel's local address is one its socket
// is bound to.
func (d *gwDecoder) sockets() {
	g := d.g
	need := map[Encap]bool{}
	need6 := map[Encap]bool{}
	for i := range g.Tunnels {
		tn, tf := &g.Tunnels[i], d.tunnelFields[i]
		if d.failed(tf + ".encap") {
			continue
		}
		need[tn.Encap] = true
		if tn.Local.Is6() && !d.failed(tf+".local") {
			need6[tn.Encap] = true
		}
	}
	// IKE runs on the ESP-in-UDP socket's port (4500, with the non-ESP
	// marker); a connection without encap may carry ESP as protocol 50.
	for i := range g.Connections {
		c := &g.Connections[i]
		encs := []Encap{EncapUDP}
		if !c.Encap {
			encs = append(encs, EncapNone)
		}
		for _, e := range encs {
			need[e] = true
			if c.Local.Is6() {
				need6[e] = true
			}
		}
	}
	unspecified := func(v6 bool) netip.Addr {
		if v6 {
			return netip.IPv6Unspecified()
		}
		return netip.IPv4Unspecified()
	}
	if need[EncapUDP] && g.UDP == nil && !d.failed("udp") {
		u := udpRules.defaults()
		g.UDP = &u
	}
	if g.UDP != nil && !g.UDP.Listen.IsValid() {
		g.UDP.Listen = netip.AddrPortFrom(unspecified(need6[EncapUDP]), DefaultUDPPort)
	}
	if need[EncapNone] && g.RawESP == nil && !d.failed("rawesp") {
		g.RawESP = &RawESP{}
	}
	if g.RawESP != nil && !g.RawESP.Listen.IsValid() {
		g.RawESP.Listen = unspecified(need6[EncapNone])
	}

	for i := range g.Tunnels {
		tn, tf := &g.Tunnels[i], d.tunnelFields[i]
		if d.failed(tf+".encap") || !tn.Local.IsValid() || d.failed(tf+".local") {
			continue
		}
		var listen netip.Addr
		var field, shown string
		switch {
		case tn.Encap == EncapUDP && g.UDP != nil && !d.failed("udp.listen"):
			listen, field, shown = g.UDP.Listen.Addr(), "udp.listen", g.UDP.Listen.String()
		case tn.Encap == EncapNone && g.RawESP != nil && !d.failed("rawesp.listen"):
			listen, field, shown = g.RawESP.Listen, "rawesp.listen", g.RawESP.Listen.String()
		default:
			continue
		}
		switch {
		case listen.IsUnspecified() && listen.Is4() && tn.Local.Is6():
			d.errorf(d.at(tf+".local"), tf+".local", "IPv6 local address %s, but %s %s (%s) takes IPv4 only: listen on :: for both families",
				tn.Local, field, shown, d.where(field))
		case !listen.IsUnspecified() && listen != tn.Local:
			d.errorf(d.at(tf+".local"), tf+".local", "local %s is not %s %s (%s): the tunnel sends and receives on that socket",
				tn.Local, field, listen, d.where(field))
		}
	}
	for i := range g.Connections {
		c, cf := &g.Connections[i], d.connFields[i]+".local_addrs"
		if !c.Local.IsValid() || d.failed(cf) || g.UDP == nil || d.failed("udp.listen") {
			continue
		}
		switch listen := g.UDP.Listen.Addr(); {
		case listen.IsUnspecified() && listen.Is4() && c.Local.Is6():
			d.errorf(d.at(cf), cf, "IPv6 local address %s, but udp.listen %s (%s) takes IPv4 only: listen on :: for both families",
				c.Local, g.UDP.Listen, d.where("udp.listen"))
		case !listen.IsUnspecified() && listen != c.Local:
			d.errorf(d.at(cf), cf, "local %s is not udp.listen %s (%s): IKE and ESP in UDP use that socket",
				c.Local, listen, d.where("udp.listen"))
		}
	}
}

// linkSAs resolves the tunnels' SA names and checks each SA against its
// tunnel.
func (d *gwDecoder) linkSAs() {
	g := d.g
	byName := make(map[string]int)
	for i := range g.SAs {
		if n := g.SAs[i].Name; n != "" {
			if _, dup := byName[n]; !dup {
				byName[n] = i
			}
		}
	}
	used := make(map[int]saRef)
	inboundSPI := make(map[uint32]int) // SPI -> SA index, inbound SAs only
	for _, ref := range d.refs {
		si, ok := byName[ref.name]
		if !ok {
			d.errorf(d.at(ref.field), ref.field, "no [[sa]] named %s %s", shortQuote(ref.name), d.saNames())
			continue
		}
		tn := &g.Tunnels[ref.tunnel]
		if prev, dup := used[si]; dup {
			d.errorf(d.at(ref.field), ref.field, "SA %s is already the %s SA of tunnel %s (%s): an SA belongs to one tunnel and one direction",
				shortQuote(ref.name), direction(prev.out), shortQuote(g.Tunnels[prev.tunnel].Name), d.line(prev.field))
			continue
		}
		used[si] = ref
		sf := d.saTables[si].field
		if d.failed(sf) {
			continue
		}
		sa := &g.SAs[si]
		if !ref.out {
			if sj, dup := inboundSPI[sa.SPI]; dup {
				pf := d.saTables[sj].field
				d.errorf(d.at(sf+".spi"), sf+".spi", "inbound SPI 0x%08x is also the SPI of %s %s (line %d), another inbound SA: the gateway finds inbound SAs by SPI alone",
					sa.SPI, pf, shortQuote(g.SAs[sj].Name), d.at(pf+".spi").Line)
			} else {
				inboundSPI[sa.SPI] = si
			}
		}
		d.checkSA(ref, tn, sa, sf)
	}
}

func direction(out bool) string {
	if out {
		return "outbound"
	}
	return "inbound"
}

// saNames lists the names that tunnels may refer to, for a message about a
// name that is not among them.
func (d *gwDecoder) saNames() string {
	var names []string
	unnamed := 0
	for i := range d.g.SAs {
		n := d.g.SAs[i].Name
		switch {
		case n == "":
			unnamed++
		case !slices.Contains(names, shortQuote(n)):
			names = append(names, shortQuote(n))
		}
	}
	var b strings.Builder
	b.WriteByte('(')
	const max = 10
	switch {
	case len(names) == 0:
		b.WriteString("no [[sa]] in the file has a name")
	case len(names) > max:
		fmt.Fprintf(&b, "named SAs: %s, and %d more", strings.Join(names[:max], ", "), len(names)-max)
	default:
		b.WriteString("named SAs: " + strings.Join(names, ", "))
	}
	if unnamed > 0 {
		fmt.Fprintf(&b, "; %d [[sa]] without a name cannot be used by a tunnel until it is given one", unnamed)
	}
	b.WriteByte(')')
	return b.String()
}

// checkSA checks the SA sa (field sf), which ref names, against tunnel tn.
// Errors go on the SA's field, naming the tunnel.
func (d *gwDecoder) checkSA(ref saRef, tn *Tunnel, sa *SA, sf string) {
	tf := d.tunnelFields[ref.tunnel]
	c := tunnelSACheck{tn: tn, sa: sa, out: ref.out, udp: d.g.UDP,
		who:      fmt.Sprintf("tunnel %s (%s)", shortQuote(tn.Name), d.line(ref.field)),
		udpWhere: d.where("udp.listen"),
		failed: func(key string) bool {
			if key == "udp.listen" {
				return d.failed(key)
			}
			return d.failed(tf + "." + key)
		},
		defaultEncap: !d.has(sf + ".encap"),
	}
	for _, f := range c.run() {
		d.errorf(d.at(sf+"."+f.key), sf+"."+f.key, "%s", f.msg)
	}
}

// tunnelSACheck checks an SA against the tunnel that uses it in one
// direction. It is the one check for SAs of the file, of a reload (both
// decoded here) and of the control socket (Gateway.CheckTunnelSA).
type tunnelSACheck struct {
	tn           *Tunnel
	sa           *SA
	out          bool
	udp          *UDP                  // the gateway's [udp], or nil
	who          string                // the tunnel in messages: `tunnel "t" (tunnel[1].out, line 12)`
	udpWhere     string                // where udp.listen comes from, in messages
	failed       func(key string) bool // a tunnel key ("local", ...) or "udp.listen" whose value failed: skip its checks
	defaultEncap bool                  // the SA's encap is the SA file's default
}

// saFinding is one problem: the SA key it is about and the message.
type saFinding struct{ key, msg string }

func (c *tunnelSACheck) run() []saFinding {
	tn, sa := c.tn, c.sa
	var out []saFinding
	add := func(key, format string, args ...any) {
		out = append(out, saFinding{key, fmt.Sprintf(format, args...)})
	}
	dir := direction(c.out)
	if sa.Mode != ModeTunnel {
		add("mode", "mode %q, but %s uses this SA: a tunnel's SAs need mode = \"tunnel\"", sa.Mode, c.who)
	}
	if tn.Local.IsValid() && tn.Peer.IsValid() && !c.failed("local") && !c.failed("peer") {
		src, dst, srcKey, dstKey := tn.Local, tn.Peer, "local", "peer"
		if !c.out {
			src, dst, srcKey, dstKey = dst, src, dstKey, srcKey
		}
		if sa.Src.IsValid() && sa.Src != src {
			add("src", "src %s is not the %s address %s of %s, whose %s SA this is", sa.Src, srcKey, src, c.who, dir)
		}
		if sa.Dst.IsValid() && sa.Dst != dst {
			add("dst", "dst %s is not the %s address %s of %s, whose %s SA this is", sa.Dst, dstKey, dst, c.who, dir)
		}
	}
	if c.failed("encap") {
		return out
	}
	if sa.Encap != tn.Encap {
		dflt := ""
		if c.defaultEncap {
			dflt = " (the SA file's default)"
		}
		add("encap", "encap %q%s, but %s has encap = %q: a tunnel's SAs use its encapsulation", sa.Encap, dflt, c.who, tn.Encap)
		return out
	}
	if !c.out || tn.Encap != EncapUDP {
		// Inbound ports are whatever the peer's packets carry after any
		// NAT on the way; only the outbound ones are ours to choose.
		return out
	}
	if !c.failed("peer_port") && sa.DPort != tn.PeerPort {
		add("dport", "dport %d is not the peer_port %d of %s, whose outbound SA this is", sa.DPort, tn.PeerPort, c.who)
	}
	if c.udp != nil && !c.failed("udp.listen") && sa.SPort != c.udp.Listen.Port() {
		add("sport", "sport %d is not the port of udp.listen %s (%s), which the outbound SA of %s sends from",
			sa.SPort, c.udp.Listen, c.udpWhere, c.who)
	}
	return out
}

// CheckTunnelSA checks sa, one [[sa]] decoded on its own (ParseSAs), as the
// outbound (out) or inbound SA of the tunnel named tunnel, with the same
// checks, and the same messages, as a tunnel's SAs in the file get. The
// control socket's sa.add uses it, so an SA the file would refuse is
// refused there too. Errors are at sa's table (sa.Pos), with fields
// "sa.KEY"; the tunnel is named with its place in g's file.
func (g *Gateway) CheckTunnelSA(tunnel string, sa *SA, out bool) error {
	ti := -1
	for i := range g.Tunnels {
		if g.Tunnels[i].Name == tunnel {
			ti = i
		}
	}
	if ti < 0 {
		return &Error{Pos: sa.Pos, Field: "sa", Msg: fmt.Sprintf("no tunnel %s in %s", shortQuote(tunnel), g.File)}
	}
	tn := &g.Tunnels[ti]
	field := elemPath("tunnel", ti) + ".out"
	if !out {
		field = elemPath("tunnel", ti) + ".in"
	}
	where := "the default"
	if p := g.FieldPos("udp.listen"); p.Line > 0 {
		where = fmt.Sprintf("udp.listen, %s line %d", g.File, p.Line)
	}
	c := tunnelSACheck{tn: tn, sa: sa, out: out, udp: g.UDP,
		who:      fmt.Sprintf("tunnel %s (%s, %s line %d)", shortQuote(tn.Name), field, g.File, g.FieldPos(field).Line),
		udpWhere: where,
		failed:   func(string) bool { return false },
	}
	var errs Errors
	for _, f := range c.run() {
		errs = append(errs, &Error{Pos: sa.Pos, Field: "sa." + f.key, Msg: f.msg})
	}
	return errs.Err()
}

// routes reports remote prefixes of different tunnels that overlap (a
// packet to the overlap would have two tunnels), and remote prefixes that
// take in an address of the TUN device itself (usually the peer's remote
// copied by mistake).
func (d *gwDecoder) routes() {
	g := d.g
	type route struct {
		tunnel int // index into tunnels, then children
		name   string
		field  string
		p      netip.Prefix
	}
	var rs []route
	for i := range g.Tunnels {
		tf := d.tunnelFields[i] + ".remote"
		if d.failed(tf) {
			continue
		}
		for k, p := range g.Tunnels[i].Remote {
			rs = append(rs, route{i, "tunnel " + shortQuote(g.Tunnels[i].Name), elemPath(tf, k), p})
		}
	}
	n := len(g.Tunnels)
	for i := range g.Connections {
		for j, ch := range g.Connections[i].Children {
			cf := elemPath(d.connFields[i]+".children", j) + ".remote_ts"
			if !d.failed(cf) {
				for k, p := range ch.RemoteTS {
					rs = append(rs, route{n, "child " + shortQuote(ch.Name), elemPath(cf, k), p})
				}
			}
			n++
		}
	}
	for j, r := range rs {
		for _, q := range rs[:j] {
			if q.tunnel != r.tunnel && q.p.Overlaps(r.p) {
				d.errorf(d.at(r.field), r.field, "%s overlaps %s of %s (%s): routes into two tunnels would be ambiguous",
					r.p, q.p, q.name, d.line(q.field))
				break
			}
		}
	}
	if d.failed("tun.addresses") {
		return
	}
	for _, r := range rs {
		for k, a := range g.TUN.Addresses {
			if r.p.Contains(a.Addr()) && r.p.Bits() >= a.Bits() {
				d.errorf(d.at(r.field), r.field, "%s takes in %s, the TUN device's own address (%s): the local network cannot be routed into a tunnel (is this the peer's remote?)",
					r.p, a, d.line(elemPath("tun.addresses", k)))
				break
			}
		}
	}
}

// linkPolicies resolves the policies' tunnels and reports tunnels that no
// traffic can enter: no remote prefixes and no policy that protects into
// them.
func (d *gwDecoder) linkPolicies() {
	g := d.g
	byName := make(map[string]int)
	var names []string
	for i := range g.Tunnels {
		if n := g.Tunnels[i].Name; n != "" && !d.failed(d.tunnelFields[i]+".name") {
			if _, dup := byName[n]; !dup {
				byName[n] = i
				names = append(names, shortQuote(n))
			}
		}
	}
	selected := make(map[int]bool)
	unresolved := false
	for i := range g.Policies {
		p, pf := &g.Policies[i], d.policyFields[i]+".tunnel"
		if d.failed(pf) || d.failed(d.policyFields[i]+".action") {
			unresolved = true
			continue
		}
		if p.Tunnel == "" {
			continue
		}
		ti, ok := byName[p.Tunnel]
		if !ok {
			unresolved = true
			list := "the file has no valid [[tunnel]]"
			if len(names) > 0 {
				list = "tunnels: " + strings.Join(names, ", ")
			}
			d.errorf(d.at(pf), pf, "no [[tunnel]] named %s (%s)", shortQuote(p.Tunnel), list)
			continue
		}
		selected[ti] = true
	}
	if unresolved {
		return
	}
	for i := range g.Tunnels {
		tn, tf := &g.Tunnels[i], d.tunnelFields[i]
		if len(tn.Remote) > 0 || selected[i] || d.failed(tf+".remote") || d.failed(tf+".name") || tn.Name == "" {
			continue
		}
		how := "no [[policy]] protects into it"
		if len(g.Policies) == 0 {
			how = "there are no [[policy]] tables"
		}
		d.errorf(d.at(tf+".remote"), tf+".remote", "no traffic can enter tunnel %s: it has no remote prefixes and %s (list the inner prefixes behind the peer, e.g. remote = [\"10.2.0.0/24\"])",
			shortQuote(tn.Name), how)
	}
}

// tunMTU checks a TUN MTU that is set against IPv6, which needs 1280.
func (d *gwDecoder) tunMTU() {
	g := d.g
	if g.TUN.MTU == 0 || g.TUN.MTU >= MinIPv6MTU {
		return
	}
	why := ""
	for _, a := range g.TUN.Addresses {
		if a.Addr().Is6() {
			why = "the TUN device has the IPv6 address " + a.String()
			break
		}
	}
	for i := 0; why == "" && i < len(g.Tunnels); i++ {
		for _, p := range g.Tunnels[i].Remote {
			if p.Addr().Is6() {
				why = fmt.Sprintf("tunnel %s routes the IPv6 prefix %s", shortQuote(g.Tunnels[i].Name), p)
				break
			}
		}
	}
	if why != "" {
		d.errorf(d.at("tun.mtu"), "tun.mtu", "MTU %d is too small: %s, and IPv6 needs at least %d (RFC 8200 section 5)", g.TUN.MTU, why, MinIPv6MTU)
	}
}
