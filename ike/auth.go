package ike

// Signature authentication: the AUTH payload signs the same octets a PSK
// MAC covers (RFC 7296 section 2.15), with
//
//   - method 1, RSA Digital Signature: RSASSA-PKCS1-v1_5 with SHA-1
//     (section 3.8);
//   - methods 9, 10, 11, ECDSA with SHA-256 on P-256, SHA-384 on P-384,
//     SHA-512 on P-521 (RFC 4754): the signature is r | s, each as long as
//     the curve's order;
//   - method 14, Digital Signature (RFC 7427): one octet of length, the
//     DER AlgorithmIdentifier of the signature algorithm, and the signature
//     (PKCS #1 v1.5 for RSA, DER Ecdsa-Sig-Value for ECDSA, RFC 8032 for
//     Ed25519 per RFC 8420), with the hash chosen from those the peer
//     announced in N(SIGNATURE_HASH_ALGORITHMS).
//
// Private keys are crypto.Signers, so a key held by a cryptodev engine
// (cryptodev.NewSigner) signs without leaving it. Certificates are X.509
// (CERT encoding 4); the peer's chain must verify to one of the configured
// CAs and name the peer's identity.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// Hash algorithm numbers of N(SIGNATURE_HASH_ALGORITHMS) (RFC 7427
// section 7, RFC 8420 for Identity).
const (
	HashSHA1     uint16 = 1
	HashSHA256   uint16 = 2
	HashSHA384   uint16 = 3
	HashSHA512   uint16 = 4
	HashIdentity uint16 = 5
)

// ourHashes is what we announce: the SHA-2 hashes and Identity (Ed25519).
var ourHashes = []uint16{HashSHA256, HashSHA384, HashSHA512, HashIdentity}

func signatureHashesNotify() *Notify {
	b := make([]byte, 0, 2*len(ourHashes))
	for _, h := range ourHashes {
		b = binary.BigEndian.AppendUint16(b, h)
	}
	return &Notify{NType: SignatureHashAlgorithms, Data: b}
}

// peerHashes reads the peer's N(SIGNATURE_HASH_ALGORITHMS), nil without
// one.
func peerHashes(ps []Payload) []uint16 {
	n := findNotify(ps, SignatureHashAlgorithms)
	if n == nil {
		return nil
	}
	out := make([]uint16, 0, len(n.Data)/2)
	for i := 0; i+1 < len(n.Data) && len(out) < 16; i += 2 {
		out = append(out, binary.BigEndian.Uint16(n.Data[i:]))
	}
	return out
}

// Object identifiers of the signature algorithms (RFC 8017 Appendix C for
// RSA, RFC 5758 section 3.2 for ECDSA, RFC 8410 section 3 for Ed25519).
var (
	oidSHA256WithRSA   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
	oidSHA384WithRSA   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 12}
	oidSHA512WithRSA   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 13}
	oidECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidECDSAWithSHA384 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidECDSAWithSHA512 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
	oidEd25519         = asn1.ObjectIdentifier{1, 3, 101, 112}
)

type sigAlg struct {
	oid  asn1.ObjectIdentifier
	hash crypto.Hash // 0 for Ed25519
	rsa  bool        // PKCS #1 v1.5 parameters are NULL
}

var sigAlgs = []sigAlg{
	{oidSHA256WithRSA, crypto.SHA256, true}, {oidSHA384WithRSA, crypto.SHA384, true}, {oidSHA512WithRSA, crypto.SHA512, true},
	{oidECDSAWithSHA256, crypto.SHA256, false}, {oidECDSAWithSHA384, crypto.SHA384, false}, {oidECDSAWithSHA512, crypto.SHA512, false},
	{oidEd25519, 0, false},
}

// algorithmIdentifier encodes the DER AlgorithmIdentifier of a.
func (a sigAlg) algorithmIdentifier() []byte {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(a.oid)
		if a.rsa {
			b.AddASN1NULL()
		}
	})
	return b.BytesOrPanic()
}

// parseAlgorithmIdentifier decodes a DER AlgorithmIdentifier into one of
// sigAlgs.
func parseAlgorithmIdentifier(der []byte) (sigAlg, error) {
	s := cryptobyte.String(der)
	var seq cryptobyte.String
	var oid asn1.ObjectIdentifier
	if !s.ReadASN1(&seq, cbasn1.SEQUENCE) || !s.Empty() || !seq.ReadASN1ObjectIdentifier(&oid) {
		return sigAlg{}, errors.New("ike: malformed AlgorithmIdentifier")
	}
	for _, a := range sigAlgs {
		if !a.oid.Equal(oid) {
			continue
		}
		if a.rsa {
			// NULL or absent parameters (RFC 4055 section 5).
			var null cryptobyte.String
			if !seq.Empty() && (!seq.ReadASN1(&null, cbasn1.NULL) || !null.Empty()) {
				return sigAlg{}, errors.New("ike: unexpected AlgorithmIdentifier parameters")
			}
		}
		if !seq.Empty() {
			return sigAlg{}, errors.New("ike: unexpected AlgorithmIdentifier parameters")
		}
		return a, nil
	}
	return sigAlg{}, fmt.Errorf("ike: signature algorithm %v is not supported", oid)
}

