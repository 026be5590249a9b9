package ike

// transform_table.go is the one table of the algorithms this package
// implements (each with its strongSwan keyword, its IANA transform and
// whether RFC 8247 calls it weak), and the names of the IANA "IKEv2
// Parameters" registry (Transform Types 1 to 4) for what a peer may offer
// beyond them. Parsing (parseKeyword), support (supported), suite names
// (Suite.Name) and log lines (proposalsAttr) all read it.

import (
	"fmt"
	"slices"
	"strings"
)

// algorithm is one transform this package implements.
type algorithm struct {
	keyword string    // strongSwan's keyword, as Suite.Name writes it
	aliases []string  // other keywords ParseProposal takes for it
	t       Transform // Type, ID and KeyLen (0: no Key Length attribute)
	// weak, when set, is why RFC 8247 discourages the transform: the
	// defaults never hold it, and a configuration that writes it gets a
	// warning (Weak). It is still negotiated when written.
	weak string
	// ikeOnly marks a transform the ESP data plane does not implement:
	// IKE SA proposals only.
	ikeOnly bool
}

// Reasons a transform is weak, after RFC 8247's requirement levels.
const (
	weakSHA1 = "RFC 8247 sections 2.2 and 2.3: SHA-1 is MUST- (on its way out); prefer sha256"
	weakMODP = "RFC 8247 section 2.4: SHOULD NOT (about 80 bits of strength); prefer modp2048, ecp256 or x25519"
)

// algorithms lists every transform this package negotiates, the ones a
// default proposal may use first.
var algorithms = []algorithm{
	{keyword: "aes128", aliases: []string{"aes"}, t: Transform{Type: TransformEncr, ID: EncrAESCBC, KeyLen: 128}},
	{keyword: "aes192", t: Transform{Type: TransformEncr, ID: EncrAESCBC, KeyLen: 192}},
	{keyword: "aes256", t: Transform{Type: TransformEncr, ID: EncrAESCBC, KeyLen: 256}},
	{keyword: "aes128gcm16", aliases: []string{"aes128gcm128"}, t: Transform{Type: TransformEncr, ID: EncrAESGCM16, KeyLen: 128}},
	{keyword: "aes192gcm16", aliases: []string{"aes192gcm128"}, t: Transform{Type: TransformEncr, ID: EncrAESGCM16, KeyLen: 192}},
	{keyword: "aes256gcm16", aliases: []string{"aes256gcm128"}, t: Transform{Type: TransformEncr, ID: EncrAESGCM16, KeyLen: 256}},
	{keyword: "chacha20poly1305", t: Transform{Type: TransformEncr, ID: EncrChaCha20Poly1305}},

	{keyword: "prfsha256", t: Transform{Type: TransformPRF, ID: PRFHMACSHA256}},
	{keyword: "prfsha384", t: Transform{Type: TransformPRF, ID: PRFHMACSHA384}},
	{keyword: "prfsha512", t: Transform{Type: TransformPRF, ID: PRFHMACSHA512}},
	{keyword: "prfsha1", t: Transform{Type: TransformPRF, ID: PRFHMACSHA1}, weak: weakSHA1},

	{keyword: "sha256", aliases: []string{"sha2_256"}, t: Transform{Type: TransformInteg, ID: IntegHMACSHA256_128}},
	{keyword: "sha384", aliases: []string{"sha2_384"}, t: Transform{Type: TransformInteg, ID: IntegHMACSHA384_192}},
	{keyword: "sha512", aliases: []string{"sha2_512"}, t: Transform{Type: TransformInteg, ID: IntegHMACSHA512_256}},
	{keyword: "sha1", aliases: []string{"sha"}, t: Transform{Type: TransformInteg, ID: IntegHMACSHA1_96}, weak: weakSHA1, ikeOnly: true},

	{keyword: "x25519", aliases: []string{"curve25519"}, t: Transform{Type: TransformDH, ID: DHCurve25519}},
	{keyword: "ecp256", t: Transform{Type: TransformDH, ID: DHECP256}},
	{keyword: "ecp384", t: Transform{Type: TransformDH, ID: DHECP384}},
	{keyword: "modp2048", t: Transform{Type: TransformDH, ID: DHModp2048}},
	{keyword: "modp1536", t: Transform{Type: TransformDH, ID: DHModp1536}, weak: weakMODP},
	{keyword: "modp1024", t: Transform{Type: TransformDH, ID: DHModp1024}, weak: weakMODP},
	{keyword: "mlkem768", t: Transform{Type: TransformDH, ID: MLKEM768}},
	{keyword: "mlkem1024", t: Transform{Type: TransformDH, ID: MLKEM1024}},

	{keyword: "noesn", t: Transform{Type: TransformESN, ID: ESNNo}},
	{keyword: "esn", t: Transform{Type: TransformESN, ID: ESNYes}},
}

