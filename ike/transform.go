package ike

// Transforms (RFC 7296 section 3.3.2 and the IANA "IKEv2 Parameters"
// registry it creates), strongSwan's proposal keywords for them, and
// proposal selection (section 2.7).

import (
	"errors"
	"fmt"
	"strconv"
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
)

// Encryption algorithm IDs (transform type 1).
const (
	EncrAESCBC           uint16 = 12
	EncrAESGCM16         uint16 = 20
	EncrChaCha20Poly1305 uint16 = 28
)

// PRF IDs (transform type 2).
const (
	PRFHMACSHA256 uint16 = 5
	PRFHMACSHA384 uint16 = 6
	PRFHMACSHA512 uint16 = 7
)

// Integrity algorithm IDs (transform type 3).
const (
	IntegNone           uint16 = 0
	IntegHMACSHA256_128 uint16 = 12
	IntegHMACSHA384_192 uint16 = 13
	IntegHMACSHA512_256 uint16 = 14
)

// Diffie-Hellman group numbers (transform type 4).
const (
	DHNone       uint16 = 0
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
func ParseProposal(proto uint8, s string) (Proposal, error) {
	p := Proposal{Num: 1, Protocol: proto}
	var encr, prf, integ, dh, esn []Transform
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
			add(&dh, t)
		case TransformESN:
			if proto != ProtoESP {
				return p, fmt.Errorf("ike: %q: %s is for ESP proposals only", s, tok)
			}
			add(&esn, t)
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
	for _, l := range [][]Transform{encr, prf, integ, dh, esn} {
		p.Transforms = append(p.Transforms, l...)
	}
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
	case IntegHMACSHA384_192:
		return PRFHMACSHA384
	case IntegHMACSHA512_256:
		return PRFHMACSHA512
	}
	return PRFHMACSHA256
}

