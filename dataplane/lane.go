package dataplane

// A lane is one goroutine that reads one link and carries every packet it
// reads to completion: classification, ESP, transmission. This file holds
// what both directions share: the lane's crypto (one ESP pipeline per
// engine), its batches, and transmission. outbound.go and inbound.go are
// the two directions, each in packet order.

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// idle marks a lane that holds no snapshot of the SAD (it is about to
// block in Read, with nothing in flight).
const idle = ^uint64(0)

// maxInflight bounds the batches a lane has in flight per asynchronous
// engine; a synchronous engine never has more than the one being made.
const maxInflight = 8

// txLink is a link that several lanes may write: inbound lanes write
// plaintext to TUN queues that outbound lanes also write ICMP errors to,
// and every outbound lane writes the raw ESP sockets. The lock is taken
// once per batch and is almost never contended.
type txLink struct {
	mu sync.Mutex
	l  Link
}

func (t *txLink) write(bufs []*packet.Buf) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.l.Write(bufs)
}

// batch is an ESP batch with the SAD entries of its packets (an inbound
// packet's policy check needs its tunnel).
type batch struct {
	*esp.Batch
	sas []*sad.SA
}

// pipe is a lane's channel to one engine: its ESP pipeline, the batch being
// filled, and the batches in flight in submission order.
type pipe struct {
	engine   string
	pl       *esp.Pipeline
	async    bool
	cur      *batch   // being filled; nil when none
	inflight []*batch // submitted, oldest first
	free     []*batch
}

type laneCounters struct {
	// Read side.
	packets, bytes counter
	rxDrops        drops
	// ESP and transmit side.
	sealed, opened      counter
	txPackets, txErrors counter
	drops               drops
}

// lane reads one link and owns what it reads until it is written out or
// dropped.
type lane struct {
	d        *Dataplane
	index    int
	name     string
	link     Link // the link read
	plain    bool // link is a TUN queue: packets go out through ESP
	classify Classifier
	seen     atomic.Uint64 // SAD generation in use, or idle
	counters laneCounters

	// Where packets leave. An outbound lane writes ESP to net or the raw
	// sockets and ICMP errors to tun; an inbound lane writes plaintext
	// to tun.
	tun, net, raw4, raw6 *txLink

	pipes []*pipe // one per engine, in the order of Dataplane.engines
	last  *pipe   // pipe of the last packet (most batches have one SA)
	grp   *grouper

	bufs   []*packet.Buf // read buffers; have of them hold pool buffers
	have   int
	frags  [64]*packet.Buf
	parsed esp.Parsed
	flow   spd.FlowKey // the packet under a traffic-selector check

	txTun, txNet, txRaw4, txRaw6, release []*packet.Buf
}

func newLane(d *Dataplane, index int, name string, l Link, plain bool) (*lane, error) {
	n := max(batchSize, l.BatchSize())
	ln := &lane{d: d, index: index, name: name, link: l, plain: plain, bufs: make([]*packet.Buf, n), grp: newGrouper(n)}
	if plain && d.cfg.NewClassifier != nil {
		ln.classify = d.cfg.NewClassifier()
	}
	for _, e := range d.engines {
		q, err := d.cfg.Engines[e].NewQueue()
		if err != nil {
			for _, p := range ln.pipes {
				p.pl.Queue().Close()
			}
			return nil, err
		}
		p := &pipe{engine: e, pl: esp.NewPipeline(q), async: d.cfg.Engines[e].Async()}
		// Every ciphertext link is a socket: the kernel sums the UDP
		// checksum itself.
		p.pl.SocketChecksums = true
		for range maxInflight + 1 {
			p.free = append(p.free, &batch{Batch: esp.NewBatch(n), sas: make([]*sad.SA, 0, n)})
		}
		ln.pipes = append(ln.pipes, p)
	}
	// Room for a whole read (and its fragments) in each transmit list.
	c := n + len(ln.frags)
	ln.txTun = make([]*packet.Buf, 0, c)
	ln.txNet = make([]*packet.Buf, 0, c)
	ln.txRaw4 = make([]*packet.Buf, 0, c)
	ln.txRaw6 = make([]*packet.Buf, 0, c)
	ln.release = make([]*packet.Buf, 0, c)
	ln.seen.Store(idle)
	return ln, nil
}

