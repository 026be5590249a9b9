package sched

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// TestConformance runs the engine conformance suite with the defaults, with
// one worker and a tiny queue, and with more workers than cores.
func TestConformance(t *testing.T) {
	for _, opts := range []Options{{}, {Workers: 1, QueueDepth: 3}, {Workers: 4, QueueDepth: 16}} {
		t.Run(fmt.Sprintf("workers=%d,depth=%d", opts.Workers, opts.QueueDepth), func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) cryptodev.Engine {
				e, err := New(opts)
				if err != nil {
					t.Fatal(err)
				}
				return e
			})
		})
	}
}

// TestConformanceAsym runs the asymmetric suite: Sign and Agree ops on the
// workers, mixed with symmetric ops in batches.
func TestConformanceAsym(t *testing.T) {
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	enginetest.RunAsym(t, e)
}

func TestOptions(t *testing.T) {
	for _, bad := range []Options{{Workers: -1}, {QueueDepth: -1}, {QueueDepth: maxQueueDepth + 1}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v): no error", bad)
		}
	}
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Workers() != runtime.NumCPU() || e.depth != DefaultQueueDepth {
		t.Errorf("defaults: %d workers, depth %d; want %d, %d", e.Workers(), e.depth, runtime.NumCPU(), DefaultQueueDepth)
	}
}

func TestRegistered(t *testing.T) {
	names := cryptodev.Engines()
	si, ki := slices.Index(names, "soft"), slices.Index(names, Name)
	if ki < 0 || si < 0 || si > ki {
		t.Fatalf("Engines() = %v; want sched registered, after soft", names)
	}
	e, err := cryptodev.Open(Name)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Name() != Name || !e.Async() {
		t.Errorf("Open(%q) gave %q, async %v", Name, e.Name(), e.Async())
	}
}

// gcmBatch is n AES-128-GCM encryptions of size bytes in ESP layout (tag
// right after the data), in place.
func gcmBatch(t testing.TB, key *cryptodev.Key, n, size int) *cryptodev.Batch {
	b := cryptodev.NewBatch(n)
	for i := range n {
		buf := make([]byte, size+16)
		for j := range buf {
			buf[j] = byte(i + j)
		}
		b.Ops = append(b.Ops, cryptodev.Op{Key: key, Dir: cryptodev.Encrypt,
			Src: buf[:size], Dst: buf[:size], Tag: buf[size:],
			IV: []byte{0, 0, 0, 0, 0, 0, 0, byte(i)}, AAD: make([]byte, 8)})
	}
	return b
}

