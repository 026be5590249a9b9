//go:build ipsecmb && cgo

package ipsecmb

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// TestGCMOddShapes: AES-GCM ops of shapes ESP does not make (AAD of any
// length up to past the descriptor's 16 bytes, no payload, Dst apart from
// Src, keys alternating op by op) give soft's results both ways, and IVs
// or tags of the wrong length are refused, with nothing written beyond
// Dst and Tag.
func TestGCMOddShapes(t *testing.T) {
	e := open(t)
	defer e.Close()
	se := soft.New()
	defer se.Close()
	p, err := e.(*Engine).NewProcessor()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sp, err := se.NewProcessor()
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES192GCM16, cryptodev.AES256GCM16} {
		var keys, skeys [2]*cryptodev.Key
		for i := range keys {
			ek := make([]byte, alg.EncKeyLen())
			rand.Read(ek)
			if keys[i], err = e.NewKey(alg, ek, nil); err != nil {
				t.Fatal(err)
			}
			defer keys[i].Destroy()
			if skeys[i], err = se.NewKey(alg, ek, nil); err != nil {
				t.Fatal(err)
			}
			defer skeys[i].Destroy()
		}
		type shape struct {
			aad, n int
			apart  bool
		}
		var shapes []shape
		for _, aad := range []int{0, 1, 4, 7, 8, 9, 12, 13, 15, 16, 17, 20, 64} {
			for _, n := range []int{0, 1, 17, 64} {
				for _, apart := range []bool{false, true} {
					shapes = append(shapes, shape{aad, n, apart})
				}
			}
		}
		const guard = 32
		mk := func(s shape, i int, ks [2]*cryptodev.Key, pt []byte) (cryptodev.Op, []byte) {
			buf := make([]byte, s.n+16+guard)
			copy(buf, pt)
			op := cryptodev.Op{Key: ks[i%2], Dir: cryptodev.Encrypt, Src: buf[:s.n], Dst: buf[:s.n], Tag: buf[s.n : s.n+16]}
			if s.apart {
				op.Dst = make([]byte, s.n+guard)[:s.n]
			}
			return op, buf
		}
		ops := make([]cryptodev.Op, len(shapes))
		sops := make([]cryptodev.Op, len(shapes))
		for i, s := range shapes {
			pt := make([]byte, s.n)
			rand.Read(pt)
			iv, aad := make([]byte, 8), make([]byte, s.aad)
			rand.Read(iv)
			rand.Read(aad)
			ops[i], _ = mk(s, i, keys, pt)
			sops[i], _ = mk(s, i, skeys, pt)
			ops[i].IV, ops[i].AAD, sops[i].IV, sops[i].AAD = iv, aad, iv, aad
		}
		p.Process(ops)
		sp.Process(sops)
		for i, s := range shapes {
			if ops[i].Status != cryptodev.StatusOK || sops[i].Status != cryptodev.StatusOK {
				t.Fatalf("%v %+v: seal status %v (soft %v)", alg, s, ops[i].Status, sops[i].Status)
			}
			if !bytes.Equal(ops[i].Dst, sops[i].Dst) || !bytes.Equal(ops[i].Tag, sops[i].Tag) {
				t.Errorf("%v %+v: sealed differently from soft", alg, s)
			}
			if g := ops[i].Dst[:cap(ops[i].Dst)][s.n+16:]; !s.apart && !bytes.Equal(g, make([]byte, guard)) {
				t.Errorf("%v %+v: wrote past the tag", alg, s)
			}
			// Open the result, into fresh memory when apart.
			op := &ops[i]
			op.Dir, op.Status, op.Src = cryptodev.Decrypt, cryptodev.StatusPending, op.Dst
			if s.apart {
				op.Dst = make([]byte, s.n+guard)[:s.n]
			}
		}
		p.Process(ops)
		for i, s := range shapes {
			if ops[i].Status != cryptodev.StatusOK {
				t.Errorf("%v %+v: open status %v", alg, s, ops[i].Status)
			}
		}
		// Wrong IV and tag lengths are refused before C, and write nothing.
		for _, c := range []struct{ iv, tag int }{{0, 16}, {7, 16}, {9, 16}, {12, 16}, {8, 0}, {8, 8}, {8, 12}, {8, 15}, {8, 17}, {8, 32}} {
			for _, dir := range []cryptodev.Direction{cryptodev.Encrypt, cryptodev.Decrypt} {
				buf := make([]byte, 64+c.tag+guard)
				op := cryptodev.Op{Key: keys[0], Dir: dir, Src: buf[:64], Dst: buf[:64], Tag: buf[64 : 64+c.tag], IV: make([]byte, c.iv), AAD: make([]byte, 8)}
				ops := []cryptodev.Op{op}
				p.Process(ops)
				if ops[0].Status != cryptodev.StatusInvalid {
					t.Errorf("%v IV %d tag %d dir %v: status %v, want invalid", alg, c.iv, c.tag, dir, ops[0].Status)
				}
				if !bytes.Equal(buf, make([]byte, len(buf))) {
					t.Errorf("%v IV %d tag %d dir %v: wrote into the buffer", alg, c.iv, c.tag, dir)
				}
			}
		}
	}
}

