package ike

// Transforms (RFC 7296 section 3.3.2 and the IANA "IKEv2 Parameters"
// registry it creates), strongSwan's proposal keywords for them, and
// proposal selection (section 2.7).

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TransformType is the type of a transform (section 3.3.2).
type TransformType uint8

// Transform types.
const (
	TransformEncr  TransformType = 1
	TransformPRF   TransformType = 2
	TransformInteg TransformType = 3
	TransformDH    TransformType = 4
	TransformESN   TransformType = 5

	// TransformADDKE1 to TransformADDKE7 are the Additional Key Exchange
	// types of RFC 9370 section 2.2.1 (types 6 to 12): each carries key
	// exchange method IDs (those of type 4, and 0 for "none") for one
	// further exchange after the first, run in IKE_INTERMEDIATE.
	TransformADDKE1 TransformType = 6
	TransformADDKE7 TransformType = 12
)

// isAddKE reports whether t is one of the additional key exchange types.
func isAddKE(t TransformType) bool { return t >= TransformADDKE1 && t <= TransformADDKE7 }

// Encryption algorithm IDs (transform type 1).
const (
	EncrAESCBC           uint16 = 12
	EncrAESGCM16         uint16 = 20
	EncrChaCha20Poly1305 uint16 = 28
)

// PRF IDs (transform type 2).
const (
	PRFHMACSHA1   uint16 = 2
	PRFHMACSHA256 uint16 = 5
	PRFHMACSHA384 uint16 = 6
	PRFHMACSHA512 uint16 = 7
)

// Integrity algorithm IDs (transform type 3).
const (
	IntegNone           uint16 = 0
	IntegHMACSHA1_96    uint16 = 2
	IntegHMACSHA256_128 uint16 = 12
	IntegHMACSHA384_192 uint16 = 13
	IntegHMACSHA512_256 uint16 = 14
)

// Diffie-Hellman group numbers (transform type 4).
const (
	DHNone       uint16 = 0
	DHModp1024   uint16 = 2
	DHModp1536   uint16 = 5
	DHModp2048   uint16 = 14
	DHECP256     uint16 = 19
	DHECP384     uint16 = 20
	DHCurve25519 uint16 = 31
)

// ESN values (transform type 5).
const (
	ESNNo  uint16 = 0
	ESNYes uint16 = 1
)

// isAEAD reports whether the encryption algorithm id is an AEAD (no
// integrity transform).
func isAEAD(id uint16) bool { return id == EncrAESGCM16 || id == EncrChaCha20Poly1305 }

