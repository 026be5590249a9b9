// Package sched is the asynchronous queueing software engine: it spreads the
// batches of any number of submitters over worker goroutines on all cores,
// so that one SA's crypto is no longer limited to one core, and hands each
// submitter its batches back in the order it submitted them.
//
// It runs over a synchronous engine that does the crypto (one that
// implements cryptodev.ProcessorEngine): soft by default, any other by
// name, "sched:ipsecmb" in a configuration or cryptodev.Open, or
// Options.Inner. Each worker and each submitter that helps has a
// cryptodev.Processor of the inner engine of its own.
//
// It is the Go counterpart of VPP's crypto_sw_scheduler. The stages are:
//
//  1. Submit (submitter): the batch goes into the submitter's ring, which
//     records submission order, and is filed under encryption or
//     decryption by its first op.
//  2. Claim (any worker): a worker looks through every submitter's ring for
//     an unclaimed part (a chunk) of a batch of the direction it serves
//     next, and claims it with a CAS on the batch's Private().State. A big
//     batch is split into up to Workers chunks, so two workers share one
//     submitter's single stream.
//  3. Crypto (in parallel): the worker runs its Processor on its chunk and
//     counts the chunk done in the same state word; whoever finishes the
//     last chunk wakes the submitter if it sleeps on that batch.
//  4. Dequeue (submitter, sequential): only the head of the ring is ever
//     returned, once it is done; workers finish out of order, batches come
//     back in order. A submitter that waits (Dequeue(true)) first runs
//     unclaimed chunks of its own ring itself, oldest first, as a VPP
//     worker does in its crypto dequeue; then it spins briefly and parks
//     until the worker finishing its head batch wakes it.
//
// Asymmetric ops (Sign, Agree) are the exception to "all cores": they have
// a work list of their own, served only by the asymmetric workers (at most
// all cores but one, on threads at a low priority; see Engine), and
// submitters do not help with them.
//
// Ordering and fairness. A submitter has one ring, the completion order.
// Its encryption and decryption work lists are the two subsequences of that
// ring made of the batches whose first op encrypts, respectively does not;
// each list has its own scan cursor, so a worker looking for encryption work
// never walks past decryption batches twice. Every worker alternates: after
// a chunk of one direction it looks for the other direction first, and only
// when there is none takes the same direction again, so neither direction
// starves the other. Submitters are served round robin. Because Dequeue reads
// only the head, overall submission order holds whatever the mix.
//
// Bounds. A ring holds at most Options.QueueDepth batches; Submit on a full
// ring returns cryptodev.ErrQueueFull at once and the caller keeps the batch.
// Nothing on the hot path takes a lock or allocates: rings are single-producer
// arrays of atomic pointers, claims and completions are atomic operations on
// the batch's state word, and idle workers and waiting submitters park on
// channels.
package sched

