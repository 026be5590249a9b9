// Package enginetest is the conformance suite every cryptodev engine
// passes, synchronous or asynchronous, in the manner of Go's
// cryptotest.TestAEAD. An engine's tests call Run:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, func(t *testing.T) cryptodev.Engine { return soft.New() })
//	}
//
// Every expected output is computed with Go's crypto packages directly or
// read from the published vectors in the module's testdata directory, never
// through an engine. Every wait is bounded: an engine that hangs fails with
// the stacks of all goroutines instead of stalling the test binary.
package enginetest

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// Run runs the conformance suite. open returns a fresh engine for one
// subtest; the suite closes it (Close must be idempotent).
func Run(t *testing.T, open func(t *testing.T) cryptodev.Engine) {
	s := &suite{open: open}
	t.Run("Basics", s.testBasics)
	t.Run("RoundTrip", s.testRoundTrip)
	t.Run("KnownAnswer", s.testKnownAnswer)
	t.Run("MixedBatch", s.testMixedBatch)
	t.Run("Tampered", s.testTampered)
	t.Run("Invalid", s.testInvalid)
	t.Run("Order", s.testOrder)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("QueueFull", s.testQueueFull)
	t.Run("QueueClose", s.testQueueClose)
	t.Run("CloseInFlight", s.testCloseInFlight)
}

type suite struct {
	open func(t *testing.T) cryptodev.Engine
}

// hangAfter bounds every subtest.
const hangAfter = 2 * time.Minute

// engine opens an engine for t, closes it when t ends, and arms a watchdog.
func (s *suite) engine(t *testing.T) cryptodev.Engine {
	t.Helper()
	watchdog(t, hangAfter)
	e := s.open(t)
	if e == nil {
		t.Fatal("open returned a nil engine")
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// watchdog panics with every goroutine's stack if t runs longer than d.
func watchdog(t *testing.T, d time.Duration) {
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("enginetest: %s still running after %v; the engine hangs\n\n%s", name, d, buf))
	})
	t.Cleanup(func() { timer.Stop() })
}

func newQueue(t *testing.T, e cryptodev.Engine) cryptodev.Queue {
	t.Helper()
	q, err := e.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue: %v", err)
	}
	return q
}

// runBatch submits b on q, which has nothing else in flight, and waits for
// it.
func runBatch(t *testing.T, q cryptodev.Queue, b *cryptodev.Batch) {
	t.Helper()
	if err := q.Submit(b); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if d := q.Dequeue(true); d != b {
		t.Fatalf("Dequeue(true) returned %p, want the batch submitted (%p)", d, b)
	}
	if n := q.InFlight(); n != 0 {
		t.Fatalf("InFlight after the only batch was dequeued = %d, want 0", n)
	}
}

// batchOf builds a batch holding ops.
func batchOf(ops []cryptodev.Op) *cryptodev.Batch {
	b := cryptodev.NewBatch(len(ops))
	b.Ops = append(b.Ops, ops...)
	return b
}

// dequeueWithin is Dequeue(true) that fails t if it takes longer than d.
func dequeueWithin(t *testing.T, q cryptodev.Queue, d time.Duration) *cryptodev.Batch {
	t.Helper()
	ch := make(chan *cryptodev.Batch, 1)
	go func() { ch <- q.Dequeue(true) }()
	select {
	case b := <-ch:
		return b
	case <-time.After(d):
		t.Fatalf("Dequeue(true) still blocked after %v with %d in flight", d, q.InFlight())
		return nil
	}
}

