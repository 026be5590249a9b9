package ike

// The Configuration payload (RFC 7296 section 3.15) and the attributes
// remote access needs (3.15.1), as a road warrior and its gateway use them
// in IKE_AUTH (3.15.4):
//
//	Initiator (vips = 0.0.0.0)            Responder (pools = rw)
//	HDR, SK{IDi, AUTH,
//	  CP(CFG_REQUEST: INTERNAL_IP4_ADDRESS(),
//	                  INTERNAL_IP4_DNS()),
//	  SAi2, TSi(0.0.0.0-255.255.255.255),
//	  TSr}                          -->
//	                                <--  HDR, SK{IDr, AUTH,
//	                                       CP(CFG_REPLY: INTERNAL_IP4_ADDRESS(10.3.0.1),
//	                                                     INTERNAL_IP4_DNS(10.3.0.53)),
//	                                       SAr2, TSi(10.3.0.1), TSr}
//
// A responder that cannot assign an address answers
// N(INTERNAL_ADDRESS_FAILURE) instead of the Child SA (3.15.4). An empty
// attribute in a CFG_REQUEST asks for a value of that kind; a value asks
// for that one (a 0.0.0.0 or :: value counts as empty). Attributes this
// package does not know are kept in the payload (it re-encodes as it was
// received) and ignored: the responder returns only those it supports
// (3.15.1).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
)

// Configuration payload types (section 3.15).
const (
	CfgRequest uint8 = 1
	CfgReply   uint8 = 2
	CfgSet     uint8 = 3
	CfgAck     uint8 = 4
)

// ConfigAttrType is the 15-bit type of a configuration attribute
// (section 3.15.1).
type ConfigAttrType uint16

// Configuration attribute types (section 3.15.1 and the IANA registry).
const (
	AttrInternalIP4Address  ConfigAttrType = 1
	AttrInternalIP4Netmask  ConfigAttrType = 2
	AttrInternalIP4DNS      ConfigAttrType = 3
	AttrInternalIP4NBNS     ConfigAttrType = 4
	AttrInternalIP4DHCP     ConfigAttrType = 6
	AttrApplicationVersion  ConfigAttrType = 7
	AttrInternalIP6Address  ConfigAttrType = 8
	AttrInternalIP6DNS      ConfigAttrType = 10
	AttrInternalIP6DHCP     ConfigAttrType = 12
	AttrInternalIP4Subnet   ConfigAttrType = 13
	AttrSupportedAttributes ConfigAttrType = 14
	AttrInternalIP6Subnet   ConfigAttrType = 15
)

var attrNames = map[ConfigAttrType]string{
	AttrInternalIP4Address: "INTERNAL_IP4_ADDRESS", AttrInternalIP4Netmask: "INTERNAL_IP4_NETMASK",
	AttrInternalIP4DNS: "INTERNAL_IP4_DNS", AttrInternalIP4NBNS: "INTERNAL_IP4_NBNS",
	AttrInternalIP4DHCP: "INTERNAL_IP4_DHCP", AttrApplicationVersion: "APPLICATION_VERSION",
	AttrInternalIP6Address: "INTERNAL_IP6_ADDRESS", AttrInternalIP6DNS: "INTERNAL_IP6_DNS",
	AttrInternalIP6DHCP: "INTERNAL_IP6_DHCP", AttrInternalIP4Subnet: "INTERNAL_IP4_SUBNET",
	AttrSupportedAttributes: "SUPPORTED_ATTRIBUTES", AttrInternalIP6Subnet: "INTERNAL_IP6_SUBNET",
}

func (t ConfigAttrType) String() string {
	if n, ok := attrNames[t]; ok {
		return n
	}
	return fmt.Sprintf("attribute(%d)", uint16(t))
}

// checkLen reports whether a value of n octets is one section 3.15.1's
// table allows for an attribute of type t. Types it does not list take
// any length.
func (t ConfigAttrType) checkLen(n int) error {
	var want string
	switch t {
	case AttrInternalIP4Address, AttrInternalIP4Netmask, AttrInternalIP4DNS, AttrInternalIP4NBNS, AttrInternalIP4DHCP:
		if n == 0 || n == 4 {
			return nil
		}
		want = "0 or 4"
	case AttrInternalIP6DNS, AttrInternalIP6DHCP:
		if n == 0 || n == 16 {
			return nil
		}
		want = "0 or 16"
	case AttrInternalIP4Subnet:
		if n == 0 || n == 8 {
			return nil
		}
		want = "0 or 8"
	case AttrInternalIP6Address, AttrInternalIP6Subnet:
		// The table says 17 octets for INTERNAL_IP6_SUBNET; an empty one
		// in a request is taken as for the others.
		if n == 0 || n == 17 {
			return nil
		}
		want = "0 or 17"
	case AttrSupportedAttributes:
		if n%2 == 0 {
			return nil
		}
		want = "a multiple of 2"
	default:
		return nil
	}
	return fmt.Errorf("ike: %v attribute of %d bytes (%s)", t, n, want)
}

