package ike

import (
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"math/big"
	"os"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPRFRFC4231 checks the PRFs against RFC 4231's HMAC-SHA-2 vectors,
// as the repository's testdata/hmac_rfc4231.toml transcribes them (its
// header names the source).
func TestPRFRFC4231(t *testing.T) {
	data, err := os.ReadFile("../testdata/hmac_rfc4231.toml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vector []struct{ Name, Alg, Key, Data, Mac string }
	}
	if err := toml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	ids := map[string]uint16{"hmac-sha256": PRFHMACSHA256, "hmac-sha384": PRFHMACSHA384, "hmac-sha512": PRFHMACSHA512}
	n := 0
	for _, v := range f.Vector {
		id, ok := ids[v.Alg]
		if !ok {
			continue
		}
		prf, err := NewPRF(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := prf.Sum(unhex(t, v.Key), unhex(t, v.Data)); !bytes.Equal(got, unhex(t, v.Mac)) {
			t.Errorf("%s: %x", v.Name, got)
		}
		n++
	}
	if n < 9 {
		t.Fatalf("only %d vectors", n)
	}
}

// TestPRFPlus checks prf+ against its definition in RFC 7296 section
// 2.13, computed block by block with crypto/hmac.
func TestPRFPlus(t *testing.T) {
	for _, id := range []uint16{PRFHMACSHA256, PRFHMACSHA384, PRFHMACSHA512} {
		prf, _ := NewPRF(id)
		key, seed := []byte("key"), []byte("seed bytes")
		got, err := prf.Plus(key, seed, 3*prf.Size()+5)
		if err != nil {
			t.Fatal(err)
		}
		var want, prev []byte
		for i := byte(1); i <= 4; i++ {
			m := hmac.New(prf.h, key)
			m.Write(prev)
			m.Write(seed)
			m.Write([]byte{i})
			prev = m.Sum(nil)
			want = append(want, prev...)
		}
		if !bytes.Equal(got, want[:len(got)]) {
			t.Fatalf("prf %d: prf+ differs", id)
		}
		if _, err := prf.Plus(key, seed, 255*prf.Size()+1); err == nil {
			t.Fatal("prf+ beyond 255 blocks")
		}
	}
}

// TestDHVectors checks groups 19, 20 and 31 against RFC 5903 section 8 and
// RFC 7748 section 6.1 (testdata/dh_vectors.toml names them).
func TestDHVectors(t *testing.T) {
	data, err := os.ReadFile("testdata/dh_vectors.toml")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Ecp []map[string]any
	}
	if err := toml.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Ecp) != 3 {
		t.Fatalf("%d vectors", len(g.Ecp))
	}
	for _, v := range g.Ecp {
		s := func(k string) []byte { return unhex(t, v[k].(string)) }
		group := uint16(v["group"].(int64))
		ki, err := ecFromPrivate(group, s("priv_i"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ki.Public(), s("pub_i")) {
			t.Errorf("%s: g^i %x", v["name"], ki.Public())
		}
		sh, err := ki.Shared(s("pub_r"))
		if err != nil || !bytes.Equal(sh, s("shared")) {
			t.Errorf("%s: g^ir %x %v", v["name"], sh, err)
		}
		if pr := s("priv_r"); len(pr) > 0 {
			kr, err := ecFromPrivate(group, pr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kr.Public(), s("pub_r")) {
				t.Errorf("%s: g^r %x", v["name"], kr.Public())
			}
			if sh, err := kr.Shared(s("pub_i")); err != nil || !bytes.Equal(sh, s("shared")) {
				t.Errorf("%s: g^ri %x %v", v["name"], sh, err)
			}
		}
		if _, err := ki.Shared(s("pub_r")[1:]); err == nil {
			t.Errorf("%s: short public value accepted", v["name"])
		}
	}
}

// TestModp2048 checks group 14's prime (RFC 3526 section 3: a safe prime
// of 2048 bits) and that two sides agree; RFC 3526 gives no exchange
// vectors.
func TestModp2048(t *testing.T) {
	p := modp2048
	q := new(big.Int).Rsh(p, 1)
	if p.BitLen() != 2048 || !p.ProbablyPrime(8) || !q.ProbablyPrime(8) {
		t.Fatal("the group 14 modulus is not a 2048-bit safe prime")
	}
	a, err := NewDH(DHModp2048)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewDH(DHModp2048)
	s1, err1 := a.Shared(b.Public())
	s2, err2 := b.Shared(a.Public())
	if err1 != nil || err2 != nil || !bytes.Equal(s1, s2) || len(s1) != 256 || len(a.Public()) != 256 {
		t.Fatalf("shared secrets differ: %v %v", err1, err2)
	}
	one := make([]byte, 256)
	one[255] = 1
	if _, err := a.Shared(one); err == nil {
		t.Fatal("y = 1 accepted")
	}
	if _, err := a.Shared(p.FillBytes(make([]byte, 256))); err == nil {
		t.Fatal("y = p accepted")
	}
	for _, g := range []uint16{DHECP256, DHECP384, DHCurve25519} {
		a, _ := NewDH(g)
		b, _ := NewDH(g)
		s1, _ := a.Shared(b.Public())
		s2, _ := b.Shared(a.Public())
		if len(s1) == 0 || !bytes.Equal(s1, s2) {
			t.Fatalf("group %d: shared secrets differ", g)
		}
	}
}
