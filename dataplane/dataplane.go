// Package dataplane moves packets between the plaintext side (TUN queues)
// and the ciphertext side (ESP-in-UDP sockets, raw ESP) through ESP and the
// crypto framework, on every core.
//
// # Lanes: run to completion, no handoff
//
// Every link the data plane reads (each TUN queue, each ESP-in-UDP socket
// of the SO_REUSEPORT group, each raw ESP socket) has one goroutine, a
// lane, that reads a batch and carries each packet to the end: classify,
// ESP, transmit. outbound.go (TUN to wire) and inbound.go (wire to TUN)
// draw the stages of each direction; lane.go holds what they share.
//
//	TUN queue i --read--> lane --classify, seal--> UDP socket i (GSO) / raw ESP
//	UDP socket i --read--> lane --parse, open, check--> TUN queue i (GRO)
//
// The kernel spreads flows over the TUN queues and the sockets by a hash,
// so the lanes of a gateway share its cores without talking to each other.
// A packet is never handed to another goroutine, so moving it costs no
// wake-up; with a synchronous engine (soft) the whole read is processed in
// the goroutine that read it and the only system calls are the read and one
// write per link per read. Lanes are not locked to OS threads: a locked
// goroutine woken by the netpoller must have its own thread woken too,
// which is the futex and context switch this design removes.
//
// # SA state: a lock per SA, taken once per run of packets
//
// An SA's sequence numbers, replay window and lifetime have one writer at a
// time: its lock, taken by esp.Pipeline for each run of consecutive packets
// of the SA in a batch, around the work before and after the crypto, not
// during it (DESIGN.md decisions 4 and 5). Two lanes rarely contend for one
// SA: a TCP or UDP flow hashes to one TUN queue, and a peer's ESP-in-UDP
// flow to one socket, so one tunnel's traffic in one direction usually
// meets one lane. When it meets two (several flows of one tunnel on two
// TUN queues), the ESP packets of one SA may leave the two lanes' sockets
// interleaved by up to a batch, well inside a replay window of 64 or more.
//
// # Asynchronous engines
//
// With an asynchronous engine (sched) a lane submits every batch of a read
// before it waits for the first, so one read's batches spread over all
// cores, and it takes them back in submission order (DESIGN.md decision
// 3). It waits for all of them before it blocks in its next read: a packet
// that arrives alone is never held back for the next one to arrive.
//
// # Why this design
//
// The data plane before this one had a receive goroutine per link that
// handed each batch through a channel to the worker goroutine owning the
// tunnel (locked to its OS thread), which sealed and sent it. Measured with
// iperf3 through a tunnel between two namespaces (BENCHMARKS.md), the
// sending gateway spent 31% of its samples in the kernel scheduler
// (finish_task_switch) and made 22,000 futex calls a second, while its
// cipher took a few percent; the receiving gateway wrote to its TUN once
// per packet. The lanes remove the handoff; the TUN queue coalesces on
// write (pktio/tun) and the UDP offloads are on by default.
//
// Counters, not logs, record every drop (DESIGN.md decision 9).
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
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
	// Engines by name; Default names the one used when an SA names none.
	Engines map[string]cryptodev.Engine
	Default string
	// Plain are the plaintext links (TUN queues); Net the ESP-in-UDP links
	// (a SO_REUSEPORT group); Raw4 and Raw6 the raw ESP links, if any (a
	// raw socket carries one family). Each gets a lane. The lane of
	// Plain[i] sends ESP on Net[i%len(Net)]; the lane of Net[j] writes
	// plaintext to Plain[j%len(Plain)].
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
	// NoSA, if set, is told of each outbound packet dropped because its
	// tunnel has no outbound SA yet (ReasonNoSA): a tunnel keyed on
	// demand (IKE's start_action = trap) starts its negotiation there.
	// It runs on the lane, per such packet: it must not block or
	// allocate.
	NoSA func(t *sad.Tunnel)
	// Pool supplies packet buffers; its slots must hold a tunnel MTU packet
	// plus esp.MaxHeadroom and esp.MaxTailroom.
	Pool      *packet.Pool
	NATTPorts []uint16
	Oversize  Oversize
	Logger    *slog.Logger
}