// lookupAlgorithm returns the entry of t (its type 4 entry for an
// additional key exchange), if this package implements it.
func lookupAlgorithm(t Transform) (algorithm, bool) {
	if isAddKE(t.Type) {
		t.Type = TransformDH
	}
	for _, a := range algorithms {
		if a.t.Type == t.Type && a.t.ID == t.ID && a.t.KeyLen == t.KeyLen {
			return a, true
		}
	}
	return algorithm{}, false
}

// refused are strongSwan keywords of algorithms this package does not
// implement, so that a configuration naming one reads why.
var refused = map[string]string{
	"3des":     "ENCR_3DES: RFC 8221 and RFC 8247 say MAY at best (64-bit blocks); use aes256",
	"des":      "ENCR_DES: MUST NOT (RFC 8221, RFC 8247)",
	"null":     "ENCR_NULL: no confidentiality",
	"md5":      "AUTH_HMAC_MD5_96: MUST NOT (RFC 8221, RFC 8247)",
	"prfmd5":   "PRF_HMAC_MD5: MUST NOT (RFC 8247)",
	"aesxcbc":  "AUTH_AES_XCBC_96 is not implemented; use sha256",
	"aescmac":  "AUTH_AES_CMAC_96 is not implemented; use sha256",
	"modp768":  "768-bit MODP group: MUST NOT (RFC 8247)",
	"modp3072": "3072-bit MODP group is not implemented; use modp2048, ecp384 or x25519",
	"modp4096": "4096-bit MODP group is not implemented; use modp2048, ecp384 or x25519",
	"modp8192": "8192-bit MODP group is not implemented; use modp2048, ecp384 or x25519",
	"ecp521":   "521-bit random ECP group is not implemented; use ecp384",
	"x448":     "Curve448 is not implemented; use x25519",
}

// ianaEncr, ianaPRF and ianaInteg are the names of IANA's IKEv2 registry
// for Transform Types 1, 2 and 3 (RFC 7296 section 3.3.2 and the RFCs
// that added to it), for the log lines that name what a peer offered.
var (
	ianaEncr = map[uint16]string{
		1: "ENCR_DES_IV64", 2: "ENCR_DES", 3: "ENCR_3DES", 4: "ENCR_RC5", 5: "ENCR_IDEA", 6: "ENCR_CAST",
		7: "ENCR_BLOWFISH", 8: "ENCR_3IDEA", 9: "ENCR_DES_IV32", 11: "ENCR_NULL", 12: "ENCR_AES_CBC",
		13: "ENCR_AES_CTR", 14: "ENCR_AES_CCM_8", 15: "ENCR_AES_CCM_12", 16: "ENCR_AES_CCM_16",
		18: "ENCR_AES_GCM_8", 19: "ENCR_AES_GCM_12", 20: "ENCR_AES_GCM_16", 21: "ENCR_NULL_AUTH_AES_GMAC",
		23: "ENCR_CAMELLIA_CBC", 24: "ENCR_CAMELLIA_CTR", 25: "ENCR_CAMELLIA_CCM_8", 26: "ENCR_CAMELLIA_CCM_12",
		27: "ENCR_CAMELLIA_CCM_16", 28: "ENCR_CHACHA20_POLY1305", 29: "ENCR_AES_CCM_8_IIV",
		30: "ENCR_AES_GCM_16_IIV", 31: "ENCR_CHACHA20_POLY1305_IIV", 32: "ENCR_KUZNYECHIK_MGM_KTREE",
		33: "ENCR_MAGMA_MGM_KTREE", 34: "ENCR_KUZNYECHIK_MGM_MAC_KTREE", 35: "ENCR_MAGMA_MGM_MAC_KTREE",
	}
	ianaPRF = map[uint16]string{
		1: "PRF_HMAC_MD5", 2: "PRF_HMAC_SHA1", 3: "PRF_HMAC_TIGER", 4: "PRF_AES128_XCBC",
		5: "PRF_HMAC_SHA2_256", 6: "PRF_HMAC_SHA2_384", 7: "PRF_HMAC_SHA2_512", 8: "PRF_AES128_CMAC",
		9: "PRF_HMAC_STREEBOG_512",
	}
	ianaInteg = map[uint16]string{
		0: "NONE", 1: "AUTH_HMAC_MD5_96", 2: "AUTH_HMAC_SHA1_96", 3: "AUTH_DES_MAC", 4: "AUTH_KPDK_MD5",
		5: "AUTH_AES_XCBC_96", 6: "AUTH_HMAC_MD5_128", 7: "AUTH_HMAC_SHA1_160", 8: "AUTH_AES_CMAC_96",
		9: "AUTH_AES_128_GMAC", 10: "AUTH_AES_192_GMAC", 11: "AUTH_AES_256_GMAC",
		12: "AUTH_HMAC_SHA2_256_128", 13: "AUTH_HMAC_SHA2_384_192", 14: "AUTH_HMAC_SHA2_512_256",
	}
	// ianaKE are Transform Type 4's methods. IANA names them in prose
	// ("1024-bit MODP Group"); these are the one-word forms strongSwan
	// logs them by.
	ianaKE = map[uint16]string{
		0: "NONE", 1: "MODP_768", 2: "MODP_1024", 5: "MODP_1536", 14: "MODP_2048", 15: "MODP_3072",
		16: "MODP_4096", 17: "MODP_6144", 18: "MODP_8192", 19: "ECP_256", 20: "ECP_384", 21: "ECP_521",
		22: "MODP_1024_160", 23: "MODP_2048_224", 24: "MODP_2048_256", 25: "ECP_192", 26: "ECP_224",
		27: "ECP_224_BP", 28: "ECP_256_BP", 29: "ECP_384_BP", 30: "ECP_512_BP", 31: "CURVE_25519",
		32: "CURVE_448", 33: "GOST3410_2012_256", 34: "GOST3410_2012_512", 35: "ML_KEM_512",
		36: "ML_KEM_768", 37: "ML_KEM_1024",
	}
)

