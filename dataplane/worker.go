package dataplane

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

// pipe is a worker's channel to one engine: its ESP pipeline, the batches
// it may have in flight, and their order.
type pipe struct {
	name     string
	pl       *esp.Pipeline
	free     []*esp.Batch
	inflight int
}

// maxInflight bounds the batches a worker has in flight per engine.
const maxInflight = 16

type workerCounters struct {
	sealed, opened      atomic.Uint64
	txPackets, txErrors atomic.Uint64
	drops               drops
}

// worker owns the SA state of the tunnels assigned to it and runs their
// ESP processing. It transmits on its own links.
type worker struct {
	d        *Dataplane
	index    int
	in       chan *item
	pipes    []*pipe
	plain    Link
	net      Link
	raw4     Link
	raw6     Link
	counters workerCounters

	txNet, txRaw4, txRaw6, txPlain []*packet.Buf
	release                        []*packet.Buf
}

func newWorker(d *Dataplane, i int) (*worker, error) {
	cfg := &d.cfg
	w := &worker{d: d, index: i, in: make(chan *item, cfg.QueueDepth), raw4: cfg.Raw4, raw6: cfg.Raw6}
	w.plain = cfg.Plain[i%len(cfg.Plain)]
	if len(cfg.Net) > 0 {
		w.net = cfg.Net[i%len(cfg.Net)]
	}
	names := make([]string, 0, len(cfg.Engines))
	for n := range cfg.Engines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		q, err := cfg.Engines[n].NewQueue()
		if err != nil {
			return nil, fmt.Errorf("dataplane: engine %s: %w", n, err)
		}
		p := &pipe{name: n, pl: esp.NewPipeline(q)}
		for range maxInflight {
			p.free = append(p.free, esp.NewBatch(batchSize))
		}
		w.pipes = append(w.pipes, p)
	}
	w.txNet = make([]*packet.Buf, 0, batchSize)
	w.txRaw4 = make([]*packet.Buf, 0, batchSize)
	w.txRaw6 = make([]*packet.Buf, 0, batchSize)
	w.txPlain = make([]*packet.Buf, 0, batchSize)
	w.release = make([]*packet.Buf, 0, batchSize)
	return w, nil
}

func (w *worker) pipeFor(engine string) *pipe {
	if engine == "" {
		engine = w.d.cfg.Default
	}
	for _, p := range w.pipes {
		if p.name == engine {
			return p
		}
	}
	return w.pipeFor(w.d.cfg.Default)
}

func (w *worker) inflight() int {
	n := 0
	for _, p := range w.pipes {
		n += p.inflight
	}
	return n
}

func (w *worker) run(ctx context.Context) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		if w.inflight() == 0 {
			select {
			case it := <-w.in:
				w.handle(it)
			case <-ctx.Done():
				w.drain()
				return
			}
		} else {
			select {
			case it := <-w.in:
				w.handle(it)
			default:
				w.completeOldest()
			}
		}
		w.completeReady()
	}
}

// drain finishes everything in flight and drops what is still queued.
func (w *worker) drain() {
	for w.inflight() > 0 {
		w.completeOldest()
	}
	for {
		select {
		case it := <-w.in:
			if it.kind == kindMarker {
				it.marker()
			}
			for i := range it.n {
				w.counters.drops.inc(ReasonHandoffFull)
				it.bufs[i].Release()
			}
			w.recycle(it)
		default:
			return
		}
	}
}

func (w *worker) close() {
	for _, p := range w.pipes {
		p.pl.Queue().Close()
	}
}

func (w *worker) recycle(it *item) {
	clear(it.bufs[:it.n])
	clear(it.sas[:it.n])
	it.n, it.marker = 0, nil
	w.d.items <- it
}

func (w *worker) handle(it *item) {
	switch it.kind {
	case kindMarker:
		for w.inflight() > 0 {
			w.completeOldest()
		}
		it.marker()
	case kindLocal:
		w.txPlain = append(w.txPlain, it.bufs[:it.n]...)
		w.transmit()
	default:
		w.submit(it)
	}
	w.recycle(it)
}