func (s *suite) testBasics(t *testing.T) {
	e := s.engine(t)
	if e.Name() == "" {
		t.Error("Name() is empty")
	}
	for _, alg := range cryptodev.Algs() {
		if !e.Supports(alg) {
			t.Logf("%s does not support %s; the suite skips it", e.Name(), alg)
			continue
		}
		info := alg.Info()
		// Wrong key lengths are errors, not panics.
		if _, err := e.NewKey(alg, make([]byte, alg.EncKeyLen()+1), make([]byte, info.AuthKeyLen)); err == nil {
			t.Errorf("NewKey(%s) with %d bytes of encryption key: no error", alg, alg.EncKeyLen()+1)
		}
		if _, err := e.NewKey(alg, make([]byte, alg.EncKeyLen()), make([]byte, info.AuthKeyLen+1)); err == nil {
			t.Errorf("NewKey(%s) with %d bytes of authentication key: no error", alg, info.AuthKeyLen+1)
		}
	}
	if e.Supports(cryptodev.AlgInvalid) {
		t.Error("Supports(AlgInvalid) = true")
	}
	if _, err := e.NewKey(cryptodev.AlgInvalid, nil, nil); err == nil {
		t.Error("NewKey(AlgInvalid): no error")
	}

	q := newQueue(t, e)
	if b := q.Dequeue(false); b != nil {
		t.Errorf("Dequeue(false) on a new queue returned %p, want nil", b)
	}
	done := make(chan *cryptodev.Batch, 1)
	go func() { done <- q.Dequeue(true) }()
	select {
	case b := <-done:
		if b != nil {
			t.Errorf("Dequeue(true) with nothing in flight returned %p, want nil", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dequeue(true) with nothing in flight blocks")
	}
	if n := q.InFlight(); n != 0 {
		t.Errorf("InFlight on a new queue = %d", n)
	}

	// An empty batch completes too.
	empty := cryptodev.NewBatch(0)
	runBatch(t, q, empty)

	// cryptodev.Run, the synchronous convenience form.
	r := newRand(1)
	alg := firstSupported(e)
	key, m := newKey(t, e, alg, r)
	smp := newSample(alg, key, m, randBytes(r, payloadLen(alg, 100)), r)
	dst := make([]byte, len(smp.pt)+len(smp.tag))
	b := batchOf([]cryptodev.Op{smp.encOp(dst)})
	if err := cryptodev.Run(q, b); err != nil {
		t.Fatalf("cryptodev.Run: %v", err)
	}
	checkEnc(t, "Run", &b.Ops[0], smp)
}

// firstSupported returns an algorithm e supports, preferring AES-128-GCM.
func firstSupported(e cryptodev.Engine) cryptodev.Alg {
	if e.Supports(cryptodev.AES128GCM16) {
		return cryptodev.AES128GCM16
	}
	for _, a := range cryptodev.Algs() {
		if e.Supports(a) {
			return a
		}
	}
	panic("enginetest: engine supports no algorithm")
}

// supported lists the algorithms e supports.
func supported(e cryptodev.Engine) []cryptodev.Alg {
	var out []cryptodev.Alg
	for _, a := range cryptodev.Algs() {
		if e.Supports(a) {
			out = append(out, a)
		}
	}
	return out
}

// checkEnc checks an encryption op against its sample.
func checkEnc(t *testing.T, what string, op *cryptodev.Op, smp *sample) bool {
	t.Helper()
	if op.Status != cryptodev.StatusOK {
		t.Errorf("%s: %s encrypt of %d bytes: status %v, want ok", what, smp.alg, len(smp.pt), op.Status)
		return false
	}
	if !bytes.Equal(op.Dst, smp.ct) {
		t.Errorf("%s: %s encrypt of %d bytes: wrong ciphertext\n got %x\nwant %x", what, smp.alg, len(smp.pt), clip(op.Dst), clip(smp.ct))
		return false
	}
	if !bytes.Equal(op.Tag, smp.tag) {
		t.Errorf("%s: %s encrypt of %d bytes: wrong ICV\n got %x\nwant %x", what, smp.alg, len(smp.pt), op.Tag, smp.tag)
		return false
	}
	return true
}

// checkDec checks a decryption op against its sample.
func checkDec(t *testing.T, what string, op *cryptodev.Op, smp *sample) bool {
	t.Helper()
	if op.Status != cryptodev.StatusOK {
		t.Errorf("%s: %s decrypt of %d bytes: status %v, want ok", what, smp.alg, len(smp.pt), op.Status)
		return false
	}
	if !bytes.Equal(op.Dst, smp.pt) {
		t.Errorf("%s: %s decrypt of %d bytes: wrong plaintext\n got %x\nwant %x", what, smp.alg, len(smp.pt), clip(op.Dst), clip(smp.pt))
		return false
	}
	return true
}

func clip(b []byte) []byte {
	if len(b) > 48 {
		return b[:48]
	}
	return b
}

// testMixedBatch runs one batch mixing algorithms, keys and directions.
func (s *suite) testMixedBatch(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(2)
	type keyed struct {
		key *cryptodev.Key
		m   material
	}
	algs := supported(e)
	keys := make(map[cryptodev.Alg][2]keyed)
	for _, alg := range algs {
		k0, m0 := newKey(t, e, alg, r)
		k1, m1 := newKey(t, e, alg, r)
		keys[alg] = [2]keyed{{k0, m0}, {k1, m1}}
	}
	sizes := []int{0, 1, 64, 333, 1420}
	var samples []*sample
	var ops []cryptodev.Op
	for i := range 6 * len(algs) {
		alg := algs[i%len(algs)]
		k := keys[alg][i/len(algs)%2]
		smp := newSample(alg, k.key, k.m, randBytes(r, payloadLen(alg, sizes[i%len(sizes)])), r)
		dst := make([]byte, len(smp.pt)+len(smp.tag))
		if i%3 == 1 {
			ops = append(ops, smp.decOp(dst))
		} else {
			ops = append(ops, smp.encOp(dst))
		}
		samples = append(samples, smp)
	}
	b := batchOf(ops)
	runBatch(t, q, b)
	for i := range b.Ops {
		what := fmt.Sprintf("op %d", i)
		if b.Ops[i].Dir == cryptodev.Encrypt {
			checkEnc(t, what, &b.Ops[i], samples[i])
		} else {
			checkDec(t, what, &b.Ops[i], samples[i])
		}
	}
}

// testTampered checks that a failed ICV fails its op alone.
func (s *suite) testTampered(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(3)
	for _, alg := range supported(e) {
		t.Run(alg.String(), func(t *testing.T) {
			key, m := newKey(t, e, alg, r)
			chained := !alg.Info().AEAD
			var samples []*sample
			var ops []cryptodev.Op
			bad := map[int]string{}
			for i := range 10 {
				n := payloadLen(alg, 64)
				if i == 8 {
					n = 0
				}
				smp := newSample(alg, key, m, randBytes(r, n), r)
				if chained && i == 7 && smp.trailer == nil {
					smp.trailer = randBytes(r, 4)
					smp.ct, smp.tag = refSeal(alg, m, smp.iv, smp.aad, smp.trailer, smp.pt)
					smp.ctTag = append(append([]byte(nil), smp.ct...), smp.tag...)
					smp.ct, smp.tag = smp.ctTag[:n:n], smp.ctTag[n:]
				}
				op := smp.decOp(make([]byte, n))
				// Tamper with private copies; the sample keeps the truth.
				src := append([]byte(nil), smp.ctTag...)
				op.Src, op.Tag = src[:n], src[n:]
				op.AAD = append([]byte(nil), smp.aad...)
				op.AuthTrailer = append([]byte(nil), smp.trailer...)
				switch i {
				case 2:
					src[n/2] ^= 0x01
					bad[i] = "ciphertext"
				case 4:
					src[len(src)-1] ^= 0x80
					bad[i] = "ICV"
				case 5:
					op.AAD[len(op.AAD)-1] ^= 0x10
					bad[i] = "AAD"
				case 7:
					if chained {
						op.AuthTrailer[0] ^= 0x01
						bad[i] = "ESN high bits"
					}
				case 8:
					src[0] ^= 0x01
					bad[i] = "ICV of an empty payload"
				}
				if i == 9 && len(smp.iv) > 0 {
					op.IV = append([]byte(nil), smp.iv...)
					op.IV[0] ^= 0x01
					bad[i] = "IV"
				}
				samples = append(samples, smp)
				ops = append(ops, op)
			}
			b := batchOf(ops)
			runBatch(t, q, b)
			for i := range b.Ops {
				if what, ok := bad[i]; ok {
					if st := b.Ops[i].Status; st != cryptodev.StatusAuthFailed {
						t.Errorf("op %d with tampered %s: status %v, want auth_failed", i, what, st)
					}
					continue
				}
				checkDec(t, fmt.Sprintf("op %d (untampered, in a batch with tampered ops)", i), &b.Ops[i], samples[i])
			}
		})
	}
}

// testInvalid checks that ops whose lengths do not fit give StatusInvalid,
// without a panic and without affecting valid ops in the same batch.
func (s *suite) testInvalid(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(4)
	for _, alg := range supported(e) {
		t.Run(alg.String(), func(t *testing.T) {
			info := alg.Info()
			key, m := newKey(t, e, alg, r)
			n := payloadLen(alg, 48)
			smp := newSample(alg, key, m, randBytes(r, n), r)
			type bad struct {
				what string
				op   cryptodev.Op
			}
			var cases []bad
			add := func(what string, mod func(op *cryptodev.Op)) {
				for _, dir := range []cryptodev.Direction{cryptodev.Encrypt, cryptodev.Decrypt} {
					var op cryptodev.Op
					if dir == cryptodev.Encrypt {
						op = smp.encOp(make([]byte, n+info.ICVLen))
					} else {
						op = smp.decOp(make([]byte, n))
						op.Src = append([]byte(nil), op.Src...)
						op.Tag = append([]byte(nil), op.Tag...)
					}
					mod(&op)
					name := "encrypt"
					if dir == cryptodev.Decrypt {
						name = "decrypt"
					}
					cases = append(cases, bad{name + " with " + what, op})
				}
			}
			add("IV one byte long", func(op *cryptodev.Op) { op.IV = make([]byte, info.IVLen+1) })
			if info.IVLen > 0 {
				add("IV one byte short", func(op *cryptodev.Op) { op.IV = op.IV[:info.IVLen-1] })
				add("no IV", func(op *cryptodev.Op) { op.IV = nil })
			}
			add("Dst one byte short", func(op *cryptodev.Op) { op.Dst = op.Dst[:n-1] })
			add("Dst one byte long", func(op *cryptodev.Op) { op.Dst = make([]byte, n+1) })
			add("Tag one byte short", func(op *cryptodev.Op) { op.Tag = op.Tag[:info.ICVLen-1] })
			add("Tag one byte long", func(op *cryptodev.Op) { op.Tag = make([]byte, info.ICVLen+1) })
			add("no Tag", func(op *cryptodev.Op) { op.Tag = nil })
			if isCBC(alg) {
				for _, odd := range []int{1, 15, 17, n - 1} {
					add(fmt.Sprintf("%d bytes of CBC payload", odd), func(op *cryptodev.Op) {
						op.Src, op.Dst = make([]byte, odd), make([]byte, odd)
					})
				}
			}
			dead, _ := newKey(t, e, alg, r)
			dead.Destroy()
			add("a destroyed key", func(op *cryptodev.Op) { op.Key = dead })

			ops := []cryptodev.Op{smp.encOp(make([]byte, n+info.ICVLen))}
			for _, c := range cases {
				ops = append(ops, c.op)
			}
			ops = append(ops, smp.decOp(make([]byte, n)))
			b := batchOf(ops)
			runBatch(t, q, b)
			checkEnc(t, "valid op before the invalid ones", &b.Ops[0], smp)
			checkDec(t, "valid op after the invalid ones", &b.Ops[len(ops)-1], smp)
			for i, c := range cases {
				if st := b.Ops[i+1].Status; st != cryptodev.StatusInvalid {
					t.Errorf("%s: status %v, want invalid", c.what, st)
				}
			}
		})
	}
}

// testOrder submits batches whose sizes differ wildly, so that an engine
// running them in parallel finishes them out of order, and checks that they
// come back in submission order.
func (s *suite) testOrder(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(5)
	alg := firstSupported(e)
	key, m := newKey(t, e, alg, r)
	big := newSample(alg, key, m, randBytes(r, payloadLen(alg, 8192)), r)
	small := newSample(alg, key, m, randBytes(r, payloadLen(alg, 16)), r)
	const nBatches = 96
	pending := map[int]*cryptodev.Batch{}
	next, want := 0, 0
	for want < nBatches {
		if next < nBatches {
			var ops []cryptodev.Op
			smp, count := small, 1
			if next%4 == 0 {
				smp, count = big, 32
			}
			for range count {
				ops = append(ops, smp.encOp(make([]byte, len(smp.pt)+len(smp.tag))))
			}
			b := batchOf(ops)
			b.User = next
			err := q.Submit(b)
			if err == nil {
				pending[next] = b
				next++
				if q.InFlight() != next-want {
					t.Fatalf("InFlight = %d, want %d", q.InFlight(), next-want)
				}
				continue
			}
			if !errors.Is(err, cryptodev.ErrQueueFull) {
				t.Fatalf("Submit: %v", err)
			}
		}
		d := q.Dequeue(next == nBatches || r.IntN(2) == 0)
		if d == nil {
			continue
		}
		if d.User != want {
			t.Fatalf("Dequeue returned batch %v, want %d (submission order)", d.User, want)
		}
		if d != pending[want] {
			t.Fatalf("Dequeue returned a different *Batch for id %d", want)
		}
		delete(pending, want)
		smp := small
		if want%4 == 0 {
			smp = big
		}
		for i := range d.Ops {
			checkEnc(t, fmt.Sprintf("batch %d op %d", want, i), &d.Ops[i], smp)
		}
		want++
	}
	if b := q.Dequeue(true); b != nil || q.InFlight() != 0 {
		t.Fatalf("after draining: Dequeue(true) = %p, InFlight = %d", b, q.InFlight())
	}
}

// testConcurrent runs 8 submitters, each with its own queue and a stream of
// reused batches mixing algorithms, keys, sizes and directions, and checks
// every result and the order of every queue. Under -race it also checks
// that the engine publishes its results to the submitter properly.
func (s *suite) testConcurrent(t *testing.T) {
	e := s.engine(t)
	r := newRand(6)
	var samples []*sample
	for _, alg := range supported(e) {
		key, m := newKey(t, e, alg, r)
		for _, n := range []int{0, 20, 64, 200, 1420, 4096} {
			samples = append(samples, newSample(alg, key, m, randBytes(r, payloadLen(alg, n)), r))
		}
	}
	const (
		submitters = 8
		nBatches   = 150
		poolSize   = 10
		maxOps     = 12
	)
	var wg sync.WaitGroup
	for g := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runSubmitter(e, samples, uint64(100+g), nBatches, poolSize, maxOps); err != nil {
				t.Errorf("submitter %d: %v", g, err)
			}
		}()
	}
	wg.Wait()
}

