// Package config reads sluice's configuration files: the SA file, described
// here, and the gateway configuration, which embeds the SA file's [[sa]]
// tables (see Gateway and LoadGateway).
//
// The SA file is TOML holding one [[sa]] table per security association:
//
//	[[sa]]
//	name = "a-to-b"              # optional, unique
//	spi = 0x1001                 # required, 256..0xffffffff
//	src = "192.0.2.1"            # optional IP address
//	dst = "192.0.2.2"            # optional IP address, same family as src
//	mode = "tunnel"              # "tunnel" (default) or "transport"
//	encap = "none"               # "none" (default) or "udp" (RFC 3948)
//	sport = 4500                 # encap = "udp" only; default 4500
//	dport = 4500                 # encap = "udp" only; default 4500
//	esp = "aes128gcm16"          # strongSwan ESP proposal keyword, required
//	enc_key = "0x0011...babe"    # hex; AEAD: key then 4-byte salt
//	auth_key = ""                # hex HMAC key, CBC and NULL suites only
//	esn = false
//	replay_window = 64           # 0 turns anti-replay off; 0..65536
//	seq = 0                      # < 2^32 unless esn = true
//
// Errors carry the file, line, column and field they are about, and all the
// errors found in a file are reported together, in file order.
package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicegw/sluice/cryptodev"
)

// Mode is the ESP mode of an SA.
type Mode string

// The ESP modes.
const (
	ModeTunnel    Mode = "tunnel"
	ModeTransport Mode = "transport"
)

// Encap is how ESP packets travel.
type Encap string

// The encapsulations.
const (
	EncapNone Encap = "none" // IP protocol 50
	EncapUDP  Encap = "udp"  // UDP encapsulation, RFC 3948
)

// Defaults and limits of the SA file.
const (
	MinSPI              = 256 // 1..255 are reserved by IANA (RFC 4303 section 2.1)
	DefaultUDPPort      = 4500
	DefaultReplayWindow = 64
	MaxReplayWindow     = 65536
)

// SA is one security association from the SA file.
type SA struct {
	Name         string
	SPI          uint32
	Src, Dst     netip.Addr // zero Addr when not given
	Mode         Mode
	Encap        Encap
	SPort, DPort uint16 // zero unless Encap is EncapUDP
	Alg          cryptodev.Alg
	EncKey       []byte // AEAD suites: the key followed by the salt
	AuthKey      []byte // HMAC key of the CBC and NULL suites
	ESN          bool
	ReplayWindow int    // packets; 0 turns anti-replay off
	Seq          uint64 // outbound: last number sent; inbound: highest received
	Pos          Pos    // where its [[sa]] table starts
}

// String describes the SA in one short line, without key material.
func (sa *SA) String() string {
	var b strings.Builder
	if sa.Name != "" {
		b.WriteString(printableName(sa.Name))
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "spi=0x%08x %s->%s %s", sa.SPI, addrString(sa.Src), addrString(sa.Dst), sa.Mode)
	if sa.Encap == EncapUDP {
		fmt.Fprintf(&b, " udp %d->%d", sa.SPort, sa.DPort)
	}
	fmt.Fprintf(&b, " %s", sa.Alg)
	if sa.ESN {
		b.WriteString(" esn")
	}
	fmt.Fprintf(&b, " replay=%d", sa.ReplayWindow)
	return b.String()
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return "any"
	}
	return a.String()
}