// ParseProposal parses one strongSwan proposal keyword string, such as
// "aes256gcm16-prfsha384-ecp384" or "aes128-sha256-modp2048" for IKE
// (proto ProtoIKE) and "aes128gcm16", "aes256gcm16-esn", "aes128-sha256" or
// "chacha20poly1305" for ESP (proto ProtoESP), into a proposal with the
// transforms in the order given. Several algorithms of one kind may be
// listed ("aes128-aes256-sha256-modp2048-ecp256").
//
// As in strongSwan: for IKE, integrity algorithms without any prf keyword
// also propose the PRF of the same hash; an AEAD IKE proposal needs a prf
// keyword. For ESP, no esn/noesn keyword means noesn, and a DH group asks
// for PFS (used only in CREATE_CHILD_SA; IKE_AUTH leaves it out).
//
// The keywords are transform_table.go's. The weak ones (sha1, prfsha1,
// modp1024, modp1536; see Weak) are taken as written, sha1 in IKE
// proposals only; keywords of algorithms not implemented are an error
// saying why (3des, md5, modp4096, ...).
//
// Additional key exchanges (RFC 9370) take strongSwan 6's keywords: "ke1_"
// to "ke7_" before a key exchange method, as in
// "aes256gcm16-prfsha384-x25519-ke1_mlkem768", and "ke1_none" to make
// that exchange optional. ML-KEM is taken only as an additional key
// exchange of an IKE proposal (it does not fit an unfragmentable
// IKE_SA_INIT; the draft's section 2.1), and additional key exchanges
// only in IKE proposals (a Child SA's would need IKE_FOLLOWUP_KE, RFC 9370
// section 2.2.4, which this package does not implement).
func ParseProposal(proto uint8, s string) (Proposal, error) {
	p := Proposal{Num: 1, Protocol: proto}
	var encr, prf, integ, dh, esn []Transform
	var addke [7][]Transform
	add := func(list *[]Transform, t Transform) {
		for _, x := range *list {
			if x == t {
				return
			}
		}
		*list = append(*list, t)
	}
	aead, classic := false, false
	for _, tok := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "-") {
		t, err := parseKeyword(tok)
		if err != nil {
			return p, err
		}
		if a, _ := lookupAlgorithm(t); a.ikeOnly && proto == ProtoESP {
			return p, fmt.Errorf("ike: %q: %s is for IKE proposals only: the ESP data plane does not implement it (have the client propose sha256)", s, tok)
		}
		switch t.Type {
		case TransformEncr:
			if isAEAD(t.ID) {
				aead = true
			} else {
				classic = true
			}
			add(&encr, t)
		case TransformPRF:
			add(&prf, t)
		case TransformInteg:
			add(&integ, t)
		case TransformDH:
			if isKEM(t.ID) {
				return p, fmt.Errorf("ike: %q: %s is supported as an additional key exchange only (ke1_%s)", s, tok, tok)
			}
			add(&dh, t)
		case TransformESN:
			if proto != ProtoESP {
				return p, fmt.Errorf("ike: %q: %s is for ESP proposals only", s, tok)
			}
			add(&esn, t)
		default: // ke1_ to ke7_
			if proto != ProtoIKE {
				return p, fmt.Errorf("ike: %q: %s: additional key exchanges for Child SAs (IKE_FOLLOWUP_KE) are not supported", s, tok)
			}
			add(&addke[t.Type-TransformADDKE1], t)
		}
	}
	if len(encr) == 0 {
		return p, fmt.Errorf("ike: %q: no encryption algorithm", s)
	}
	if aead && classic {
		return p, fmt.Errorf("ike: %q mixes AEAD and non-AEAD encryption in one proposal", s)
	}
	if aead && len(integ) > 0 {
		return p, fmt.Errorf("ike: %q: an AEAD proposal takes no integrity algorithm", s)
	}
	if classic && len(integ) == 0 {
		return p, fmt.Errorf("ike: %q: no integrity algorithm", s)
	}
	switch proto {
	case ProtoIKE:
		if len(prf) == 0 {
			if aead {
				return p, fmt.Errorf("ike: %q: an AEAD IKE proposal needs a prf keyword (prfsha256, prfsha384, prfsha512)", s)
			}
			for _, t := range integ {
				add(&prf, Transform{Type: TransformPRF, ID: prfOfInteg(t.ID)})
			}
		}
		if len(dh) == 0 {
			return p, fmt.Errorf("ike: %q: no Diffie-Hellman group", s)
		}
	case ProtoESP:
		if len(prf) > 0 {
			return p, fmt.Errorf("ike: %q: an ESP proposal takes no PRF", s)
		}
		if len(esn) == 0 {
			esn = []Transform{{Type: TransformESN, ID: ESNNo}}
		}
	default:
		return p, fmt.Errorf("ike: protocol %d proposals are not supported", proto)
	}
	for _, l := range [][]Transform{encr, prf, integ, dh} {
		p.Transforms = append(p.Transforms, l...)
	}
	for _, l := range addke {
		p.Transforms = append(p.Transforms, l...)
	}
	p.Transforms = append(p.Transforms, esn...)
	return p, nil
}

// ParseProposals parses a comma-separated list of proposals (strongSwan's
// proposals = / esp_proposals =), numbering them from 1.
func ParseProposals(proto uint8, s string) ([]Proposal, error) {
	var ps []Proposal
	for i, one := range strings.Split(s, ",") {
		p, err := ParseProposal(proto, one)
		if err != nil {
			return nil, err
		}
		p.Num = uint8(i + 1)
		ps = append(ps, p)
	}
	if len(ps) > 32 {
		return nil, errors.New("ike: more than 32 proposals")
	}
	return ps, nil
}

func prfOfInteg(id uint16) uint16 {
	switch id {
	case IntegHMACSHA1_96:
		return PRFHMACSHA1
	case IntegHMACSHA384_192:
		return PRFHMACSHA384
	case IntegHMACSHA512_256:
		return PRFHMACSHA512
	}
	return PRFHMACSHA256
}