// Dataplane is a running data plane.
type Dataplane struct {
	cfg     Config
	log     *slog.Logger
	engines []string // engine names, sorted: a lane's pipes in this order
	lanes   []*lane
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	closed  atomic.Bool

	retireMu    sync.Mutex     // one retirement waits for the lanes at a time
	retireStart sync.Mutex     // orders a retirement's start against Close
	retiring    sync.WaitGroup // retirements under way
}

// batchSize is the least number of packets a lane reads at once and an ESP
// batch holds (a lane uses its link's batch size when that is larger).
const batchSize = 64

// New builds a data plane; Start runs it.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Store == nil || cfg.Pool == nil {
		return nil, errors.New("dataplane: config needs a store and a pool")
	}
	if len(cfg.Plain) == 0 || (len(cfg.Net) == 0 && cfg.Raw4 == nil && cfg.Raw6 == nil) {
		return nil, errors.New("dataplane: config needs plaintext and ciphertext links")
	}
	if cfg.Engines[cfg.Default] == nil {
		return nil, fmt.Errorf("dataplane: default engine %q not configured", cfg.Default)
	}
	if len(cfg.NATTPorts) == 0 {
		cfg.NATTPorts = []uint16{esp.NATTPort}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dataplane{cfg: cfg, log: log}
	for n := range cfg.Engines {
		d.engines = append(d.engines, n)
	}
	sort.Strings(d.engines)

	wrap := func(ls []Link) []*txLink {
		out := make([]*txLink, len(ls))
		for i, l := range ls {
			out[i] = &txLink{l: l}
		}
		return out
	}
	tuns, nets := wrap(cfg.Plain), wrap(cfg.Net)
	var raw4, raw6 *txLink
	if cfg.Raw4 != nil {
		raw4 = &txLink{l: cfg.Raw4}
	}
	if cfg.Raw6 != nil {
		raw6 = &txLink{l: cfg.Raw6}
	}
	add := func(l Link, plain bool, name string, tun *txLink) error {
		ln, err := newLane(d, len(d.lanes), name, l, plain)
		if err != nil {
			return fmt.Errorf("dataplane: lane %s: %w", name, err)
		}
		ln.tun, ln.raw4, ln.raw6 = tun, raw4, raw6
		if plain && len(nets) > 0 {
			ln.net = nets[len(d.lanes)%len(nets)]
		}
		d.lanes = append(d.lanes, ln)
		return nil
	}
	var err error
	for i, l := range cfg.Plain {
		if err == nil {
			err = add(l, true, fmt.Sprintf("plain/%d", i), tuns[i])
		}
	}
	for i, l := range cfg.Net {
		if err == nil {
			err = add(l, false, fmt.Sprintf("udp/%d", i), tuns[i%len(tuns)])
		}
	}
	if cfg.Raw4 != nil && err == nil {
		err = add(cfg.Raw4, false, "rawesp4", tuns[0])
	}
	if cfg.Raw6 != nil && err == nil {
		err = add(cfg.Raw6, false, "rawesp6", tuns[len(tuns)-1])
	}
	if err != nil {
		for _, ln := range d.lanes {
			ln.close()
		}
		return nil, err
	}
	return d, nil
}

// Start runs the lanes until ctx ends or Close.
func (d *Dataplane) Start(ctx context.Context) {
	d.ctx, d.cancel = context.WithCancel(ctx)
	for _, ln := range d.lanes {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); ln.run(d.ctx) }()
	}
}

// Close stops the data plane: it closes the links (which ends the lanes'
// reads), lets each lane finish the read it holds, and waits. The links
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
	// Retirements under way finish now that no lane runs: their SAs end
	// (keys destroyed, sad.SA.Retired called) before Close returns. One
	// that starts after closed is set ends its SAs itself.
	d.retireStart.Lock()
	d.retireStart.Unlock()
	d.retiring.Wait()
	for _, ln := range d.lanes {
		ln.close()
	}
}

