//go:build ipsecmb && cgo

package ipsecmb

import (
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/packet"
)

// BenchmarkProcess measures the engine alone on batches of 64 ESP-shaped
// AES-128-GCM ops in pool memory (AAD, IV, payload and ICV in one slot, in
// place, as esp lays them out): the Go descriptor fill, the cgo call and
// the library. ns/op is per batch; ns/pkt divides it by the batch.
// Opening checks only the first batch's status (see below).
func BenchmarkProcess(b *testing.B) {
	for _, c := range []struct {
		name string
		dir  cryptodev.Direction
		size int
	}{{"seal/72", cryptodev.Encrypt, 72}, {"open/72", cryptodev.Decrypt, 72}, {"seal/1424", cryptodev.Encrypt, 1424}} {
		b.Run(c.name, func(b *testing.B) {
			e, err := New()
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			k, err := e.NewKey(cryptodev.AES128GCM16, make([]byte, cryptodev.AES128GCM16.EncKeyLen()), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer k.Destroy()
			const batch = 64
			pool := packet.NewPool(batch, 2048, 64)
			ops := make([]cryptodev.Op, batch)
			bufs := make([]*packet.Buf, batch)
			for i := range ops {
				bufs[i] = pool.Get()
				d := bufs[i].Append(8 + 8 + c.size + 16)
				ops[i] = cryptodev.Op{Key: k, Dir: cryptodev.Encrypt, AAD: d[:8], IV: d[8:16],
					Src: d[16 : 16+c.size], Dst: d[16 : 16+c.size], Tag: d[16+c.size:]}
			}
			defer pool.PutN(bufs)
			p, err := e.NewProcessor()
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			p.Process(ops) // sealed once, so that opening authenticates
			for i := range ops {
				ops[i].Dir = c.dir
			}
			p.Process(ops)
			if ops[0].Status != cryptodev.StatusOK {
				b.Fatalf("status %v", ops[0].Status)
			}
			// Opening in place leaves plaintext, which fails the ICV from
			// now on: the same work, the status aside.
			b.SetBytes(int64(batch * c.size))
			for b.Loop() {
				p.Process(ops)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pkt")
		})
	}
}