// ConfigAttr is one configuration attribute (section 3.15.1). Value
// aliases the message it was decoded from.
type ConfigAttr struct {
	Type  ConfigAttrType
	Value []byte
}

// Addr returns the address an attribute carries: the value of an
// INTERNAL_IP4_ADDRESS, _NETMASK, _DNS, _NBNS or _DHCP, or of an
// INTERNAL_IP6_DNS or _DHCP, and the address part of an
// INTERNAL_IP6_ADDRESS. ok is false for an empty value (a request for
// one) and for any other type.
func (a ConfigAttr) Addr() (addr netip.Addr, ok bool) {
	switch a.Type {
	case AttrInternalIP4Address, AttrInternalIP4Netmask, AttrInternalIP4DNS, AttrInternalIP4NBNS, AttrInternalIP4DHCP:
		if len(a.Value) == 4 {
			return netip.AddrFrom4([4]byte(a.Value)), true
		}
	case AttrInternalIP6DNS, AttrInternalIP6DHCP:
		if len(a.Value) == 16 {
			return netip.AddrFrom16([16]byte(a.Value)), true
		}
	case AttrInternalIP6Address:
		if len(a.Value) == 17 {
			return netip.AddrFrom16([16]byte(a.Value[:16])), true
		}
	}
	return netip.Addr{}, false
}

// Prefix returns the prefix an INTERNAL_IP6_ADDRESS (address and prefix
// length), INTERNAL_IP4_SUBNET (address and netmask) or
// INTERNAL_IP6_SUBNET carries. ok is false for an empty value, a netmask
// that is not a prefix, and any other type.
func (a ConfigAttr) Prefix() (p netip.Prefix, ok bool) {
	switch a.Type {
	case AttrInternalIP6Address, AttrInternalIP6Subnet:
		if len(a.Value) == 17 && a.Value[16] <= 128 {
			return netip.PrefixFrom(netip.AddrFrom16([16]byte(a.Value[:16])), int(a.Value[16])), true
		}
	case AttrInternalIP4Subnet:
		if len(a.Value) == 8 {
			m := binary.BigEndian.Uint32(a.Value[4:])
			bits := 0
			for bits < 32 && m&(1<<(31-bits)) != 0 {
				bits++
			}
			if bits == 32 || m<<bits == 0 {
				return netip.PrefixFrom(netip.AddrFrom4([4]byte(a.Value[:4])), bits), true
			}
		}
	}
	return netip.Prefix{}, false
}

// addrAttr returns an attribute of type t carrying a; the zero Addr (or
// an unspecified one) gives the empty value of a request.
func addrAttr(t ConfigAttrType, a netip.Addr) ConfigAttr {
	if !a.IsValid() || a.IsUnspecified() {
		return ConfigAttr{Type: t}
	}
	return ConfigAttr{Type: t, Value: a.AsSlice()}
}

// ip6AddrAttr returns an INTERNAL_IP6_ADDRESS carrying p (address and
// prefix length); the zero Prefix (or an unspecified address) gives the
// empty value of a request.
func ip6AddrAttr(p netip.Prefix) ConfigAttr {
	if !p.IsValid() || p.Addr().IsUnspecified() {
		return ConfigAttr{Type: AttrInternalIP6Address}
	}
	a := p.Addr().As16()
	return ConfigAttr{Type: AttrInternalIP6Address, Value: append(a[:], byte(p.Bits()))}
}

// CP is the Configuration payload (section 3.15).
type CP struct {
	CfgType uint8
	Attrs   []ConfigAttr
}

func (p *CP) Type() PayloadType { return PayloadCP }