import (
	"crypto"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// Name is the engine's registry name. Over an inner engine other than
// soft it is named Name + ":" + the inner engine's name.
const Name = "sched"

func init() {
	// Below soft (10): the synchronous engine stays the default, sched is
	// chosen by configuration.
	cryptodev.RegisterWrapper(Name, 5, func() (cryptodev.Engine, error) { return New(Options{}) },
		func(inner cryptodev.Engine) (cryptodev.Engine, error) {
			pe, ok := inner.(cryptodev.ProcessorEngine)
			if !ok || inner.Async() {
				inner.Close()
				return nil, fmt.Errorf("sched: engine %q cannot run under sched: it is not a synchronous engine with Processors (cryptodev.ProcessorEngine)", inner.Name())
			}
			e, err := New(Options{Inner: pe})
			if err != nil {
				inner.Close()
			}
			return e, err
		})
}

// Options configures an Engine. The zero value gives the defaults.
type Options struct {
	// Workers is the number of worker goroutines; 0 means runtime.NumCPU().
	Workers int
	// QueueDepth bounds each submitter's queue, in batches submitted and not
	// yet dequeued; 0 means 64.
	QueueDepth int
	// Inner is the synchronous engine whose Processors run the ops; nil
	// means soft.New(). The sched engine owns it and closes it on Close.
	Inner cryptodev.ProcessorEngine
	// AsymWorkers is the number of asymmetric workers, the only
	// goroutines that run Sign and Agree ops; 0 means all cores but one
	// (the lesser of Workers and GOMAXPROCS, less one, at least 1). See
	// Engine.
	AsymWorkers int
}

// DefaultQueueDepth is the per-submitter bound when Options.QueueDepth is 0.
const DefaultQueueDepth = 64

// maxQueueDepth keeps rings a sane size.
const maxQueueDepth = 1 << 16

// minChunkOps is the fewest ops a split-off chunk of a batch gets: below
// that, the cost of claiming and of a second worker's cache misses exceeds
// what the parallelism saves (16 AES-GCM ops of 64 bytes are about 2 µs).
const minChunkOps = 16

// Engine is the asynchronous queueing software engine. It is safe for
// concurrent use; each Queue is for one goroutine.
//
// Asymmetric ops (Sign, Agree: a batch whose first op is one) have a work
// list and workers of their own. An asymmetric worker is a goroutine
// locked to its OS thread, whose scheduling priority it lowers to nice
// asymNice: an RSA-4096 signature takes milliseconds of one core, and
// the kernel then runs the other threads of the process (the goroutines
// serving open connections, the symmetric workers) first, so a storm of
// handshakes takes mostly the CPU the rest leaves, not the CPU the rest
// needs. By default there are one fewer than the lesser of Workers and
// the runtime's Ps (GOMAXPROCS), at least 1, so that at least one P stays
// with other goroutines however many signatures wait; submitters never run
// asymmetric chunks themselves (help), and symmetric workers never claim
// them. A batch of asymmetric ops is split into up to AsymWorkers chunks
// of any size (one op is milliseconds of work).
type Engine struct {
	workers int
	depth   int
	inner   cryptodev.ProcessorEngine
	name    string
	procs   []cryptodev.Processor // one per worker

	asymWorkers int
	asymProcs   []cryptodev.Processor // one per asymmetric worker
	// asymNiced counts the asymmetric workers whose thread's priority
	// was lowered (it is not where the system forbids it).
	asymNiced atomic.Int32

	// queues is the copy-on-write list of open submitter queues that
	// workers scan. mu serialises its writers (NewQueue, unregister,
	// Close); readers only load the pointer.
	queues atomic.Pointer[[]*queue]
	mu     sync.Mutex

	closed    atomic.Bool
	quit      chan struct{} // closed by Close: workers exit
	closeOnce sync.Once
	wg        sync.WaitGroup

	// sym and asym are where idle symmetric and asymmetric workers park.
	sym, asym pool

	// onChunk, when set (by tests, before any work), is called by the
	// worker after it ran ops [lo, hi) of b.
	onChunk func(b *cryptodev.Batch, lo, hi int)
}

// New starts an engine with opts.Workers worker goroutines. Close stops them.
func New(opts Options) (*Engine, error) {
	e, err := newEngine(opts)
	if err != nil {
		return nil, err
	}
	e.start()
	return e, nil
}

// newEngine builds an engine without starting its workers (tests start them
// after queueing work, to make the order of claims deterministic).
func newEngine(opts Options) (*Engine, error) {
	if opts.Workers < 0 {
		return nil, fmt.Errorf("sched: Workers is %d; want 0 (one per CPU) or more", opts.Workers)
	}
	if opts.QueueDepth < 0 || opts.QueueDepth > maxQueueDepth {
		return nil, fmt.Errorf("sched: QueueDepth is %d; want 0 (default %d) to %d", opts.QueueDepth, DefaultQueueDepth, maxQueueDepth)
	}
	if opts.Workers == 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.QueueDepth == 0 {
		opts.QueueDepth = DefaultQueueDepth
	}
	if opts.AsymWorkers < 0 {
		return nil, fmt.Errorf("sched: AsymWorkers is %d; want 0 (all cores but one) or more", opts.AsymWorkers)
	}
	if opts.AsymWorkers == 0 {
		// All Ps but one, not all workers but one: Workers defaults to
		// the CPUs, GOMAXPROCS to fewer in a container with a CPU limit.
		opts.AsymWorkers = max(1, min(opts.Workers, runtime.GOMAXPROCS(0))-1)
	}
	name := Name
	if opts.Inner == nil {
		opts.Inner = soft.New()
	} else if opts.Inner.Async() {
		return nil, fmt.Errorf("sched: inner engine %s is asynchronous; sched runs over a synchronous one", opts.Inner.Name())
	} else if n := opts.Inner.Name(); n != soft.Name {
		name += ":" + n
	}
	e := &Engine{
		workers:     opts.Workers,
		asymWorkers: opts.AsymWorkers,
		depth:       opts.QueueDepth,
		inner:       opts.Inner,
		name:        name,
		quit:        make(chan struct{}),
		sym:         pool{wake: make(chan struct{}, opts.Workers)},
		asym:        pool{wake: make(chan struct{}, opts.AsymWorkers)},
	}
	for i := range e.workers + e.asymWorkers {
		p, err := e.inner.NewProcessor()
		if err != nil {
			for _, p := range append(e.procs, e.asymProcs...) {
				p.Close()
			}
			return nil, fmt.Errorf("sched: %s: %w", e.inner.Name(), err)
		}
		if i < e.workers {
			e.procs = append(e.procs, p)
		} else {
			e.asymProcs = append(e.asymProcs, p)
		}
	}
	e.queues.Store(new([]*queue))
	return e, nil
}

func (e *Engine) start() {
	e.wg.Add(e.workers + e.asymWorkers)
	for i := range e.workers {
		go e.work(i)
	}
	for i := range e.asymWorkers {
		go e.workAsym(i)
	}
}

// Name is "sched", or "sched:INNER" over an inner engine other than soft.
func (e *Engine) Name() string                  { return e.name }
func (*Engine) Async() bool                     { return true }
func (e *Engine) Supports(a cryptodev.Alg) bool { return e.inner.Supports(a) }

// Describe says how many workers run which inner engine's code.
func (e *Engine) Describe() string {
	return fmt.Sprintf("%d workers and %d asymmetric (low priority) over %s", e.workers, e.asymWorkers, cryptodev.Describe(e.inner))
}

// Inner returns the synchronous engine whose code the workers run.
func (e *Engine) Inner() cryptodev.ProcessorEngine { return e.inner }

// Workers returns the number of (symmetric) worker goroutines.
func (e *Engine) Workers() int { return e.workers }

// AsymWorkers returns the number of asymmetric worker goroutines.
func (e *Engine) AsymWorkers() int { return e.asymWorkers }

// NewKey expands a key as the inner engine does; the handle names this
// engine. Destroying it zeroes the material through the inner key.
func (e *Engine) NewKey(alg cryptodev.Alg, encKey, authKey []byte) (*cryptodev.Key, error) {
	ik, err := e.inner.NewKey(alg, encKey, authKey)
	if err != nil {
		if errors.Is(err, cryptodev.ErrUnsupported) {
			return nil, err
		}
		return nil, fmt.Errorf("sched: %w", err)
	}
	return cryptodev.NewKeyHandle(alg, e.name, ik.State(), ik.Destroy), nil
}

// NewPrivateKey imports a private key as the inner engine does, if it holds
// private keys (soft does); its Sign and Agree ops then run on the workers
// like any other op, so a handshake waits on the engine instead of
// blocking its submitter. See cryptodev.AsymEngine.
func (e *Engine) NewPrivateKey(priv crypto.PrivateKey) (*cryptodev.Key, error) {
	ae, ok := e.inner.(cryptodev.AsymEngine)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds no private keys", cryptodev.ErrUnsupported, e.inner.Name())
	}
	ik, err := ae.NewPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return cryptodev.NewKeyHandle(ik.Alg(), e.name, ik.State(), ik.Destroy), nil
}

