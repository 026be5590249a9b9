package ike

// The payloads of RFC 7296 section 3 (3.3 to 3.15), each a struct with an
// explicit decoder and encoder. Decoders check every length against the
// body they are given and alias it; encoders append to a slice.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// PayloadType is the "next payload" value naming a payload (section 3.2).
type PayloadType uint8

// Payload types (RFC 7296 section 3.2).
const (
	NoNextPayload   PayloadType = 0
	PayloadSA       PayloadType = 33
	PayloadKE       PayloadType = 34
	PayloadIDi      PayloadType = 35
	PayloadIDr      PayloadType = 36
	PayloadCERT     PayloadType = 37
	PayloadCERTREQ  PayloadType = 38
	PayloadAUTH     PayloadType = 39
	PayloadNonce    PayloadType = 40
	PayloadNotify   PayloadType = 41
	PayloadDelete   PayloadType = 42
	PayloadVendorID PayloadType = 43
	PayloadTSi      PayloadType = 44
	PayloadTSr      PayloadType = 45
	PayloadSK       PayloadType = 46
	PayloadCP       PayloadType = 47
	PayloadEAP      PayloadType = 48
	PayloadSKF      PayloadType = 53 // Encrypted Fragment (RFC 7383 section 2.5)
)

var payloadNames = map[PayloadType]string{
	PayloadSA: "SA", PayloadKE: "KE", PayloadIDi: "IDi", PayloadIDr: "IDr",
	PayloadCERT: "CERT", PayloadCERTREQ: "CERTREQ", PayloadAUTH: "AUTH",
	PayloadNonce: "Nonce", PayloadNotify: "Notify", PayloadDelete: "Delete",
	PayloadVendorID: "VendorID", PayloadTSi: "TSi", PayloadTSr: "TSr",
	PayloadSK: "SK", PayloadCP: "CP", PayloadEAP: "EAP", PayloadSKF: "SKF",
}

func (t PayloadType) String() string {
	if n, ok := payloadNames[t]; ok {
		return n
	}
	return fmt.Sprintf("payload(%d)", uint8(t))
}

// Payload is one decoded payload. The concrete types are the pointer
// types below; a payload of a type this package does not decode is an
// *Unknown.
type Payload interface {
	// Type is the payload's type (its "next payload" value).
	Type() PayloadType
	// appendBody appends the payload's body, after the generic header.
	appendBody(b []byte) ([]byte, error)
}

// decodePayload decodes the body of one payload of type typ.
func decodePayload(typ PayloadType, critical bool, body []byte) (Payload, error) {
	switch typ {
	case PayloadSA:
		return decodeSA(body)
	case PayloadKE:
		if len(body) < 4 {
			return nil, errors.New("ike: KE payload shorter than 4 bytes")
		}
		return &KE{Group: binary.BigEndian.Uint16(body[0:2]), Data: body[4:]}, nil
	case PayloadIDi, PayloadIDr:
		if len(body) < 4 {
			return nil, fmt.Errorf("ike: %v payload shorter than 4 bytes", typ)
		}
		return &ID{Responder: typ == PayloadIDr, IDType: IDType(body[0]), Data: body[4:]}, nil
	case PayloadCERT, PayloadCERTREQ:
		if len(body) < 1 {
			return nil, fmt.Errorf("ike: empty %v payload", typ)
		}
		return &Cert{Request: typ == PayloadCERTREQ, Encoding: body[0], Data: body[1:]}, nil
	case PayloadAUTH:
		if len(body) < 4 {
			return nil, errors.New("ike: AUTH payload shorter than 4 bytes")
		}
		return &Auth{Method: AuthMethod(body[0]), Data: body[4:]}, nil
	case PayloadNonce:
		// Section 3.9: 16 to 256 octets.
		if len(body) < 16 || len(body) > 256 {
			return nil, fmt.Errorf("ike: nonce of %d bytes (16..256)", len(body))
		}
		return &Nonce{Data: body}, nil
	case PayloadNotify:
		return decodeNotify(body)
	case PayloadDelete:
		return decodeDelete(body)
	case PayloadVendorID:
		return &VendorID{Data: body}, nil
	case PayloadTSi, PayloadTSr:
		return decodeTS(typ == PayloadTSr, body)
	case PayloadCP:
		return decodeCP(body)
	case PayloadEAP:
		// Section 3.16: one EAP message, its header at least (RFC 3748).
		if len(body) < 4 {
			return nil, errors.New("ike: EAP payload shorter than 4 bytes")
		}
		return &EAP{Data: body}, nil
	}
	if critical {
		return nil, fmt.Errorf("%w: type %d", ErrUnsupportedCritical, uint8(typ))
	}
	return &Unknown{T: typ, Data: body}, nil
}