// decodeCP decodes a Configuration payload's body. The R bit of each
// attribute is ignored (section 3.15.1); a known attribute with a length
// section 3.15.1 does not allow, or an INTERNAL_IP6_ADDRESS with a prefix
// length over 128, is an error.
func decodeCP(b []byte) (*CP, error) {
	if len(b) < 4 {
		return nil, errors.New("ike: CP payload shorter than 4 bytes")
	}
	cp := &CP{CfgType: b[0]}
	b = b[4:]
	for len(b) > 0 {
		if len(cp.Attrs) == maxPayloads {
			return nil, errors.New("ike: too many configuration attributes")
		}
		if len(b) < 4 {
			return nil, errors.New("ike: configuration attribute cut short")
		}
		t, l := ConfigAttrType(binary.BigEndian.Uint16(b[0:2])&0x7fff), int(binary.BigEndian.Uint16(b[2:4]))
		if 4+l > len(b) {
			return nil, errors.New("ike: configuration attribute cut short")
		}
		if err := t.checkLen(l); err != nil {
			return nil, err
		}
		v := b[4 : 4+l]
		if t == AttrInternalIP6Address && l == 17 && v[16] > 128 {
			return nil, fmt.Errorf("ike: INTERNAL_IP6_ADDRESS with prefix length %d", v[16])
		}
		cp.Attrs = append(cp.Attrs, ConfigAttr{Type: t, Value: v})
		b = b[4+l:]
	}
	return cp, nil
}

func (p *CP) appendBody(b []byte) ([]byte, error) {
	b = append(b, p.CfgType, 0, 0, 0)
	for _, a := range p.Attrs {
		if len(a.Value) > 0xffff || a.Type > 0x7fff {
			return nil, fmt.Errorf("ike: configuration attribute %v of %d bytes", a.Type, len(a.Value))
		}
		b = append(b, byte(a.Type>>8), byte(a.Type), byte(len(a.Value)>>8), byte(len(a.Value)))
		b = append(b, a.Value...)
	}
	return b, nil
}

// vipRequest returns the CFG_REQUEST of an initiator that wants the
// virtual IPs vips (swanctl's vips: 0.0.0.0 or :: for any address of that
// family, another address for that one), asking for DNS servers of the
// same families.
func vipRequest(vips []netip.Addr) *CP {
	cp := &CP{CfgType: CfgRequest}
	var dns4, dns6 bool
	for _, v := range vips {
		if v.Is4() {
			cp.Attrs = append(cp.Attrs, addrAttr(AttrInternalIP4Address, v))
			dns4 = true
		} else {
			p := netip.Prefix{}
			if !v.IsUnspecified() {
				p = netip.PrefixFrom(v, 128)
			}
			cp.Attrs = append(cp.Attrs, ip6AddrAttr(p))
			dns6 = true
		}
	}
	if dns4 {
		cp.Attrs = append(cp.Attrs, ConfigAttr{Type: AttrInternalIP4DNS})
	}
	if dns6 {
		cp.Attrs = append(cp.Attrs, ConfigAttr{Type: AttrInternalIP6DNS})
	}
	return cp
}

// cpAsk is what a CFG_REQUEST asks for.
type cpAsk struct {
	// Addrs are the addresses asked for, one per INTERNAL_IP4_ADDRESS or
	// INTERNAL_IP6_ADDRESS: 0.0.0.0 or :: for any of that family.
	Addrs []netip.Addr
	// Netmask is set when an INTERNAL_IP4_NETMASK was asked for.
	Netmask bool
}

// requested returns what the CFG_REQUEST p asks for.
func (p *CP) requested() cpAsk {
	var ask cpAsk
	for _, a := range p.Attrs {
		switch a.Type {
		case AttrInternalIP4Address:
			v, ok := a.Addr()
			if !ok {
				v = netip.IPv4Unspecified()
			}
			ask.Addrs = append(ask.Addrs, v)
		case AttrInternalIP6Address:
			v, ok := a.Addr()
			if !ok {
				v = netip.IPv6Unspecified()
			}
			ask.Addrs = append(ask.Addrs, v)
		case AttrInternalIP4Netmask:
			ask.Netmask = true
		}
	}
	return ask
}

// vipReply returns the CFG_REPLY of a responder that assigned the
// addresses vips (IPv6 ones with prefix length 128) and announces the
// DNS servers dns. An INTERNAL_IP4_NETMASK (255.255.255.255: the address
// alone) answers one that was asked for.
func vipReply(vips, dns []netip.Addr, netmask bool) *CP {
	cp := &CP{CfgType: CfgReply}
	for _, v := range vips {
		if v.Is4() {
			cp.Attrs = append(cp.Attrs, addrAttr(AttrInternalIP4Address, v))
			if netmask {
				cp.Attrs = append(cp.Attrs, ConfigAttr{Type: AttrInternalIP4Netmask, Value: []byte{255, 255, 255, 255}})
				netmask = false
			}
		} else {
			cp.Attrs = append(cp.Attrs, ip6AddrAttr(netip.PrefixFrom(v, 128)))
		}
	}
	for _, d := range dns {
		t := AttrInternalIP4DNS
		if d.Is6() {
			t = AttrInternalIP6DNS
		}
		cp.Attrs = append(cp.Attrs, addrAttr(t, d))
	}
	return cp
}