var _ cryptodev.AsymEngine = (*Engine)(nil)

// NewQueue opens a queue for one submitter. See cryptodev.Engine.
func (e *Engine) NewQueue() (cryptodev.Queue, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	q, err := newQueue(e)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		q.proc.Close()
		return nil, cryptodev.ErrClosed
	}
	old := *e.queues.Load()
	qs := make([]*queue, len(old), len(old)+1)
	copy(qs, old)
	qs = append(qs, q)
	e.queues.Store(&qs)
	return q, nil
}

// unregister removes q from the list workers scan; q has nothing in flight.
func (e *Engine) unregister(q *queue) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.queues.Load()
	qs := make([]*queue, 0, len(old))
	for _, o := range old {
		if o != q {
			qs = append(qs, o)
		}
	}
	e.queues.Store(&qs)
}

// Close stops accepting batches (Submit and NewQueue return
// cryptodev.ErrClosed), lets each worker finish the chunk it holds, and
// waits for every worker to exit. Ops no worker claimed get
// cryptodev.StatusAborted when their submitter next calls Dequeue (the owner
// of a ring is the only one who aborts its batches, so an abort can never
// touch a batch that has since moved on); every submitted batch can still be
// dequeued. Close is idempotent and returns nil.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed.Store(true)
		e.mu.Unlock()
		close(e.quit)
		e.wg.Wait()
		for _, p := range append(e.procs, e.asymProcs...) {
			p.Close()
		}
		e.inner.Close()
		// Wake submitters parked in Dequeue(true): with the workers gone
		// they abort what is left themselves.
		for _, q := range *e.queues.Load() {
			q.wakeSubmitter()
		}
	})
	return nil
}