// Unknown is a payload of a type this package does not decode. Its body
// is kept as it is.
type Unknown struct {
	T        PayloadType
	Critical bool
	Data     []byte
}

func (p *Unknown) Type() PayloadType                   { return p.T }
func (p *Unknown) appendBody(b []byte) ([]byte, error) { return append(b, p.Data...), nil }

// EAP is the Extensible Authentication payload (section 3.16): one EAP
// message, which package eap parses.
type EAP struct {
	Data []byte
}

func (p *EAP) Type() PayloadType                   { return PayloadEAP }
func (p *EAP) appendBody(b []byte) ([]byte, error) { return append(b, p.Data...), nil }

// Protocol IDs of proposals, notifications and deletes (section 3.3.1).
const (
	ProtoIKE uint8 = 1
	ProtoAH  uint8 = 2
	ProtoESP uint8 = 3
)

// SA is the Security Association payload (section 3.3): proposals in
// order of preference.
type SA struct {
	Proposals []Proposal
}

// Proposal is one proposal substructure (section 3.3.1). SPI is empty in
// an IKE_SA_INIT proposal and 4 bytes for ESP.
type Proposal struct {
	Num        uint8
	Protocol   uint8
	SPI        []byte
	Transforms []Transform
}

// Transform is one transform substructure (section 3.3.2). KeyLen is the
// Key Length attribute (section 3.3.5) in bits, 0 when absent. A transform
// carrying an attribute other than Key Length is marked BadAttr: section
// 3.3.6 says to reject such a transform.
type Transform struct {
	Type    TransformType
	ID      uint16
	KeyLen  uint16
	BadAttr bool
}

// attrKeyLength is the only transform attribute IKEv2 defines.
const attrKeyLength = 14

func (p *SA) Type() PayloadType { return PayloadSA }

func decodeSA(b []byte) (*SA, error) {
	sa := &SA{}
	for len(b) > 0 {
		if len(sa.Proposals) == maxPayloads {
			return nil, errors.New("ike: too many proposals")
		}
		if len(b) < 8 {
			return nil, errors.New("ike: proposal header cut short")
		}
		last, n := b[0], int(binary.BigEndian.Uint16(b[2:4]))
		if n < 8 || n > len(b) {
			return nil, fmt.Errorf("ike: proposal length %d outside 8..%d", n, len(b))
		}
		p := Proposal{Num: b[4], Protocol: b[5]}
		spiSize, nt := int(b[6]), int(b[7])
		body := b[8:n]
		if spiSize > len(body) {
			return nil, fmt.Errorf("ike: proposal SPI of %d bytes in %d", spiSize, len(body))
		}
		p.SPI, body = body[:spiSize], body[spiSize:]
		for i := 0; i < nt; i++ {
			if len(body) < 8 {
				return nil, errors.New("ike: transform cut short")
			}
			tl := int(binary.BigEndian.Uint16(body[2:4]))
			if tl < 8 || tl > len(body) {
				return nil, fmt.Errorf("ike: transform length %d outside 8..%d", tl, len(body))
			}
			if (i == nt-1) != (body[0] == 0) {
				return nil, errors.New("ike: transform count disagrees with the last-transform marks")
			}
			t := Transform{Type: TransformType(body[4]), ID: binary.BigEndian.Uint16(body[6:8])}
			attrs := body[8:tl]
			for len(attrs) > 0 {
				if len(attrs) < 4 {
					return nil, errors.New("ike: transform attribute cut short")
				}
				at := binary.BigEndian.Uint16(attrs[0:2])
				if at&0x8000 != 0 { // TV
					if at&0x7fff == attrKeyLength && t.KeyLen == 0 {
						t.KeyLen = binary.BigEndian.Uint16(attrs[2:4])
					} else {
						t.BadAttr = true
					}
					attrs = attrs[4:]
					continue
				}
				al := int(binary.BigEndian.Uint16(attrs[2:4]))
				if 4+al > len(attrs) {
					return nil, errors.New("ike: transform attribute cut short")
				}
				t.BadAttr = true
				attrs = attrs[4+al:]
			}
			p.Transforms = append(p.Transforms, t)
			body = body[tl:]
		}
		if len(body) != 0 {
			return nil, fmt.Errorf("ike: %d bytes after the transforms of proposal %d", len(body), p.Num)
		}
		sa.Proposals = append(sa.Proposals, p)
		b = b[n:]
		if (last == 0) != (len(b) == 0) {
			return nil, errors.New("ike: proposal last-substructure mark disagrees with the length")
		}
	}
	if len(sa.Proposals) == 0 {
		return nil, errors.New("ike: SA payload without proposals")
	}
	return sa, nil
}

