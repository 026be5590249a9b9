package enginetest

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// RunAsym is the conformance suite for asymmetric operations (Sign and
// Agree ops, see cryptodev/asym.go). It skips engines that do not
// implement cryptodev.AsymEngine, and each key type the engine does not
// Support.
//
// It checks that every key type signs (or agrees) through batches and that
// the results verify with the standard library; that asymmetric and
// symmetric ops share a batch; that malformed ops (wrong hash, short Dst,
// bad peer keys, ops a key type cannot do, destroyed keys) complete with
// StatusInvalid rather than panicking; that the engine keeps its own copy
// of imported keys; that the crypto.Signer adapter works, also from many
// goroutines; and that crypto/tls completes handshakes with the engine's
// keys.
func RunAsym(t *testing.T, eng cryptodev.Engine) {
	ae, ok := eng.(cryptodev.AsymEngine)
	if !ok {
		t.Skipf("engine %s does not implement cryptodev.AsymEngine", eng.Name())
	}
	a := &asymSuite{eng: ae}
	t.Run("Import", a.testImport)
	t.Run("Sign", a.testSign)
	t.Run("Agree", a.testAgree)
	t.Run("MixedBatch", a.testMixedBatch)
	t.Run("Invalid", a.testInvalid)
	t.Run("Destroy", a.testDestroy)
	t.Run("Signer", a.testSigner)
	t.Run("TLS", a.testTLS)
}

type asymSuite struct {
	eng cryptodev.AsymEngine
}

// Generated keys are shared by every RunAsym call in a test binary: RSA
// key generation is the slowest part of the suite.
var (
	testKeysMu sync.Mutex
	testKeys   = map[cryptodev.Alg]crypto.PrivateKey{}
)

func testPrivateKey(t *testing.T, alg cryptodev.Alg) crypto.PrivateKey {
	t.Helper()
	testKeysMu.Lock()
	defer testKeysMu.Unlock()
	if k, ok := testKeys[alg]; ok {
		return k
	}
	k, err := cryptodev.GenerateKey(alg)
	if err != nil {
		t.Fatalf("GenerateKey(%v): %v", alg, err)
	}
	testKeys[alg] = k
	return k
}

// key imports a test key of type alg, skipping t if the engine does not
// support alg. The key is destroyed when t ends.
func (a *asymSuite) key(t *testing.T, alg cryptodev.Alg) (*cryptodev.Key, crypto.PrivateKey) {
	t.Helper()
	if !a.eng.Supports(alg) {
		t.Skipf("engine %s does not support %v", a.eng.Name(), alg)
	}
	priv := testPrivateKey(t, alg)
	k, err := a.eng.NewPrivateKey(priv)
	if err != nil {
		t.Fatalf("NewPrivateKey(%v): %v", alg, err)
	}
	t.Cleanup(k.Destroy)
	return k, priv
}

// run submits ops as one batch on a fresh queue and waits for it.
func (a *asymSuite) run(t *testing.T, ops []cryptodev.Op) {
	t.Helper()
	q, err := a.eng.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue: %v", err)
	}
	defer q.Close()
	b := &cryptodev.Batch{Ops: ops}
	if err := cryptodev.Run(q, b); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

var sigHashes = []crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512}

func digestOf(h crypto.Hash, msg []byte) []byte {
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(msg)
		return d[:]
	case crypto.SHA384:
		d := sha512.Sum384(msg)
		return d[:]
	case crypto.SHA512:
		d := sha512.Sum512(msg)
		return d[:]
	}
	panic("enginetest: no digest for " + h.String())
}

const asymDstFill = 0xa5

// asymDst returns a Dst of n bytes with 16 more bytes of capacity after it,
// all filled with asymDstFill, so that checkDstGuard sees an engine that writes
// past Dst[:N] (or appends beyond len(Dst)).
func asymDst(n int) []byte {
	return bytes.Repeat([]byte{asymDstFill}, n+16)[:n]
}

// checkDstGuard reports an engine that wrote past Dst[:N].
func checkDstGuard(t *testing.T, what string, op *cryptodev.Op) {
	t.Helper()
	if op.N < 0 || op.N > len(op.Dst) {
		t.Errorf("%s: N = %d with a %d-byte Dst", what, op.N, len(op.Dst))
		return
	}
	for i, c := range op.Dst[op.N:cap(op.Dst)] {
		if c != asymDstFill {
			t.Errorf("%s: Dst[%d] (after N = %d, len %d) was written", what, op.N+i, op.N, len(op.Dst))
			return
		}
	}
}