// TestDestroyedKeyBetweenBatches: a key destroyed after one batch fails
// its ops in the next, and ops of the other key between them still run
// (the key cache lives for one batch only).
func TestDestroyedKeyBetweenBatches(t *testing.T) {
	e := open(t)
	defer e.Close()
	p, err := e.(*Engine).NewProcessor()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	alg := cryptodev.AES128GCM16
	var keys [2]*cryptodev.Key
	for i := range keys {
		if keys[i], err = e.NewKey(alg, make([]byte, alg.EncKeyLen()), nil); err != nil {
			t.Fatal(err)
		}
	}
	defer keys[1].Destroy()
	batch := func() []cryptodev.Op {
		ops := make([]cryptodev.Op, 6)
		for i := range ops {
			buf := make([]byte, 64+16)
			ops[i] = cryptodev.Op{Key: keys[i/3], Dir: cryptodev.Encrypt, Src: buf[:64], Dst: buf[:64], Tag: buf[64:], IV: make([]byte, 8), AAD: make([]byte, 8)}
		}
		return ops
	}
	ops := batch()
	p.Process(ops)
	for i := range ops {
		if ops[i].Status != cryptodev.StatusOK {
			t.Fatalf("op %d: %v", i, ops[i].Status)
		}
	}
	keys[0].Destroy()
	ops = batch()
	p.Process(ops)
	for i := range ops {
		want := cryptodev.StatusOK
		if i < 3 {
			want = cryptodev.StatusInvalid
		}
		if ops[i].Status != want {
			t.Errorf("%s op %d: %v, want %v", fmt.Sprint(alg), i, ops[i].Status, want)
		}
	}
}

// TestGCMAfterRefusedJob: a job the library refused leaves its error
// status in the manager, which the job API clears only on the next job;
// the GCM ops after it, which do not go through jobs, still succeed.
func TestGCMAfterRefusedJob(t *testing.T) {
	e := open(t)
	defer e.Close()
	p, err := e.(*Engine).NewProcessor()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	alg := cryptodev.AES128GCM16
	k, err := e.NewKey(alg, make([]byte, alg.EncKeyLen()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Destroy()
	p.(*processor).setJobErrno(2004) // IMB_ERR_JOB_CIPH_LEN, as a refused CBC job sets it
	buf := make([]byte, 8+8+64+16)
	ops := []cryptodev.Op{{Key: k, Dir: cryptodev.Encrypt, AAD: buf[:8], IV: buf[8:16], Src: buf[16:80], Dst: buf[16:80], Tag: buf[80:]}}
	p.Process(ops)
	if ops[0].Status != cryptodev.StatusOK {
		t.Fatalf("GCM after a refused job: %v, want ok", ops[0].Status)
	}
}