// parseKeyword parses one strongSwan algorithm keyword.
func parseKeyword(tok string) (Transform, error) {
	enc := func(id, bits uint16) (Transform, error) {
		return Transform{Type: TransformEncr, ID: id, KeyLen: bits}, nil
	}
	switch tok {
	case "aes", "aes128":
		return enc(EncrAESCBC, 128)
	case "aes192":
		return enc(EncrAESCBC, 192)
	case "aes256":
		return enc(EncrAESCBC, 256)
	case "aes128gcm16", "aes128gcm128":
		return enc(EncrAESGCM16, 128)
	case "aes192gcm16", "aes192gcm128":
		return enc(EncrAESGCM16, 192)
	case "aes256gcm16", "aes256gcm128":
		return enc(EncrAESGCM16, 256)
	case "chacha20poly1305":
		return enc(EncrChaCha20Poly1305, 0)
	case "sha256", "sha2_256":
		return Transform{Type: TransformInteg, ID: IntegHMACSHA256_128}, nil
	case "sha384", "sha2_384":
		return Transform{Type: TransformInteg, ID: IntegHMACSHA384_192}, nil
	case "sha512", "sha2_512":
		return Transform{Type: TransformInteg, ID: IntegHMACSHA512_256}, nil
	case "prfsha256":
		return Transform{Type: TransformPRF, ID: PRFHMACSHA256}, nil
	case "prfsha384":
		return Transform{Type: TransformPRF, ID: PRFHMACSHA384}, nil
	case "prfsha512":
		return Transform{Type: TransformPRF, ID: PRFHMACSHA512}, nil
	case "modp2048":
		return Transform{Type: TransformDH, ID: DHModp2048}, nil
	case "ecp256":
		return Transform{Type: TransformDH, ID: DHECP256}, nil
	case "ecp384":
		return Transform{Type: TransformDH, ID: DHECP384}, nil
	case "x25519", "curve25519":
		return Transform{Type: TransformDH, ID: DHCurve25519}, nil
	case "esn":
		return Transform{Type: TransformESN, ID: ESNYes}, nil
	case "noesn":
		return Transform{Type: TransformESN, ID: ESNNo}, nil
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
	switch s.Encr {
	case EncrAESGCM16:
		return fmt.Sprintf("aes%dgcm16", s.KeyLen)
	case EncrChaCha20Poly1305:
		return "chacha20poly1305"
	}
	h := map[uint16]string{IntegHMACSHA256_128: "sha256", IntegHMACSHA384_192: "sha384", IntegHMACSHA512_256: "sha512"}[s.Integ]
	return fmt.Sprintf("aes%d-%s", s.KeyLen, h)
}

// Name is the suite in strongSwan's proposal keywords, which
// ParseProposal takes back, in strongSwan's order: encryption, integrity
// (none for an AEAD), PRF, DH group, ESN: "aes256gcm16-prfsha384-ecp384"
// and "aes128-sha256-prfsha256-modp2048" for IKE SAs, "aes128gcm16-esn"
// for a Child SA. An ID it has no keyword for is written as a number.
func (s Suite) Name() string {
	var parts []string
	switch s.Encr {
	case EncrAESGCM16:
		parts = append(parts, fmt.Sprintf("aes%dgcm16", s.KeyLen))
	case EncrChaCha20Poly1305:
		parts = append(parts, "chacha20poly1305")
	case EncrAESCBC:
		parts = append(parts, fmt.Sprintf("aes%d", s.KeyLen))
	default:
		parts = append(parts, fmt.Sprintf("encr%d", s.Encr))
	}
	name := func(m map[uint16]string, id uint16) string {
		if n, ok := m[id]; ok {
			return n
		}
		return strconv.Itoa(int(id))
	}
	if s.Integ != 0 {
		parts = append(parts, name(map[uint16]string{IntegHMACSHA256_128: "sha256", IntegHMACSHA384_192: "sha384", IntegHMACSHA512_256: "sha512"}, s.Integ))
	}
	if s.PRF != 0 {
		parts = append(parts, name(map[uint16]string{PRFHMACSHA256: "prfsha256", PRFHMACSHA384: "prfsha384", PRFHMACSHA512: "prfsha512"}, s.PRF))
	}
	if s.DH != 0 {
		parts = append(parts, dhName(s.DH))
	}
	if s.ESN {
		parts = append(parts, "esn")
	}
	return strings.Join(parts, "-")
}

// supported reports whether this package implements transform t (for the
// protocol proto).
func supported(proto uint8, t Transform) bool {
	if t.BadAttr {
		return false
	}
	switch t.Type {
	case TransformEncr:
		switch t.ID {
		case EncrAESCBC, EncrAESGCM16:
			return t.KeyLen == 128 || t.KeyLen == 192 || t.KeyLen == 256
		case EncrChaCha20Poly1305:
			return t.KeyLen == 0
		}
	case TransformPRF:
		return proto == ProtoIKE && t.KeyLen == 0 && (t.ID == PRFHMACSHA256 || t.ID == PRFHMACSHA384 || t.ID == PRFHMACSHA512)
	case TransformInteg:
		return t.KeyLen == 0 && (t.ID == IntegHMACSHA256_128 || t.ID == IntegHMACSHA384_192 || t.ID == IntegHMACSHA512_256)
	case TransformDH:
		return t.KeyLen == 0 && (t.ID == DHModp2048 || t.ID == DHECP256 || t.ID == DHECP384 || t.ID == DHCurve25519)
	case TransformESN:
		return proto == ProtoESP && t.KeyLen == 0 && (t.ID == ESNNo || t.ID == ESNYes)
	}
	return false
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
	for _, typ := range []TransformType{TransformEncr, TransformPRF, TransformInteg, TransformDH, TransformESN} {
		if typ == TransformDH && ignoreDH {
			continue
		}
		var found, oursHas, theirsHas bool
		var pick Transform
		for _, ot := range o.Transforms {
			if ot.Type != typ {
				continue
			}
			oursHas = true
			if found || !supported(o.Protocol, ot) {
				continue
			}
			for _, tt := range t.Transforms {
				if tt == ot {
					pick, found = ot, true
					break
				}
			}
		}
		for _, tt := range t.Transforms {
			if tt.Type == typ {
				theirsHas = true
			}
		}
		if oursHas != theirsHas {
			return s, false
		}
		if !oursHas {
			continue
		}
		if !found {
			return s, false
		}
		switch typ {
		case TransformEncr:
			s.Encr, s.KeyLen = pick.ID, pick.KeyLen
		case TransformPRF:
			s.PRF = pick.ID
		case TransformInteg:
			s.Integ = pick.ID
		case TransformDH:
			s.DH = pick.ID
		case TransformESN:
			s.ESN = pick.ID == ESNYes
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