// verifySig checks sig over msg (for Ed25519) or digest with pub.
func verifySig(pub crypto.PublicKey, h crypto.Hash, pss bool, digest, sig []byte) error {
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if len(sig) != p.Size() {
			return errors.New("RSA signature is not modulus-sized")
		}
		if pss {
			return rsa.VerifyPSS(p, h, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		}
		return rsa.VerifyPKCS1v15(p, h, digest, sig)
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(p, digest, sig) {
			return errors.New("ECDSA signature does not verify")
		}
		return nil
	case ed25519.PublicKey:
		if !ed25519.Verify(p, digest, sig) {
			return errors.New("Ed25519 signature does not verify")
		}
		return nil
	}
	return errors.New("unknown public key type")
}

func signAlgs() []cryptodev.Alg {
	var out []cryptodev.Alg
	for _, alg := range cryptodev.AsymAlgs() {
		if alg.CanSign() {
			out = append(out, alg)
		}
	}
	return out
}

func agreeAlgs() []cryptodev.Alg {
	var out []cryptodev.Alg
	for _, alg := range cryptodev.AsymAlgs() {
		if alg.CanAgree() {
			out = append(out, alg)
		}
	}
	return out
}

func (a *asymSuite) testImport(t *testing.T) {
	for _, alg := range cryptodev.AsymAlgs() {
		t.Run(alg.String(), func(t *testing.T) {
			k, priv := a.key(t, alg)
			if k.Alg() != alg || !k.Alg().IsAsymmetric() {
				t.Errorf("Alg() = %v, want %v", k.Alg(), alg)
			}
			if k.Engine() != a.eng.Name() {
				t.Errorf("Engine() = %q, want %q", k.Engine(), a.eng.Name())
			}
			want := priv.(interface{ Public() crypto.PublicKey }).Public()
			got := k.Public()
			if eq, ok := got.(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(want) {
				t.Errorf("Public() = %T %v, want the key's public half", got, got)
			}
		})
	}
	t.Run("Unsupported", func(t *testing.T) {
		p384, _ := ecdh.P384().GenerateKey(rand.Reader)
		for name, priv := range map[string]crypto.PrivateKey{
			"nil":          nil,
			"bytes":        []byte("not a key"),
			"ecdh-p384":    p384,
			"ed25519-len":  ed25519.PrivateKey(make([]byte, 10)),
			"ed25519-bad":  badEd25519(),
			"rsa-public":   &rsa.PrivateKey{PublicKey: testPrivateKey(t, cryptodev.RSA2048).(*rsa.PrivateKey).PublicKey},
			"rsa-modified": brokenRSA(t),
		} {
			if k, err := a.eng.NewPrivateKey(priv); err == nil {
				k.Destroy()
				t.Errorf("%s: NewPrivateKey accepted it", name)
			}
		}
	})
}

// badEd25519 is an Ed25519 private key whose public half is not its seed's.
func badEd25519() ed25519.PrivateKey {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	k = append(ed25519.PrivateKey(nil), k...)
	k[63] ^= 1
	return k
}

// brokenRSA is a 2048-bit RSA key whose private exponent does not match.
func brokenRSA(t *testing.T) *rsa.PrivateKey {
	p := testPrivateKey(t, cryptodev.RSA2048).(*rsa.PrivateKey)
	return &rsa.PrivateKey{
		PublicKey: p.PublicKey,
		D:         new(big.Int).Add(p.D, big.NewInt(2)),
		Primes:    p.Primes,
	}
}

func (a *asymSuite) testSign(t *testing.T) {
	for _, alg := range signAlgs() {
		t.Run(alg.String(), func(t *testing.T) {
			k, _ := a.key(t, alg)
			pub := k.Public()
			type want struct {
				hash   crypto.Hash
				pss    bool
				signed []byte // digest, or message for Ed25519
			}
			var ops []cryptodev.Op
			var wants []want
			add := func(h crypto.Hash, pss bool, src []byte, dstLen int) {
				ops = append(ops, cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: h, PSS: pss, Src: src, Dst: asymDst(dstLen)})
				wants = append(wants, want{h, pss, src})
			}
			if alg == cryptodev.Ed25519 {
				for _, n := range []int{0, 1, 64, 1000} {
					msg := make([]byte, n)
					rand.Read(msg)
					add(0, false, msg, alg.MaxOutLen())
				}
				add(0, false, []byte("a larger Dst"), alg.MaxOutLen()+100)
			} else {
				for _, h := range sigHashes {
					for _, pss := range []bool{false, true} {
						if pss && alg.RSABits() == 0 {
							continue
						}
						add(h, pss, digestOf(h, []byte("sluice "+h.String())), alg.MaxOutLen())
					}
				}
				add(crypto.SHA256, false, digestOf(crypto.SHA256, []byte("a larger Dst")), alg.MaxOutLen()+100)
			}
			a.run(t, ops)
			for i := range ops {
				op, w := &ops[i], wants[i]
				if op.Status != cryptodev.StatusOK {
					t.Errorf("op %d (%v pss=%v): status %v", i, w.hash, w.pss, op.Status)
					continue
				}
				if op.N <= 0 || op.N > alg.MaxOutLen() {
					t.Errorf("op %d: N = %d, want 1..%d", i, op.N, alg.MaxOutLen())
					continue
				}
				if err := verifySig(pub, w.hash, w.pss, w.signed, op.Dst[:op.N]); err != nil {
					t.Errorf("op %d (%v pss=%v): %v", i, w.hash, w.pss, err)
				}
				checkDstGuard(t, "sign", op)
			}
		})
	}
}

