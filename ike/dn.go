package ike

// dn.go: distinguished names as identities (ID_DER_ASN1_DN, RFC 7296
// section 3.5; RFC 4945 section 3.1.5). A DN is written as swanctl.conf
// writes it ("C=CH, O=strongSwan, CN=gw.example") and sent as the DER of
// its X.501 Name. Two DNs are the same name when their attributes are, in
// order, of the same types with the same values: the ASN.1 string type a
// value is encoded with (strongSwan writes PrintableString, openssl
// UTF8String) and the case of its letters do not matter (X.520's
// caseIgnoreMatch).

import (
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// dnAttr is an attribute type of a DN: its OID and the names it is
// written with, the first being the one String uses.
type dnAttr struct {
	oid   asn1.ObjectIdentifier
	names []string
	ia5   bool // its value is an IA5String
}

// dnAttrs are the attribute types a DN string may name, as strongSwan's
// identification parser knows them.
var dnAttrs = []dnAttr{
	{oid: asn1.ObjectIdentifier{2, 5, 4, 3}, names: []string{"CN", "commonName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 4}, names: []string{"SN", "S", "surname"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 5}, names: []string{"serialNumber"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 6}, names: []string{"C", "countryName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 7}, names: []string{"L", "localityName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 8}, names: []string{"ST", "stateOrProvinceName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 9}, names: []string{"street", "streetAddress"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 10}, names: []string{"O", "organizationName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 11}, names: []string{"OU", "organizationalUnitName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 12}, names: []string{"T", "title"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 17}, names: []string{"postalCode"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 41}, names: []string{"N", "name"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 42}, names: []string{"G", "GN", "givenName"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 43}, names: []string{"I", "initials"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 46}, names: []string{"dnQualifier"}},
	{oid: asn1.ObjectIdentifier{2, 5, 4, 65}, names: []string{"pseudonym"}},
	{oid: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}, names: []string{"E", "Email", "emailAddress"}, ia5: true},
	{oid: asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}, names: []string{"UID", "userid"}},
	{oid: asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}, names: []string{"DC", "domainComponent"}, ia5: true},
}

// dnAttrByName finds an attribute type by name (in any case) or by its
// dotted OID.
func dnAttrByName(name string) (dnAttr, bool) {
	for _, a := range dnAttrs {
		for _, n := range a.names {
			if strings.EqualFold(n, name) {
				return a, true
			}
		}
	}
	if oid, ok := parseOID(name); ok {
		for _, a := range dnAttrs {
			if a.oid.Equal(oid) {
				return a, true
			}
		}
		return dnAttr{oid: oid}, true
	}
	return dnAttr{}, false
}

func parseOID(s string) (asn1.ObjectIdentifier, bool) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return nil, false
	}
	oid := make(asn1.ObjectIdentifier, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || p[0] == '+' {
			return nil, false
		}
		oid[i] = n
	}
	return oid, true
}

// IsDN reports whether s reads as a distinguished name, as swanctl.conf
// takes it: text before its first '=' that names an attribute type (CN,
// O, C, OU, DC, E, ... or a dotted OID), after an optional leading '/'.
// Such an id is a DN, never an FQDN; ParseDN says whether it is a good
// one.
func IsDN(s string) bool {
	i := strings.IndexByte(s, '=')
	if i <= 0 {
		return false
	}
	_, ok := dnAttrByName(strings.TrimSpace(strings.TrimPrefix(s[:i], "/")))
	return ok
}

