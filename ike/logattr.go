package ike

// logattr.go spells what the endpoint logs: SPIs one way (ESP SPIs as
// 0x and eight hex digits, as `sluice sa list` and `ip xfrm` print them;
// IKE SPIs as 0x and sixteen), a message's payloads in a short list
// (charon's "[ SA KE No N(NATD_S_IP) ]"), suites in strongSwan's
// keywords. Values are attributes, never inside a message, and no key
// material is ever among them.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// ESPSPI is an ESP SPI as sluice's logs spell it, everywhere (packages
// gateway and control use it too): "0x0000c001", as `sluice sa list`
// and the SA file's String print it.
type ESPSPI uint32

func (s ESPSPI) String() string { return fmt.Sprintf("0x%08x", uint32(s)) }

// LogValue implements slog.LogValuer.
func (s ESPSPI) LogValue() slog.Value { return slog.StringValue(s.String()) }

// IKESPI is an IKE SPI as sluice's logs spell it: "0x0123456789abcdef".
type IKESPI uint64

func (s IKESPI) String() string { return fmt.Sprintf("0x%016x", uint64(s)) }

// LogValue implements slog.LogValuer.
func (s IKESPI) LogValue() slog.Value { return slog.StringValue(s.String()) }

// payloadList is a message's payloads as a log attribute: their types,
// notifications by name, in order: "SA KE Nonce N(NAT_DETECTION_SOURCE_IP)".
type payloadList []Payload

// LogValue implements slog.LogValuer.
func (ps payloadList) LogValue() slog.Value {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch p := p.(type) {
		case *Notify:
			b.WriteString("N(" + notifyName(p.NType) + ")")
		case *Delete:
			fmt.Fprintf(&b, "D(%s", protoName(p.Protocol))
			if len(p.SPIs) > 0 {
				fmt.Fprintf(&b, " %d", len(p.SPIs))
			}
			b.WriteByte(')')
		default:
			b.WriteString(p.Type().String())
		}
	}
	return slog.StringValue(b.String())
}

// selectorList is traffic selectors as a log attribute:
// "10.1.0.0/24 10.2.0.0/24".
type selectorList []Selector

// LogValue implements slog.LogValuer.
func (ss selectorList) LogValue() slog.Value {
	s := make([]string, len(ss))
	for i, sel := range ss {
		s[i] = sel.String()
	}
	return slog.StringValue(strings.Join(s, " "))
}

// protoName names an SA protocol of a Delete or proposal.
func protoName(p uint8) string {
	switch p {
	case ProtoIKE:
		return "IKE"
	case ProtoESP:
		return "ESP"
	}
	return fmt.Sprintf("proto %d", p)
}

// proposalsAttr is proposals as a log attribute, each as its transforms
// (proposalName: keywords, else IANA names or numbers, none left out):
// "aes256gcm16-prfsha256-ecp256,aes256-sha1-prfsha1-modp1024".
type proposalsAttr []Proposal

// maxLoggedTransforms bounds how many transforms one proposalsAttr names
// (a peer's SA payload may hold thousands; a client's holds dozens).
const maxLoggedTransforms = 256

// LogValue implements slog.LogValuer.
func (ps proposalsAttr) LogValue() slog.Value {
	out := make([]string, 0, len(ps))
	left, rest := maxLoggedTransforms, 0
	for _, p := range ps {
		if left <= 0 {
			rest += len(p.Transforms)
			continue
		}
		if len(p.Transforms) > left {
			rest += len(p.Transforms) - left
			p.Transforms = p.Transforms[:left]
		}
		left -= len(p.Transforms)
		out = append(out, proposalName(p))
	}
	s := strings.Join(out, ",")
	if rest > 0 {
		s += fmt.Sprintf(",...(%d more transforms)", rest)
	}
	return slog.StringValue(s)
}

// authName names an authentication method.
func authName(m AuthMethod) string {
	switch m {
	case AuthRSASig:
		return "RSA signature"
	case AuthPSK:
		return "pre-shared key"
	case AuthDSS:
		return "DSS signature"
	case AuthECDSA256, AuthECDSA384, AuthECDSA521:
		return "ECDSA signature"
	case AuthDigitalSig:
		return "digital signature (RFC 7427)"
	}
	return fmt.Sprintf("method %d", m)
}

// logAttrs are the attributes that name sa in its log lines: its peer's
// configured name (once known), the remote address and the IKE SPIs.
func (sa *ikeSA) logAttrs(more ...any) []any {
	name := ""
	if sa.peer != nil {
		name = sa.peer.Name
	}
	attrs := []any{"peer", name, "remote", sa.remote, "spi_i", IKESPI(sa.spii)}
	if sa.spir != 0 { // the initiator's, before the responder's answer
		attrs = append(attrs, "spi_r", IKESPI(sa.spir))
	}
	return append(attrs, more...)
}

// debugMessage logs a message sa sends or receives (what is "sending" or
// "received"): its exchange, message ID and payloads, as charon's `ike 2`.
func (sa *ikeSA) debugMessage(what string, h *Header, ps []Payload) {
	log := sa.ep.cfg.Log
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	log.Debug("ike: "+what, sa.logAttrs("exchange", h.Exchange.String(), "msgid", h.MessageID,
		"response", h.IsResponse(), "payloads", payloadList(ps))...)
}
