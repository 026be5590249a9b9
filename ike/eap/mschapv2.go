package eap

// EAP-MSCHAPv2 as a server: draft-kamath-pppext-eap-mschapv2 carries the
// MS-CHAP-V2 packets of RFC 2759 in EAP; the computations are RFC 2759
// section 8 and the keys RFC 3079 section 3.
//
//	server                                   peer
//	Request  Challenge (16 octets, our name)  ->
//	                                          <- Response (peer challenge,
//	                                             NT-Response, user name)
//	Request  Success "S=<authenticator> M=.." ->
//	                                          <- Response Success
//	EAP-Success (the MSK is ready)
//
// A wrong password or an unknown user ends the session with EAP-Failure
// at once: the retry dance of RFC 2759 section 6 (a Failure request with
// R=1) buys a peer more guesses and, in IKE, a client that does not
// answer (strongSwan's and Windows' clients end on a Failure request).

import (
	"crypto/des"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"

	//lint:ignore SA1019 MS-CHAPv2 fixes MD4 (see the package doc)
	"golang.org/x/crypto/md4"
)

// MS-CHAPv2 opcodes (draft-kamath-pppext-eap-mschapv2 section 2).
const (
	msOpChallenge = 1
	msOpResponse  = 2
	msOpSuccess   = 3
	msOpFailure   = 4
)

const (
	msChallengeLen = 16
	msResponseLen  = 49 // peer challenge 16, reserved 8, NT-Response 24, flags 1
	msHeaderLen    = 4  // opcode, MS-CHAPv2-ID, MS-Length (after the EAP Type)
)

// ErrAuth is the cause of a Failure when the peer's credentials are wrong
// or unknown.
var ErrAuth = errors.New("eap: authentication failed")

// ntPasswordHash is NtPasswordHash (RFC 2759 section 8.3): MD4 of the
// password in UTF-16 little endian. The password is UTF-8.
func ntPasswordHash(password []byte) [16]byte {
	h := md4.New()
	var u [2]byte
	for _, r := range string(password) {
		for _, c := range utf16.Encode([]rune{r}) {
			binary.LittleEndian.PutUint16(u[:], c)
			h.Write(u[:])
		}
	}
	var out [16]byte
	h.Sum(out[:0])
	return out
}

// hashNtPasswordHash is HashNtPasswordHash (RFC 2759 section 8.4).
func hashNtPasswordHash(hash [16]byte) [16]byte {
	h := md4.New()
	h.Write(hash[:])
	var out [16]byte
	h.Sum(out[:0])
	return out
}

// challengeHash is ChallengeHash (RFC 2759 section 8.2): the first eight
// octets of SHA-1 over both challenges and the user name without its
// domain.
func challengeHash(peerChallenge, authChallenge []byte, user string) [8]byte {
	h := sha1.New()
	h.Write(peerChallenge)
	h.Write(authChallenge)
	h.Write([]byte(user))
	var sum [sha1.Size]byte
	h.Sum(sum[:0])
	var out [8]byte
	copy(out[:], sum[:8])
	return out
}

// desKey spreads seven octets over the eight of a DES key, seven bits
// each (RFC 2759 section 8.6, DesEncrypt); crypto/des ignores the parity
// bits, so they stay zero.
func desKey(k []byte) []byte {
	var v uint64
	for _, b := range k[:7] {
		v = v<<8 | uint64(b)
	}
	out := make([]byte, 8)
	for i := range out {
		out[i] = byte(v>>(49-7*uint(i))) << 1
	}
	return out
}

// challengeResponse is ChallengeResponse (RFC 2759 section 8.5): the
// challenge encrypted with DES under three keys cut from the zero-padded
// password hash.
func challengeResponse(challenge [8]byte, passwordHash [16]byte) [24]byte {
	var z [21]byte
	copy(z[:], passwordHash[:])
	var out [24]byte
	for i := range 3 {
		c, err := des.NewCipher(desKey(z[7*i:]))
		if err != nil {
			panic("eap: DES key: " + err.Error()) // the key is always eight octets
		}
		c.Encrypt(out[8*i:], challenge[:])
	}
	return out
}

