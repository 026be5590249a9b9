package ike

// Additional key exchanges (RFC 9370) over the IKE_INTERMEDIATE exchange
// (RFC 9242): the keys after each exchange and the IntAuth value that
// binds the intermediate messages into IKE_AUTH.
//
//  1. IKE_SA_INIT: SAi1 with ADDKE transforms, N(INTERMEDIATE_EXCHANGE_
//     SUPPORTED) both ways; keys SK_*(0) from g^ir as RFC 7296 says.
//  2. One IKE_INTERMEDIATE per additional key exchange chosen (ADDKE1
//     first, "none" skipped), message IDs 1, 2, ...: KEi(n) and KEr(n)
//     under SK_*(n-1); each side adds its message to IntAuth with the
//     SK_p of the keys that protected it, then derives SK_*(n).
//  3. IKE_AUTH under the last keys; both AUTH payloads sign
//     ... | MACedID | IntAuth_iN | IntAuth_rN | IKE_AUTH's message ID.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// IKE_INTERMEDIATE is the exchange type of RFC 9242 section 3.2.
const IKE_INTERMEDIATE ExchangeType = 43

// Notify types of RFC 9242 and RFC 9370 (IANA "IKEv2 Notify Message
// Types").
const (
	// IntermediateExchangeSupported, in IKE_SA_INIT, says the sender can
	// run IKE_INTERMEDIATE exchanges (RFC 9242 section 3.1).
	IntermediateExchangeSupported NotifyType = 16438
	// AdditionalKeyExchange links a CREATE_CHILD_SA to its
	// IKE_FOLLOWUP_KE exchanges (RFC 9370 section 2.2.4); sluice does not
	// run those and only names the type.
	AdditionalKeyExchange NotifyType = 16441
)

// addKEMethods returns the suite's additional key exchange methods in the
// order their IKE_INTERMEDIATE exchanges run (RFC 9370 section 2.2.2:
// ADDKE1 first; a type whose method is "none" is skipped).
func (s Suite) addKEMethods() []uint16 {
	var ms []uint16
	for _, m := range s.AddKE {
		if m != DHNone {
			ms = append(ms, m)
		}
	}
	return ms
}

// withoutAddKE returns proposals with their additional key exchange
// transforms removed: what sluice offers and accepts when it rekeys an
// IKE SA (a rekey's additional key exchanges would need IKE_FOLLOWUP_KE,
// RFC 9370 section 2.2.4, which sluice does not run; the new keys still
// descend from the old SK_d, into which every ML-KEM secret went).
func withoutAddKE(ps []Proposal) []Proposal {
	out := make([]Proposal, len(ps))
	for i, p := range ps {
		// A copy: the transforms are shared with the configuration.
		p.Transforms = slices.DeleteFunc(slices.Clone(p.Transforms), func(t Transform) bool { return isAddKE(t.Type) })
		out[i] = p
	}
	return out
}

// deriveAddKEKeys returns the keys after additional key exchange n (RFC
// 9370 section 2.2.2): SKEYSEED(n) = prf(SK_d(n-1), SK(n) | Ni | Nr) and
// {SK_d(n) | SK_ai(n) | ... | SK_pr(n)} = prf+(SKEYSEED(n), Ni | Nr |
// SPIi | SPIr), with the IKE SA's own PRF and SPIs. prev are the keys
// SK_*(n-1); shared is SK(n), the exchange's shared secret.
func deriveAddKEKeys(s Suite, prev *Keys, shared, ni, nr []byte, spii, spir uint64) (*Keys, error) {
	if prev == nil || len(prev.D) == 0 {
		return nil, errors.New("ike: additional key exchange without the previous keys")
	}
	if len(shared) == 0 {
		return nil, errors.New("ike: additional key exchange with an empty shared secret")
	}
	prf, err := NewPRF(s.PRF)
	if err != nil {
		return nil, err
	}
	// The formula is section 2.18's for a rekeyed IKE SA with SK(n) in
	// the place of g^ir (new) and the same suite on both sides.
	return deriveRekeyedIKEKeys(prf, prev.D, s, ni, nr, shared, spii, spir)
}

// intAuthOctets returns IntAuth_*A | IntAuth_*P of an IKE_INTERMEDIATE
// message (RFC 9242 section 3.3.2): the IKE header and the Encrypted
// payload's generic header, whose Length and Payload Length count only
// the header, that payload header and the plaintext inner payloads (no
// IV, padding, pad length or ICV), followed by that plaintext. h is the
// message's header (its Next Payload and Length are set here); first is
// the type of the first inner payload and plain the inner payloads as
// encoded. A fragmented message is taken as if it was sent whole (the
// same section), so the fragments' SKF headers never enter it.
func intAuthOctets(h Header, first PayloadType, plain []byte) []byte {
	b := make([]byte, HeaderLen+genericLen, HeaderLen+genericLen+len(plain))
	h.NextPayload = PayloadSK
	if h.Version == 0 {
		h.Version = Version
	}
	h.Length = uint32(HeaderLen + genericLen + len(plain))
	h.put(b)
	b[HeaderLen] = byte(first)
	binary.BigEndian.PutUint16(b[HeaderLen+2:], uint16(genericLen+len(plain)))
	return append(b, plain...)
}

// intAuthOf returns intAuthOctets for a message with header h whose SK
// payload carries inner (as sent, or as decoded from a received message:
// like strongSwan, the receiver encodes the decoded payloads again).
func intAuthOf(h Header, inner []Payload) ([]byte, error) {
	plain, first, err := encodeInner(inner)
	if err != nil {
		return nil, err
	}
	return intAuthOctets(h, first, plain), nil
}

