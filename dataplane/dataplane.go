// Package dataplane moves packets between the plaintext side (TUN queues)
// and the ciphertext side (ESP-in-UDP sockets, raw ESP) through ESP and the
// crypto framework, on every core.
//
// Stages:
//
//  1. Receive (one goroutine per link queue): read a batch into pooled
//     buffers; classify each packet — outbound by route (or policy) to a
//     tunnel, inbound by SPI to an SA — and check the tunnel MTU.
//  2. Handoff: group the batch by the worker that owns each tunnel's SA state
//     and pass each group to that worker's bounded queue (full: drop and
//     count). An SA's sequence numbers and replay window have exactly one
//     writer, the owning worker (DESIGN.md decision 4).
//  3. Crypto (worker): esp.Pipeline.Submit, which prepares every packet and
//     hands the crypto to the engine; a synchronous engine finishes at once,
//     an asynchronous one (sched) spreads one SA's batches over all cores
//     while the worker goes on with its next batch.
//  4. Transmit (worker): completed batches come back in submission order;
//     each packet goes out on the worker's own ciphertext socket or TUN
//     queue, so packets of one SA leave in order.
//
// Counters, not logs, record every drop (DESIGN.md decision 9).
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

// Link is the batch packet interface of package pktio, restated here so
// that the data plane depends on behaviour, not on the backends.
type Link interface {
	Read(bufs []*packet.Buf) (int, error)
	Write(bufs []*packet.Buf) (int, error)
	BatchSize() int
	Close() error
}

// Classifier picks the tunnel of an outbound packet. The route table of the
// SAD is the default; policy-based mode supplies one built on the SPD. Each
// receive goroutine gets its own (NewClassifier), so it may keep a cache.
type Classifier interface {
	// Classify returns the tunnel for pkt, or nil and a drop reason.
	Classify(db *sad.DB, pkt []byte) (*sad.Tunnel, Reason)
}

// Oversize says what happens to plaintext packets larger than the tunnel MTU
// that may be fragmented (IPv4 without DF).
type Oversize uint8

const (
	// OversizeFragment fragments them before encryption (RFC 4459 section 3).
	OversizeFragment Oversize = iota
	// OversizeDrop drops them and sends ICMP "fragmentation needed".
	OversizeDrop
)

// Config is what a Dataplane runs on.
type Config struct {
	// Workers is the number of crypto workers; 0 means one per core.
	Workers int
	// Engines by name; Default names the one used when an SA names none.
	Engines map[string]cryptodev.Engine
	Default string
	// Plain are the plaintext links (TUN queues); Net the ESP-in-UDP links
	// (one socket per worker); Raw4 and Raw6 the raw ESP links, if any
	// (a raw socket carries one family). Worker i transmits on
	// Plain[i%len] and Net[i%len].
	Plain      []Link
	Net        []Link
	Raw4, Raw6 Link
	Store      *sad.Store
	// NewClassifier makes a classifier per receive goroutine; nil means
	// route-based.
	NewClassifier func() Classifier
	// InboundCheck, if set, checks a decrypted inner packet against the
	// policy of its tunnel (RFC 4301 section 5.2 step 4); false drops it.
	InboundCheck func(t *sad.Tunnel, inner []byte) bool
	// Pool supplies packet buffers; its slots must hold a tunnel MTU packet
	// plus esp.MaxHeadroom and esp.MaxTailroom.
	Pool      *packet.Pool
	NATTPorts []uint16
	Oversize  Oversize
	// ICMPSource4/6 are the addresses ICMP errors are sent from (the TUN
	// addresses); zero means the packet's destination.
	ICMPSource4, ICMPSource6 netip.Addr
	Logger                   *slog.Logger
	// QueueDepth bounds each worker's handoff queue, in batches.
	QueueDepth int
}

// Dataplane is a running data plane.
type Dataplane struct {
	cfg     Config
	log     *slog.Logger
	workers []*worker
	items   chan *item // free handoff items
	rx      []*receiver
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	closed  atomic.Bool

	retireMu sync.Mutex
}

// batchSize is the most packets a link read or a handoff item carries.
const batchSize = 64

