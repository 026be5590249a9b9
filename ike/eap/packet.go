package eap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Code is an EAP packet's code (RFC 3748 section 4).
type Code uint8

// EAP codes (RFC 3748 section 4).
const (
	CodeRequest  Code = 1
	CodeResponse Code = 2
	CodeSuccess  Code = 3
	CodeFailure  Code = 4
)

func (c Code) String() string {
	switch c {
	case CodeRequest:
		return "Request"
	case CodeResponse:
		return "Response"
	case CodeSuccess:
		return "Success"
	case CodeFailure:
		return "Failure"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Type is the method type of a Request or Response (RFC 3748 section 5).
type Type uint8

// EAP types (RFC 3748 section 5; IANA "Method Types").
const (
	TypeIdentity     Type = 1
	TypeNotification Type = 2
	TypeNak          Type = 3
	TypeMD5          Type = 4
	TypeTLS          Type = 13
	TypeMSCHAPv2     Type = 26
	TypeExpanded     Type = 254
)

func (t Type) String() string {
	switch t {
	case TypeIdentity:
		return "Identity"
	case TypeNotification:
		return "Notification"
	case TypeNak:
		return "Nak"
	case TypeMD5:
		return "MD5-Challenge"
	case TypeTLS:
		return "EAP-TLS"
	case TypeMSCHAPv2:
		return "EAP-MSCHAPv2"
	case TypeExpanded:
		return "Expanded"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// headerLen is the length of the Code, Identifier and Length fields.
const headerLen = 4

// MaxPacketLen is the largest EAP packet (the Length field is 16 bits).
const MaxPacketLen = 0xffff

// Packet is one EAP packet (RFC 3748 section 4). Type and Data are used
// by Requests and Responses only; Data is the type data after the Type
// octet.
type Packet struct {
	Code       Code
	Identifier uint8
	Type       Type
	Data       []byte
}

// Errors returned by Parse.
var (
	ErrShort  = errors.New("eap: packet truncated")
	ErrLength = errors.New("eap: bad Length field")
)

// Parse decodes one EAP packet. Octets past the Length field are padding
// and ignored (RFC 3748 section 4.1). Data aliases b. A Success or Failure
// with type data is accepted and its data ignored.
func Parse(b []byte) (Packet, error) {
	if len(b) < headerLen {
		return Packet{}, ErrShort
	}
	p := Packet{Code: Code(b[0]), Identifier: b[1]}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n < headerLen {
		return Packet{}, fmt.Errorf("%w: %d octets, less than the header", ErrLength, n)
	}
	if n > len(b) {
		return Packet{}, fmt.Errorf("%w: %d octets, only %d present", ErrLength, n, len(b))
	}
	switch p.Code {
	case CodeRequest, CodeResponse:
		if n < headerLen+1 {
			return Packet{}, fmt.Errorf("%w: %s without a Type", ErrLength, p.Code)
		}
		p.Type = Type(b[4])
		p.Data = b[5:n:n]
	case CodeSuccess, CodeFailure:
	default:
		return Packet{}, fmt.Errorf("eap: unknown code %d", uint8(p.Code))
	}
	return p, nil
}

// Len is the packet's encoded length.
func (p Packet) Len() int {
	if p.Code == CodeSuccess || p.Code == CodeFailure {
		return headerLen
	}
	return headerLen + 1 + len(p.Data)
}

// Append appends the encoded packet to b. It panics if the packet is
// longer than MaxPacketLen (a caller's bug: methods fragment below it).
func (p Packet) Append(b []byte) []byte {
	n := p.Len()
	if n > MaxPacketLen {
		panic("eap: packet longer than 65535 octets")
	}
	b = append(b, byte(p.Code), p.Identifier, byte(n>>8), byte(n))
	if p.Code == CodeSuccess || p.Code == CodeFailure {
		return b
	}
	b = append(b, byte(p.Type))
	return append(b, p.Data...)
}

// Marshal returns the encoded packet.
func (p Packet) Marshal() []byte {
	return p.Append(make([]byte, 0, p.Len()))
}