// IntAuth accumulates the IntAuth of RFC 9242 section 3.3.2 over an IKE
// SA's IKE_INTERMEDIATE exchanges:
//
//	IntAuth_i1 = prf(SK_pi1,              IntAuth_i1A [| IntAuth_i1P])
//	IntAuth_in = prf(SK_pin, IntAuth_in-1 | IntAuth_inA [| IntAuth_inP])
//
// and the same with SK_pr over the responder's messages. The zero value
// is ready; it is not safe for concurrent use.
type IntAuth struct {
	i, r []byte
}

// Add chains one IKE_INTERMEDIATE message into IntAuth: octets is its
// intAuthOctets, skp the SK_pi (a request, sent by the initiator) or
// SK_pr (a response) of the keys that protected it, and fromInitiator
// says which chain it belongs to.
func (a *IntAuth) Add(prf PRF, skp []byte, fromInitiator bool, octets []byte) {
	if fromInitiator {
		a.i = prf.Sum(skp, a.i, octets)
	} else {
		a.r = prf.Sum(skp, a.r, octets)
	}
}

// Value returns IntAuth = IntAuth_iN | IntAuth_rN | IKE_AUTH_MID, the
// octets appended to both sides' signed octets (RFC 9242 section 3.3.2),
// where authMID is the message ID of the first IKE_AUTH request. Without
// any IKE_INTERMEDIATE exchange it is empty and AUTH is RFC 7296's.
func (a *IntAuth) Value(authMID uint32) []byte {
	if a.i == nil && a.r == nil {
		return nil
	}
	out := make([]byte, 0, len(a.i)+len(a.r)+4)
	out = append(append(out, a.i...), a.r...)
	return binary.BigEndian.AppendUint32(out, authMID)
}

// addKE runs an IKE SA's additional key exchanges, one per
// IKE_INTERMEDIATE exchange, for either role, and keeps their IntAuth.
// The caller owns the keys: after each exchange it derives the next ones
// (deriveAddKEKeys) and chains both messages into auth with the SK_p of
// the keys that protected them. It is not safe for concurrent use.
type addKE struct {
	methods []uint16 // the suite's, in the order they run
	done    int      // exchanges finished
	dh      DH       // initiator: the key of the exchange in flight
	auth    IntAuth
}

// newAddKE returns the additional key exchanges of suite s (nil if it
// has none).
func newAddKE(s Suite) *addKE {
	ms := s.addKEMethods()
	if len(ms) == 0 {
		return nil
	}
	return &addKE{methods: ms}
}

// pending reports whether an exchange is still to run.
func (a *addKE) pending() bool { return a != nil && a.done < len(a.methods) }

// request returns the initiator's KE payload for the next exchange,
// making its key (ML-KEM key generation: run it off the IKE SA's lock).
func (a *addKE) request() (*KE, error) {
	if !a.pending() {
		return nil, errors.New("ike: no additional key exchange is pending")
	}
	dh, err := NewDH(a.methods[a.done])
	if err != nil {
		return nil, err
	}
	a.dh = dh
	return &KE{Group: dh.Group(), Data: dh.Public()}, nil
}

// respond is the responder's side of the next exchange: from the
// request's inner payloads it returns the KE payload to answer with and
// the shared secret, and marks the exchange done. On a missing KE
// payload, one of another method or malformed key exchange data it
// returns the error and INVALID_SYNTAX, the notification to refuse with
// (RFC 9370 section 2.2.2 for the method; the ML-KEM draft's section 2.2
// for the data).
func (a *addKE) respond(inner []Payload) (*KE, []byte, NotifyType, error) {
	if !a.pending() {
		return nil, nil, InvalidSyntax, errors.New("ike: IKE_INTERMEDIATE without a pending additional key exchange")
	}
	ke, err := theKE(inner, a.methods[a.done])
	if err != nil {
		return nil, nil, InvalidSyntax, err
	}
	pub, shared, err := RespondKE(ke.Group, ke.Data)
	if err != nil {
		return nil, nil, InvalidSyntax, err
	}
	a.done++
	return &KE{Group: ke.Group, Data: pub}, shared, 0, nil
}

// finish is the initiator's end of the exchange in flight: the shared
// secret from the response's inner payloads. A response without the KE
// payload of the method, or with malformed data, is an error (the
// ML-KEM draft's section 2.2: the initiator fails the IKE SA).
func (a *addKE) finish(inner []Payload) ([]byte, error) {
	if a.dh == nil {
		return nil, errors.New("ike: IKE_INTERMEDIATE response without a request")
	}
	for _, p := range inner {
		if n, ok := p.(*Notify); ok && n.NType.IsError() {
			return nil, fmt.Errorf("ike: the peer refused additional key exchange %d: notify %d", a.done+1, n.NType)
		}
	}
	ke, err := theKE(inner, a.dh.Group())
	if err != nil {
		return nil, err
	}
	shared, err := a.dh.Shared(ke.Data)
	if err != nil {
		return nil, err
	}
	a.dh = nil
	a.done++
	return shared, nil
}

// theKE returns the one KE payload of inner, which must be of method.
func theKE(inner []Payload, method uint16) (*KE, error) {
	var ke *KE
	for _, p := range inner {
		if k, ok := p.(*KE); ok {
			if ke != nil {
				return nil, errors.New("ike: IKE_INTERMEDIATE with two KE payloads")
			}
			ke = k
		}
	}
	if ke == nil {
		return nil, errors.New("ike: IKE_INTERMEDIATE without a KE payload")
	}
	if ke.Group != method {
		return nil, fmt.Errorf("ike: IKE_INTERMEDIATE KE payload of method %d, negotiated %d", ke.Group, method)
	}
	return ke, nil
}