func printableName(s string) string {
	for _, r := range s {
		if r == ' ' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// LoadSAFile reads and parses an SA file. See ParseSAs; a file that cannot
// be read gives the os error unchanged.
func LoadSAFile(path string) ([]SA, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSAs(path, data)
}

// ParseSAs parses the contents of an SA file; filename is used in messages.
// On failure it returns nil and an Errors holding every error found. A file
// without [[sa]] tables is valid and yields no SAs.
func ParseSAs(filename string, data []byte) ([]SA, error) {
	doc, err := ParseDocument(filename, data)
	if err != nil {
		return nil, err
	}
	var errs Errors
	var sas []SA
	for _, e := range doc.Root.Entries() {
		if e.Key == "sa" {
			var es Errors
			sas, es = DecodeSAs("sa", e.Value)
			errs = append(errs, es...)
			continue
		}
		errs = append(errs, unknownKey(e, fieldPath("", e.Key), []string{"sa"}, "the SA file holds only [[sa]] tables"))
	}
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return sas, nil
}

// DecodeSAs decodes the value of an "sa" key: an array of tables ([[sa]] or
// sa = [{...}]). field names it in messages (e.g. "sa"; elements become
// "sa[1]", "sa[2]", ...). Besides checking each SA it rejects duplicate
// names and conflicting SPIs. It returns the SAs that decoded, and the
// errors in file order; callers should not use the SAs when there are
// errors.
func DecodeSAs(field string, v *Value) ([]SA, Errors) {
	d := gwDecoder{g: &Gateway{}}
	sas, _ := d.decodeSAs(field, v)
	d.errs.Sort()
	return sas, d.errs
}

// decodeSAs is DecodeSAs adding its errors to d. It also returns the table
// each SA came from (sas[i] from tables[i]), so that a document embedding
// the SAs (the gateway configuration) can point at their fields.
func (d *gwDecoder) decodeSAs(field string, v *Value) ([]SA, []tableElem) {
	tables, ok := d.arrayOfTables(field, v)
	if !ok {
		return nil, nil
	}
	sas := make([]SA, 0, len(tables))
	metas := make([]saMeta, 0, len(tables))
	for _, te := range tables {
		sa, m := d.decode(te.field, te.pos, te.t)
		sas = append(sas, sa)
		metas = append(metas, m)
	}
	d.checkUnique(sas, metas)
	return sas, tables
}

// saMeta remembers, for the checks across SAs, where an SA's fields are and
// which of them decoded.
type saMeta struct {
	field           string // "sa[2]"
	namePos, spiPos Pos
	nameOK, spiOK   bool
	dstOK           bool // dst is absent or valid
	spiSeen         bool
}

var (
	// the values of mode and encap, in the SA file and the gateway
	// configuration
	modes  = []string{string(ModeTunnel), string(ModeTransport)}
	encaps = []string{string(EncapNone), string(EncapUDP)}

	spiRange    = fmt.Sprintf("%d..0xffffffff; 1..255 are reserved by IANA, RFC 4303 section 2.1, and 0 is never sent", MinSPI)
	replayRange = fmt.Sprintf("0..%d packets; 0 turns anti-replay off", MaxReplayWindow)
)

// hexKey is an enc_key or auth_key as read, before the checks that need the
// algorithm.
type hexKey struct {
	e  *Entry // nil when the key is left out
	b  []byte
	ok bool // the value is a string of hex
}

// saSide is an [[sa]] being read: what the checks across its keys need.
type saSide struct {
	SA
	m                          saMeta
	sportE, dportE, seqE, dstE *Entry
	enc, auth                  hexKey
	algOK, encapBad, haveESP   bool
	srcOK, seqOK               bool
	seq                        int64
}

// saRules are the keys of an [[sa]] table, in documentation order.
var saRules = newSection(reflect.TypeFor[FileSA](),
	rule[saSide]{key: "name", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		s.m.namePos = e.Value.Pos
		s.Name, s.m.nameOK = d.name(f, e.Value, "empty name (leave the key out for an unnamed SA)")
		return s.m.nameOK
	}, write: func(s *saSide) (any, bool) { return s.Name, s.Name != "" }},
	rule[saSide]{key: "spi", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		s.m.spiSeen, s.m.spiPos = true, e.Value.Pos
		i, ok := d.intIn(f, e.Value, "SPI", MinSPI, 0xffffffff, spiRange)
		if ok {
			s.SPI, s.m.spiOK = uint32(i), true
		}
		return ok
	}, write: func(s *saSide) (any, bool) { return s.SPI, true }}.required(fmt.Sprintf("an integer %d..0xffffffff", MinSPI)),
	rule[saSide]{key: "src", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		a, ok := parsed(&d.decoder, f, e.Value, parseAddr)
		if ok {
			s.Src, s.srcOK = a, true
		}
		return ok
	}, write: func(s *saSide) (any, bool) { return s.Src.String(), s.Src.IsValid() }},
	rule[saSide]{key: "dst", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		s.dstE, s.m.dstOK = e, false
		a, ok := parsed(&d.decoder, f, e.Value, parseAddr)
		if ok {
			s.Dst, s.m.dstOK = a, true
		}
		return ok
	}, write: func(s *saSide) (any, bool) { return s.Dst.String(), s.Dst.IsValid() }},
	rule[saSide]{key: "mode", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		v, ok := d.oneOf(f, e.Value, "mode", modes, "tunnel, transport")
		if ok {
			s.Mode = Mode(v)
		}
		return ok
	}, init: func(s *saSide) { s.Mode = ModeTunnel }, write: func(s *saSide) (any, bool) { return string(s.Mode), s.Mode != ModeTunnel }},
	rule[saSide]{key: "encap", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		v, ok := d.oneOf(f, e.Value, "encapsulation", encaps, "none for IP protocol 50, udp for RFC 3948 UDP encapsulation")
		if ok {
			s.Encap = Encap(v)
		}
		s.encapBad = !ok
		return ok
	}, init: func(s *saSide) { s.Encap = EncapNone }, write: func(s *saSide) (any, bool) { return string(s.Encap), s.Encap != EncapNone }},
	// sport and dport depend on encap, which may come after them:
	// saAfter reads them.
	rule[saSide]{key: "sport", read: func(_ *gwDecoder, _ string, e *Entry, s *saSide) bool { s.sportE = e; return true },
		write: func(s *saSide) (any, bool) { return s.SPort, s.SPort != 0 && s.SPort != DefaultUDPPort }},
	rule[saSide]{key: "dport", read: func(_ *gwDecoder, _ string, e *Entry, s *saSide) bool { s.dportE = e; return true },
		write: func(s *saSide) (any, bool) { return s.DPort, s.DPort != 0 && s.DPort != DefaultUDPPort }},
	rule[saSide]{key: "esp", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		s.haveESP = true
		s.Alg, s.algOK = parsed(&d.decoder, f, e.Value, parseAlg)
		return s.algOK
	}, write: func(s *saSide) (any, bool) { return s.Alg.String(), true }}.required("an ESP algorithm: "+algList()),
	// The keys' lengths depend on esp: saAfter checks them.
	rule[saSide]{key: "enc_key", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool { s.enc = d.hexKey(f, e); return s.enc.ok },
		write: func(s *saSide) (any, bool) { return hex.EncodeToString(s.EncKey), len(s.EncKey) > 0 }},
	rule[saSide]{key: "auth_key", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool { s.auth = d.hexKey(f, e); return s.auth.ok },
		write: func(s *saSide) (any, bool) { return hex.EncodeToString(s.AuthKey), len(s.AuthKey) > 0 }},
	field("esn", flag(), false, func(s *saSide) *bool { return &s.ESN }),
	field("replay_window", intIn[int]("replay window", 0, MaxReplayWindow, replayRange), DefaultReplayWindow, func(s *saSide) *int { return &s.ReplayWindow }),
	rule[saSide]{key: "seq", read: func(d *gwDecoder, f string, e *Entry, s *saSide) bool {
		s.seqE = e
		i, ok := d.integer(f, e.Value)
		if !ok {
			return false
		}
		if i < 0 {
			d.errorf(e.Value.Pos, f, "sequence number %d is negative (want 0..4294967295, or up to 2^63-1 with esn = true)", i)
			return false
		}
		s.seq, s.seqOK = i, true
		return true
	}, write: func(s *saSide) (any, bool) { return int64(s.Seq), s.Seq != 0 }},
)

