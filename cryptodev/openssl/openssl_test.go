//go:build openssl

package openssl_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/openssl"
	_ "github.com/sluicegw/sluice/cryptodev/sched"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/packet"
)

func open(t *testing.T) cryptodev.Engine {
	e, err := openssl.New()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConformance runs the engine conformance suite against openssl.
func TestConformance(t *testing.T) { enginetest.Run(t, open) }

// TestAsym runs the asymmetric conformance suite.
func TestAsym(t *testing.T) { enginetest.RunAsym(t, open(t)) }

// TestSched runs both suites under sched, as "sched:openssl" opens it:
// sched's workers run the ops through openssl processors of their own.
func TestSched(t *testing.T) {
	openSched := func(t *testing.T) cryptodev.Engine {
		e, err := cryptodev.Open("sched:" + openssl.Name)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "sched:openssl" {
			t.Errorf("Name() = %q", e.Name())
		}
		return e
	}
	enginetest.Run(t, openSched)
	enginetest.RunAsym(t, openSched(t))
}

// sealOps fills b with n in-place AES-GCM encryptions of 64 bytes over one
// buffer, each with its tag behind its data, as ESP lays them out.
func sealOps(b *cryptodev.Batch, k *cryptodev.Key, buf []byte, ctr *uint64) {
	const slot = 64 + 16 + 8 + 8
	b.Reset(len(b.Ops[:cap(b.Ops)]))
	for i := range b.Ops {
		s := buf[i*slot : (i+1)*slot]
		*ctr++
		iv := s[80:88]
		binary.BigEndian.PutUint64(iv, *ctr)
		b.Ops[i] = cryptodev.Op{Key: k, Dir: cryptodev.Encrypt, Src: s[:64], Dst: s[:64], Tag: s[64:80], IV: iv, AAD: s[88:96]}
	}
}

// TestSharedKey uses one key from more goroutines, each with its own
// queue, than a key has context slots, while the garbage collector runs,
// and checks every result against soft's.
func TestSharedKey(t *testing.T) {
	e := open(t)
	ref := soft.New()
	material := make([]byte, 20)
	rand.Read(material)
	k, err := e.NewKey(cryptodev.AES128GCM16, material, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Destroy()
	rk, _ := ref.NewKey(cryptodev.AES128GCM16, material, nil)
	defer rk.Destroy()
	stop := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, _ := e.NewQueue()
			rq, _ := ref.NewQueue()
			defer q.Close()
			defer rq.Close()
			b, rb := cryptodev.NewBatch(8), cryptodev.NewBatch(8)
			ctr, rctr := uint64(g)<<32, uint64(g)<<32
			for range 200 {
				buf, rbuf := make([]byte, 8*96), make([]byte, 8*96)
				rand.Read(buf[:64])
				copy(rbuf, buf)
				sealOps(b, k, buf, &ctr)
				sealOps(rb, rk, rbuf, &rctr)
				if err := cryptodev.Run(q, b); err != nil {
					errs <- err
					return
				}
				cryptodev.Run(rq, rb)
				for i := range b.Ops {
					if b.Ops[i].Status != cryptodev.StatusOK || !bytes.Equal(buf, rbuf) {
						errs <- fmt.Errorf("goroutine %d op %d: status %v or output differs from soft", g, i, b.Ops[i].Status)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-gcDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSymAllocs: a steady stream of symmetric batches over packet memory
// (a pinned arena, as the data plane's pools are) allocates nothing.
func TestSymAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	e := open(t)
	k, err := e.NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Destroy()
	q, _ := e.NewQueue()
	b := cryptodev.NewBatch(64)
	buf := make([]byte, 64*96)
	defer packet.PinArena(buf)()
	var ctr uint64
	sealOps(b, k, buf, &ctr)
	cryptodev.Run(q, b)
	allocs := testing.AllocsPerRun(1000, func() {
		sealOps(b, k, buf, &ctr)
		if err := q.Submit(b); err != nil {
			t.Fatal(err)
		}
		q.Dequeue(false)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}