// chunks is how many pieces a batch of n ops of work list dir is split
// into: symmetric ones one per worker at most, none smaller than
// minChunkOps unless the batch is; asymmetric ones one per asymmetric
// worker at most, of any size.
func (e *Engine) chunks(n int, dir uint32) uint32 {
	if n == 0 {
		return 0
	}
	if dir == dirAsym {
		return uint32(max(1, min(n, e.asymWorkers, maxChunks)))
	}
	return uint32(max(1, min(n/minChunkOps, e.workers, maxChunks)))
}

// pool is where the idle workers of one kind park.
type pool struct {
	// idle counts workers parked (or about to park) on wake; Submit sends
	// a token per chunk, up to that many.
	idle atomic.Int32
	wake chan struct{}
}

// wakeUp wakes up to n parked workers.
func (p *pool) wakeUp(n uint32) {
	for idle := p.idle.Load(); idle > 0 && n > 0; idle, n = idle-1, n-1 {
		select {
		case p.wake <- struct{}{}:
		default:
			return // enough tokens are pending already
		}
	}
}

// Worker idling: after finding no work, a worker scans again busySpins
// times, then yields the processor between scans (a submitter on the same
// core gets to run), then parks.
const (
	busySpins  = 16
	yieldSpins = 48
)

// work is a worker goroutine's loop.
func (e *Engine) work(id int) {
	defer e.wg.Done()
	w := worker{e: e, p: e.procs[id], dir: uint32(id & 1), next: id}
	spins := 0
	for !e.closed.Load() {
		if w.step() {
			spins = 0
			continue
		}
		if spins < busySpins+yieldSpins {
			if spins >= busySpins {
				runtime.Gosched()
			}
			spins++
			continue
		}
		// Announce idleness, then look once more: a Submit that published
		// its batch before seeing idle > 0 is found here (both sides use
		// sequentially consistent atomics, so one sees the other).
		e.sym.idle.Add(1)
		if !w.step() {
			select {
			case <-e.sym.wake:
			case <-e.quit:
			}
		}
		e.sym.idle.Add(-1)
		spins = 0
	}
}