// generateNTResponse is GenerateNTResponse (RFC 2759 section 8.1).
func generateNTResponse(authChallenge, peerChallenge []byte, user string, password []byte) [24]byte {
	return challengeResponse(challengeHash(peerChallenge, authChallenge, user), ntPasswordHash(password))
}

var (
	// The magic constants of RFC 2759 section 8.7.
	authMagic1 = []byte("Magic server to client signing constant")
	authMagic2 = []byte("Pad to make it do more than one iteration")
	// The constants of RFC 3079 section 3.4.
	mppeMagic1 = []byte("This is the MPPE Master Key")
	mppeMagic2 = []byte("On the client side, this is the send key; on the server side, it is the receive key.")
	mppeMagic3 = []byte("On the client side, this is the receive key; on the server side, it is the send key.")
)

// authenticatorResponse is GenerateAuthenticatorResponse (RFC 2759
// section 8.7): "S=" and 40 upper-case hex digits.
func authenticatorResponse(passwordHashHash [16]byte, ntResponse [24]byte, peerChallenge, authChallenge []byte, user string) string {
	h := sha1.New()
	h.Write(passwordHashHash[:])
	h.Write(ntResponse[:])
	h.Write(authMagic1)
	digest := h.Sum(nil)
	ch := challengeHash(peerChallenge, authChallenge, user)
	h.Reset()
	h.Write(digest)
	h.Write(ch[:])
	h.Write(authMagic2)
	digest = h.Sum(digest[:0])
	return "S=" + strings.ToUpper(hex.EncodeToString(digest))
}