// parseKeyword parses one strongSwan algorithm keyword.
func parseKeyword(tok string) (Transform, error) {
	// strongSwan 6: ke<n>_<method> for additional key exchange n.
	if len(tok) > 4 && tok[:2] == "ke" && tok[2] >= '1' && tok[2] <= '7' && tok[3] == '_' {
		typ := TransformADDKE1 + TransformType(tok[2]-'1')
		if tok[4:] == "none" {
			return Transform{Type: typ, ID: DHNone}, nil
		}
		t, err := parseKeyword(tok[4:])
		if err != nil {
			return Transform{}, err
		}
		if t.Type != TransformDH {
			return Transform{}, fmt.Errorf("ike: %q: %q is not a key exchange method", tok, tok[4:])
		}
		t.Type = typ
		return t, nil
	}
	if tok == "mlkem512" {
		return Transform{}, errors.New("ike: mlkem512 is not supported (Go's crypto/mlkem has ML-KEM-768 and ML-KEM-1024)")
	}
	for _, a := range algorithms {
		if a.keyword == tok || slices.Contains(a.aliases, tok) {
			return a.t, nil
		}
	}
	if why, ok := refused[tok]; ok {
		return Transform{}, fmt.Errorf("ike: %s is not supported (%s)", tok, why)
	}
	return Transform{}, fmt.Errorf("ike: unknown or unsupported algorithm keyword %q", tok)
}

// Suite is one transform of each type chosen from a proposal: what an SA
// runs with. Zero fields mean "none" (an AEAD has no Integ; an IKE SA has
// no ESN; an ESP SA has no PRF).
type Suite struct {
	Protocol uint8
	Encr     uint16
	KeyLen   uint16 // bits; 0 for ChaCha20-Poly1305
	PRF      uint16
	Integ    uint16
	DH       uint16
	ESN      bool
	// AddKE are the methods of the additional key exchanges (RFC 9370):
	// AddKE[i] of type ADDKE(i+1), 0 where none was chosen. They run in
	// this order, one IKE_INTERMEDIATE exchange each, skipping zeros.
	AddKE [7]uint16
}

// transforms returns the suite as the transforms of a one-of-each
// proposal.
func (s Suite) transforms() []Transform {
	ts := []Transform{{Type: TransformEncr, ID: s.Encr, KeyLen: s.KeyLen}}
	if s.PRF != 0 {
		ts = append(ts, Transform{Type: TransformPRF, ID: s.PRF})
	}
	if s.Integ != 0 {
		ts = append(ts, Transform{Type: TransformInteg, ID: s.Integ})
	}
	if s.DH != 0 {
		ts = append(ts, Transform{Type: TransformDH, ID: s.DH})
	}
	for i, m := range s.AddKE {
		if m != 0 {
			ts = append(ts, Transform{Type: TransformADDKE1 + TransformType(i), ID: m})
		}
	}
	if s.Protocol == ProtoESP {
		esn := ESNNo
		if s.ESN {
			esn = ESNYes
		}
		ts = append(ts, Transform{Type: TransformESN, ID: esn})
	}
	return ts
}

// ESPName is the suite's name in sluice's (strongSwan's) keywords, as the
// config package takes it: "aes128gcm16", "aes256-sha256",
// "chacha20poly1305". The ESN flag is not part of the name.
func (s Suite) ESPName() string {
	name := transformName(ProtoESP, Transform{Type: TransformEncr, ID: s.Encr, KeyLen: s.KeyLen})
	if s.Integ != 0 {
		name += "-" + transformName(ProtoESP, Transform{Type: TransformInteg, ID: s.Integ})
	}
	return name
}

// Name is the suite in strongSwan's proposal keywords, which
// ParseProposal takes back, in strongSwan's order: encryption, integrity
// (none for an AEAD), PRF, DH group, additional key exchanges, ESN: "aes256gcm16-prfsha384-ecp384"
// and "aes128-sha256-prfsha256-modp2048" for IKE SAs, "aes128gcm16-esn"
// for a Child SA (whose "noesn" is left out). An ID it has no keyword for
// is written by its IANA name or number (transformName).
func (s Suite) Name() string {
	ts := slices.DeleteFunc(s.transforms(), func(t Transform) bool { return t.Type == TransformESN && t.ID == ESNNo })
	return proposalName(Proposal{Protocol: s.Protocol, Transforms: ts})
}

// supported reports whether this package implements transform t (for the
// protocol proto): it is in the algorithms table, with the Key Length
// attribute the table gives, and of a type the protocol takes.
func supported(proto uint8, t Transform) bool {
	if t.BadAttr {
		return false
	}
	if isAddKE(t.Type) {
		// "none" (0) included: RFC 9370 section 2.2.1 lets an initiator
		// make an additional key exchange optional.
		return proto == ProtoIKE && t.KeyLen == 0 && (t.ID == DHNone || isDHGroup(t.ID) || isKEM(t.ID))
	}
	a, ok := lookupAlgorithm(t)
	if !ok || (a.ikeOnly && proto != ProtoIKE) {
		return false
	}
	switch t.Type {
	case TransformPRF:
		return proto == ProtoIKE
	case TransformDH:
		return isDHGroup(t.ID)
	case TransformESN:
		return proto == ProtoESP
	}
	return true
}

