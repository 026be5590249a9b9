//go:build ipsecmb && cgo

package ipsecmb

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/sched"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/packet"
)

func open(t *testing.T) cryptodev.Engine {
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConformance runs the conformance suite synchronously.
func TestConformance(t *testing.T) {
	e := open(t)
	t.Logf("%s", e.(*Engine).Describe())
	e.Close()
	enginetest.Run(t, open)
}

// TestConformanceSched runs it under sched, as "sched:ipsecmb" opens it.
func TestConformanceSched(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) cryptodev.Engine {
		e, err := cryptodev.Open("sched:" + Name)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "sched:ipsecmb" {
			t.Errorf("Name() = %q", e.Name())
		}
		return e
	})
	e, err := sched.New(sched.Options{Workers: 3, QueueDepth: 4, Inner: open(t).(*Engine)})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
}

// espOps lays out n packets per suite in a pool as ESP does (ESP header,
// IV, payload, ICV) and describes an in-place op on each.
func espOps(t *testing.T, pool *packet.Pool, key *cryptodev.Key, dir cryptodev.Direction, sizes []int) ([]cryptodev.Op, []*packet.Buf) {
	info := key.Alg().Info()
	var ops []cryptodev.Op
	var bufs []*packet.Buf
	for _, size := range sizes {
		if !info.AEAD && size%info.BlockSize != 0 {
			size += info.BlockSize - size%info.BlockSize
		}
		b := pool.Get()
		canary := b.Slot()[b.Offset()+8+info.IVLen+size+info.ICVLen:]
		for i := range canary {
			canary[i] = 0xa5
		}
		data := b.Append(8 + info.IVLen + size + info.ICVLen)
		rand.Read(data)
		binary.BigEndian.PutUint32(data, 0x1001)
		ops = append(ops, cryptodev.Op{Key: key, Dir: dir, AAD: data[:8], IV: data[8 : 8+info.IVLen],
			Src: data[8+info.IVLen : 8+info.IVLen+size], Dst: data[8+info.IVLen : 8+info.IVLen+size],
			Tag: data[8+info.IVLen+size:]})
		bufs = append(bufs, b)
	}
	return ops, bufs
}

// TestESPLayout: ops laid out as ESP lays them out in pool memory (the
// path the library hashes chained suites on, with no pinning per call)
// give soft's results byte for byte, both ways, and a flipped bit fails
// only its own op.
func TestESPLayout(t *testing.T) {
	e := open(t)
	defer e.Close()
	s := soft.New()
	pool := packet.NewPool(256, 2048, 64)
	sizes := []int{0, 1, 16, 64, 333, 1420}
	for _, alg := range cryptodev.Algs() {
		t.Run(alg.String(), func(t *testing.T) {
			info := alg.Info()
			ek, ak := make([]byte, alg.EncKeyLen()), make([]byte, info.AuthKeyLen)
			rand.Read(ek)
			rand.Read(ak)
			k, err := e.NewKey(alg, ek, ak)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Destroy()
			sk, _ := s.NewKey(alg, ek, ak)
			ops, bufs := espOps(t, pool, k, cryptodev.Encrypt, sizes)
			defer pool.PutN(bufs)
			want := make([][]byte, len(ops))
			sops := make([]cryptodev.Op, len(ops))
			for i := range ops {
				c := append([]byte(nil), bufs[i].Bytes()...)
				so := ops[i]
				so.Key = sk
				off := len(so.AAD) + len(so.IV)
				so.Src, so.Dst, so.Tag = c[off:off+len(so.Src)], c[off:off+len(so.Src)], c[off+len(so.Src):]
				sops[i] = so
				want[i] = c
			}
			sp, _ := s.NewProcessor()
			sp.Process(sops)
			p, err := e.(*Engine).NewProcessor()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Process(ops)
			if ran := p.(*processor).ran; ran != len(ops) {
				t.Errorf("the library ran %d of %d ops", ran, len(ops))
			}
			for i := range ops {
				if ops[i].Status != cryptodev.StatusOK || !bytes.Equal(bufs[i].Bytes(), want[i]) {
					t.Fatalf("encrypt %d bytes: status %v, output differs from soft's: %v", len(ops[i].Src), ops[i].Status, !bytes.Equal(bufs[i].Bytes(), want[i]))
				}
				ops[i].Dir, ops[i].Status = cryptodev.Decrypt, cryptodev.StatusPending
			}
			for i := range bufs {
				for j, c := range bufs[i].Slot()[bufs[i].Offset()+bufs[i].Len():] {
					if c != 0xa5 {
						t.Fatalf("op %d: the engine wrote %d bytes past the ICV", i, j+1)
					}
				}
			}
			ops[2].Tag[0] ^= 1
			p.Process(ops)
			for i := range ops {
				want := cryptodev.StatusOK
				if i == 2 {
					want = cryptodev.StatusAuthFailed
				}
				if ops[i].Status != want {
					t.Errorf("decrypt %d: %v, want %v", i, ops[i].Status, want)
				}
			}
		})
	}
}

