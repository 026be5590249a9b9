package ike

// The IKE header and the generic payload chain (RFC 7296 sections 3.1 and
// 3.2). ParseMessage checks every length against the bytes it was given and
// returns an error for anything that does not fit; it never panics and
// never reads past the slice. Payload bodies are decoded by the functions in
// payload.go.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderLen is the length of the IKE header (RFC 7296 section 3.1).
const HeaderLen = 28

// genericLen is the length of the generic payload header (section 3.2).
const genericLen = 4

// MaxMessageLen bounds the messages ParseMessage accepts and Encode
// produces: an IKE message travels in one UDP datagram.
const MaxMessageLen = 65535 - 8

// maxPayloads bounds the payloads of one message (inner payloads of an SK
// payload included): a message with more is malformed for our purposes.
const maxPayloads = 64

// Version is the IKE version octet this package speaks: major 2, minor 0.
const Version = 0x20

// ExchangeType is the exchange type of an IKE header (section 3.1).
type ExchangeType uint8

// Exchange types (RFC 7296 section 3.1).
const (
	IKE_SA_INIT     ExchangeType = 34
	IKE_AUTH        ExchangeType = 35
	CREATE_CHILD_SA ExchangeType = 36
	INFORMATIONAL   ExchangeType = 37
)

func (e ExchangeType) String() string {
	switch e {
	case IKE_SA_INIT:
		return "IKE_SA_INIT"
	case IKE_AUTH:
		return "IKE_AUTH"
	case CREATE_CHILD_SA:
		return "CREATE_CHILD_SA"
	case INFORMATIONAL:
		return "INFORMATIONAL"
	case IKE_INTERMEDIATE:
		return "IKE_INTERMEDIATE"
	}
	return fmt.Sprintf("exchange(%d)", uint8(e))
}

// Header flags (section 3.1).
const (
	FlagInitiator uint8 = 0x08
	FlagVersion   uint8 = 0x10
	FlagResponse  uint8 = 0x20
)

// Header is the decoded IKE header. Length is the whole message's length
// as the header states it; Encode fills it in.
type Header struct {
	SPIi, SPIr  uint64
	NextPayload PayloadType
	Version     uint8
	Exchange    ExchangeType
	Flags       uint8
	MessageID   uint32
	Length      uint32
}

// IsResponse reports whether the R flag is set.
func (h *Header) IsResponse() bool { return h.Flags&FlagResponse != 0 }

// IsInitiator reports whether the I flag is set (the sender is the
// original initiator of the IKE SA).
func (h *Header) IsInitiator() bool { return h.Flags&FlagInitiator != 0 }

// ParseHeader decodes the IKE header at the start of b. It checks that the
// length field covers at least the header and at most len(b); it does not
// look at the payloads.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, fmt.Errorf("ike: message of %d bytes is shorter than the IKE header", len(b))
	}
	h.SPIi = binary.BigEndian.Uint64(b[0:8])
	h.SPIr = binary.BigEndian.Uint64(b[8:16])
	h.NextPayload = PayloadType(b[16])
	h.Version = b[17]
	h.Exchange = ExchangeType(b[18])
	h.Flags = b[19]
	h.MessageID = binary.BigEndian.Uint32(b[20:24])
	h.Length = binary.BigEndian.Uint32(b[24:28])
	if h.Length < HeaderLen || uint64(h.Length) > uint64(len(b)) {
		return h, fmt.Errorf("ike: header length %d outside %d..%d", h.Length, HeaderLen, len(b))
	}
	return h, nil
}

// put writes the header into b[:HeaderLen].
func (h *Header) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], h.SPIi)
	binary.BigEndian.PutUint64(b[8:16], h.SPIr)
	b[16] = byte(h.NextPayload)
	b[17] = h.Version
	b[18] = byte(h.Exchange)
	b[19] = h.Flags
	binary.BigEndian.PutUint32(b[20:24], h.MessageID)
	binary.BigEndian.PutUint32(b[24:28], h.Length)
}

// Message is a decoded IKE message: its header and its payloads in order.
// A message parsed from the wire that carries an SK payload has it as its
// last payload (an *Encrypted), still encrypted; the SA that owns the keys
// decrypts it (see Decrypt) and replaces it with the inner payloads.
type Message struct {
	Header   Header
	Payloads []Payload
}

// ErrUnsupportedCritical is wrapped by the error ParseMessage returns for a
// payload of an unknown type with the critical bit set (section 2.5): the
// peer must be told UNSUPPORTED_CRITICAL_PAYLOAD.
var ErrUnsupportedCritical = errors.New("ike: unsupported critical payload")