func hashNumber(h crypto.Hash) uint16 {
	switch h {
	case crypto.SHA256:
		return HashSHA256
	case crypto.SHA384:
		return HashSHA384
	case crypto.SHA512:
		return HashSHA512
	}
	return HashIdentity
}

func digest(h crypto.Hash, msg []byte) []byte {
	if h == 0 {
		return msg
	}
	d := h.New()
	d.Write(msg)
	return d.Sum(nil)
}

// curveMethod returns the classic ECDSA method and hash of a curve
// (RFC 4754).
func curveMethod(c elliptic.Curve) (AuthMethod, crypto.Hash, error) {
	switch c {
	case elliptic.P256():
		return AuthECDSA256, crypto.SHA256, nil
	case elliptic.P384():
		return AuthECDSA384, crypto.SHA384, nil
	case elliptic.P521():
		return AuthECDSA521, crypto.SHA512, nil
	}
	return 0, 0, errors.New("ike: unsupported ECDSA curve")
}

// chooseSigAlg picks the RFC 7427 algorithm for key among the hashes the
// peer accepts.
func chooseSigAlg(pub crypto.PublicKey, peer []uint16) (sigAlg, bool) {
	accepts := func(h crypto.Hash) bool {
		for _, p := range peer {
			if p == hashNumber(h) {
				return true
			}
		}
		return false
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		for _, a := range sigAlgs[:3] {
			if accepts(a.hash) {
				return a, true
			}
		}
	case *ecdsa.PublicKey:
		_, h, err := curveMethod(k.Curve)
		if err != nil {
			return sigAlg{}, false
		}
		for _, a := range sigAlgs[3:6] {
			if a.hash == h && accepts(h) {
				return a, true
			}
		}
	case ed25519.PublicKey:
		if accepts(0) {
			return sigAlgs[6], true
		}
	}
	return sigAlg{}, false
}

// signAuth signs octets with signer. method 0 chooses: Digital Signature
// (14) when the peer announced a hash the key can use, else the classic
// method of the key type (1 for RSA, 9/10/11 for ECDSA).
func signAuth(method AuthMethod, signer crypto.Signer, octets []byte, peer []uint16) (*Auth, error) {
	pub := signer.Public()
	if method == 0 || method == AuthDigitalSig {
		if a, ok := chooseSigAlg(pub, peer); ok {
			var opts crypto.SignerOpts = a.hash
			sig, err := signer.Sign(rand.Reader, digest(a.hash, octets), opts)
			if err != nil {
				return nil, fmt.Errorf("ike: signing AUTH: %w", err)
			}
			id := a.algorithmIdentifier()
			data := append([]byte{byte(len(id))}, id...)
			return &Auth{Method: AuthDigitalSig, Data: append(data, sig...)}, nil
		}
		if method == AuthDigitalSig {
			return nil, errors.New("ike: the peer announced no hash our key can sign with (RFC 7427)")
		}
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if method != 0 && method != AuthRSASig {
			return nil, fmt.Errorf("ike: AUTH method %d with an RSA key", method)
		}
		sig, err := signer.Sign(rand.Reader, digest(crypto.SHA1, octets), crypto.SHA1)
		if err != nil {
			return nil, fmt.Errorf("ike: signing AUTH: %w", err)
		}
		return &Auth{Method: AuthRSASig, Data: sig}, nil
	case *ecdsa.PublicKey:
		m, h, err := curveMethod(k.Curve)
		if err != nil {
			return nil, err
		}
		if method != 0 && method != m {
			return nil, fmt.Errorf("ike: AUTH method %d with an ECDSA key on %s", method, k.Curve.Params().Name)
		}
		der, err := signer.Sign(rand.Reader, digest(h, octets), h)
		if err != nil {
			return nil, fmt.Errorf("ike: signing AUTH: %w", err)
		}
		rs, err := derToRS(der, (k.Curve.Params().N.BitLen()+7)/8)
		if err != nil {
			return nil, err
		}
		return &Auth{Method: m, Data: rs}, nil
	}
	return nil, fmt.Errorf("ike: no AUTH method for a %T key without RFC 7427", pub)
}

// derToRS turns a DER Ecdsa-Sig-Value into r | s of n bytes each (RFC
// 4754 section 7).
func derToRS(der []byte, n int) ([]byte, error) {
	var r, s big.Int
	in := cryptobyte.String(der)
	var seq cryptobyte.String
	if !in.ReadASN1(&seq, cbasn1.SEQUENCE) || !in.Empty() || !seq.ReadASN1Integer(&r) || !seq.ReadASN1Integer(&s) || !seq.Empty() ||
		r.Sign() <= 0 || s.Sign() <= 0 || r.BitLen() > 8*n || s.BitLen() > 8*n {
		return nil, errors.New("ike: malformed ECDSA signature from the signer")
	}
	out := make([]byte, 2*n)
	r.FillBytes(out[:n])
	s.FillBytes(out[n:])
	return out, nil
}