// run is the lane's loop: refill the read buffers, read, process the read
// to completion, repeat. Nothing is in flight while it blocks in Read, so
// a packet that arrives alone is never held back waiting for another.
func (ln *lane) run(ctx context.Context) {
	pool := ln.d.cfg.Pool
	defer func() {
		if ln.have > 0 {
			pool.PutN(ln.bufs[:ln.have])
			ln.have = 0
		}
		ln.seen.Store(idle)
	}()
	for {
		if ln.have < len(ln.bufs) {
			ln.have += pool.GetN(ln.bufs[ln.have:])
			if ln.have == 0 {
				ln.counters.rxDrops.inc(ReasonNoBuffer)
				if ctx.Err() != nil {
					return
				}
				runtime.Gosched()
				continue
			}
		}
		ln.seen.Store(idle)
		n, err := ln.link.Read(ln.bufs[:ln.have])
		if err != nil {
			if ctx.Err() != nil || ln.d.closed.Load() || isClosed(err) {
				return
			}
			if n == 0 {
				ln.counters.rxDrops.inc(ReasonLinkError)
				continue
			}
		}
		db := ln.snapshot()
		if ln.plain {
			ln.outbound(db, ln.bufs[:n])
		} else {
			ln.inbound(db, ln.bufs[:n])
		}
		ln.flush()
		// The buffers read are gone (sent, dropped or released): move
		// the unused ones to the front.
		copy(ln.bufs, ln.bufs[n:ln.have])
		clear(ln.bufs[ln.have-n : ln.have])
		ln.have -= n
	}
}

// testHookSnapshot, if set (by tests), runs between a lane's load of the
// SAD and the publication of the generation it holds.
var testHookSnapshot atomic.Pointer[func(d *Dataplane, lane string)]

// snapshot loads the SAD and publishes the generation the lane holds. The
// generation is published before the snapshot is used and the store is
// read again after publishing: a retire that started while the lane still
// showed idle (and so may destroy the keys of an older snapshot) was
// started by a newer generation, which the second read sees and the lane
// then uses instead. Only a snapshot that was current after its generation
// was published is ever used.
func (ln *lane) snapshot() *sad.DB {
	db := ln.d.cfg.Store.Load()
	if h := testHookSnapshot.Load(); h != nil {
		(*h)(ln.d, ln.name)
	}
	for {
		ln.seen.Store(db.Generation())
		again := ln.d.cfg.Store.Load()
		if again == db {
			return db
		}
		db = again
	}
}

func isClosed(err error) bool {
	return errors.Is(err, pktio.ErrClosed) || errors.Is(err, context.Canceled)
}

// pipeFor returns the lane's pipe for an SA's engine. The engine name is
// compared with the last packet's first; equal strings that share their
// bytes (every SA of one engine) compare by pointer.
func (ln *lane) pipeFor(s *sad.SA) *pipe {
	e := s.Engine
	if e == "" {
		e = ln.d.cfg.Default
	}
	if ln.last != nil && ln.last.engine == e {
		return ln.last
	}
	for _, p := range ln.pipes {
		if p.engine == e {
			ln.last = p
			return p
		}
	}
	// An engine the data plane was not given (the gateway never makes
	// such an SA): the default's pipe, which New made sure exists.
	for _, p := range ln.pipes {
		if p.engine == ln.d.cfg.Default {
			return p
		}
	}
	return ln.pipes[0]
}