func (a *asymSuite) testAgree(t *testing.T) {
	for _, alg := range agreeAlgs() {
		t.Run(alg.String(), func(t *testing.T) {
			k, priv := a.key(t, alg)
			mine := priv.(*ecdh.PrivateKey)
			var ops []cryptodev.Op
			var want [][]byte
			for i := 0; i < 4; i++ {
				peer, err := mine.Curve().GenerateKey(rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				secret, err := peer.ECDH(mine.PublicKey())
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: peer.PublicKey().Bytes(), Dst: asymDst(32 + i)})
				want = append(want, secret)
			}
			a.run(t, ops)
			for i := range ops {
				op := &ops[i]
				if op.Status != cryptodev.StatusOK {
					t.Errorf("op %d: status %v", i, op.Status)
					continue
				}
				if !bytes.Equal(op.Dst[:op.N], want[i]) {
					t.Errorf("op %d: secret %x, peer computed %x", i, op.Dst[:op.N], want[i])
				}
				checkDstGuard(t, "agree", op)
			}

			// The convenience form.
			peer, _ := mine.Curve().GenerateKey(rand.Reader)
			q, err := a.eng.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			out := make([]byte, 32)
			n, err := cryptodev.RunAgree(q, k, peer.PublicKey().Bytes(), out)
			secret, _ := peer.ECDH(mine.PublicKey())
			if err != nil || !bytes.Equal(out[:n], secret) {
				t.Errorf("RunAgree = %x, %v; want %x", out[:n], err, secret)
			}
			if _, err := cryptodev.RunAgree(q, k, []byte{1, 2, 3}, out); err == nil {
				t.Error("RunAgree with a 3-byte peer key succeeded")
			}
		})
	}
}

// symmetricGCM returns an AES-128-GCM engine key and the same key for
// Go's crypto, or skips t.
func (a *asymSuite) symmetricGCM(t *testing.T) (*cryptodev.Key, cipher.AEAD, []byte) {
	t.Helper()
	alg := cryptodev.AES128GCM16
	if !a.eng.Supports(alg) {
		t.Skipf("engine %s does not support %v", a.eng.Name(), alg)
	}
	material := make([]byte, alg.EncKeyLen())
	rand.Read(material)
	k, err := a.eng.NewKey(alg, material, nil)
	if err != nil {
		t.Fatalf("NewKey(%v): %v", alg, err)
	}
	t.Cleanup(k.Destroy)
	block, _ := aes.NewCipher(material[:16])
	gcm, _ := cipher.NewGCM(block)
	return k, gcm, material[16:]
}