// ParseDN reads a distinguished name written as swanctl.conf writes it,
// relative distinguished names from the most significant, separated by
// ',' (or each led by '/'): "C=CH, O=strongSwan, CN=gw.example" or
// "/C=CH/O=strongSwan/CN=gw.example". A '\' takes the next character as
// it is (to write a separator into a value). It returns the DER of the
// X.501 Name: each value a PrintableString where its characters allow
// (as strongSwan encodes them), else a UTF8String; emailAddress and DC
// are IA5Strings.
func ParseDN(s string) ([]byte, error) {
	sep := byte(',')
	body := strings.TrimSpace(s)
	if strings.HasPrefix(body, "/") {
		sep, body = '/', body[1:]
	}
	var rdns pkix.RDNSequence
	for _, part := range splitEscaped(body, sep) {
		part = strings.TrimSpace(part)
		i := strings.IndexByte(part, '=')
		if i < 0 {
			return nil, fmt.Errorf("ike: DN %q: %q has no '=' (want TYPE=value, e.g. CN=gw.example)", s, unescape(part))
		}
		name, val := strings.TrimSpace(part[:i]), unescape(strings.TrimSpace(part[i+1:]))
		a, ok := dnAttrByName(name)
		if !ok {
			return nil, fmt.Errorf("ike: DN %q: unknown attribute type %q (want CN, C, O, OU, L, ST, DC, E, serialNumber, ... or an OID)", s, name)
		}
		if val == "" {
			return nil, fmt.Errorf("ike: DN %q: %s has an empty value", s, name)
		}
		if !utf8.ValidString(val) {
			return nil, fmt.Errorf("ike: DN %q: %s is not UTF-8", s, name)
		}
		v, err := dnValue(a, val)
		if err != nil {
			return nil, fmt.Errorf("ike: DN %q: %s: %w", s, name, err)
		}
		rdns = append(rdns, pkix.RelativeDistinguishedNameSET{{Type: a.oid, Value: v}})
	}
	if len(rdns) == 0 {
		return nil, fmt.Errorf("ike: DN %q is empty", s)
	}
	der, err := asn1.Marshal(rdns)
	if err != nil {
		return nil, fmt.Errorf("ike: DN %q: %w", s, err)
	}
	return der, nil
}

// dnValue is the ASN.1 value of an attribute: a string with the tag
// strongSwan gives it.
func dnValue(a dnAttr, v string) (asn1.RawValue, error) {
	tag := asn1.TagPrintableString
	switch {
	case a.ia5:
		for i := 0; i < len(v); i++ {
			if v[i] >= 0x80 {
				return asn1.RawValue{}, errors.New("not ASCII (an IA5String)")
			}
		}
		tag = asn1.TagIA5String
	case !printable(v):
		tag = asn1.TagUTF8String
	}
	return asn1.RawValue{Class: asn1.ClassUniversal, Tag: tag, Bytes: []byte(v)}, nil
}

// printable reports whether s fits an ASN.1 PrintableString.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(" '()+,-./:=?", c) >= 0) {
			return false
		}
	}
	return true
}

// splitEscaped splits s at each sep that no '\' escapes, keeping the
// escapes in the parts.
func splitEscaped(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// DNEqual reports whether the DER-encoded names a and b are the same
// name: as many relative distinguished names, each with attributes of the
// same types and values in the same order. String values compare without
// regard to their ASN.1 string type or the case of their letters; other
// values by their encoding. Bytes that are not a Name equal only
// themselves.
func DNEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y pkix.RDNSequence
	if rest, err := asn1.Unmarshal(a, &x); err != nil || len(rest) != 0 {
		return false
	}
	if rest, err := asn1.Unmarshal(b, &y); err != nil || len(rest) != 0 {
		return false
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if len(x[i]) != len(y[i]) {
			return false
		}
		for j := range x[i] {
			p, q := x[i][j], y[i][j]
			if !p.Type.Equal(q.Type) {
				return false
			}
			ps, ok1 := p.Value.(string)
			qs, ok2 := q.Value.(string)
			switch {
			case ok1 && ok2:
				if !strings.EqualFold(ps, qs) {
					return false
				}
			case ok1 || ok2:
				return false
			case !reflect.DeepEqual(p.Value, q.Value):
				return false
			}
		}
	}
	return true
}

// dnString formats a DER-encoded name as ParseDN reads it, or "" when der
// is no Name.
func dnString(der []byte) string {
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(der, &rdns); err != nil || len(rest) != 0 {
		return ""
	}
	var b strings.Builder
	for i, rdn := range rdns {
		for j, atv := range rdn {
			switch {
			case i > 0 && j == 0:
				b.WriteString(", ")
			case j > 0:
				b.WriteString(" + ")
			}
			name := atv.Type.String()
			for _, a := range dnAttrs {
				if a.oid.Equal(atv.Type) {
					name = a.names[0]
					break
				}
			}
			b.WriteString(name)
			b.WriteByte('=')
			if s, ok := atv.Value.(string); ok {
				b.WriteString(strings.NewReplacer(`\`, `\\`, ",", `\,`).Replace(s))
			} else {
				fmt.Fprintf(&b, "%v", atv.Value)
			}
		}
	}
	return b.String()
}
