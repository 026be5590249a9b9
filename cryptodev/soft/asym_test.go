package soft_test

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

func TestAsym(t *testing.T) {
	enginetest.RunAsym(t, soft.New())
}

func TestAsymAlgs(t *testing.T) {
	e := soft.New()
	names := []string{"rsa2048", "rsa3072", "rsa4096", "ecdsap256", "ecdsap384", "ed25519", "x25519", "ecdhp256"}
	algs := cryptodev.AsymAlgs()
	if len(algs) != len(names) {
		t.Fatalf("AsymAlgs() = %v", algs)
	}
	for i, name := range names {
		a, err := cryptodev.ParseAsymAlg(" " + name + " ")
		if err != nil || a != algs[i] || a.String() != name {
			t.Errorf("ParseAsymAlg(%q) = %v (%d), %v", name, a, a, err)
		}
		if up, _ := cryptodev.ParseAsymAlg(strings.ToUpper(name)); up != a {
			t.Errorf("ParseAsymAlg(%q) differs", name)
		}
		if !a.Valid() || !a.IsAsymmetric() || a < 64 || a.Info().Name != name {
			t.Errorf("%s: Valid %v IsAsymmetric %v value %d", name, a.Valid(), a.IsAsymmetric(), a)
		}
		if a.CanSign() == a.CanAgree() {
			t.Errorf("%s: CanSign %v CanAgree %v", name, a.CanSign(), a.CanAgree())
		}
		if a.MaxOutLen() == 0 {
			t.Errorf("%s: MaxOutLen 0", name)
		}
		if slices.Contains(cryptodev.Algs(), a) {
			t.Errorf("%s listed in Algs()", name)
		}
		if _, err := cryptodev.ParseAlg(name); err == nil {
			t.Errorf("ParseAlg(%q) accepted an asymmetric name", name)
		}
		if !e.Supports(a) {
			t.Errorf("soft does not support %s", name)
		}
		// The symmetric constructor refuses asymmetric algorithms without
		// panicking.
		if k, err := e.NewKey(a, nil, nil); err == nil {
			k.Destroy()
			t.Errorf("NewKey(%s) succeeded", name)
		}
	}
	if _, err := cryptodev.ParseAsymAlg("rsa1024"); err == nil {
		t.Error("ParseAsymAlg(rsa1024) succeeded")
	}
	for _, a := range cryptodev.Algs() {
		if a.IsAsymmetric() || a.CanSign() || a.CanAgree() || a.MaxOutLen() != 0 {
			t.Errorf("symmetric %v looks asymmetric", a)
		}
	}
	if s := cryptodev.Alg(64 + len(names)).String(); s != "alg(72)" {
		t.Errorf("String of the first unused asymmetric value = %q", s)
	}

	// MaxOutLen bounds the longest DER ECDSA signature: both integers with
	// a leading zero byte.
	for _, c := range []struct {
		a    cryptodev.Alg
		size int
	}{{cryptodev.ECDSAP256, 32}, {cryptodev.ECDSAP384, 48}} {
		if want := 2 + 2*(2+c.size+1); c.a.MaxOutLen() != want {
			t.Errorf("%v: MaxOutLen %d, want %d", c.a, c.a.MaxOutLen(), want)
		}
	}
}

func TestAsymUnsupportedSizes(t *testing.T) {
	e := soft.New()
	r1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	for name, priv := range map[string]crypto.PrivateKey{"rsa1024": r1024, "ecdsa-p521": p521} {
		if _, err := e.NewPrivateKey(priv); err == nil {
			t.Errorf("%s: NewPrivateKey succeeded", name)
		}
	}
}

// signKeys are generated once for the benchmarks.
var signKeys = map[cryptodev.Alg]crypto.Signer{}