func (a *asymSuite) testMixedBatch(t *testing.T) {
	sym, gcm, salt := a.symmetricGCM(t)
	var ops []cryptodev.Op
	type check func(op *cryptodev.Op) error
	var checks []check

	for i := 0; i < 3; i++ {
		src := make([]byte, 64+i*7)
		rand.Read(src)
		iv := make([]byte, 8)
		rand.Read(iv)
		aad := []byte{0, 0, 1, 0, 0, 0, 0, byte(i)}
		ops = append(ops, cryptodev.Op{Key: sym, Dir: cryptodev.Encrypt, Src: src, Dst: make([]byte, len(src)), IV: iv, AAD: aad, Tag: make([]byte, 16)})
		checks = append(checks, func(op *cryptodev.Op) error {
			want := gcm.Seal(nil, append(append([]byte(nil), salt...), iv...), src, aad)
			if !bytes.Equal(append(append([]byte(nil), op.Dst...), op.Tag...), want) {
				return errors.New("AES-GCM output differs from Go's")
			}
			return nil
		})
	}
	for _, alg := range []cryptodev.Alg{cryptodev.ECDSAP256, cryptodev.Ed25519, cryptodev.RSA2048} {
		if !a.eng.Supports(alg) {
			continue
		}
		k, _ := a.key(t, alg)
		h, msg := crypto.SHA256, digestOf(crypto.SHA256, []byte("mixed"))
		if alg == cryptodev.Ed25519 {
			h, msg = 0, []byte("mixed")
		}
		ops = append(ops, cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: h, Src: msg, Dst: asymDst(alg.MaxOutLen())})
		checks = append(checks, func(op *cryptodev.Op) error {
			return verifySig(k.Public(), h, false, msg, op.Dst[:op.N])
		})
	}
	if a.eng.Supports(cryptodev.X25519) {
		k, priv := a.key(t, cryptodev.X25519)
		peer, _ := ecdh.X25519().GenerateKey(rand.Reader)
		ops = append(ops, cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: peer.PublicKey().Bytes(), Dst: asymDst(32)})
		checks = append(checks, func(op *cryptodev.Op) error {
			want, _ := peer.ECDH(priv.(*ecdh.PrivateKey).PublicKey())
			if !bytes.Equal(op.Dst[:op.N], want) {
				return errors.New("X25519 secret differs from the peer's")
			}
			return nil
		})
	}
	// Interleave: symmetric, asymmetric, symmetric, ...
	order := []int{0, 3, 1, 4, 2}
	for i := 5; i < len(ops); i++ {
		order = append(order, i)
	}
	mixed := make([]cryptodev.Op, 0, len(ops))
	mixedChecks := make([]check, 0, len(ops))
	for _, i := range order {
		if i < len(ops) {
			mixed = append(mixed, ops[i])
			mixedChecks = append(mixedChecks, checks[i])
		}
	}
	a.run(t, mixed)
	for i := range mixed {
		op := &mixed[i]
		if op.Status != cryptodev.StatusOK {
			t.Errorf("op %d (dir %d, %v): status %v", i, op.Dir, op.Key.Alg(), op.Status)
			continue
		}
		if err := mixedChecks[i](op); err != nil {
			t.Errorf("op %d (dir %d, %v): %v", i, op.Dir, op.Key.Alg(), err)
		}
	}
}