// ToFile returns the SA as an [[sa]] that DecodeSAs reads back into sa
// (its Pos aside).
func (sa *SA) ToFile() FileSA {
	return saRules.encode(&saSide{SA: *sa}).Interface().(FileSA)
}

func (d *gwDecoder) decode(f string, pos Pos, t *Table) (SA, saMeta) {
	s := saRules.defaults()
	s.SA.Pos, s.m = pos, saMeta{field: f, dstOK: true}
	seen, _ := saRules.decode(d, f, pos, t, &s)
	d.saAfter(f, pos, seen, &s)
	return s.SA, s.m
}

// saAfter checks an SA once its keys are read: its addresses against each
// other, its ports against its encap, its keys against its algorithm, its
// sequence number against ESN.
func (d *gwDecoder) saAfter(f string, pos Pos, _ map[string]bool, s *saSide) {
	sa := &s.SA
	// Addresses: same family.
	if s.srcOK && s.m.dstOK && sa.Src.IsValid() && sa.Dst.IsValid() && sa.Src.Is4() != sa.Dst.Is4() {
		d.errorf(s.dstE.Value.Pos, f+".dst", "address family of %s (%s) differs from src %s (%s)",
			sa.Dst, family(sa.Dst), sa.Src, family(sa.Src))
	}

	// UDP ports: only with encap = "udp", defaulting to 4500.
	for _, pe := range []*Entry{s.sportE, s.dportE} {
		if pe == nil {
			continue
		}
		p, ok := d.udpPort(fieldPath(f, pe.Key), pe.Value, sa.Encap, !s.encapBad, "UDP port", "ports are")
		switch {
		case ok && pe == s.sportE:
			sa.SPort = p
		case ok:
			sa.DPort = p
		}
	}
	if sa.Encap == EncapUDP {
		if s.sportE == nil {
			sa.SPort = DefaultUDPPort
		}
		if s.dportE == nil {
			sa.DPort = DefaultUDPPort
		}
	}

	// Keys: their lengths depend on the algorithm.
	if s.algOK {
		sa.EncKey = d.keyFor(f+".enc_key", pos, s.enc, sa.Alg, encKeyShape(sa.Alg))
		sa.AuthKey = d.keyFor(f+".auth_key", pos, s.auth, sa.Alg, authKeyShape(sa.Alg))
	} else if !s.haveESP && s.enc.e == nil {
		d.errorf(pos, f+".enc_key", "missing required key (hex key material; its length depends on esp)")
	}

	// Sequence number: 32 bits unless ESN.
	if s.seqOK {
		if !sa.ESN && s.seq > 0xffffffff {
			d.errorf(s.seqE.Value.Pos, f+".seq", "sequence number %d needs esn = true (want 0..4294967295 without ESN)", s.seq)
		} else {
			sa.Seq = uint64(s.seq)
		}
	}
}