// Retire is the sad.Store retire function for stores the data plane runs
// on: it destroys the SAs' keys once no lane can hold them. A lane holds an
// SA only while it processes a read made after loading a SAD generation,
// and has nothing in flight when it blocks in its next read (idle), so
// once every lane is idle or past generation gen the SAs are unreachable.
func (d *Dataplane) Retire(gen uint64, sas []*sad.SA) {
	d.retireStart.Lock()
	if d.closed.Load() || d.ctx == nil {
		d.retireStart.Unlock()
		destroy(sas) // nothing runs any more (or yet)
		return
	}
	d.retiring.Add(1)
	d.retireStart.Unlock()
	go func() {
		defer d.retiring.Done()
		d.retire(gen, sas)
	}()
}

// destroy ends retired SAs (sad.SA.End): their keys are destroyed and
// their owners told.
func destroy(sas []*sad.SA) {
	for _, s := range sas {
		s.End()
	}
}

func (d *Dataplane) retire(gen uint64, sas []*sad.SA) {
	d.retireMu.Lock()
	defer d.retireMu.Unlock()
	for _, ln := range d.lanes {
		for {
			s := ln.seen.Load()
			if s == idle || s >= gen || d.closed.Load() {
				break
			}
			runtime.Gosched()
		}
	}
	if d.closed.Load() {
		d.wg.Wait() // the lanes have finished what they held
	}
	destroy(sas)
}

// Stats is a snapshot of the data plane's counters.
type Stats struct {
	Workers   []WorkerStats `json:"workers"`
	Receivers []RxStats     `json:"receivers"`
}

// WorkerStats are the ESP and transmit counters of one lane.
type WorkerStats struct {
	Index     int               `json:"index"`
	Sealed    uint64            `json:"sealed"`
	Opened    uint64            `json:"opened"`
	TxPackets uint64            `json:"tx_packets"`
	TxErrors  uint64            `json:"tx_errors"`
	Drops     map[string]uint64 `json:"drops"`
}

// RxStats are the read counters of one lane.
type RxStats struct {
	Name    string            `json:"name"` // "plain/N", "udp/N" or "rawesp"
	Plain   bool              `json:"plain"`
	Packets uint64            `json:"packets"`
	Bytes   uint64            `json:"bytes"`
	Drops   map[string]uint64 `json:"drops"`
}

// Stats reads the counters. It is safe to call at any time. Each lane
// reports its read side as a receiver and its ESP and transmit side as a
// worker, both under the lane's index.
func (d *Dataplane) Stats() Stats {
	var s Stats
	for i, ln := range d.lanes {
		c := &ln.counters
		s.Workers = append(s.Workers, WorkerStats{Index: i, Sealed: c.sealed.load(), Opened: c.opened.load(),
			TxPackets: c.txPackets.load(), TxErrors: c.txErrors.load(), Drops: c.drops.Map()})
		rx := RxStats{Name: ln.name, Plain: ln.plain, Packets: c.packets.load(), Bytes: c.bytes.load(), Drops: c.rxDrops.Map()}
		if sl, ok := ln.link.(statsLink); ok {
			addLinkDrops(rx.Drops, sl.Stats().Snapshot())
		}
		s.Receivers = append(s.Receivers, rx)
	}
	return s
}

// Drops sums the drops of every lane, receive and transmit side, by reason.
func (s Stats) Drops() map[string]uint64 {
	m := map[string]uint64{}
	for _, r := range s.Receivers {
		for k, v := range r.Drops {
			m[k] += v
		}
	}
	for _, w := range s.Workers {
		for k, v := range w.Drops {
			m[k] += v
		}
	}
	return m
}

// statsLink is a Link with pktio's counters, as every pktio backend has.
type statsLink interface{ Stats() *pktio.LinkStats }

// addLinkDrops adds what the link itself took out of the stream before
// the lane saw it: datagrams with the non-ESP marker (IKE) and
// NAT-keepalives when nothing handles them, packets too long for a buffer,
// malformed ones and failed reads. They are drops as much as the lane's own
// and are shown beside them, under the same names where one exists.
func addLinkDrops(m map[string]uint64, c pktio.Counters) {
	add := func(name string, v uint64) {
		if v != 0 {
			m[name] += v
		}
	}
	add(esp.ReasonIKE.String(), c.RxIKE)
	add(esp.ReasonKeepalive.String(), c.RxKeepalive)
	add(esp.ReasonMalformed.String(), c.RxInvalid)
	add(linkDropNames[0], c.RxShort)
	add(linkDropNames[1], c.RxErrors)
}