func (a *asymSuite) testInvalid(t *testing.T) {
	type tc struct {
		name string
		op   cryptodev.Op
	}
	var cases []tc
	addCase := func(name string, op cryptodev.Op) { cases = append(cases, tc{name, op}) }
	sign := func(k *cryptodev.Key, h crypto.Hash, src []byte, dst int) cryptodev.Op {
		return cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: h, Src: src, Dst: asymDst(dst)}
	}
	d256 := digestOf(crypto.SHA256, []byte("x"))
	var valid []cryptodev.Op // one good op per key, to show statuses are per op

	if a.eng.Supports(cryptodev.RSA2048) {
		k, _ := a.key(t, cryptodev.RSA2048)
		n := cryptodev.RSA2048.MaxOutLen()
		addCase("rsa/hash-0", sign(k, 0, d256, n))
		addCase("rsa/md5", sign(k, crypto.MD5, d256[:16], n))
		addCase("rsa/sha1", sign(k, crypto.SHA1, d256[:20], n))
		addCase("rsa/unknown-hash", sign(k, crypto.Hash(200), d256, n))
		addCase("rsa/digest-short", sign(k, crypto.SHA256, d256[:20], n))
		addCase("rsa/digest-long", sign(k, crypto.SHA256, append(d256, 0), n))
		addCase("rsa/sha384-len", sign(k, crypto.SHA384, d256, n))
		addCase("rsa/dst-short", sign(k, crypto.SHA256, d256, n-1))
		addCase("rsa/dst-nil", cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: crypto.SHA256, Src: d256})
		pss := sign(k, crypto.SHA256, d256, n-1)
		pss.PSS = true
		addCase("rsa/pss-dst-short", pss)
		addCase("rsa/agree", cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: make([]byte, 32), Dst: asymDst(512)})
		addCase("rsa/encrypt", cryptodev.Op{Key: k, Dir: cryptodev.Encrypt, Src: make([]byte, 16), Dst: make([]byte, 16), IV: make([]byte, 8), Tag: make([]byte, 16)})
		valid = append(valid, sign(k, crypto.SHA256, d256, n))
	}
	if a.eng.Supports(cryptodev.ECDSAP256) {
		k, _ := a.key(t, cryptodev.ECDSAP256)
		addCase("ecdsap256/dst-71", sign(k, crypto.SHA256, d256, 71))
		addCase("ecdsap256/hash-0", sign(k, 0, d256, 72))
		addCase("ecdsap256/sha512-len", sign(k, crypto.SHA512, d256, 72))
		pss := sign(k, crypto.SHA256, d256, 72)
		pss.PSS = true
		addCase("ecdsap256/pss", pss)
		addCase("ecdsap256/agree", cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: make([]byte, 65), Dst: asymDst(72)})
		addCase("ecdsap256/unknown-dir", cryptodev.Op{Key: k, Dir: cryptodev.Agree + 1, Hash: crypto.SHA256, Src: d256, Dst: asymDst(72)})
		valid = append(valid, sign(k, crypto.SHA256, d256, 72))
	}
	if a.eng.Supports(cryptodev.Ed25519) {
		k, _ := a.key(t, cryptodev.Ed25519)
		addCase("ed25519/hash", sign(k, crypto.SHA512, digestOf(crypto.SHA512, nil), 64))
		addCase("ed25519/dst-63", sign(k, 0, []byte("m"), 63))
		valid = append(valid, sign(k, 0, []byte("m"), 64))
	}
	if a.eng.Supports(cryptodev.X25519) {
		k, _ := a.key(t, cryptodev.X25519)
		agree := func(src []byte, dst int) cryptodev.Op {
			return cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: src, Dst: asymDst(dst)}
		}
		peer, _ := ecdh.X25519().GenerateKey(rand.Reader)
		pk := peer.PublicKey().Bytes()
		addCase("x25519/peer-31", agree(pk[:31], 32))
		addCase("x25519/peer-33", agree(append(pk, 0), 32))
		addCase("x25519/peer-low-order", agree(make([]byte, 32), 32))
		addCase("x25519/dst-31", agree(pk, 31))
		addCase("x25519/sign", sign(k, crypto.SHA256, d256, 64))
		valid = append(valid, agree(pk, 32))
	}
	if a.eng.Supports(cryptodev.ECDHP256) {
		k, _ := a.key(t, cryptodev.ECDHP256)
		agree := func(src []byte, dst int) cryptodev.Op {
			return cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: src, Dst: asymDst(dst)}
		}
		peer, _ := ecdh.P256().GenerateKey(rand.Reader)
		pk := peer.PublicKey().Bytes()
		compressed := append([]byte{2 + pk[64]&1}, pk[1:33]...)
		offCurve := append([]byte(nil), pk...)
		offCurve[64] ^= 1
		addCase("ecdhp256/compressed", agree(compressed, 32))
		addCase("ecdhp256/off-curve", agree(offCurve, 32))
		addCase("ecdhp256/x25519-size", agree(pk[:32], 32))
		addCase("ecdhp256/dst-31", agree(pk, 31))
		valid = append(valid, agree(pk, 32))
	}
	if a.eng.Supports(cryptodev.AES128GCM16) {
		k, _, _ := a.symmetricGCM(t)
		addCase("aes128gcm16/sign", sign(k, crypto.SHA256, d256, 512))
		addCase("aes128gcm16/agree", cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: make([]byte, 32), Dst: asymDst(32)})
	}
	addCase("nil-key/sign", sign(nil, crypto.SHA256, d256, 512))
	addCase("nil-key/agree", cryptodev.Op{Dir: cryptodev.Agree, Src: make([]byte, 32), Dst: asymDst(32)})

	// Interleave the valid ops with the invalid ones in one batch.
	ops := make([]cryptodev.Op, 0, len(cases)+len(valid))
	for _, c := range cases {
		ops = append(ops, c.op)
	}
	ops = append(ops, valid...)
	for i := range ops {
		ops[i].N = -1 // an engine must set N, also on failure
	}
	a.run(t, ops)
	for i, c := range cases {
		op := &ops[i]
		want := cryptodev.StatusInvalid
		if op.Status != want && !(c.op.Dir > cryptodev.Agree && op.Status == cryptodev.StatusUnsupported) {
			t.Errorf("%s: status %v, want %v", c.name, op.Status, want)
		}
		if op.Dir >= cryptodev.Sign && op.N != 0 {
			t.Errorf("%s: N = %d after a failed op, want 0", c.name, op.N)
		}
		if op.Dir >= cryptodev.Sign && len(op.Dst) > 0 {
			checkDstGuard(t, c.name, op)
		}
	}
	for i := range valid {
		if op := &ops[len(cases)+i]; op.Status != cryptodev.StatusOK {
			t.Errorf("valid %v op among invalid ones: status %v", op.Key.Alg(), op.Status)
		}
	}
}