// slotMeta is what a pooled batch of testConcurrent carries in User.
type slotMeta struct {
	id      int
	samples []*sample
	dst     [][]byte
}

func runSubmitter(e cryptodev.Engine, samples []*sample, seed uint64, nBatches, poolSize, maxOps int) error {
	r := newRand(seed)
	q, err := e.NewQueue()
	if err != nil {
		return err
	}
	defer q.Close()
	maxLen := 0
	for _, smp := range samples {
		maxLen = max(maxLen, len(smp.ctTag))
	}
	var free []*cryptodev.Batch
	metas := map[*cryptodev.Batch]*slotMeta{}
	for range poolSize {
		b := cryptodev.NewBatch(maxOps)
		meta := &slotMeta{dst: make([][]byte, maxOps)}
		for i := range meta.dst {
			meta.dst[i] = make([]byte, maxLen)
		}
		metas[b] = meta
		free = append(free, b)
	}
	next, want := 0, 0
	for want < nBatches {
		if next < nBatches && len(free) > 0 {
			b := free[len(free)-1]
			meta := metas[b]
			n := 1 + r.IntN(maxOps)
			b.Reset(n)
			meta.id = next
			meta.samples = meta.samples[:0]
			for i := range n {
				smp := samples[r.IntN(len(samples))]
				meta.samples = append(meta.samples, smp)
				if r.IntN(2) == 0 {
					b.Ops[i] = smp.encOp(meta.dst[i])
				} else {
					b.Ops[i] = smp.decOp(meta.dst[i])
				}
			}
			b.User = meta
			switch err := q.Submit(b); {
			case err == nil:
				free = free[:len(free)-1]
				next++
				continue
			case errors.Is(err, cryptodev.ErrQueueFull):
				for i := range b.Ops {
					if b.Ops[i].Status != cryptodev.StatusPending {
						return fmt.Errorf("batch refused with ErrQueueFull has op %d with status %v", i, b.Ops[i].Status)
					}
				}
			default:
				return fmt.Errorf("Submit: %w", err)
			}
		}
		d := q.Dequeue(r.IntN(4) != 0 || len(free) == 0 || next == nBatches)
		if d == nil {
			if q.InFlight() == 0 {
				return errors.New("Dequeue(true) returned nil with batches in flight")
			}
			continue
		}
		meta, ok := d.User.(*slotMeta)
		if !ok || metas[d] != meta {
			return fmt.Errorf("Dequeue returned a batch that is not ours or lost its User (%T)", d.User)
		}
		if meta.id != want {
			return fmt.Errorf("Dequeue returned batch %d, want %d (submission order)", meta.id, want)
		}
		for i := range d.Ops {
			op, smp := &d.Ops[i], meta.samples[i]
			if op.Status != cryptodev.StatusOK {
				return fmt.Errorf("batch %d op %d (%s, %d bytes): status %v", want, i, smp.alg, len(smp.pt), op.Status)
			}
			if op.Dir == cryptodev.Encrypt {
				if !bytes.Equal(op.Dst, smp.ct) || !bytes.Equal(op.Tag, smp.tag) {
					return fmt.Errorf("batch %d op %d (%s encrypt, %d bytes): wrong output", want, i, smp.alg, len(smp.pt))
				}
			} else if !bytes.Equal(op.Dst, smp.pt) {
				return fmt.Errorf("batch %d op %d (%s decrypt, %d bytes): wrong output", want, i, smp.alg, len(smp.pt))
			}
		}
		want++
		free = append(free, d)
	}
	if d := q.Dequeue(true); d != nil {
		return errors.New("Dequeue(true) on a drained queue returned a batch")
	}
	return nil
}