// masterKey is GetMasterKey (RFC 3079 section 3.4).
func masterKey(passwordHashHash [16]byte, ntResponse [24]byte) [16]byte {
	h := sha1.New()
	h.Write(passwordHashHash[:])
	h.Write(ntResponse[:])
	h.Write(mppeMagic1)
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// asymmetricStartKey is GetAsymetricStartKey (RFC 3079 section 3.4) for a
// 16-octet key, magic chosen by the caller (mppeMagic2 or mppeMagic3).
func asymmetricStartKey(master [16]byte, magic []byte) [16]byte {
	var pad1 [40]byte
	var pad2 [40]byte
	for i := range pad2 {
		pad2[i] = 0xf2
	}
	h := sha1.New()
	h.Write(master[:])
	h.Write(pad1[:])
	h.Write(magic)
	h.Write(pad2[:])
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// mschapv2MSK is the 64-octet MSK as strongSwan (eap_mschapv2.c) and
// Windows derive it: the key made with Magic2 (the client's send key,
// the server's receive key), then the key made with Magic3, then 32 zero
// octets. Both ends compute the same bytes whatever their role.
func mschapv2MSK(passwordHashHash [16]byte, ntResponse [24]byte) []byte {
	m := masterKey(passwordHashHash, ntResponse)
	k2 := asymmetricStartKey(m, mppeMagic2)
	k3 := asymmetricStartKey(m, mppeMagic3)
	msk := make([]byte, 64)
	copy(msk, k2[:])
	copy(msk[16:], k3[:])
	return msk
}

// userName strips a Windows domain ("BIGCO\johndoe" gives "johndoe"):
// RFC 2759 section 4 hashes the account name only.
func userName(name string) string {
	if i := strings.LastIndexByte(name, '\\'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// mschapv2 is the server side of one EAP-MSCHAPv2 run.
type mschapv2 struct {
	cfg       *Config
	msID      uint8
	challenge [msChallengeLen]byte
	sentOK    bool // the Success request is out
	auth      string
	msk       []byte
	user      string
}

func newMSCHAPv2(cfg *Config) (*mschapv2, error) {
	if cfg.Password == nil {
		return nil, errors.New("eap: EAP-MSCHAPv2 needs Config.Password")
	}
	return &mschapv2{cfg: cfg}, nil
}

// msPacket builds MS-CHAPv2 type data: opcode, MS-CHAPv2-ID, MS-Length
// (the EAP Length minus 5: the length from the opcode on) and body.
func (m *mschapv2) msPacket(op byte, body []byte) []byte {
	b := make([]byte, msHeaderLen, msHeaderLen+len(body))
	b[0] = op
	b[1] = m.msID
	binary.BigEndian.PutUint16(b[2:], uint16(msHeaderLen+len(body)))
	return append(b, body...)
}

func (m *mschapv2) start() ([]byte, error) {
	if _, err := readFull(m.cfg.rand(), m.challenge[:]); err != nil {
		return nil, fmt.Errorf("eap: EAP-MSCHAPv2 challenge: %w", err)
	}
	m.msID = m.challenge[0]
	name := m.cfg.name()
	body := make([]byte, 0, 1+msChallengeLen+len(name))
	body = append(body, msChallengeLen)
	body = append(body, m.challenge[:]...)
	body = append(body, name...)
	return m.msPacket(msOpChallenge, body), nil
}

func (m *mschapv2) process(data []byte) ([]byte, status, error) {
	if len(data) < 1 {
		return nil, failed, errors.New("eap: EAP-MSCHAPv2 response without an opcode")
	}
	switch op := data[0]; {
	case op == msOpResponse && !m.sentOK:
		return m.response(data)
	case op == msOpSuccess && m.sentOK:
		return nil, succeeded, nil
	case op == msOpFailure:
		return nil, failed, errors.New("eap: EAP-MSCHAPv2 peer sent Failure")
	default:
		return nil, failed, fmt.Errorf("eap: EAP-MSCHAPv2 unexpected opcode %d", op)
	}
}

// response checks the peer's Response packet (RFC 2759 section 4) and
// answers with the Success request.
func (m *mschapv2) response(data []byte) ([]byte, status, error) {
	if len(data) < msHeaderLen+1+msResponseLen {
		return nil, failed, fmt.Errorf("eap: EAP-MSCHAPv2 Response of %d octets, too short", len(data))
	}
	if data[1] != m.msID {
		return nil, failed, fmt.Errorf("eap: EAP-MSCHAPv2 Response MS-CHAPv2-ID %d, want %d", data[1], m.msID)
	}
	if data[msHeaderLen] != msResponseLen {
		return nil, failed, fmt.Errorf("eap: EAP-MSCHAPv2 Response Value-Size %d, want %d", data[msHeaderLen], msResponseLen)
	}
	v := data[msHeaderLen+1 : msHeaderLen+1+msResponseLen]
	peerChallenge, got := v[:16], v[24:48]
	name := string(data[msHeaderLen+1+msResponseLen:])
	if len(name) > 256 {
		return nil, failed, fmt.Errorf("eap: EAP-MSCHAPv2 user name of %d octets, longer than 256", len(name))
	}
	if m.cfg.Identity != "" && name != m.cfg.Identity {
		return nil, failed, fmt.Errorf("%w: EAP-MSCHAPv2 user %q, the configured identity is %q", ErrAuth, name, m.cfg.Identity)
	}
	password, ok := m.cfg.Password(name)
	if !ok {
		return nil, failed, fmt.Errorf("%w: EAP-MSCHAPv2 user %q unknown", ErrAuth, name)
	}
	user := userName(name)
	want := generateNTResponse(m.challenge[:], peerChallenge, user, password)
	if subtle.ConstantTimeCompare(want[:], got) != 1 {
		return nil, failed, fmt.Errorf("%w: EAP-MSCHAPv2 wrong password for %q", ErrAuth, name)
	}
	hh := hashNtPasswordHash(ntPasswordHash(password))
	m.auth = authenticatorResponse(hh, want, peerChallenge, m.challenge[:], user)
	m.msk = mschapv2MSK(hh, want)
	m.user = name
	m.sentOK = true
	return m.msPacket(msOpSuccess, []byte(m.auth+" M=welcome")), more, nil
}

func (m *mschapv2) key() []byte { return m.msk }

func (m *mschapv2) identity() string { return m.user }

func (m *mschapv2) close() {}