// assigned returns the virtual IPs and DNS servers a CFG_REPLY names, as
// it names them (acceptVIPs decides which virtual IPs to take).
// Unspecified DNS servers are skipped.
func (p *CP) assigned() (vips, dns []netip.Addr) {
	for _, a := range p.Attrs {
		v, ok := a.Addr()
		if !ok {
			continue
		}
		switch a.Type {
		case AttrInternalIP4Address, AttrInternalIP6Address:
			vips = append(vips, v)
		case AttrInternalIP4DNS, AttrInternalIP6DNS:
			if !v.IsUnspecified() {
				dns = append(dns, v)
			}
		}
	}
	return vips, dns
}

// CheckVIP says why a, assigned by a CFG_REPLY, cannot be a host's
// virtual IP: nil for a unicast address of global or private scope; an
// error for the unspecified address, loopback, link-local, multicast,
// IPv4 broadcast (255.255.255.255), an IPv4-mapped IPv6 address or one
// with a zone. The gateway puts what passes on its TUN device.
func CheckVIP(a netip.Addr) error {
	if why := vipProblem(a); why != "" {
		return fmt.Errorf("ike: virtual IP %v is %s", a, why)
	}
	return nil
}

// vipProblem is CheckVIP's reason, "" for an address that passes.
func vipProblem(a netip.Addr) string {
	var why string
	switch {
	case !a.IsValid():
		why = "not an address"
	case a.Zone() != "":
		why = "an address with a zone"
	case a.Is4In6():
		why = "an IPv4-mapped IPv6 address"
	case a.IsUnspecified():
		why = "the unspecified address"
	case a.IsLoopback():
		why = "a loopback address"
	case a.IsLinkLocalUnicast():
		why = "a link-local address"
	case a.IsMulticast():
		why = "a multicast address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		why = "the broadcast address"
	}
	return why
}

// refusedVIP is an address of a CFG_REPLY that the initiator does not
// take, and why.
type refusedVIP struct {
	addr netip.Addr
	why  string
}

func (r refusedVIP) String() string { return r.addr.String() + ": " + r.why }

// refusedList is refused virtual IPs as a log attribute: "127.0.0.1: a
// loopback address; 10.3.0.2: a second address of its family".
type refusedList []refusedVIP

// LogValue implements slog.LogValuer.
func (rs refusedList) LogValue() slog.Value {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return slog.StringValue(strings.Join(s, "; "))
}

// acceptVIPs returns the virtual IPs an initiator that asked for asked
// (Peer.VIPs) takes of assigned, those of a CFG_REPLY (RFC 7296 section
// 3.15.4), given tsi, the TSi the responder narrowed the Child SA to: at
// most one of each family asked for, the first that CheckVIP passes and
// that tsi holds. refused are the others, with why: a responder decides
// which address we have, not which addresses our host sends from.
func acceptVIPs(assigned, asked []netip.Addr, tsi []Selector) (vips []netip.Addr, refused []refusedVIP) {
	var want4, want6 bool
	for _, a := range asked {
		want4, want6 = want4 || a.Is4(), want6 || !a.Is4()
	}
	for _, a := range assigned {
		why := vipProblem(a)
		switch {
		case why != "":
		case (a.Is4() && !want4) || (a.Is6() && !want6):
			why = "of a family not asked for"
		case slices.ContainsFunc(vips, func(v netip.Addr) bool { return v.Is4() == a.Is4() }):
			why = "a second address of its family"
		case !slices.ContainsFunc(tsi, func(s Selector) bool { return s.Contains(a) }):
			why = "outside the Child SA's TSi (" + selectorList(tsi).LogValue().String() + ")"
		}
		if why != "" {
			refused = append(refused, refusedVIP{a, why})
			continue
		}
		vips = append(vips, a)
	}
	return vips, refused
}

// Contains reports whether a is in the address range of s (whatever its
// protocol and ports).
func (s Selector) Contains(a netip.Addr) bool {
	return s.Start.BitLen() == a.BitLen() && s.Start.Compare(a) <= 0 && a.Compare(s.End) <= 0
}

// checkRemoteAccess checks the peer's Pools and VIPs.
func (p *Peer) checkRemoteAccess() error {
	for i, pool := range p.Pools {
		if pool == nil {
			return fmt.Errorf("ike: peer %q: pool %d is nil", p.Name, i+1)
		}
	}
	for _, v := range p.VIPs {
		if !v.IsValid() || v.Zone() != "" || v.Is4In6() {
			return fmt.Errorf("ike: peer %q: virtual IP %v: want an IPv4 or IPv6 address (0.0.0.0 or :: for any)", p.Name, v)
		}
	}
	return nil
}
