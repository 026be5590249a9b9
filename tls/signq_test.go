package tls

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

func openEngine(t *testing.T, name string) cryptodev.Engine {
	eng, err := cryptodev.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestSignQueueBatches checks that requests waiting when a lane wakes go
// into one batch (split over the signing cores for an asynchronous
// engine) and that
// every waiter gets its own valid signature.
func TestSignQueueBatches(t *testing.T) {
	for _, name := range testEngines {
		for _, kt := range keyTypes {
			t.Run(name+"/"+kt, func(t *testing.T) {
				eng := openEngine(t, name)
				priv := genKey(t, kt)
				key, err := eng.(cryptodev.AsymEngine).NewPrivateKey(priv)
				if err != nil {
					t.Fatal(err)
				}
				defer key.Destroy()
				// A queue whose lane starts only once every request waits.
				q := &signQueue{eng: eng, async: eng.Async(), reqs: make(chan *signReq, 64), quit: make(chan struct{}), split: 1}
				if q.async {
					q.split = signCores(runtime.GOMAXPROCS(0))
				}
				ek := &engineKey{key: key, pub: priv.Public(), q: q}
				const n = 10 // below maxPartOps: one collection
				var wg sync.WaitGroup
				errs := make([]error, n)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d := sha256.Sum256([]byte{byte(i)})
						var opts crypto.SignerOpts = crypto.SHA256
						if i%2 == 1 && kt == "rsa" {
							opts = &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
						}
						sig, err := (&handshakeSigner{k: ek, ctx: context.Background()}).Sign(nil, d[:], opts)
						if err == nil {
							switch pub := priv.Public().(type) {
							case *ecdsa.PublicKey:
								if !ecdsa.VerifyASN1(pub, d[:], sig) {
									err = errors.New("bad ECDSA signature")
								}
							case *rsa.PublicKey:
								if pss, ok := opts.(*rsa.PSSOptions); ok {
									err = rsa.VerifyPSS(pub, crypto.SHA256, d[:], sig, pss)
								} else {
									err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, d[:], sig)
								}
							}
						}
						errs[i] = err
					}()
				}
				waitFor(t, "every request to wait", func() bool { return q.depth.Load() == n })
				cq, err := eng.NewQueue()
				if err != nil {
					t.Fatal(err)
				}
				q.lanes = []cryptodev.Queue{cq}
				if !q.async {
					// Two lanes (one of them idle): the running one takes
					// its fair share, half of what waits.
					q.lanes = append(q.lanes, cq)
				}
				q.wg.Add(1)
				go q.lane(cq)
				wg.Wait()
				q.close()
				for i, err := range errs {
					if err != nil {
						t.Errorf("request %d: %v", i, err)
					}
				}
				if q.ops.Load() != n || q.depth.Load() != 0 {
					t.Fatalf("ops %d depth %d", q.ops.Load(), q.depth.Load())
				}
				if q.async && kt == "rsa" {
					// An RSA signature is milliseconds: one per batch, so
					// that each handshake goes on as soon as it is signed.
					if q.batches.Load() != n || q.maxBatch.Load() != 1 {
						t.Fatalf("batches %d (want %d), largest %d (want 1)", q.batches.Load(), n, q.maxBatch.Load())
					}
				} else if q.async {
					// One collection, split over the signing cores.
					if want := uint64(min(n, q.split)); q.batches.Load() != want || q.maxBatch.Load() != uint64((n+q.split-1)/q.split) {
						t.Fatalf("batches %d (want %d), largest %d", q.batches.Load(), want, q.maxBatch.Load())
					}
				} else if q.maxBatch.Load() != n/2 {
					t.Fatalf("largest batch %d, want the fair share %d", q.maxBatch.Load(), n/2)
				}
			})
		}
	}
}

// TestSignQueueAsyncCores: an asynchronous engine's lane keeps at most
// signCores batches of at most maxPartOps ops in flight, so that the
// engine never spreads handshake signatures over every core; and
// signCores leaves one core of several.
func TestSignQueueAsyncCores(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 1, 8: 7} {
		if got := signCores(procs); got != want {
			t.Errorf("signCores(%d) = %d, want %d", procs, got, want)
		}
	}
	eng := openEngine(t, "sched")
	priv := genKey(t, "ecdsa")
	key, err := eng.(cryptodev.AsymEngine).NewPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Destroy()
	q := &signQueue{eng: eng, async: true, reqs: make(chan *signReq, 64), quit: make(chan struct{}), split: 1}
	ek := &engineKey{key: key, pub: priv.Public(), q: q}
	const n = maxPartOps + 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := sha256.Sum256([]byte{byte(i)})
			if _, err := (&handshakeSigner{k: ek, ctx: context.Background()}).Sign(nil, d[:], crypto.SHA256); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}()
	}
	waitFor(t, "every request to wait", func() bool { return q.depth.Load() == n })
	cq, err := eng.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	q.lanes = []cryptodev.Queue{cq}
	q.wg.Add(1)
	go q.lane(cq)
	wg.Wait()
	q.close()
	if q.ops.Load() != n || q.batches.Load() != 2 || q.maxBatch.Load() != maxPartOps {
		t.Fatalf("ops %d, batches %d (want 2), largest %d (want %d)", q.ops.Load(), q.batches.Load(), q.maxBatch.Load(), maxPartOps)
	}
}

// TestSignQueueFullAndAbandoned: a full queue fails at once (counted as
// "sign"); a waiter whose handshake ends gives up, and the lane skips it.
func TestSignQueueFullAndAbandoned(t *testing.T) {
	eng := openEngine(t, "soft")
	priv := genKey(t, "ecdsa")
	key, err := eng.(cryptodev.AsymEngine).NewPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Destroy()
	q := &signQueue{eng: eng, reqs: make(chan *signReq, 1), quit: make(chan struct{}), split: 1}
	d := sha256.Sum256(nil)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := q.sign(ctx, nil, key, d[:], crypto.SHA256, false)
		first <- err
	}()
	waitFor(t, "the first request to wait", func() bool { return q.depth.Load() == 1 })
	_, err = q.sign(context.Background(), nil, key, d[:], crypto.SHA256, false)
	if !errors.Is(err, errSignQueueFull) || classify(err, nil) != failSign {
		t.Fatalf("full queue: %v (%s)", err, classify(err, nil))
	}
	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an abandoned Sign did not return")
	}
	// The lane finds the abandoned request and does not sign it.
	cq, _ := eng.NewQueue()
	q.wg.Add(1)
	go q.lane(cq)
	waitFor(t, "the lane to take the request", func() bool { return q.depth.Load() == 0 })
	q.close()
	if q.ops.Load() != 0 {
		t.Fatalf("signed an abandoned request")
	}
}

// TestConcurrentHandshakes runs many handshakes at once on both engines and
// checks that every signature went through the queue.
func TestConcurrentHandshakes(t *testing.T) {
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			f := newSite(t, eng, "rsa", nil)
			const n = 32
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := goClient(t, f.addr, "alpha.test", f.ca, nil)
					if err != nil {
						t.Error(err)
						return
					}
					c.Close()
				}()
			}
			wg.Wait()
			st := statsOf(t, f.s, "web")
			if st.SignOps != n || st.SignBatches == 0 || st.SignBatches > n || st.SignMaxBatch == 0 || st.SignQueueDepth != 0 {
				t.Fatalf("%+v", st)
			}
			t.Logf("%s: %d signatures in %d batches, largest %d", eng, st.SignOps, st.SignBatches, st.SignMaxBatch)
		})
	}
}