func (p *SA) appendBody(b []byte) ([]byte, error) {
	for i, pr := range p.Proposals {
		if len(pr.SPI) > 255 || len(pr.Transforms) > 255 {
			return nil, errors.New("ike: proposal SPI or transform list too long")
		}
		start := len(b)
		last := byte(2)
		if i == len(p.Proposals)-1 {
			last = 0
		}
		b = append(b, last, 0, 0, 0, pr.Num, pr.Protocol, byte(len(pr.SPI)), byte(len(pr.Transforms)))
		b = append(b, pr.SPI...)
		for j, t := range pr.Transforms {
			last := byte(3)
			if j == len(pr.Transforms)-1 {
				last = 0
			}
			tl := 8
			if t.KeyLen != 0 {
				tl = 12
			}
			b = append(b, last, 0, 0, byte(tl), byte(t.Type), 0, byte(t.ID>>8), byte(t.ID))
			if t.KeyLen != 0 {
				b = append(b, 0x80, attrKeyLength, byte(t.KeyLen>>8), byte(t.KeyLen))
			}
		}
		if len(b)-start > 0xffff {
			return nil, errors.New("ike: proposal too long")
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	return b, nil
}

// KE is the Key Exchange payload (section 3.4).
type KE struct {
	Group uint16
	Data  []byte
}

func (p *KE) Type() PayloadType { return PayloadKE }
func (p *KE) appendBody(b []byte) ([]byte, error) {
	b = append(b, byte(p.Group>>8), byte(p.Group), 0, 0)
	return append(b, p.Data...), nil
}

// IDType is the type of an identification (section 3.5).
type IDType uint8

// Identification types (section 3.5).
const (
	IDIPv4Addr IDType = 1
	IDFQDN     IDType = 2
	IDRFC822   IDType = 3
	IDIPv6Addr IDType = 5
	IDDERASN1  IDType = 9
	IDKeyID    IDType = 11
)

// ID is the IDi or IDr payload (section 3.5).
type ID struct {
	Responder bool // IDr rather than IDi
	IDType    IDType
	Data      []byte
}

func (p *ID) Type() PayloadType {
	if p.Responder {
		return PayloadIDr
	}
	return PayloadIDi
}

func (p *ID) appendBody(b []byte) ([]byte, error) {
	b = append(b, byte(p.IDType), 0, 0, 0)
	return append(b, p.Data...), nil
}

// Cert is the CERT or CERTREQ payload (sections 3.6 and 3.7).
type Cert struct {
	Request  bool // CERTREQ rather than CERT
	Encoding uint8
	Data     []byte
}

// CertX509Signature is the X.509 certificate encoding (section 3.6).
const CertX509Signature uint8 = 4

func (p *Cert) Type() PayloadType {
	if p.Request {
		return PayloadCERTREQ
	}
	return PayloadCERT
}

func (p *Cert) appendBody(b []byte) ([]byte, error) {
	b = append(b, p.Encoding)
	return append(b, p.Data...), nil
}

// AuthMethod is the authentication method of an AUTH payload (section
// 3.8, RFC 7427).
type AuthMethod uint8

// Authentication methods.
const (
	AuthRSASig        AuthMethod = 1
	AuthPSK           AuthMethod = 2
	AuthDSS           AuthMethod = 3
	AuthECDSA256      AuthMethod = 9
	AuthECDSA384      AuthMethod = 10
	AuthECDSA521      AuthMethod = 11
	AuthDigitalSig    AuthMethod = 14
	authMethodUnknown AuthMethod = 0
)

// Auth is the Authentication payload (section 3.8).
type Auth struct {
	Method AuthMethod
	Data   []byte
}

func (p *Auth) Type() PayloadType { return PayloadAUTH }
func (p *Auth) appendBody(b []byte) ([]byte, error) {
	b = append(b, byte(p.Method), 0, 0, 0)
	return append(b, p.Data...), nil
}

// Nonce is the Nonce payload (section 3.9).
type Nonce struct{ Data []byte }

func (p *Nonce) Type() PayloadType                   { return PayloadNonce }
func (p *Nonce) appendBody(b []byte) ([]byte, error) { return append(b, p.Data...), nil }

// NotifyType is the type of a Notify payload (section 3.10.1).
type NotifyType uint16

// Notify message types used here (section 3.10.1, RFC 7296 and the IANA
// registry it names).
const (
	UnsupportedCriticalPayload NotifyType = 1
	InvalidIKESPI              NotifyType = 4
	InvalidMajorVersion        NotifyType = 5
	InvalidSyntax              NotifyType = 7
	InvalidMessageID           NotifyType = 9
	InvalidSPI                 NotifyType = 11
	NoProposalChosen           NotifyType = 14
	InvalidKEPayload           NotifyType = 17
	AuthenticationFailed       NotifyType = 24
	SinglePairRequired         NotifyType = 34
	NoAdditionalSAs            NotifyType = 35
	InternalAddressFailure     NotifyType = 36
	FailedCPRequired           NotifyType = 37
	TSUnacceptable             NotifyType = 38
	InvalidSelectors           NotifyType = 39
	TemporaryFailure           NotifyType = 43
	ChildSANotFound            NotifyType = 44

	InitialContact            NotifyType = 16384
	SetWindowSize             NotifyType = 16385
	AdditionalTSPossible      NotifyType = 16386
	IPCompSupported           NotifyType = 16387
	NATDetectionSourceIP      NotifyType = 16388
	NATDetectionDestinationIP NotifyType = 16389
	Cookie                    NotifyType = 16390
	UseTransportMode          NotifyType = 16391
	RekeySA                   NotifyType = 16393
	ESPTFCPaddingNotSupported NotifyType = 16394
	NonFirstFragmentsAlso     NotifyType = 16395
	MOBIKESupported           NotifyType = 16396
	FragmentationSupported    NotifyType = 16430
	SignatureHashAlgorithms   NotifyType = 16431
)

// IsError reports whether t is an error type (below 16384, section
// 3.10.1).
func (t NotifyType) IsError() bool { return t < 16384 }

// MOBIKE's notify types (RFC 4555 section 4.2; MOBIKESupported is above).
const (
	// UnacceptableAddresses refuses the addresses of an
	// UPDATE_SA_ADDRESSES (section 4.2.4).
	UnacceptableAddresses NotifyType = 40
	// UnexpectedNATDetected refuses a message whose NAT detection shows
	// a NAT where NO_NATS_ALLOWED forbade one (section 4.2.4).
	UnexpectedNATDetected NotifyType = 41
	// AdditionalIP4Address and AdditionalIP6Address carry one further
	// address of the sender each; NoAdditionalAddresses says it has
	// none beyond the one in use (section 4.2.2).
	AdditionalIP4Address  NotifyType = 16397
	AdditionalIP6Address  NotifyType = 16398
	NoAdditionalAddresses NotifyType = 16399
	// UpdateSAAddresses asks the responder to move the IKE SA and its
	// Child SAs to the addresses the INFORMATIONAL request came from and
	// to (section 4.2.3).
	UpdateSAAddresses NotifyType = 16400
	// Cookie2 is the return routability check's cookie: the responder
	// echoes it unchanged (section 4.2.4, 3.5).
	Cookie2 NotifyType = 16401
	// NoNATsAllowed carries the addresses and ports the sender used,
	// which no NAT may have changed (section 4.2.5).
	NoNATsAllowed NotifyType = 16402
)

// Notify is the Notify payload (section 3.10).
type Notify struct {
	Protocol uint8
	SPI      []byte
	NType    NotifyType
	Data     []byte
}

func (p *Notify) Type() PayloadType { return PayloadNotify }

func decodeNotify(b []byte) (*Notify, error) {
	if len(b) < 4 {
		return nil, errors.New("ike: Notify payload shorter than 4 bytes")
	}
	spi := int(b[1])
	if 4+spi > len(b) {
		return nil, fmt.Errorf("ike: Notify SPI of %d bytes in %d", spi, len(b)-4)
	}
	return &Notify{Protocol: b[0], NType: NotifyType(binary.BigEndian.Uint16(b[2:4])), SPI: b[4 : 4+spi], Data: b[4+spi:]}, nil
}

func (p *Notify) appendBody(b []byte) ([]byte, error) {
	if len(p.SPI) > 255 {
		return nil, errors.New("ike: Notify SPI too long")
	}
	b = append(b, p.Protocol, byte(len(p.SPI)), byte(p.NType>>8), byte(p.NType))
	b = append(b, p.SPI...)
	return append(b, p.Data...), nil
}

// Delete is the Delete payload (section 3.11). For the IKE SA, SPIs is
// empty; for ESP each SPI is 4 bytes.
type Delete struct {
	Protocol uint8
	SPIs     []uint32
}

func (p *Delete) Type() PayloadType { return PayloadDelete }

func decodeDelete(b []byte) (*Delete, error) {
	if len(b) < 4 {
		return nil, errors.New("ike: Delete payload shorter than 4 bytes")
	}
	d := &Delete{Protocol: b[0]}
	size, n := int(b[1]), int(binary.BigEndian.Uint16(b[2:4]))
	b = b[4:]
	switch {
	case d.Protocol == ProtoIKE && size == 0 && n == 0 && len(b) == 0:
		return d, nil
	case (d.Protocol == ProtoESP || d.Protocol == ProtoAH) && size == 4 && len(b) == 4*n:
		d.SPIs = make([]uint32, n)
		for i := range d.SPIs {
			d.SPIs[i] = binary.BigEndian.Uint32(b[4*i:])
		}
		return d, nil
	}
	return nil, fmt.Errorf("ike: Delete payload for protocol %d with %d SPIs of %d bytes in %d", d.Protocol, n, size, len(b))
}

func (p *Delete) appendBody(b []byte) ([]byte, error) {
	if p.Protocol == ProtoIKE {
		return append(b, ProtoIKE, 0, 0, 0), nil
	}
	if len(p.SPIs) > 0xffff {
		return nil, errors.New("ike: too many SPIs in a Delete payload")
	}
	b = append(b, p.Protocol, 4, byte(len(p.SPIs)>>8), byte(len(p.SPIs)))
	for _, s := range p.SPIs {
		b = binary.BigEndian.AppendUint32(b, s)
	}
	return b, nil
}

// VendorID is the Vendor ID payload (section 3.12).
type VendorID struct{ Data []byte }

func (p *VendorID) Type() PayloadType                   { return PayloadVendorID }
func (p *VendorID) appendBody(b []byte) ([]byte, error) { return append(b, p.Data...), nil }

// Traffic selector types (section 3.13.1).
const (
	TSIPv4AddrRange uint8 = 7
	TSIPv6AddrRange uint8 = 8
)

// Selector is one traffic selector (section 3.13.1): an address range, a
// port range and an IP protocol (0 = any). Start and End are of one
// family.
type Selector struct {
	IPProto            uint8
	StartPort, EndPort uint16
	Start, End         netip.Addr
}

// TS is the TSi or TSr payload (section 3.13).
type TS struct {
	Responder bool // TSr rather than TSi
	Selectors []Selector
}

func (p *TS) Type() PayloadType {
	if p.Responder {
		return PayloadTSr
	}
	return PayloadTSi
}

func decodeTS(responder bool, b []byte) (*TS, error) {
	if len(b) < 4 {
		return nil, errors.New("ike: TS payload shorter than 4 bytes")
	}
	n := int(b[0])
	b = b[4:]
	ts := &TS{Responder: responder, Selectors: make([]Selector, 0, min(n, 16))}
	for i := 0; i < n; i++ {
		if len(b) < 8 {
			return nil, errors.New("ike: traffic selector cut short")
		}
		typ, l := b[0], int(binary.BigEndian.Uint16(b[2:4]))
		var alen int
		switch typ {
		case TSIPv4AddrRange:
			alen = 4
		case TSIPv6AddrRange:
			alen = 16
		default:
			return nil, fmt.Errorf("ike: traffic selector type %d", typ)
		}
		if l != 8+2*alen || l > len(b) {
			return nil, fmt.Errorf("ike: traffic selector of type %d with length %d", typ, l)
		}
		s := Selector{IPProto: b[1], StartPort: binary.BigEndian.Uint16(b[4:6]), EndPort: binary.BigEndian.Uint16(b[6:8])}
		s.Start, _ = netip.AddrFromSlice(b[8 : 8+alen])
		s.End, _ = netip.AddrFromSlice(b[8+alen : 8+2*alen])
		ts.Selectors = append(ts.Selectors, s)
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("ike: %d bytes after the traffic selectors", len(b))
	}
	return ts, nil
}

func (p *TS) appendBody(b []byte) ([]byte, error) {
	if len(p.Selectors) > 255 {
		return nil, errors.New("ike: too many traffic selectors")
	}
	b = append(b, byte(len(p.Selectors)), 0, 0, 0)
	for _, s := range p.Selectors {
		typ, l := TSIPv4AddrRange, 16
		if !s.Start.Is4() || !s.End.Is4() {
			if !s.Start.Is6() || !s.End.Is6() {
				return nil, fmt.Errorf("ike: traffic selector %v-%v mixes families", s.Start, s.End)
			}
			typ, l = TSIPv6AddrRange, 40
		}
		b = append(b, typ, s.IPProto, 0, byte(l), byte(s.StartPort>>8), byte(s.StartPort), byte(s.EndPort>>8), byte(s.EndPort))
		b = append(b, s.Start.AsSlice()...)
		b = append(b, s.End.AsSlice()...)
	}
	return b, nil
}

// Encrypted is the Encrypted and Authenticated (SK) payload (section
// 3.14), always the last payload of its message. Inner is the type of the
// first payload inside; Data is the body as sent: IV, ciphertext (with
// padding and pad length) and ICV.
type Encrypted struct {
	Inner PayloadType
	Data  []byte
}

func (p *Encrypted) Type() PayloadType                   { return PayloadSK }
func (p *Encrypted) appendBody(b []byte) ([]byte, error) { return append(b, p.Data...), nil }

// EncryptedFragment is the Encrypted Fragment (SKF) payload of RFC 7383
// section 2.5: one piece of an SK payload's plaintext, protected on its
// own, always the last (and only) payload of its message. Number counts
// from 1 to Total; Inner is the type of the first inner payload in
// fragment 1 and 0 in the others; Data is as an Encrypted's: IV,
// ciphertext (with padding and pad length) and ICV.
type EncryptedFragment struct {
	Inner         PayloadType
	Number, Total uint16
	Data          []byte
}

func (p *EncryptedFragment) Type() PayloadType { return PayloadSKF }
func (p *EncryptedFragment) appendBody(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, p.Number)
	b = binary.BigEndian.AppendUint16(b, p.Total)
	return append(b, p.Data...), nil
}
