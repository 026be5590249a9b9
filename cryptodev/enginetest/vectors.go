package enginetest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/sluicegw/sluice/cryptodev"
)

// vectorFiles are the published vectors the suite runs, in the module's
// testdata directory; required ones must yield at least one usable vector.
var vectorFiles = []struct {
	name     string
	required bool
}{
	{"gcm_draft_mcgrew.toml", true},         // RFC 4106 AES-GCM-ESP (draft-mcgrew-gcm-test-01)
	{"chacha20poly1305_rfc7634.toml", true}, // RFC 7634 Appendix A
	{"dpdk_ipsec.toml", false},              // DPDK lookaside IPsec: GCM and AES-CBC + HMAC-SHA-256
	{"cbc_rfc3602.toml", false},             // RFC 3602: the AES-CBC half of the chained suites
}

// vector is one [[vector]] table. Each file names its sources in its
// header. Sequence numbers: seq_hi and seq_lo are authoritative where given;
// seq (the whole 64-bit number) is absent where it does not fit a TOML
// integer.
type vector struct {
	Name       string  `toml:"name"`
	Source     string  `toml:"source"`
	Alg        string  `toml:"alg"`
	SPI        uint32  `toml:"spi"`
	Seq        *uint64 `toml:"seq"`
	SeqHi      *uint32 `toml:"seq_hi"`
	SeqLo      *uint32 `toml:"seq_lo"`
	ESN        bool    `toml:"esn"`
	EncKey     string  `toml:"enc_key"`
	AuthKey    string  `toml:"auth_key"`
	IV         string  `toml:"iv"`
	AAD        string  `toml:"aad"`
	Plaintext  string  `toml:"plaintext"`
	Ciphertext string  `toml:"ciphertext"`
	ICV        string  `toml:"icv"`
	ESP        string  `toml:"esp"`
}

// testdataDir finds the module's testdata directory from the test's
// working directory (the package directory under go test).
func testdataDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("enginetest: no go.mod above the working directory")
		}
		dir = parent
	}
}

func loadVectors(path string) ([]vector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Vector []vector `toml:"vector"`
	}
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc.Vector, nil
}

// kat is a vector turned into op inputs.
type kat struct {
	v                vector
	alg              cryptodev.Alg
	cbcOnly          bool // raw AES-CBC vector, run through an AES-CBC suite
	encKey, authKey  []byte
	iv, aad, trailer []byte
	pt, ct, icv, esp []byte
}