func benchKey(b *testing.B, alg cryptodev.Alg) crypto.Signer {
	if k, ok := signKeys[alg]; ok {
		return k
	}
	priv, err := cryptodev.GenerateKey(alg)
	if err != nil {
		b.Fatal(err)
	}
	signKeys[alg] = priv.(crypto.Signer)
	return signKeys[alg]
}

// BenchmarkSign compares signing through the batch API (one op per batch,
// and 16 per batch), through the crypto.Signer adapter, and by calling Go's
// crypto directly. Each iteration is one signature.
func BenchmarkSign(b *testing.B) {
	for _, alg := range []cryptodev.Alg{cryptodev.RSA2048, cryptodev.RSA4096, cryptodev.ECDSAP256, cryptodev.Ed25519} {
		b.Run(alg.String(), func(b *testing.B) {
			priv := benchKey(b, alg)
			src, h := func() ([]byte, crypto.Hash) {
				d := sha256.Sum256([]byte("benchmark"))
				if alg == cryptodev.Ed25519 {
					return make([]byte, 128), 0 // a handshake transcript's worth
				}
				return d[:], crypto.SHA256
			}()
			b.Run("direct", func(b *testing.B) {
				sign := directSign(priv, h)
				for b.Loop() {
					if _, err := sign(src); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sign/s")
			})
			e := soft.New()
			k, err := e.NewPrivateKey(priv)
			if err != nil {
				b.Fatal(err)
			}
			defer k.Destroy()
			for _, n := range []int{1, 16} {
				b.Run("batch"+strconv.Itoa(n), func(b *testing.B) {
					q, _ := e.NewQueue()
					defer q.Close()
					batch := cryptodev.NewBatch(n)
					dst := make([]byte, n*alg.MaxOutLen())
					done := 0
					for done < b.N {
						m := min(n, b.N-done)
						batch.Reset(m)
						for i := range batch.Ops {
							batch.Ops[i] = cryptodev.Op{Key: k, Dir: cryptodev.Sign, Hash: h, Src: src, Dst: dst[i*alg.MaxOutLen() : (i+1)*alg.MaxOutLen()]}
						}
						if err := cryptodev.Run(q, batch); err != nil {
							b.Fatal(err)
						}
						for i := range batch.Ops {
							if batch.Ops[i].Status != cryptodev.StatusOK {
								b.Fatal(batch.Ops[i].Status)
							}
						}
						done += m
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sign/s")
				})
			}
			b.Run("signer", func(b *testing.B) {
				s, err := cryptodev.NewSigner(e, k)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := s.Sign(nil, src, h); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sign/s")
			})
		})
	}
}

// BenchmarkAgree compares X25519 through the batch API with Go's ecdh.
func BenchmarkAgree(b *testing.B) {
	priv, _ := ecdh.X25519().GenerateKey(rand.Reader)
	peer, _ := ecdh.X25519().GenerateKey(rand.Reader)
	pub := peer.PublicKey()
	b.Run("x25519/direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := priv.ECDH(pub); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "agree/s")
	})
	b.Run("x25519/batch1", func(b *testing.B) {
		e := soft.New()
		k, _ := e.NewPrivateKey(priv)
		defer k.Destroy()
		q, _ := e.NewQueue()
		defer q.Close()
		out := make([]byte, 32)
		pb := pub.Bytes()
		for b.Loop() {
			if _, err := cryptodev.RunAgree(q, k, pb, out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "agree/s")
	})
}

func directSign(priv crypto.Signer, h crypto.Hash) func([]byte) ([]byte, error) {
	switch p := priv.(type) {
	case *rsa.PrivateKey:
		return func(d []byte) ([]byte, error) { return rsa.SignPKCS1v15(nil, p, h, d) }
	case *ecdsa.PrivateKey:
		return func(d []byte) ([]byte, error) { return ecdsa.SignASN1(rand.Reader, p, d) }
	case ed25519.PrivateKey:
		return func(m []byte) ([]byte, error) { return ed25519.Sign(p, m), nil }
	}
	panic("unknown key")
}