// hexKey reads the hex key material of entry e.
func (d *decoder) hexKey(f string, e *Entry) hexKey {
	b, ok := parsed(d, f, e.Value, parseHexKey)
	return hexKey{e: e, b: b, ok: ok}
}

// keyShape is what an enc_key or auth_key of a suite must be.
type keyShape struct {
	n    int    // bytes
	what string // what they are, e.g. "HMAC-SHA-256 key"
	// none, when not "", says why the suite takes no such key: it must
	// then be left out or empty.
	none string
}

// keyFor checks key k (field f of the table at pos) against the shape alg
// wants, and returns it if it is right.
func (d *decoder) keyFor(f string, pos Pos, k hexKey, alg cryptodev.Alg, shape keyShape) []byte {
	switch {
	case shape.none != "":
		if k.ok && len(k.b) != 0 {
			d.errorf(k.e.Value.Pos, f, "must be empty for %s (%s), got %d bytes", alg, shape.none, len(k.b))
		}
	case k.e == nil:
		d.errorf(pos, f, "missing required key (for %s, want %d bytes as hex: %s)", alg, shape.n, shape.what)
	case k.ok && len(k.b) != shape.n:
		d.errorf(k.e.Value.Pos, f, "wrong length %d bytes for %s (want %d: %s)", len(k.b), alg, shape.n, shape.what)
	case k.ok:
		return k.b
	}
	return nil
}

// checkName returns what is wrong with the name of an SA, a tunnel or a
// policy, or "". empty is the message for "".
func checkName(s, empty string) string {
	if s == "" {
		return empty
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return "name contains a control or non-printable character"
		}
	}
	return ""
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// parseAddr parses a literal IP address, returning a message on failure.
func parseAddr(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if _, perr := netip.ParsePrefix(s); perr == nil {
			return netip.Addr{}, fmt.Sprintf("invalid IP address %s: want a single address, not a prefix", shortQuote(s))
		}
		return netip.Addr{}, fmt.Sprintf("invalid IP address %s (want an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1)", shortQuote(s))
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("invalid IP address %s: zones are not supported", shortQuote(s))
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Sprintf("IPv4-mapped IPv6 address %s: write the IPv4 address %s", a, a.Unmap())
	}
	return a, ""
}

// parseAlg parses the esp key of an SA.
func parseAlg(s string) (cryptodev.Alg, string) {
	alg, err := cryptodev.ParseAlg(s)
	if err != nil {
		return cryptodev.AlgInvalid, fmt.Sprintf("unknown ESP algorithm %s (valid: %s)", shortQuote(s), algList())
	}
	return alg, ""
}