// submit turns a handoff item into one ESP batch per engine and submits
// them.
func (w *worker) submit(it *item) {
	dir := esp.Outbound
	if it.kind == kindIn {
		dir = esp.Inbound
	}
	done := 0
	for done < it.n {
		// Packets for the engine of the first packet not yet submitted.
		engine := it.sas[done].Engine
		p := w.pipeFor(engine)
		for len(p.free) == 0 {
			w.completeOldestOf(p)
		}
		b := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		b.Reset(dir, 0)
		for i := done; i < it.n; i++ {
			s := it.sas[i]
			if s == nil || w.pipeFor(s.Engine) != p {
				continue
			}
			b.Bufs = append(b.Bufs, it.bufs[i])
			b.SAs = append(b.SAs, s.SA)
			b.Reasons = append(b.Reasons, esp.ReasonNone)
			b.Parsed = b.Parsed[:len(b.Bufs)]
			if dir == esp.Inbound {
				b.Parsed[len(b.Bufs)-1] = it.parsed[i]
			}
			it.sas[i] = nil
		}
		for done < it.n && it.sas[done] == nil {
			done++
		}
		if err := p.pl.Submit(b); err != nil {
			w.emit(b)
			p.free = append(p.free, b)
			continue
		}
		p.inflight++
	}
}

// completeOldest waits for the oldest batch of the first engine with work.
func (w *worker) completeOldest() {
	for _, p := range w.pipes {
		if p.inflight > 0 {
			w.completeOldestOf(p)
			return
		}
	}
}

func (w *worker) completeOldestOf(p *pipe) {
	if b := p.pl.Complete(true); b != nil {
		p.inflight--
		w.emit(b)
		p.free = append(p.free, b)
	}
}

// completeReady takes every batch that is already complete.
func (w *worker) completeReady() {
	for _, p := range w.pipes {
		for p.inflight > 0 {
			b := p.pl.Complete(false)
			if b == nil {
				break
			}
			p.inflight--
			w.emit(b)
			p.free = append(p.free, b)
		}
	}
}

// emit sends a completed batch's packets on their way and counts the rest.
func (w *worker) emit(b *esp.Batch) {
	check := w.d.cfg.InboundCheck
	for i, p := range b.Bufs {
		if r := b.Reasons[i]; r != esp.ReasonNone {
			w.counters.drops.inc(Reason(r))
			w.release = append(w.release, p)
			continue
		}
		if b.Dir == esp.Outbound {
			w.counters.sealed.Store(w.counters.sealed.Load() + 1)
			if b.SAs[i].Config().Encap == esp.EncapUDP && w.net != nil {
				w.txNet = append(w.txNet, p)
			} else if packet.IPVersion(p.Bytes()) == 4 && w.raw4 != nil {
				w.txRaw4 = append(w.txRaw4, p)
			} else if packet.IPVersion(p.Bytes()) == 6 && w.raw6 != nil {
				w.txRaw6 = append(w.txRaw6, p)
			} else {
				w.counters.drops.inc(ReasonLinkError)
				w.release = append(w.release, p)
			}
			continue
		}
		w.counters.opened.Store(w.counters.opened.Load() + 1)
		if check != nil {
			if s, ok := b.SAs[i].User().(*sad.SA); ok && s.Tunnel != nil && !check(s.Tunnel, p.Bytes()) {
				w.counters.drops.inc(ReasonPolicyMismatch)
				w.release = append(w.release, p)
				continue
			}
		}
		w.txPlain = append(w.txPlain, p)
	}
	w.transmit()
}

// transmit writes the queued packets and releases every buffer.
func (w *worker) transmit() {
	w.write(w.net, w.txNet)
	w.write(w.raw4, w.txRaw4)
	w.write(w.raw6, w.txRaw6)
	w.write(w.plain, w.txPlain)
	w.txNet, w.txRaw4, w.txRaw6, w.txPlain = w.txNet[:0], w.txRaw4[:0], w.txRaw6[:0], w.txPlain[:0]
	if len(w.release) > 0 {
		w.d.cfg.Pool.PutN(w.release)
		clear(w.release)
		w.release = w.release[:0]
	}
}

func (w *worker) write(l Link, bufs []*packet.Buf) {
	if len(bufs) == 0 {
		return
	}
	n, err := l.Write(bufs)
	if err != nil && n < len(bufs) {
		w.counters.txErrors.Store(w.counters.txErrors.Load() + uint64(len(bufs)-n))
	}
	w.counters.txPackets.Store(w.counters.txPackets.Load() + uint64(n))
	w.d.cfg.Pool.PutN(bufs)
	clear(bufs)
}