// kat parses v. It returns nil (and why) for a vector the suite cannot run.
func parseKAT(v vector) (*kat, string, error) {
	k := &kat{v: v}
	switch alg, err := cryptodev.ParseAlg(v.Alg); {
	case err == nil:
		k.alg = alg
	case strings.EqualFold(v.Alg, "aes128cbc"):
		k.alg, k.cbcOnly = cryptodev.AES128CBCSHA256, true
	default:
		return nil, "not an ESP suite sluice implements", nil
	}
	var err error
	field := func(name, s string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		if b, err = hex.DecodeString(strings.TrimPrefix(s, "0x")); err != nil {
			err = fmt.Errorf("%s: field %s: %w", v.Name, name, err)
		}
		return b
	}
	k.encKey = field("enc_key", v.EncKey)
	k.authKey = field("auth_key", v.AuthKey)
	k.iv = field("iv", v.IV)
	aad := field("aad", v.AAD)
	k.pt = field("plaintext", v.Plaintext)
	k.ct = field("ciphertext", v.Ciphertext)
	k.icv = field("icv", v.ICV)
	k.esp = field("esp", v.ESP)
	if err != nil {
		return nil, "", err
	}
	info := k.alg.Info()
	if k.cbcOnly {
		// The suite's HMAC half is not part of the vector: any key does.
		k.authKey = bytes.Repeat([]byte{0x5a}, info.AuthKeyLen)
		k.aad = make([]byte, 8)
		return k, "", nil
	}

	var hi, lo uint32
	switch {
	case v.SeqHi != nil && v.SeqLo != nil:
		hi, lo = *v.SeqHi, *v.SeqLo
	case v.Seq != nil:
		hi, lo = uint32(*v.Seq>>32), uint32(*v.Seq)
	default:
		return nil, "", fmt.Errorf("%s: no sequence number (seq, or seq_hi and seq_lo)", v.Name)
	}
	spi := binary.BigEndian.AppendUint32(nil, v.SPI)
	// RFC 4303 section 2.2.1: the ESP header carries the low 32 bits; with
	// ESN the high bits are authenticated too. RFC 4106 section 5 puts
	// them in the AEAD AAD (SPI || seq_hi || seq_lo); chained suites hash
	// them after the payload (section 3.3.2.1), as AuthTrailer.
	if info.AEAD {
		want := spi
		if v.ESN {
			want = binary.BigEndian.AppendUint32(want, hi)
		}
		want = binary.BigEndian.AppendUint32(want, lo)
		if len(aad) > 0 && !bytes.Equal(aad, want) {
			return nil, "", fmt.Errorf("%s: aad %x is not SPI || [seq_hi ||] seq_lo = %x", v.Name, aad, want)
		}
		k.aad = want
	} else {
		k.aad = binary.BigEndian.AppendUint32(spi, lo)
		if v.ESN {
			k.trailer = binary.BigEndian.AppendUint32(nil, hi)
		}
	}
	if len(k.icv) != info.ICVLen || len(k.ct) != len(k.pt) {
		return nil, "", fmt.Errorf("%s: %d bytes of ICV and %d of ciphertext for %d of plaintext; %s has a %d-byte ICV",
			v.Name, len(k.icv), len(k.ct), len(k.pt), k.alg, info.ICVLen)
	}
	if len(k.esp) > 0 {
		want := append(append(append(append([]byte(nil), spi...), binary.BigEndian.AppendUint32(nil, lo)...), k.iv...), k.ct...)
		want = append(want, k.icv...)
		if !bytes.Equal(k.esp, want) {
			return nil, "", fmt.Errorf("%s: esp is not SPI || seq_lo || IV || ciphertext || ICV", v.Name)
		}
	}
	return k, "", nil
}