func (a *asymSuite) testDestroy(t *testing.T) {
	for _, alg := range []cryptodev.Alg{cryptodev.RSA2048, cryptodev.ECDSAP256, cryptodev.Ed25519, cryptodev.X25519} {
		t.Run(alg.String(), func(t *testing.T) {
			if !a.eng.Supports(alg) {
				t.Skipf("engine %s does not support %v", a.eng.Name(), alg)
			}
			// A key of its own: this test destroys it.
			priv, err := cryptodev.GenerateKey(alg)
			if err != nil {
				t.Fatal(err)
			}
			k, err := a.eng.NewPrivateKey(priv)
			if err != nil {
				t.Fatal(err)
			}
			op := cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: crypto.SHA256, Src: digestOf(crypto.SHA256, []byte("d")), Dst: asymDst(alg.MaxOutLen())}
			switch alg {
			case cryptodev.Ed25519:
				op.Hash = 0
			case cryptodev.X25519:
				peer, _ := ecdh.X25519().GenerateKey(rand.Reader)
				op = cryptodev.Op{Key: k, Dir: cryptodev.Agree, Src: peer.PublicKey().Bytes(), Dst: asymDst(32)}
			}
			before := op
			ops := []cryptodev.Op{op}
			a.run(t, ops)
			if ops[0].Status != cryptodev.StatusOK {
				t.Fatalf("before Destroy: status %v", ops[0].Status)
			}
			k.Destroy()
			k.Destroy() // idempotent
			if k.Public() != nil {
				t.Errorf("Public() after Destroy = %v, want nil", k.Public())
			}
			ops = []cryptodev.Op{before}
			a.run(t, ops)
			if ops[0].Status != cryptodev.StatusInvalid {
				t.Errorf("after Destroy: status %v, want %v", ops[0].Status, cryptodev.StatusInvalid)
			}
			// The engine held its own copy: the caller's key is intact.
			if !privUsable(priv) {
				t.Errorf("Destroy damaged the caller's %v key", alg)
			}
		})
	}
}

// privUsable reports whether priv still works with the standard library.
func privUsable(priv crypto.PrivateKey) bool {
	msg := []byte("still here")
	d := digestOf(crypto.SHA256, msg)
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		if p.Validate() != nil {
			return false
		}
		sig, err := rsa.SignPKCS1v15(nil, p, crypto.SHA256, d)
		return err == nil && rsa.VerifyPKCS1v15(&p.PublicKey, crypto.SHA256, d, sig) == nil
	case *ecdsa.PrivateKey:
		sig, err := ecdsa.SignASN1(rand.Reader, p, d)
		return err == nil && ecdsa.VerifyASN1(&p.PublicKey, d, sig)
	case ed25519.PrivateKey:
		return ed25519.Verify(p.Public().(ed25519.PublicKey), msg, ed25519.Sign(p, msg))
	case *ecdh.PrivateKey:
		peer, _ := p.Curve().GenerateKey(rand.Reader)
		s1, err1 := p.ECDH(peer.PublicKey())
		s2, err2 := peer.ECDH(p.PublicKey())
		return err1 == nil && err2 == nil && bytes.Equal(s1, s2)
	}
	return false
}