func gcmKey(t testing.TB, e cryptodev.Engine) *cryptodev.Key {
	key, err := e.NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestAllocs proves that Submit and Dequeue, with the workers' crypto,
// allocate nothing per batch (AllocsPerRun counts every goroutine).
func TestAllocs(t *testing.T) {
	e, err := New(Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	key := gcmKey(t, e)
	q, _ := e.NewQueue()
	for _, size := range []int{64, 1420} {
		bs := []*cryptodev.Batch{gcmBatch(t, key, 64, size), gcmBatch(t, key, 64, size), gcmBatch(t, key, 64, size)}
		i := 0
		// Pipelined: three in flight, dequeue with wait.
		allocs := testing.AllocsPerRun(200, func() {
			if q.InFlight() == len(bs) {
				q.Dequeue(true)
			}
			if err := q.Submit(bs[i%len(bs)]); err != nil {
				t.Fatal(err)
			}
			i++
		})
		if allocs != 0 {
			t.Errorf("%d bytes, pipelined: %v allocations per batch, want 0", size, allocs)
		}
		for q.InFlight() > 0 {
			q.Dequeue(true)
		}
		// One at a time, polling.
		allocs = testing.AllocsPerRun(200, func() {
			if err := q.Submit(bs[0]); err != nil {
				t.Fatal(err)
			}
			for q.Dequeue(false) == nil {
				runtime.Gosched()
			}
		})
		if allocs != 0 {
			t.Errorf("%d bytes, polling: %v allocations per batch, want 0", size, allocs)
		}
	}
}

// checkNoLeak fails t if goroutines outlive fn beyond a bounded wait.
func checkNoLeak(t *testing.T, fn func()) {
	t.Helper()
	before := runtime.NumGoroutine()
	fn()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	checkNoLeak(t, func() {
		e, err := New(Options{Workers: 6})
		if err != nil {
			t.Fatal(err)
		}
		key := gcmKey(t, e)
		q, _ := e.NewQueue()
		for range 10 {
			if err := cryptodev.Run(q, gcmBatch(t, key, 64, 256)); err != nil {
				t.Fatal(err)
			}
		}
		// Work in flight at Close, on an idle engine (workers parked), and
		// Close twice.
		for range 5 {
			if err := q.Submit(gcmBatch(t, key, 64, 1420)); err != nil {
				t.Fatal(err)
			}
		}
		e.Close()
		e.Close()
		for q.InFlight() > 0 {
			q.Dequeue(true)
		}
		idle, _ := New(Options{Workers: 3})
		time.Sleep(10 * time.Millisecond)
		idle.Close()
	})
}

// TestSubmitterHelps checks that a submitter waiting in Dequeue(true) runs
// its own unclaimed chunks: here no worker ever starts.
func TestSubmitterHelps(t *testing.T) {
	e, err := newEngine(Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q, _ := e.NewQueue()
	b := gcmBatch(t, gcmKey(t, e), 64, 64)
	if err := q.Submit(b); err != nil {
		t.Fatal(err)
	}
	if d := q.Dequeue(false); d != nil {
		t.Fatal("Dequeue(false) returned a batch no one ran")
	}
	drain(t, q, b)
}

// TestCloseAborts checks that ops no one claimed before Close come back
// aborted, whether the submitter polls or waits.
func TestCloseAborts(t *testing.T) {
	e, err := newEngine(Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	key := gcmKey(t, e)
	q, _ := e.NewQueue()
	b1, b2 := gcmBatch(t, key, 40, 64), gcmBatch(t, key, 3, 64)
	q.Submit(b1)
	q.Submit(b2)
	e.Close()
	if err := q.Submit(gcmBatch(t, key, 1, 64)); !errors.Is(err, cryptodev.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	for i, wait := range []bool{false, true} {
		d := q.Dequeue(wait)
		if d != []*cryptodev.Batch{b1, b2}[i] {
			t.Fatalf("Dequeue(%v) after Close: got %p", wait, d)
		}
		for j := range d.Ops {
			if d.Ops[j].Status != cryptodev.StatusAborted {
				t.Fatalf("batch %d op %d: %v, want aborted", i, j, d.Ops[j].Status)
			}
		}
	}
}

// TestParkedSubmitter parks a submitter on a batch whose chunks a stand-in
// worker (the test) holds, checks that it stays parked, also across Close,
// and that finishing the chunks wakes it.
func TestParkedSubmitter(t *testing.T) {
	e, err := newEngine(Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	qi, _ := e.NewQueue()
	q := qi.(*queue)
	b := gcmBatch(t, gcmKey(t, e), 64, 64)
	if err := q.Submit(b); err != nil {
		t.Fatal(err)
	}
	var claims [][2]uint32
	for {
		cb, k, total, ok := q.claim(dirEnc)
		if !ok {
			break
		}
		if cb != b {
			t.Fatal("claimed a batch that was not submitted")
		}
		claims = append(claims, [2]uint32{k, total})
	}
	if len(claims) != 2 {
		t.Fatalf("claimed %d chunks, want 2", len(claims))
	}
	got := make(chan *cryptodev.Batch)
	go func() { got <- q.Dequeue(true) }()
	parked := func(what string) {
		time.Sleep(30 * time.Millisecond)
		select {
		case <-got:
			t.Fatalf("Dequeue(true) returned %s, with chunks unfinished", what)
		default:
		}
	}
	parked("early")
	e.Close()
	parked("after Close")
	p, _ := soft.New().NewProcessor()
	for _, c := range claims {
		e.run(b, c[0], c[1], p, true)
	}
	select {
	case d := <-got:
		if d != b {
			t.Fatalf("Dequeue returned %p, want %p", d, b)
		}
		for i := range d.Ops {
			if d.Ops[i].Status != cryptodev.StatusOK {
				t.Fatalf("op %d: %v", i, d.Ops[i].Status)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("finishing the last chunk did not wake the parked submitter")
	}
}

// chunkLog records the chunks workers ran, through the onChunk hook.
type chunkLog struct {
	mu     sync.Mutex
	chunks []chunk
}

type chunk struct {
	b      *cryptodev.Batch
	lo, hi int
}

func (l *chunkLog) hook(b *cryptodev.Batch, lo, hi int) {
	l.mu.Lock()
	l.chunks = append(l.chunks, chunk{b, lo, hi})
	l.mu.Unlock()
}

func (l *chunkLog) get() []chunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.chunks)
}

// startWith builds an engine with a chunk log, lets setup queue work, then
// starts the workers.
func startWith(t *testing.T, opts Options, setup func(e *Engine)) (*Engine, *chunkLog) {
	t.Helper()
	e, err := newEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	log := &chunkLog{}
	e.onChunk = log.hook
	setup(e)
	e.start()
	t.Cleanup(func() { e.Close() })
	return e, log
}

func drain(t *testing.T, q cryptodev.Queue, want ...*cryptodev.Batch) {
	t.Helper()
	for i, w := range want {
		if d := q.Dequeue(true); d != w {
			t.Fatalf("Dequeue %d: got %p, want %p", i, d, w)
		}
		for j := range w.Ops {
			if w.Ops[j].Status != cryptodev.StatusOK {
				t.Fatalf("batch %d op %d: %v", i, j, w.Ops[j].Status)
			}
		}
	}
}

// TestSplit checks that a big batch is shared between workers, and a small
// one is not.
func TestSplit(t *testing.T) {
	for _, c := range []struct {
		workers, ops int
		want         [][2]int
	}{
		{1, 64, [][2]int{{0, 64}}},
		{2, 64, [][2]int{{0, 32}, {32, 64}}},
		{2, 20, [][2]int{{0, 20}}},
		{2, 31, [][2]int{{0, 31}}},
		{2, 32, [][2]int{{0, 16}, {16, 32}}},
		{4, 50, [][2]int{{0, 16}, {16, 33}, {33, 50}}},
		{8, 40, [][2]int{{0, 20}, {20, 40}}},
	} {
		var q cryptodev.Queue
		var b *cryptodev.Batch
		_, log := startWith(t, Options{Workers: c.workers}, func(e *Engine) {
			q, _ = e.NewQueue()
			b = gcmBatch(t, gcmKey(t, e), c.ops, 64)
			if err := q.Submit(b); err != nil {
				t.Fatal(err)
			}
		})
		drain(t, q, b)
		var got [][2]int
		for _, ch := range log.get() {
			got = append(got, [2]int{ch.lo, ch.hi})
		}
		slices.SortFunc(got, func(x, y [2]int) int { return x[0] - y[0] })
		if !slices.Equal(got, c.want) {
			t.Errorf("%d workers, %d ops: chunks %v, want %v", c.workers, c.ops, got, c.want)
		}
	}
}

// TestAlternation checks that one worker serves the encryption and
// decryption lists alternately, and submitters round robin, whatever the
// order the batches were queued in; and that Dequeue still returns each
// submitter's batches in submission order.
func TestAlternation(t *testing.T) {
	var q1, q2 cryptodev.Queue
	var enc1, dec1, enc2 []*cryptodev.Batch
	_, log := startWith(t, Options{Workers: 1}, func(e *Engine) {
		key := gcmKey(t, e)
		q1, _ = e.NewQueue()
		q2, _ = e.NewQueue()
		for range 6 {
			b := gcmBatch(t, key, 4, 64)
			enc1 = append(enc1, b)
			q1.Submit(b)
		}
		for range 3 {
			b := gcmBatch(t, key, 4, 64)
			for i := range b.Ops { // decrypt garbage: auth fails, fine here
				b.Ops[i].Dir = cryptodev.Decrypt
			}
			dec1 = append(dec1, b)
			q1.Submit(b)
		}
		for range 3 {
			b := gcmBatch(t, key, 4, 64)
			enc2 = append(enc2, b)
			q2.Submit(b)
		}
	})
	// Let the worker run everything first: a submitter waiting in
	// Dequeue(true) would run its own chunks and change the order.
	deadline := time.Now().Add(10 * time.Second)
	for len(log.get()) < 12 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for _, w := range append(enc1, dec1...) {
		if d := q1.Dequeue(true); d != w {
			t.Fatalf("q1: Dequeue order broken")
		}
	}
	for _, w := range enc2 {
		if d := q2.Dequeue(true); d != w {
			t.Fatalf("q2: Dequeue order broken")
		}
	}
	name := map[*cryptodev.Batch]string{}
	for i, b := range enc1 {
		name[b] = fmt.Sprintf("e1.%d", i)
	}
	for i, b := range dec1 {
		name[b] = fmt.Sprintf("d1.%d", i)
	}
	for i, b := range enc2 {
		name[b] = fmt.Sprintf("e2.%d", i)
	}
	var got []string
	for _, c := range log.get() {
		got = append(got, name[c.b])
	}
	// Worker 0 starts with encryption at submitter 0; after each chunk it
	// turns to the other direction and the next submitter.
	want := []string{"e1.0", "d1.0", "e2.0", "d1.1", "e2.1", "d1.2", "e2.2", "e1.1", "e1.2", "e1.3", "e1.4", "e1.5"}
	if !slices.Equal(got, want) {
		t.Errorf("service order\n got %v\nwant %v", got, want)
	}
}

// TestBatchesMove resubmits dequeued batches on other queues and on
// another engine, as a data plane's batch pool does, while all workers
// run: a worker holding a stale pointer to a moved batch must never run
// it twice, run it for the wrong queue, or leave its new owner hanging.
func TestBatchesMove(t *testing.T) {
	e1, _ := New(Options{Workers: 2})
	e2, _ := New(Options{Workers: 2})
	defer e1.Close()
	defer e2.Close()
	k1, k2 := gcmKey(t, e1), gcmKey(t, e2)
	want := make([]byte, 200+16)
	{
		blk, _ := aes.NewCipher(make([]byte, 16))
		g, _ := cipher.NewGCM(blk)
		pt := make([]byte, 200)
		for j := range pt {
			pt[j] = byte(j)
		}
		g.Seal(want[:0], make([]byte, 12), pt, make([]byte, 8))
	}
	var qs []cryptodev.Queue
	var keys []*cryptodev.Key
	for range 3 {
		q, _ := e1.NewQueue()
		qs, keys = append(qs, q), append(keys, k1)
		q, _ = e2.NewQueue()
		qs, keys = append(qs, q), append(keys, k2)
	}
	pool := make([]*cryptodev.Batch, 16)
	for i := range pool {
		pool[i] = cryptodev.NewBatch(20)
	}
	fill := func(b *cryptodev.Batch, key *cryptodev.Key) {
		b.Reset(1 + len(b.Ops)%20)
		for i := range b.Ops {
			buf := make([]byte, 200+16)
			for j := range 200 {
				buf[j] = byte(j)
			}
			b.Ops[i] = cryptodev.Op{Key: key, Dir: cryptodev.Encrypt, Src: buf[:200], Dst: buf[:200], Tag: buf[200:],
				IV: make([]byte, 8), AAD: make([]byte, 8)}
		}
	}
	for round := range 300 {
		for i, b := range pool {
			qi := (round + i) % len(qs)
			fill(b, keys[qi])
			if err := qs[qi].Submit(b); err != nil {
				t.Fatal(err)
			}
		}
		for qi, q := range qs {
			for q.InFlight() > 0 {
				d := q.Dequeue(true)
				for j := range d.Ops {
					op := &d.Ops[j]
					if op.Status != cryptodev.StatusOK || !bytes.Equal(op.Dst[:216:216], want) {
						t.Fatalf("round %d queue %d: op %d: %v", round, qi, j, op.Status)
					}
				}
			}
		}
	}
}

// TestQueueCloseUnregisters checks that workers stop scanning a queue once
// it is closed and empty.
func TestQueueCloseUnregisters(t *testing.T) {
	e, _ := New(Options{Workers: 1})
	defer e.Close()
	key := gcmKey(t, e)
	q1, _ := e.NewQueue()
	q2, _ := e.NewQueue()
	if n := len(*e.queues.Load()); n != 2 {
		t.Fatalf("%d queues registered, want 2", n)
	}
	q1.Close()
	b := gcmBatch(t, key, 4, 64)
	q2.Submit(b)
	q2.Close()
	if n := len(*e.queues.Load()); n != 1 {
		t.Fatalf("%d queues registered after closing an empty one, want 1", n)
	}
	drain(t, q2, b)
	if n := len(*e.queues.Load()); n != 0 {
		t.Fatalf("%d queues registered after the last batch of a closed queue, want 0", n)
	}
}

// counting is a synchronous engine for TestInner: soft's code behind
// Processors that count the ops they run.
type counting struct {
	*soft.Engine
	ops atomic.Int64
}

func (c *counting) Name() string { return "counting" }

func (c *counting) NewProcessor() (cryptodev.Processor, error) {
	p, err := c.Engine.NewProcessor()
	return &countingProc{p, c}, err
}

type countingProc struct {
	cryptodev.Processor
	c *counting
}

func (p *countingProc) Process(ops []cryptodev.Op) {
	p.c.ops.Add(int64(len(ops)))
	p.Processor.Process(ops)
}

// TestInner: sched runs the inner engine's Processors, on its workers and
// in its submitters, names itself after it, and passes the suite over it.
func TestInner(t *testing.T) {
	var inners []*counting
	enginetest.Run(t, func(t *testing.T) cryptodev.Engine {
		c := &counting{Engine: soft.New()}
		inners = append(inners, c)
		e, err := New(Options{Inner: c, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "sched:counting" {
			t.Errorf("Name() = %q, want sched:counting", e.Name())
		}
		return e
	})
	var n int64
	for _, c := range inners {
		n += c.ops.Load()
	}
	if n == 0 {
		t.Error("no op ran through the inner engine's Processors")
	}
}

// TestOpenComposite: the registry opens sched over a named engine and
// explains what it cannot open.
func TestOpenComposite(t *testing.T) {
	e, err := cryptodev.Open("sched:soft")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Name() != Name || !e.Async() {
		t.Errorf("sched:soft is %q (async %v), want %q, async", e.Name(), e.Async(), Name)
	}
	if err := cryptodev.CheckEngine("sched:soft"); err != nil {
		t.Errorf("CheckEngine(sched:soft): %v", err)
	}
	for name, want := range map[string]string{
		"sched:nope":  `inner engine "nope" in "sched:nope" is not registered`,
		"sched:sched": `inner engine "sched" in "sched:sched" runs over another engine itself`,
		"soft:soft":   `engine "soft" in "soft:soft" does not run over another engine (engines that do: sched)`,
		"nope:soft":   `engine "nope" in "nope:soft" is not registered`,
		"sched:":      `inner engine "" in "sched:" is not registered`,
	} {
		if _, err := cryptodev.Open(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want an error containing %q", name, err, want)
		}
		if err := cryptodev.CheckEngine(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckEngine(%q): %v, want an error containing %q", name, err, want)
		}
	}
}