func (s *suite) testKnownAnswer(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	dir, err := testdataDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range vectorFiles {
		t.Run(strings.TrimSuffix(f.name, ".toml"), func(t *testing.T) {
			vs, err := loadVectors(filepath.Join(dir, f.name))
			if err != nil {
				if f.required {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			var kats []*kat
			for _, v := range vs {
				k, skip, err := parseKAT(v)
				if err != nil {
					t.Error(err)
					continue
				}
				if k == nil {
					t.Logf("%s (alg %q): skipped, %s", v.Name, v.Alg, skip)
					continue
				}
				if !e.Supports(k.alg) {
					t.Logf("%s: skipped, engine does not support %s", v.Name, k.alg)
					continue
				}
				kats = append(kats, k)
			}
			if len(kats) == 0 {
				if f.required {
					t.Fatalf("%s: no vector the suite can run", f.name)
				}
				t.Skipf("%s: no vector the suite can run", f.name)
			}
			runKATs(t, e, q, kats)
		})
	}
}

// runKATs runs every vector of a file in one batch (mixing keys and
// algorithms, as traffic does): out-of-place encryption and decryption,
// in-place decryption and encryption of the ESP packet itself, and a
// tampered ICV.
func runKATs(t *testing.T, e cryptodev.Engine, q cryptodev.Queue, kats []*kat) {
	type check func(op *cryptodev.Op)
	var ops []cryptodev.Op
	var checks []check
	add := func(op cryptodev.Op, c check) {
		ops = append(ops, op)
		checks = append(checks, c)
	}
	for _, k := range kats {
		key, err := e.NewKey(k.alg, k.encKey, k.authKey)
		if err != nil {
			t.Errorf("%s: NewKey(%s): %v", k.v.Name, k.alg, err)
			continue
		}
		t.Cleanup(key.Destroy)
		name, info := k.v.Name, k.alg.Info()
		n := len(k.pt)
		base := cryptodev.Op{Key: key, IV: k.iv, AAD: k.aad, AuthTrailer: k.trailer}

		enc := base
		enc.Dir, enc.Src, enc.Dst, enc.Tag = cryptodev.Encrypt, k.pt, make([]byte, n), make([]byte, info.ICVLen)
		add(enc, func(op *cryptodev.Op) {
			switch {
			case op.Status != cryptodev.StatusOK:
				t.Errorf("%s: encrypt: status %v", name, op.Status)
			case !bytes.Equal(op.Dst, k.ct):
				t.Errorf("%s: encrypt: ciphertext\n got %x\nwant %x", name, op.Dst, k.ct)
			case k.cbcOnly:
				// Check the ICV against the reference and decrypt.
				m := material{enc: k.encKey, auth: k.authKey}
				if want := refICV(k.alg, m, k.iv, k.aad, nil, k.ct); !bytes.Equal(op.Tag, want) {
					t.Errorf("%s: HMAC over the CBC ciphertext\n got %x\nwant %x", name, op.Tag, want)
				}
			case !bytes.Equal(op.Tag, k.icv):
				t.Errorf("%s: encrypt: ICV\n got %x\nwant %x", name, op.Tag, k.icv)
			}
		})
		if k.cbcOnly {
			m := material{enc: k.encKey, auth: k.authKey}
			dec := base
			dec.Dir, dec.Src, dec.Dst = cryptodev.Decrypt, k.ct, make([]byte, n)
			dec.Tag = refICV(k.alg, m, k.iv, k.aad, nil, k.ct)
			add(dec, func(op *cryptodev.Op) {
				if op.Status != cryptodev.StatusOK || !bytes.Equal(op.Dst, k.pt) {
					t.Errorf("%s: decrypt: status %v, plaintext %x, want %x", name, op.Status, op.Dst, k.pt)
				}
			})
			continue
		}

		dec := base
		dec.Dir, dec.Src, dec.Dst, dec.Tag = cryptodev.Decrypt, k.ct, make([]byte, n), k.icv
		add(dec, func(op *cryptodev.Op) {
			if op.Status != cryptodev.StatusOK || !bytes.Equal(op.Dst, k.pt) {
				t.Errorf("%s: decrypt: status %v, plaintext\n got %x\nwant %x", name, op.Status, op.Dst, k.pt)
			}
		})

		bad := base
		tampered := append([]byte(nil), k.icv...)
		tampered[len(tampered)-1] ^= 1
		bad.Dir, bad.Src, bad.Dst, bad.Tag = cryptodev.Decrypt, k.ct, make([]byte, n), tampered
		add(bad, func(op *cryptodev.Op) {
			if op.Status != cryptodev.StatusAuthFailed {
				t.Errorf("%s: decrypt with a tampered ICV: status %v, want auth_failed", name, op.Status)
			}
		})

		if len(k.esp) == 0 {
			continue
		}
		// In place on the packet: ESP header || IV || ciphertext || ICV.
		hdr := 8 + len(k.iv)
		pkt := append([]byte(nil), k.esp...)
		in := base
		in.Dir, in.IV = cryptodev.Decrypt, pkt[8:hdr]
		in.Src, in.Dst, in.Tag = pkt[hdr:hdr+n], pkt[hdr:hdr+n], pkt[hdr+n:]
		if !info.AEAD {
			in.AAD = pkt[:8]
		}
		add(in, func(op *cryptodev.Op) {
			if op.Status != cryptodev.StatusOK || !bytes.Equal(op.Dst, k.pt) {
				t.Errorf("%s: in-place decrypt of the ESP packet: status %v, plaintext\n got %x\nwant %x", name, op.Status, op.Dst, k.pt)
			}
		})
		out := make([]byte, len(k.esp))
		copy(out, k.esp[:hdr])
		copy(out[hdr:], k.pt)
		seal := base
		seal.Dir, seal.IV = cryptodev.Encrypt, out[8:hdr]
		seal.Src, seal.Dst, seal.Tag = out[hdr:hdr+n], out[hdr:hdr+n], out[hdr+n:]
		if !info.AEAD {
			seal.AAD = out[:8]
		}
		add(seal, func(op *cryptodev.Op) {
			if op.Status != cryptodev.StatusOK || !bytes.Equal(out, k.esp) {
				t.Errorf("%s: in-place encrypt into the ESP packet: status %v, packet\n got %x\nwant %x", name, op.Status, out, k.esp)
			}
		})
	}
	b := batchOf(ops)
	runBatch(t, q, b)
	for i := range b.Ops {
		checks[i](&b.Ops[i])
	}
	t.Logf("%d vectors, %d ops in one batch", len(kats), len(ops))
}