// add puts packet p of SA s into the batch of s's engine, submitting that
// batch when it is full.
func (ln *lane) add(s *sad.SA, p *packet.Buf, dir esp.Direction, parsed *esp.Parsed) {
	pp := ln.pipeFor(s)
	b := pp.cur
	if b != nil && len(b.Bufs) == cap(b.Bufs) {
		ln.submit(pp)
		b = nil
	}
	if b == nil {
		if len(pp.free) == 0 {
			ln.completeOldest(pp)
		}
		b = pp.free[len(pp.free)-1]
		pp.free = pp.free[:len(pp.free)-1]
		b.Reset(dir, 0)
		b.sas = b.sas[:0]
		pp.cur = b
	}
	b.Bufs = append(b.Bufs, p)
	b.SAs = append(b.SAs, s.SA)
	b.Reasons = append(b.Reasons, esp.ReasonNone)
	b.Parsed = b.Parsed[:len(b.Bufs)]
	if parsed != nil {
		b.Parsed[len(b.Bufs)-1] = *parsed
	}
	b.sas = append(b.sas, s)
}

// submit hands the pipe's current batch to its engine. A synchronous
// engine has finished it on return, and it is taken at once.
func (ln *lane) submit(pp *pipe) {
	b := pp.cur
	pp.cur = nil
	if b == nil {
		return
	}
	ln.grp.group(b)
	if err := pp.pl.Submit(b.Batch); err != nil {
		ln.emit(b) // every packet is marked dropped
		pp.free = append(pp.free, b)
		return
	}
	pp.inflight = append(pp.inflight, b)
	if !pp.async {
		ln.completeOldest(pp)
	}
}

// completeOldest waits for the pipe's oldest batch and takes it.
func (ln *lane) completeOldest(pp *pipe) {
	if len(pp.inflight) == 0 {
		return
	}
	done := pp.pl.Complete(true)
	b := pp.inflight[0]
	if done != b.Batch {
		panic("dataplane: engine completed batches out of order")
	}
	copy(pp.inflight, pp.inflight[1:])
	pp.inflight = pp.inflight[:len(pp.inflight)-1]
	ln.emit(b)
	clear(b.sas)
	pp.free = append(pp.free, b)
}

// flush submits every batch being filled, waits for everything in flight,
// and transmits: the end of one read.
func (ln *lane) flush() {
	for _, pp := range ln.pipes {
		ln.submit(pp)
	}
	for _, pp := range ln.pipes {
		for len(pp.inflight) > 0 {
			ln.completeOldest(pp)
		}
	}
	ln.transmit()
}

// emit sorts a completed batch's packets onto the transmit lists and counts
// the ones that were dropped.
func (ln *lane) emit(b *batch) {
	if b.Dir == esp.Outbound {
		ln.emitOutbound(b)
	} else {
		ln.emitInbound(b)
	}
}

// drop counts a packet dropped before ESP and releases it at the end of
// the read.
func (ln *lane) drop(p *packet.Buf, why Reason) {
	ln.counters.rxDrops.inc(why)
	ln.release = append(ln.release, p)
}

// transmit writes the transmit lists, one batch per link, and returns every
// buffer to the pool.
func (ln *lane) transmit() {
	ln.write(ln.net, ln.txNet)
	ln.write(ln.raw4, ln.txRaw4)
	ln.write(ln.raw6, ln.txRaw6)
	ln.write(ln.tun, ln.txTun)
	ln.txNet, ln.txRaw4, ln.txRaw6, ln.txTun = ln.txNet[:0], ln.txRaw4[:0], ln.txRaw6[:0], ln.txTun[:0]
	if len(ln.release) > 0 {
		ln.d.cfg.Pool.PutN(ln.release)
		clear(ln.release)
		ln.release = ln.release[:0]
	}
}

func (ln *lane) write(l *txLink, bufs []*packet.Buf) {
	if len(bufs) == 0 {
		return
	}
	n, err := l.write(bufs)
	if err != nil && n < len(bufs) {
		ln.counters.txErrors.add(uint64(len(bufs) - n))
	}
	ln.counters.txPackets.add(uint64(n))
	ln.d.cfg.Pool.PutN(bufs)
	clear(bufs)
}

// close releases the lane's engine queues.
func (ln *lane) close() {
	for _, p := range ln.pipes {
		p.pl.Queue().Close()
	}
}