// TestSkippedOps: ops the engine does not hand to C (a nil key, a bad
// IV, a signature) between ones it does, of two keys, get their own
// statuses, and the others theirs, in place.
func TestSkippedOps(t *testing.T) {
	e := open(t)
	defer e.Close()
	pool := packet.NewPool(64, 2048, 64)
	alg := cryptodev.AES128GCM16
	var keys [2]*cryptodev.Key
	for i := range keys {
		ek := make([]byte, alg.EncKeyLen())
		ek[0] = byte(i)
		k, err := e.NewKey(alg, ek, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Destroy()
		keys[i] = k
	}
	sizes := []int{64, 64, 64, 64, 64, 64, 64}
	ops, bufs := espOps(t, pool, keys[0], cryptodev.Encrypt, sizes)
	defer pool.PutN(bufs)
	for i := range ops {
		ops[i].Key = keys[i/2%2]
	}
	want := make([][]byte, len(ops))
	p, err := e.(*Engine).NewProcessor()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Process(ops)
	for i := range ops {
		if ops[i].Status != cryptodev.StatusOK {
			t.Fatalf("op %d: %v", i, ops[i].Status)
		}
		want[i] = append([]byte(nil), bufs[i].Bytes()...)
		ops[i].Dir, ops[i].Status = cryptodev.Decrypt, cryptodev.StatusPending
	}
	ops[1].Key = nil
	iv := ops[3].IV
	ops[3].IV = iv[:4]
	ops[4].Tag[0] ^= 1
	ops[5].Dir = cryptodev.Sign
	ran := p.(*processor).ran
	p.Process(ops)
	wantSt := []cryptodev.Status{cryptodev.StatusOK, cryptodev.StatusInvalid, cryptodev.StatusOK,
		cryptodev.StatusInvalid, cryptodev.StatusAuthFailed, cryptodev.StatusUnsupported, cryptodev.StatusOK}
	for i := range ops {
		if ops[i].Status != wantSt[i] {
			t.Errorf("op %d: %v, want %v", i, ops[i].Status, wantSt[i])
		}
	}
	if got := p.(*processor).ran - ran; got != 4 {
		t.Errorf("the library ran %d ops, want 4", got)
	}
	for _, i := range []int{0, 2, 6} {
		if bytes.Equal(bufs[i].Bytes(), want[i]) {
			t.Errorf("op %d: not decrypted", i)
		}
	}
}

// TestAllocs: a batch in pool memory costs no allocation and no pinning.
func TestAllocs(t *testing.T) {
	e := open(t)
	defer e.Close()
	pool := packet.NewPool(64, 2048, 64)
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES256CBCSHA256} {
		info := alg.Info()
		k, err := e.NewKey(alg, make([]byte, alg.EncKeyLen()), make([]byte, info.AuthKeyLen))
		if err != nil {
			t.Fatal(err)
		}
		ops, bufs := espOps(t, pool, k, cryptodev.Encrypt, []int{64, 64, 1408, 1408})
		q, _ := e.NewQueue()
		b := &cryptodev.Batch{Ops: ops}
		allocs := testing.AllocsPerRun(200, func() {
			q.Submit(b)
			q.Dequeue(false)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per batch", alg, allocs)
		}
		for i := range ops {
			if ops[i].Status != cryptodev.StatusOK {
				t.Errorf("%v op %d: %v", alg, i, ops[i].Status)
			}
		}
		q.Close()
		pool.PutN(bufs)
		k.Destroy()
	}
}

func TestArch(t *testing.T) {
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Arch() == "" {
		t.Error("no architecture reported")
	}
	fmt.Println(e.Describe())
}