// ParseMessage decodes a whole IKE message (without the non-ESP marker).
// Bytes after the header's length are ignored. The payloads alias b.
// Unknown payload types without the critical bit are kept as *Unknown;
// with it, ParseMessage fails with ErrUnsupportedCritical.
func ParseMessage(b []byte) (*Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if h.Version>>4 != 2 {
		return nil, fmt.Errorf("ike: version 0x%02x, not 2.x", h.Version)
	}
	b = b[:h.Length]
	ps, err := parsePayloads(h.NextPayload, b[HeaderLen:], true)
	if err != nil {
		return nil, err
	}
	return &Message{Header: h, Payloads: ps}, nil
}

// parsePayloads decodes a payload chain starting with type first. An SK
// payload is allowed only when outer is true, and must then be the last.
func parsePayloads(first PayloadType, b []byte, outer bool) ([]Payload, error) {
	var ps []Payload
	next := first
	for next != NoNextPayload {
		if len(ps) == maxPayloads {
			return nil, fmt.Errorf("ike: more than %d payloads", maxPayloads)
		}
		if len(b) < genericLen {
			return nil, fmt.Errorf("ike: %v payload header cut short (%d bytes left)", next, len(b))
		}
		n := int(binary.BigEndian.Uint16(b[2:4]))
		if n < genericLen || n > len(b) {
			return nil, fmt.Errorf("ike: %v payload length %d outside %d..%d", next, n, genericLen, len(b))
		}
		typ, critical, body := next, b[1]&0x80 != 0, b[genericLen:n]
		next = PayloadType(b[0])
		b = b[n:]
		if typ == PayloadSK || typ == PayloadSKF {
			if !outer {
				return nil, fmt.Errorf("ike: %v payload inside an SK payload", typ)
			}
			if len(b) != 0 {
				return nil, fmt.Errorf("ike: %v payload is not the last payload", typ)
			}
			if typ == PayloadSK {
				return append(ps, &Encrypted{Inner: next, Data: body}), nil
			}
			// RFC 7383 section 2.5: Fragment Number and Total
			// Fragments, then what an SK payload carries; 1 <= number
			// <= total.
			if len(body) < 4 {
				return nil, fmt.Errorf("ike: SKF payload of %d bytes", len(body))
			}
			f := &EncryptedFragment{Inner: next, Number: binary.BigEndian.Uint16(body[0:2]),
				Total: binary.BigEndian.Uint16(body[2:4]), Data: body[4:]}
			if f.Number == 0 || f.Number > f.Total {
				return nil, fmt.Errorf("ike: SKF fragment %d of %d", f.Number, f.Total)
			}
			return append(ps, f), nil
		}
		p, err := decodePayload(typ, critical, body)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("ike: %d bytes after the last payload", len(b))
	}
	return ps, nil
}

// appendPayloads encodes ps as a chain; the last payload's next field is
// NoNextPayload. An *Encrypted, which must be last, names its inner first
// payload in its own next field.
func appendPayloads(b []byte, ps []Payload) ([]byte, error) {
	for i, p := range ps {
		next := NoNextPayload
		if i+1 < len(ps) {
			next = ps[i+1].Type()
		}
		if e, ok := p.(*Encrypted); ok {
			if i+1 != len(ps) {
				return nil, errors.New("ike: SK payload must be last")
			}
			next = e.Inner
		}
		if f, ok := p.(*EncryptedFragment); ok {
			if i+1 != len(ps) {
				return nil, errors.New("ike: SKF payload must be last")
			}
			next = f.Inner
		}
		start := len(b)
		b = append(b, byte(next), 0, 0, 0)
		if u, ok := p.(*Unknown); ok && u.Critical {
			b[start+1] = 0x80
		}
		var err error
		b, err = p.appendBody(b)
		if err != nil {
			return nil, err
		}
		n := len(b) - start
		if n > 0xffff {
			return nil, fmt.Errorf("ike: %v payload of %d bytes", p.Type(), n)
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	}
	return b, nil
}

// Encode returns the message's wire form: the header (with its next
// payload and length fields filled in from the payloads) and the payload
// chain. An *Encrypted payload is written as it is (its Data already
// sealed); the SA's Encrypt builds one.
func (m *Message) Encode() ([]byte, error) {
	b := make([]byte, HeaderLen, 512)
	b, err := appendPayloads(b, m.Payloads)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("ike: message of %d bytes", len(b))
	}
	h := m.Header
	h.NextPayload = NoNextPayload
	if len(m.Payloads) > 0 {
		h.NextPayload = m.Payloads[0].Type()
	}
	if h.Version == 0 {
		h.Version = Version
	}
	h.Length = uint32(len(b))
	h.put(b)
	m.Header = h
	return b, nil
}