// New builds a data plane; Start runs it.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.NumCPU()
	}
	if cfg.Store == nil || cfg.Pool == nil {
		return nil, errors.New("dataplane: config needs a store and a pool")
	}
	if len(cfg.Plain) == 0 || (len(cfg.Net) == 0 && cfg.Raw4 == nil && cfg.Raw6 == nil) {
		return nil, errors.New("dataplane: config needs plaintext and ciphertext links")
	}
	if cfg.Engines[cfg.Default] == nil {
		return nil, fmt.Errorf("dataplane: default engine %q not configured", cfg.Default)
	}
	if cfg.QueueDepth <= 0 {
		// Items are batches of up to 64 packets, but at low load a read
		// returns one packet: the queue must absorb bursts of small items.
		cfg.QueueDepth = 512
	}
	if len(cfg.NATTPorts) == 0 {
		cfg.NATTPorts = []uint16{esp.NATTPort}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dataplane{cfg: cfg, log: log}
	nitems := cfg.Workers*cfg.QueueDepth + 4*(len(cfg.Plain)+len(cfg.Net)+1)*cfg.Workers
	d.items = make(chan *item, nitems)
	for range nitems {
		d.items <- new(item)
	}
	for i := range cfg.Workers {
		w, err := newWorker(d, i)
		if err != nil {
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	return d, nil
}

// Start runs the receive goroutines and workers until ctx ends or Close.
func (d *Dataplane) Start(ctx context.Context) {
	d.ctx, d.cancel = context.WithCancel(ctx)
	for _, w := range d.workers {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); w.run(d.ctx) }()
	}
	start := func(l Link, plain bool, name string) {
		r := &receiver{d: d, name: name, link: l, plain: plain, bufs: make([]*packet.Buf, max(batchSize, l.BatchSize()))}
		r.counters.init()
		if plain && d.cfg.NewClassifier != nil {
			r.classify = d.cfg.NewClassifier()
		}
		r.seen.Store(idle)
		d.rx = append(d.rx, r)
		d.wg.Add(1)
		go func() { defer d.wg.Done(); r.run(d.ctx) }()
	}
	for i, l := range d.cfg.Plain {
		start(l, true, fmt.Sprintf("plain/%d", i))
	}
	for i, l := range d.cfg.Net {
		start(l, false, fmt.Sprintf("udp/%d", i))
	}
	if d.cfg.Raw4 != nil {
		start(d.cfg.Raw4, false, "rawesp4")
	}
	if d.cfg.Raw6 != nil {
		start(d.cfg.Raw6, false, "rawesp6")
	}
}

// Close stops the data plane: it closes the links (which ends the receive
// goroutines), lets the workers finish what they hold, and waits. The links
// are closed by Close; the store's SAs are not touched.
func (d *Dataplane) Close() {
	if !d.closed.CompareAndSwap(false, true) {
		return
	}
	for _, l := range d.cfg.Plain {
		l.Close()
	}
	for _, l := range d.cfg.Net {
		l.Close()
	}
	for _, l := range []Link{d.cfg.Raw4, d.cfg.Raw6} {
		if l != nil {
			l.Close()
		}
	}
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	for _, w := range d.workers {
		w.close()
	}
}

// Retire is the sad.Store retire function for stores the data plane runs
// on: it destroys the SAs' keys once no goroutine can hold them. Receive
// goroutines must have moved past generation gen (or be idle), and every
// worker must have finished what was handed to it before that.
func (d *Dataplane) Retire(gen uint64, sas []*sad.SA) {
	if d.closed.Load() || d.ctx == nil {
		destroy(sas) // nothing runs any more (or yet)
		return
	}
	go d.retire(gen, sas)
}

func destroy(sas []*sad.SA) {
	for _, s := range sas {
		s.Key.Destroy()
	}
}

func (d *Dataplane) retire(gen uint64, sas []*sad.SA) {
	d.retireMu.Lock()
	defer d.retireMu.Unlock()
	// 1. Receive goroutines: wait for each to be idle or past gen.
	for _, r := range d.rx {
		for {
			s := r.seen.Load()
			if s == idle || s >= gen || d.closed.Load() {
				break
			}
			runtime.Gosched()
		}
	}
	// 2. Workers: a marker behind everything already handed off.
	if !d.closed.Load() && d.ctx != nil {
		var wg sync.WaitGroup
		for _, w := range d.workers {
			wg.Add(1)
			it := <-d.items
			it.kind = kindMarker
			it.marker = wg.Done
			select {
			case w.in <- it:
			case <-d.ctx.Done():
				wg.Done()
			}
		}
		wg.Wait()
	}
	destroy(sas)
}

// Stats is a snapshot of the data plane's counters.
type Stats struct {
	Workers   []WorkerStats `json:"workers"`
	Receivers []RxStats     `json:"receivers"`
}

// WorkerStats are one worker's counters.
type WorkerStats struct {
	Index     int               `json:"index"`
	Sealed    uint64            `json:"sealed"`
	Opened    uint64            `json:"opened"`
	TxPackets uint64            `json:"tx_packets"`
	TxErrors  uint64            `json:"tx_errors"`
	Drops     map[string]uint64 `json:"drops"`
}

// RxStats are one receive goroutine's counters.
type RxStats struct {
	Name    string            `json:"name"` // "plain/N", "udp/N" or "rawesp"
	Plain   bool              `json:"plain"`
	Packets uint64            `json:"packets"`
	Bytes   uint64            `json:"bytes"`
	Drops   map[string]uint64 `json:"drops"`
}

// Stats reads the counters. It is safe to call at any time.
func (d *Dataplane) Stats() Stats {
	var s Stats
	for _, w := range d.workers {
		s.Workers = append(s.Workers, WorkerStats{Index: w.index, Sealed: w.counters.sealed.Load(), Opened: w.counters.opened.Load(),
			TxPackets: w.counters.txPackets.Load(), TxErrors: w.counters.txErrors.Load(), Drops: w.counters.drops.Map()})
	}
	for _, r := range d.rx {
		s.Receivers = append(s.Receivers, RxStats{Name: r.name, Plain: r.plain, Packets: r.counters.packets.Load(), Bytes: r.counters.bytes.Load(), Drops: r.counters.drops.Map()})
	}
	return s
}