func (a *asymSuite) testSigner(t *testing.T) {
	for _, alg := range signAlgs() {
		t.Run(alg.String(), func(t *testing.T) {
			k, priv := a.key(t, alg)
			s, err := cryptodev.NewSigner(a.eng, k)
			if err != nil {
				t.Fatal(err)
			}
			defer s.(io.Closer).Close()
			if !priv.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(s.Public()) {
				t.Error("Signer.Public differs from the key's")
			}
			type sc struct {
				opts   crypto.SignerOpts
				pss    bool
				digest []byte
				ok     bool
			}
			var cases []sc
			msg := []byte("signer")
			switch {
			case alg == cryptodev.Ed25519:
				cases = []sc{
					{crypto.Hash(0), false, msg, true},
					{&ed25519.Options{}, false, msg, true},
					{&ed25519.Options{Context: "ctx"}, false, msg, false},
					{crypto.SHA512, false, digestOf(crypto.SHA512, msg), false},
					{&ed25519.Options{Hash: crypto.SHA512}, false, digestOf(crypto.SHA512, msg), false},
				}
			case alg.RSABits() > 0:
				d := digestOf(crypto.SHA384, msg)
				cases = []sc{
					{crypto.SHA384, false, d, true},
					{&rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA384}, true, d, true},
					{&rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto, Hash: crypto.SHA384}, true, d, true},
					{&rsa.PSSOptions{SaltLength: 48, Hash: crypto.SHA384}, true, d, true},
					{&rsa.PSSOptions{SaltLength: 20, Hash: crypto.SHA384}, true, d, false},
					{crypto.SHA256, false, d, false}, // digest length mismatch
					{crypto.Hash(0), false, d, false},
				}
			default: // ECDSA
				d := digestOf(crypto.SHA384, msg)
				cases = []sc{
					{crypto.SHA384, false, d, true},
					{crypto.SHA256, false, digestOf(crypto.SHA256, msg), true},
					{&rsa.PSSOptions{Hash: crypto.SHA384}, false, d, false},
					{crypto.SHA256, false, d, false},
				}
			}
			for i, c := range cases {
				sig, err := s.Sign(rand.Reader, c.digest, c.opts)
				if !c.ok {
					if err == nil {
						t.Errorf("case %d (%#v): Sign succeeded, want an error", i, c.opts)
					}
					continue
				}
				if err != nil {
					t.Errorf("case %d (%#v): %v", i, c.opts, err)
					continue
				}
				if err := verifySig(s.Public(), c.opts.HashFunc(), c.pss, c.digest, sig); err != nil {
					t.Errorf("case %d (%#v): %v", i, c.opts, err)
				}
			}
		})
	}

	t.Run("Concurrent", func(t *testing.T) {
		alg := cryptodev.ECDSAP256
		k, _ := a.key(t, alg)
		s, err := cryptodev.NewSigner(a.eng, k)
		if err != nil {
			t.Fatal(err)
		}
		defer s.(io.Closer).Close()
		var wg sync.WaitGroup
		var bad atomic.Int32
		for g := 0; g < 3*cryptodev.SignerIdleQueues; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					d := digestOf(crypto.SHA256, []byte{byte(g), byte(i)})
					sig, err := s.Sign(nil, d, crypto.SHA256)
					if err != nil || verifySig(s.Public(), crypto.SHA256, false, d, sig) != nil {
						bad.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := bad.Load(); n != 0 {
			t.Errorf("%d concurrent signatures failed", n)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		if a.eng.Supports(cryptodev.X25519) {
			k, _ := a.key(t, cryptodev.X25519)
			if _, err := cryptodev.NewSigner(a.eng, k); err == nil {
				t.Error("NewSigner accepted an X25519 key")
			}
		}
		if _, err := cryptodev.NewSigner(a.eng, nil); err == nil {
			t.Error("NewSigner accepted a nil key")
		}
		foreign := cryptodev.NewKeyHandle(cryptodev.Ed25519, a.eng.Name()+"-other", nil, nil)
		if _, err := cryptodev.NewSigner(a.eng, foreign); err == nil {
			t.Error("NewSigner accepted another engine's key")
		}
		if !a.eng.Supports(cryptodev.Ed25519) {
			return
		}
		k, _ := a.key(t, cryptodev.Ed25519)
		s, err := cryptodev.NewSigner(a.eng, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sign(nil, []byte("m"), crypto.Hash(0)); err != nil {
			t.Fatal(err)
		}
		s.(io.Closer).Close()
		if _, err := s.Sign(nil, []byte("m"), crypto.Hash(0)); !errors.Is(err, cryptodev.ErrClosed) {
			t.Errorf("Sign after Close: %v, want ErrClosed", err)
		}
	})
}

// countingSigner counts the signatures crypto/tls asks for.
type countingSigner struct {
	crypto.Signer
	n atomic.Int32
}

func (c *countingSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	c.n.Add(1)
	return c.Signer.Sign(r, digest, opts)
}

func (a *asymSuite) testTLS(t *testing.T) {
	for _, alg := range []cryptodev.Alg{cryptodev.ECDSAP256, cryptodev.RSA2048, cryptodev.Ed25519} {
		for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			name := alg.String() + "/" + tls.VersionName(version)
			t.Run(name, func(t *testing.T) {
				k, _ := a.key(t, alg)
				s, err := cryptodev.NewSigner(a.eng, k)
				if err != nil {
					t.Fatal(err)
				}
				defer s.(io.Closer).Close()
				signer := &countingSigner{Signer: s}

				// A self-signed certificate, itself signed by the engine
				// (x509 checks the signature it gets back).
				tmpl := &x509.Certificate{
					SerialNumber:          big.NewInt(1),
					Subject:               pkix.Name{CommonName: "sluice.test"},
					DNSNames:              []string{"sluice.test"},
					NotBefore:             time.Now().Add(-time.Hour),
					NotAfter:              time.Now().Add(time.Hour),
					KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
					ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
					BasicConstraintsValid: true,
					IsCA:                  true,
				}
				der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
				if err != nil {
					t.Fatalf("CreateCertificate with the engine's key: %v", err)
				}
				cert, err := x509.ParseCertificate(der)
				if err != nil {
					t.Fatal(err)
				}
				certSigs := signer.n.Load()
				pool := x509.NewCertPool()
				pool.AddCert(cert)

				cc, sc := net.Pipe()
				deadline := time.Now().Add(time.Minute)
				cc.SetDeadline(deadline)
				sc.SetDeadline(deadline)
				server := tls.Server(sc, &tls.Config{
					Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: signer, Leaf: cert}},
					MinVersion:   version,
					MaxVersion:   version,
				})
				client := tls.Client(cc, &tls.Config{
					RootCAs:    pool,
					ServerName: "sluice.test",
					MinVersion: version,
					MaxVersion: version,
				})
				defer client.Close()

				// The server echoes five bytes and closes (sending
				// close_notify, which the client reads as EOF).
				serverErr := make(chan error, 1)
				go func() {
					serverErr <- func() error {
						defer server.Close()
						if err := server.Handshake(); err != nil {
							sc.Close() // unblock the client
							return err
						}
						buf := make([]byte, 5)
						if _, err := io.ReadFull(server, buf); err != nil {
							return err
						}
						_, err := server.Write(append([]byte("echo:"), buf...))
						return err
					}()
				}()

				if err := client.Handshake(); err != nil {
					t.Fatalf("client handshake: %v (server: %v)", err, <-serverErr)
				}
				st := client.ConnectionState()
				if st.Version != version {
					t.Errorf("negotiated %s, want %s", tls.VersionName(st.Version), tls.VersionName(version))
				}
				if len(st.PeerCertificates) == 0 || !st.PeerCertificates[0].Equal(cert) {
					t.Error("client did not see the server's certificate")
				}
				if _, err := client.Write([]byte("hello")); err != nil {
					t.Fatalf("client write: %v", err)
				}
				reply := make([]byte, 10)
				if _, err := io.ReadFull(client, reply); err != nil {
					t.Fatalf("client read: %v", err)
				}
				if string(reply) != "echo:hello" {
					t.Errorf("reply %q", reply)
				}
				if n, err := client.Read(reply); n != 0 || err != io.EOF {
					t.Errorf("after the reply: %d bytes, %v; want close_notify (EOF)", n, err)
				}
				if err := <-serverErr; err != nil {
					t.Fatalf("server: %v", err)
				}
				if signer.n.Load() <= certSigs {
					t.Error("the handshake did not sign with the engine's key")
				}
			})
		}
	}
}