// verifyAuth checks a signature AUTH payload over octets with pub.
func verifyAuth(a *Auth, pub crypto.PublicKey, octets []byte) error {
	bad := errors.New("ike: AUTH signature does not verify")
	switch a.Method {
	case AuthDigitalSig:
		if len(a.Data) < 1 || int(a.Data[0])+1 > len(a.Data) {
			return errors.New("ike: malformed Digital Signature AUTH")
		}
		alg, err := parseAlgorithmIdentifier(a.Data[1 : 1+int(a.Data[0])])
		if err != nil {
			return err
		}
		sig := a.Data[1+int(a.Data[0]):]
		d := digest(alg.hash, octets)
		switch k := pub.(type) {
		case *rsa.PublicKey:
			if !alg.rsa || rsa.VerifyPKCS1v15(k, alg.hash, d, sig) != nil {
				return bad
			}
		case *ecdsa.PublicKey:
			if alg.rsa || alg.hash == 0 || !ecdsa.VerifyASN1(k, d, sig) {
				return bad
			}
		case ed25519.PublicKey:
			if alg.hash != 0 || !ed25519.Verify(k, octets, sig) {
				return bad
			}
		default:
			return fmt.Errorf("ike: %T keys are not supported", pub)
		}
		return nil
	case AuthRSASig:
		k, ok := pub.(*rsa.PublicKey)
		if !ok || rsa.VerifyPKCS1v15(k, crypto.SHA1, digest(crypto.SHA1, octets), a.Data) != nil {
			return bad
		}
		return nil
	case AuthECDSA256, AuthECDSA384, AuthECDSA521:
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			return bad
		}
		m, h, err := curveMethod(k.Curve)
		if err != nil || m != a.Method {
			return bad
		}
		n := (k.Curve.Params().N.BitLen() + 7) / 8
		if len(a.Data) != 2*n {
			return bad
		}
		r, s := new(big.Int).SetBytes(a.Data[:n]), new(big.Int).SetBytes(a.Data[n:])
		if !ecdsa.Verify(k, digest(h, octets), r, s) {
			return bad
		}
		return nil
	}
	return fmt.Errorf("ike: AUTH method %d is not supported", a.Method)
}

// certRequest returns the CERTREQ data naming cas: the SHA-1 hashes of
// their SubjectPublicKeyInfo (section 3.7).
func certRequest(cas []*x509.Certificate) *Cert {
	var b []byte
	for _, c := range cas {
		h := sha1.Sum(c.RawSubjectPublicKeyInfo)
		b = append(b, h[:]...)
	}
	return &Cert{Request: true, Encoding: CertX509Signature, Data: b}
}

// verifyPeerCert verifies the CERT payloads of ps (the first is the
// peer's, the rest intermediates) to one of peer.RemoteCAs, checks the
// chain against peer.CRLs under peer.Revocation (crl.go), checks that the
// certificate names id, and returns its public key.
func verifyPeerCert(ps []Payload, peer *Peer, id *ID) (crypto.PublicKey, error) {
	var leaf *x509.Certificate
	inter := x509.NewCertPool()
	n := 0
	for _, p := range ps {
		c, ok := p.(*Cert)
		if !ok || c.Request {
			continue
		}
		if c.Encoding != CertX509Signature {
			continue
		}
		if n++; n > 8 {
			return nil, errors.New("ike: too many certificates")
		}
		cert, err := x509.ParseCertificate(c.Data)
		if err != nil {
			return nil, fmt.Errorf("ike: peer certificate: %w", err)
		}
		if leaf == nil {
			leaf = cert
		} else {
			inter.AddCert(cert)
		}
	}
	if leaf == nil {
		return nil, errors.New("ike: the peer sent no certificate")
	}
	roots := x509.NewCertPool()
	for _, c := range peer.RemoteCAs {
		roots.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil, fmt.Errorf("ike: peer certificate: %w", err)
	}
	if err := peer.checkChains(chains, time.Now()); err != nil {
		return nil, err
	}
	if !certNames(leaf, id) {
		return nil, fmt.Errorf("ike: the peer's certificate does not name %v", Identity{id.IDType, id.Data})
	}
	return leaf.PublicKey, nil
}

// certNames reports whether cert names the identity id (RFC 4945 section
// 3.1: the ID must match a subjectAltName, or the subject for a DN).
func certNames(cert *x509.Certificate, id *ID) bool {
	switch id.IDType {
	case IDFQDN:
		for _, n := range cert.DNSNames {
			if n == string(id.Data) {
				return true
			}
		}
	case IDRFC822:
		for _, n := range cert.EmailAddresses {
			if n == string(id.Data) {
				return true
			}
		}
	case IDIPv4Addr, IDIPv6Addr:
		a, ok := netip.AddrFromSlice(id.Data)
		for _, ip := range cert.IPAddresses {
			if b, ok2 := netip.AddrFromSlice(ip); ok && ok2 && a == b.Unmap() {
				return true
			}
		}
	case IDDERASN1:
		return DNEqual(cert.RawSubject, id.Data)
	}
	return false
}