// asymNice is how many steps the asymmetric workers' threads raise their
// nice value (lower their priority) above the one they start with, the
// process's: nice 10 in a process at 0, at most 19 (a fixed value would
// put them above a process run at nice 15, and far below one run at nice
// -10). Against a thread at the process's nice the kernel gives one about
// a tenth of a core they both want, and a woken such thread preempts it. Not lower (nice 19 gets
// 1.5%, SCHED_IDLE less): a thread that holds one of the runtime's Ps
// must run to stop for the garbage collector's stop-the-world phases, so
// a starved signer would stall the whole process, data path included,
// for as long as the kernel keeps it off the cores.
const asymNice = 10

// workAsym is an asymmetric worker goroutine's loop: on a thread of its
// own at a low priority, it claims and runs asymmetric chunks, and
// parks when there are none. It does not spin: its ops take milliseconds,
// and a locked thread that yields hands its P to another thread.
func (e *Engine) workAsym(id int) {
	defer e.wg.Done()
	// The thread is never unlocked: it ends with the goroutine, so its
	// lowered priority never reaches other goroutines.
	runtime.LockOSThread()
	base, err := threadNice()
	if err != nil {
		base = 0
	}
	if lowerThreadPriority(min(19, base+asymNice)) {
		e.asymNiced.Add(1)
	}
	p := e.asymProcs[id]
	next := id
	step := func() bool {
		qs := *e.queues.Load()
		n := len(qs)
		for i := range n {
			qi := (next + i) % n
			b, k, total, ok := qs[qi].claim(dirAsym)
			if !ok {
				continue
			}
			next = qi + 1
			e.run(b, k, total, p, false)
			return true
		}
		return false
	}
	for !e.closed.Load() {
		if step() {
			continue
		}
		e.asym.idle.Add(1)
		if !step() {
			select {
			case <-e.asym.wake:
			case <-e.quit:
			}
		}
		e.asym.idle.Add(-1)
	}
}

// worker is one worker goroutine's private state.
type worker struct {
	e    *Engine
	p    cryptodev.Processor
	dir  uint32 // direction list to serve first: dirEnc or dirDec
	next int    // submitter to look at first (round robin)
}

// step claims and runs one chunk. It reports whether it found one.
func (w *worker) step() bool {
	qs := *w.e.queues.Load()
	n := len(qs)
	if n == 0 {
		return false
	}
	if w.next >= n {
		w.next = 0
	}
	for d := uint32(0); d < 2; d++ {
		dir := w.dir ^ d
		for i := range n {
			qi := w.next + i
			if qi >= n {
				qi -= n
			}
			b, k, total, ok := qs[qi].claim(dir)
			if !ok {
				continue
			}
			w.next = qi + 1
			w.dir = dir ^ 1 // serve the other direction next
			w.e.run(b, k, total, w.p, true)
			return true
		}
	}
	return false
}

// run processes chunk k of the total chunks of b, which the caller has
// claimed, and counts it done. yield lets the submitter it woke run at
// once (not from a locked thread: yielding there hands the P away).
func (e *Engine) run(b *cryptodev.Batch, k, total uint32, p cryptodev.Processor, yield bool) {
	n := len(b.Ops)
	lo := int(k) * n / int(total)
	hi := int(k+1) * n / int(total)
	p.Process(b.Ops[lo:hi])
	if e.onChunk != nil {
		e.onChunk(b, lo, hi)
	}
	if finish(b) && yield {
		// The submitter we woke is next in line on this processor (the
		// runtime puts it in runnext) but would wait for a preemption
		// while we find more work: let it collect its batch and submit
		// more now.
		runtime.Gosched()
	}
}