// parseHexKey decodes hex key material with an optional 0x prefix. Messages
// describe the problem by position and length only, never by content.
func parseHexKey(s string) ([]byte, string) {
	digits := s
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		digits = s[2:]
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return nil, fmt.Sprintf("not hex: invalid character at position %d of the string (want hex digits with an optional 0x prefix)", len(s)-len(digits)+i+1)
		}
	}
	if len(digits)%2 != 0 {
		return nil, fmt.Sprintf("odd number of hex digits (%d)", len(digits))
	}
	b, err := hex.DecodeString(digits)
	if err != nil { // unreachable after the checks above
		return nil, "not hex"
	}
	return b, ""
}

// encKeyShape returns the enc_key a suite wants.
func encKeyShape(a cryptodev.Alg) keyShape {
	info := a.Info()
	switch {
	case a.EncKeyLen() == 0:
		return keyShape{none: "NULL encryption takes no key"}
	case info.AEAD:
		return keyShape{a.EncKeyLen(), fmt.Sprintf("%d-byte key + %d-byte salt", info.KeyLen, info.SaltLen), ""}
	}
	return keyShape{a.EncKeyLen(), fmt.Sprintf("AES-%d key", info.KeyLen*8), ""}
}

// authKeyShape returns the auth_key a suite wants.
func authKeyShape(a cryptodev.Alg) keyShape {
	info := a.Info()
	if info.AEAD {
		return keyShape{none: "an AEAD suite authenticates with its enc_key"}
	}
	name := "HMAC"
	switch info.Hash {
	case cryptodev.HashSHA256:
		name = "HMAC-SHA-256"
	case cryptodev.HashSHA384:
		name = "HMAC-SHA-384"
	case cryptodev.HashSHA512:
		name = "HMAC-SHA-512"
	}
	return keyShape{info.AuthKeyLen, name + " key", ""}
}

func algList() string {
	algs := cryptodev.Algs()
	names := make([]string, len(algs))
	for i, a := range algs {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// checkUnique reports duplicate names, and SPIs that two SAs share while
// either has no dst or both have the same dst (an inbound packet could not
// tell them apart).
func (d *decoder) checkUnique(sas []SA, metas []saMeta) {
	type spiDst struct {
		spi uint32
		dst netip.Addr
	}
	names := make(map[string]int)
	firstBySPI := make(map[uint32]int) // first SA with the SPI
	firstNoDst := make(map[uint32]int) // first SA with the SPI and no dst
	firstByDst := make(map[spiDst]int) // first SA with the SPI and dst
	for j := range sas {
		sa, m := &sas[j], &metas[j]
		if m.nameOK {
			if i, dup := names[sa.Name]; dup {
				d.errorf(m.namePos, m.field+".name", "duplicate name %s: %s (line %d) and %s (line %d)",
					shortQuote(sa.Name), metas[i].field, metas[i].namePos.Line, m.field, m.namePos.Line)
			} else {
				names[sa.Name] = j
			}
		}
		if !m.spiOK || !m.dstOK {
			continue
		}
		// Find the first earlier SA this one conflicts with.
		i, why := -1, ""
		if !sa.Dst.IsValid() {
			if k, ok := firstBySPI[sa.SPI]; ok {
				i, why = k, "and "+m.field+" has no dst"
			}
		} else {
			k1, ok1 := firstNoDst[sa.SPI]
			k2, ok2 := firstByDst[spiDst{sa.SPI, sa.Dst}]
			switch {
			case ok1 && (!ok2 || k1 < k2):
				i, why = k1, "and "+metas[k1].field+" has no dst"
			case ok2:
				i, why = k2, "with the same dst "+sa.Dst.String()
			}
		}
		if i >= 0 {
			d.errorf(m.spiPos, m.field+".spi", "duplicate SPI 0x%08x: %s (line %d) and %s (line %d) both use it %s (SAs may share an SPI only with distinct dst addresses)",
				sa.SPI, metas[i].field, metas[i].spiPos.Line, m.field, m.spiPos.Line, why)
		}
		if _, ok := firstBySPI[sa.SPI]; !ok {
			firstBySPI[sa.SPI] = j
		}
		if !sa.Dst.IsValid() {
			if _, ok := firstNoDst[sa.SPI]; !ok {
				firstNoDst[sa.SPI] = j
			}
		} else if _, ok := firstByDst[spiDst{sa.SPI, sa.Dst}]; !ok {
			firstByDst[spiDst{sa.SPI, sa.Dst}] = j
		}
	}
}