// isDHGroup reports whether id is a Diffie-Hellman group NewDH supports
// (a type 4 method of the algorithms table that is not a KEM).
func isDHGroup(id uint16) bool {
	_, ok := lookupAlgorithm(Transform{Type: TransformDH, ID: id})
	return ok && id != DHNone && !isKEM(id)
}

// selectProposal picks, for our proposals (in our order of preference)
// against the peer's, the first pair that agrees on one transform of
// every type either side lists (section 2.7; ignoreDH drops DH transforms
// from both, as IKE_AUTH does for a Child SA's PFS groups). It returns the
// suite and the peer's proposal that matched (whose SPI is the peer's).
func selectProposal(ours, theirs []Proposal, ignoreDH bool) (Suite, *Proposal, bool) {
	for _, o := range ours {
		for i := range theirs {
			t := &theirs[i]
			if t.Protocol != o.Protocol {
				continue
			}
			if s, ok := matchProposal(o, *t, ignoreDH); ok {
				return s, t, true
			}
		}
	}
	return Suite{}, nil, false
}

func matchProposal(o, t Proposal, ignoreDH bool) (Suite, bool) {
	s := Suite{Protocol: o.Protocol}
	// Section 3.3.6: a proposal with a transform type we do not know is
	// unacceptable.
	for _, tt := range t.Transforms {
		if tt.Type < TransformEncr || tt.Type > TransformADDKE7 {
			return s, false
		}
	}
	var used []uint16 // key exchange methods chosen so far
	for typ := TransformEncr; typ <= TransformADDKE7; typ++ {
		ke := typ == TransformDH || isAddKE(typ)
		if ke && ignoreDH {
			continue
		}
		var oursHas, theirsHas, oursNone, theirsNone bool
		for _, ot := range o.Transforms {
			if ot.Type == typ {
				oursHas, oursNone = true, oursNone || ot.ID == DHNone
			}
		}
		for _, tt := range t.Transforms {
			if tt.Type == typ {
				theirsHas, theirsNone = true, theirsNone || tt.ID == DHNone
			}
		}
		if !oursHas && !theirsHas {
			continue
		}
		if oursHas != theirsHas {
			// RFC 9370 section 2.2.1: an additional key exchange one
			// side leaves out is acceptable if the other's includes
			// NONE; then it does not take place.
			if isAddKE(typ) && (oursNone || theirsNone) {
				continue
			}
			return s, false
		}
		var found bool
		var pick Transform
		for _, ot := range o.Transforms {
			if ot.Type != typ || !supported(o.Protocol, ot) {
				continue
			}
			// As strongSwan: one method is not chosen for two key
			// exchanges.
			if ke && ot.ID != DHNone && slices.Contains(used, ot.ID) {
				continue
			}
			if slices.Contains(t.Transforms, ot) {
				pick, found = ot, true
				break
			}
		}
		if !found {
			return s, false
		}
		switch {
		case typ == TransformEncr:
			s.Encr, s.KeyLen = pick.ID, pick.KeyLen
		case typ == TransformPRF:
			s.PRF = pick.ID
		case typ == TransformInteg:
			s.Integ = pick.ID
		case typ == TransformDH:
			s.DH = pick.ID
		case typ == TransformESN:
			s.ESN = pick.ID == ESNYes
		default:
			s.AddKE[typ-TransformADDKE1] = pick.ID
		}
		if ke && pick.ID != DHNone {
			used = append(used, pick.ID)
		}
	}
	if s.Encr == 0 || (!isAEAD(s.Encr) && s.Integ == 0) || (isAEAD(s.Encr) && s.Integ != 0) {
		return s, false
	}
	if s.Protocol == ProtoIKE && (s.PRF == 0 || s.DH == 0) {
		return s, false
	}
	return s, true
}

// checkChosen verifies that a responder's chosen proposal (one transform
// per type) is one of ours, and returns its suite.
func checkChosen(ours []Proposal, chosen Proposal, ignoreDH bool) (Suite, error) {
	seen := map[TransformType]bool{}
	for _, t := range chosen.Transforms {
		if seen[t.Type] {
			return Suite{}, errors.New("ike: the responder chose more than one transform of a type")
		}
		seen[t.Type] = true
	}
	for _, o := range ours {
		if o.Protocol != chosen.Protocol {
			continue
		}
		if s, ok := matchProposal(o, chosen, ignoreDH); ok {
			return s, nil
		}
	}
	return Suite{}, errors.New("ike: the responder chose a proposal we did not offer")
}