// transformName names one transform as the logs show what a peer
// offered: by sluice's (strongSwan's) keyword where this package
// implements it for proto ("aes256", "sha1", "modp1024", "ke1_mlkem768"),
// else by its IANA name ("ENCR_3DES", "PRF_AES128_XCBC", "MODP_4096"),
// else by type and number ("encr#1234", "type#200:5"). A Key Length
// attribute the keyword does not imply follows as "_<bits>"
// ("ENCR_AES_CTR_256", "encr#1234_128"); a transform with an attribute
// this package does not understand ends in "_badattr".
func transformName(proto uint8, t Transform) string {
	var prefix string
	typ := t.Type
	if isAddKE(typ) {
		prefix = fmt.Sprintf("ke%d_", typ-TransformADDKE1+1)
		typ = TransformDH
	}
	if supported(proto, t) {
		if t.Type == TransformDH || isAddKE(t.Type) {
			return prefix + dhName(t.ID)
		}
		a, _ := lookupAlgorithm(t)
		return a.keyword
	}
	var name string
	var ok bool
	switch typ {
	case TransformEncr:
		name, ok = ianaEncr[t.ID]
		if !ok {
			name = fmt.Sprintf("encr#%d", t.ID)
		}
	case TransformPRF:
		if name, ok = ianaPRF[t.ID]; !ok {
			name = fmt.Sprintf("prf#%d", t.ID)
		}
	case TransformInteg:
		if name, ok = ianaInteg[t.ID]; !ok {
			name = fmt.Sprintf("integ#%d", t.ID)
		}
	case TransformDH:
		if name, ok = ianaKE[t.ID]; !ok {
			name = fmt.Sprintf("ke#%d", t.ID)
		}
	case TransformESN:
		switch t.ID {
		case ESNNo:
			name = "noesn"
		case ESNYes:
			name = "esn"
		default:
			name = fmt.Sprintf("esn#%d", t.ID)
		}
	default:
		name = fmt.Sprintf("type#%d:%d", t.Type, t.ID)
	}
	name = prefix + name
	if t.KeyLen != 0 {
		name += fmt.Sprintf("_%d", t.KeyLen)
	}
	if t.BadAttr {
		name += "_badattr"
	}
	return name
}

// dhName names a key exchange method by its keyword ("modp2048",
// "x25519", "mlkem768", "none" for 0), or its IANA name or number when
// this package has no keyword for it.
func dhName(g uint16) string {
	if g == DHNone {
		return "none"
	}
	if a, ok := lookupAlgorithm(Transform{Type: TransformDH, ID: g}); ok {
		return a.keyword
	}
	if n, ok := ianaKE[g]; ok {
		return n
	}
	return fmt.Sprintf("ke#%d", g)
}

// proposalName is one proposal as the logs show it: its transforms by
// transformName in strongSwan's order (encryption, integrity, PRF, key
// exchange, additional key exchanges, ESN), joined by "-".
func proposalName(p Proposal) string {
	order := []TransformType{TransformEncr, TransformInteg, TransformPRF, TransformDH, 6, 7, 8, 9, 10, 11, 12, TransformESN}
	rank := func(t TransformType) int {
		if i := slices.Index(order, t); i >= 0 {
			return i
		}
		return len(order) // unknown types last, in the order sent
	}
	sorted := slices.Clone(p.Transforms)
	slices.SortStableFunc(sorted, func(a, b Transform) int { return rank(a.Type) - rank(b.Type) })
	names := make([]string, len(sorted))
	for i, t := range sorted {
		names[i] = transformName(p.Protocol, t)
	}
	return strings.Join(names, "-")
}

// Weak lists, once each, the transforms of ps that RFC 8247 discourages,
// as "keyword (why)": what a configuration that names them is warned
// about. Nothing in the defaults is weak.
func Weak(ps []Proposal) []string {
	var out []string
	for _, p := range ps {
		for _, t := range p.Transforms {
			a, ok := lookupAlgorithm(t)
			if !ok || a.weak == "" {
				continue
			}
			s := a.keyword + " (" + a.weak + ")"
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}