// testQueueFull fills a queue and checks that Submit refuses at once with
// ErrQueueFull, leaves the refused batch to the caller untouched, and
// accepts it again once a batch is dequeued. An asynchronous engine must
// bound its queue within fillLimit batches.
func (s *suite) testQueueFull(t *testing.T) {
	const fillLimit = 1 << 13
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(7)
	alg := firstSupported(e)
	key, m := newKey(t, e, alg, r)
	smp := newSample(alg, key, m, randBytes(r, payloadLen(alg, 32)), r)
	mk := func(id int) *cryptodev.Batch {
		b := batchOf([]cryptodev.Op{smp.encOp(make([]byte, len(smp.ctTag)))})
		b.User = id
		return b
	}
	var refused *cryptodev.Batch
	submitted := 0
	for submitted < fillLimit {
		b := mk(submitted)
		start := time.Now()
		err := q.Submit(b)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Submit took %v; it must not block", d)
		}
		if err == nil {
			submitted++
			continue
		}
		if !errors.Is(err, cryptodev.ErrQueueFull) {
			t.Fatalf("Submit: %v, want nil or ErrQueueFull", err)
		}
		refused = b
		break
	}
	if refused == nil {
		if e.Async() {
			t.Fatalf("an asynchronous engine accepted %d batches without ErrQueueFull; its queue must be bounded", fillLimit)
		}
		t.Logf("%s accepted %d batches without ErrQueueFull", e.Name(), fillLimit)
	} else {
		t.Logf("queue full after %d batches", submitted)
		if n := q.InFlight(); n != submitted {
			t.Errorf("InFlight = %d, want %d", n, submitted)
		}
		// Refused again while still full, and not touched.
		if err := q.Submit(refused); !errors.Is(err, cryptodev.ErrQueueFull) {
			t.Fatalf("second Submit of the refused batch on a full queue: %v, want ErrQueueFull", err)
		}
		op := &refused.Ops[0]
		if op.Status != cryptodev.StatusPending || !allZero(op.Dst) || !allZero(op.Tag) {
			t.Fatalf("the refused batch was processed: status %v", op.Status)
		}
	}
	want := 0
	check := func(d *cryptodev.Batch) {
		t.Helper()
		if d == nil {
			t.Fatalf("Dequeue(true) = nil with %d in flight", q.InFlight())
		}
		if d.User != want {
			t.Fatalf("Dequeue returned batch %v, want %d", d.User, want)
		}
		checkEnc(t, fmt.Sprintf("batch %d", want), &d.Ops[0], smp)
		want++
	}
	check(q.Dequeue(true))
	if refused != nil {
		if err := q.Submit(refused); err != nil {
			t.Fatalf("Submit of the refused batch after a Dequeue: %v", err)
		}
		submitted++
	}
	for q.InFlight() > 0 {
		check(q.Dequeue(true))
	}
	if want != submitted {
		t.Fatalf("dequeued %d batches, submitted %d", want, submitted)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// testQueueClose checks that a closed queue refuses batches with ErrClosed
// and still hands back those in flight.
func (s *suite) testQueueClose(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(8)
	alg := firstSupported(e)
	key, m := newKey(t, e, alg, r)
	smp := newSample(alg, key, m, randBytes(r, payloadLen(alg, 1420)), r)
	var subs []*cryptodev.Batch
	for range 4 {
		b := batchOf([]cryptodev.Op{smp.encOp(make([]byte, len(smp.ctTag))), smp.decOp(make([]byte, len(smp.pt)))})
		if err := q.Submit(b); err != nil {
			if len(subs) > 0 && errors.Is(err, cryptodev.ErrQueueFull) {
				break
			}
			t.Fatalf("Submit: %v", err)
		}
		subs = append(subs, b)
	}
	q.Close()
	late := batchOf([]cryptodev.Op{smp.encOp(make([]byte, len(smp.ctTag)))})
	if err := q.Submit(late); !errors.Is(err, cryptodev.ErrClosed) {
		t.Fatalf("Submit on a closed queue: %v, want ErrClosed", err)
	}
	if late.Ops[0].Status != cryptodev.StatusPending {
		t.Fatalf("batch refused with ErrClosed was processed: %v", late.Ops[0].Status)
	}
	for i, want := range subs {
		d := dequeueWithin(t, q, 30*time.Second)
		if d != want {
			t.Fatalf("Dequeue %d after Close returned %p, want %p", i, d, want)
		}
		checkEnc(t, "after queue Close", &d.Ops[0], smp)
		checkDec(t, "after queue Close", &d.Ops[1], smp)
	}
	if d := dequeueWithin(t, q, 10*time.Second); d != nil || q.InFlight() != 0 {
		t.Fatalf("closed, drained queue: Dequeue(true) = %p, InFlight = %d", d, q.InFlight())
	}
	// Other queues are unaffected.
	runBatch(t, newQueue(t, e), batchOf([]cryptodev.Op{smp.encOp(make([]byte, len(smp.ctTag)))}))
}

// testCloseInFlight closes the engine with work in flight on several
// queues. Every submitted batch must still be dequeued, in order, each op
// either done (and correct) or aborted; nothing may hang; the engine must
// leave no goroutine behind.
func (s *suite) testCloseInFlight(t *testing.T) {
	before := runtime.NumGoroutine()
	watchdog(t, hangAfter)
	e := s.open(t)
	closed := false
	t.Cleanup(func() {
		if !closed {
			e.Close()
		}
	})
	r := newRand(9)
	algs := supported(e)
	alg := algs[len(algs)-1] // chained suites are the slowest: more left in flight
	key, m := newKey(t, e, alg, r)
	smp := newSample(alg, key, m, randBytes(r, payloadLen(alg, 8192)), r)
	const nQueues = 4
	type sub struct {
		q     cryptodev.Queue
		sent  []*cryptodev.Batch
		owned *cryptodev.Batch // refused after Close
	}
	subs := make([]*sub, nQueues)
	for i := range subs {
		subs[i] = &sub{q: newQueue(t, e)}
	}
	for _, sb := range subs {
		for range 32 {
			var ops []cryptodev.Op
			for range 16 {
				ops = append(ops, smp.encOp(make([]byte, len(smp.ctTag))))
			}
			b := batchOf(ops)
			if err := sb.q.Submit(b); err != nil {
				if errors.Is(err, cryptodev.ErrQueueFull) {
					break
				}
				t.Fatalf("Submit: %v", err)
			}
			sb.sent = append(sb.sent, b)
		}
	}

	closeDone := make(chan error, 1)
	go func() { closeDone <- e.Close() }()
	select {
	case err := <-closeDone:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close with work in flight did not return in 30s")
	}
	closed = true
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// After Close: refused, and the caller keeps the batch.
	for _, sb := range subs {
		b := batchOf([]cryptodev.Op{smp.encOp(make([]byte, len(smp.ctTag)))})
		err := sb.q.Submit(b)
		switch {
		case errors.Is(err, cryptodev.ErrClosed):
			if b.Ops[0].Status != cryptodev.StatusPending {
				t.Errorf("batch refused with ErrClosed was processed: %v", b.Ops[0].Status)
			}
		case err == nil && !e.Async():
			// A synchronous engine has nothing to stop; accepting is
			// tolerated, the batch is complete.
			t.Logf("%s accepts batches after Close (cryptodev.ErrClosed expected)", e.Name())
			sb.sent = append(sb.sent, b)
		default:
			t.Errorf("Submit after Close: %v, want ErrClosed", err)
		}
	}
	if e.Async() {
		if _, err := e.NewQueue(); !errors.Is(err, cryptodev.ErrClosed) {
			t.Errorf("NewQueue after Close: %v, want ErrClosed", err)
		}
	}

	var ok, aborted int
	for qi, sb := range subs {
		for i, want := range sb.sent {
			d := dequeueWithin(t, sb.q, 30*time.Second)
			if d != want {
				t.Fatalf("queue %d: Dequeue %d after Close returned %p, want %p", qi, i, d, want)
			}
			for j := range d.Ops {
				switch op := &d.Ops[j]; op.Status {
				case cryptodev.StatusOK:
					ok++
					checkEnc(t, "completed before Close", op, smp)
				case cryptodev.StatusAborted:
					aborted++
				default:
					t.Fatalf("queue %d batch %d op %d: status %v after Close, want ok or aborted", qi, i, j, op.Status)
				}
			}
		}
		if d := dequeueWithin(t, sb.q, 10*time.Second); d != nil {
			t.Fatalf("queue %d: Dequeue(true) after draining returned %p", qi, d)
		}
		sb.q.Close()
	}
	t.Logf("after Close: %d ops completed, %d aborted", ok, aborted)

	// No goroutine left behind.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines before the engine was opened, %d after Close\n%s", before, n, buf)
	}
}
