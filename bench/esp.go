package bench

// sluice bench esp: ESP encapsulation and decapsulation in process, with
// no I/O, in the shape of the published IPsec tables (throughput by packet
// size, tunnel count and cores).
//
//  1. Setup: Tunnels pairs of SAs (tunnel mode, IPv4 in IPv4, ESP as IP
//     protocol 50, ESN on), each pair with its own key; the inbound SA that
//     is measured has anti-replay off (window 0), so that one pre-made
//     ciphertext per tunnel and size can be opened again and again. Worker
//     w owns tunnels [w*T/W, (w+1)*T/W), SA state having one owner
//     (DESIGN.md decision 4), and has its own packet pool, esp.Pipeline and
//     engine queue.
//  2. Each step refills one free batch of Batch packets, spread round robin
//     over the worker's tunnels: encapsulation puts the inner packet's
//     window back and restores its 28 header bytes (the rest of the packet
//     is last round's ciphertext, encrypted again); decapsulation copies the
//     tunnel's ciphertext into the buffer (decryption is in place) and runs
//     esp.Parse. The SA is the tunnel's, known without a SAD lookup.
//  3. Submit through the pipeline, collect what is complete (InFlight
//     batches on an asynchronous engine), check every packet made it.
//
// The raw rows run the same steps without ESP: each packet is its ESP
// payload (inner packet, padding, trailer), sealed (or copied and opened)
// with the tunnel's cipher.AEAD, or AES-CBC and HMAC, called directly. A
// library's own loop where linked in (ipsecmb-c) seals the same payloads
// in C (encap, one size): the floor of its engine's rows, so that the
// difference between the two is what ESP and the engine's Go side cost.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

// Bounds of an ESP size: an inner packet holds its IPv4 and UDP headers, and
// at most a jumbo frame.
const (
	MinESPSize = packet.IPv4MinHeader + packet.UDPHeader
	MaxESPSize = 9000
)

// imixCycle is the simple IMIX, 7:4:1 of 64, 576 and 1500 bytes,
// interleaved.
var imixCycle = []int{64, 576, 64, 64, 576, 64, 1500, 64, 576, 64, 64, 576}

// ErrTooFewTunnels is returned for more workers than tunnels: an SA has one
// owner, so a worker without a tunnel would have nothing to do.
var ErrTooFewTunnels = errors.New("bench: fewer tunnels than workers")

// ESPSpec is one ESP measurement.
type ESPSpec struct {
	// Engine is Raw or a registered engine name.
	Engine string
	// Alg is the SAs' suite.
	Alg cryptodev.Alg
	// Size is the inner IP packet's bytes, or IMIX.
	Size Size
	// Tunnels is the number of SA pairs; Workers the number of goroutines,
	// each with its own pipeline and queue, each owning Tunnels/Workers
	// of them.
	Tunnels, Workers int
	// Dir is esp.Outbound (encapsulation) or esp.Inbound (decapsulation).
	Dir esp.Direction
	// Batch is the packets per batch; InFlight the batches each worker
	// keeps in flight on an asynchronous engine (0: DefaultInFlight).
	Batch, InFlight int
	// Duration is the measured window; Warmup runs before it (0 means
	// DefaultWarmup(Duration)).
	Duration, Warmup time.Duration
	// SchedWorkers, when > 0, is the sched engine's worker count.
	SchedWorkers int
}

// DirName is the name of an ESP direction in results: encap or decap.
func DirName(d esp.Direction) string {
	if d == esp.Inbound {
		return "decap"
	}
	return "encap"
}

// cycle is the sequence of inner packet sizes a run repeats.
func (s *ESPSpec) cycle() []int {
	if s.Size == IMIX {
		return imixCycle
	}
	return []int{int(s.Size)}
}

func (s *ESPSpec) check() error {
	switch {
	case !s.Alg.Valid() || s.Alg.IsAsymmetric():
		return fmt.Errorf("bench: %v is not an ESP algorithm", s.Alg)
	case s.Size != IMIX && (s.Size < MinESPSize || s.Size > MaxESPSize):
		return fmt.Errorf("bench: ESP size %d: want %d to %d bytes (an IPv4 UDP packet), or imix", s.Size, MinESPSize, MaxESPSize)
	case s.Tunnels <= 0:
		return fmt.Errorf("bench: tunnels %d: want > 0", s.Tunnels)
	case s.Workers <= 0:
		return fmt.Errorf("bench: workers %d: want > 0", s.Workers)
	case s.Workers > s.Tunnels:
		return fmt.Errorf("%w: %d workers, %d tunnels", ErrTooFewTunnels, s.Workers, s.Tunnels)
	case s.Batch <= 0:
		return fmt.Errorf("bench: batch %d: want > 0", s.Batch)
	case s.Duration <= 0:
		return fmt.Errorf("bench: duration %v: want > 0", s.Duration)
	}
	return CheckEngine(s.Engine)
}

// RunESP measures s. progress, if not nil, gets the fraction done.
func RunESP(ctx context.Context, s ESPSpec, progress func(float64)) (ESPResult, error) {
	res := ESPResult{Engine: s.Engine, Alg: s.Alg.String(), Size: s.Size, Tunnels: s.Tunnels,
		Workers: s.Workers, Batch: s.Batch, Direction: DirName(s.Dir)}
	if err := s.check(); err != nil {
		return res, err
	}
	sum := 0
	for _, n := range s.cycle() {
		sum += n
	}
	res.MeanSize = float64(sum) / float64(len(s.cycle()))
	loops, cleanup, err := espLoops(&s)
	if err != nil {
		return res, err
	}
	defer cleanup()
	w, err := measure(ctx, loops, s.Warmup, s.Duration, progress)
	if err != nil {
		return res, err
	}
	if w.ops == 0 {
		return res, fmt.Errorf("bench: %s %v: no batch completed in %v", s.Engine, s.Alg, s.Duration)
	}
	res.Packets, res.Seconds, res.CPUSeconds = w.ops, w.elapsed.Seconds(), w.cpu.Seconds()
	res.PPS, res.BPS = w.opsPerSec(), 8*w.bytesPerSec()
	return res, nil
}

// Addresses of the benchmark's tunnels (documentation ranges).
var (
	outerSrc = netip.MustParseAddr("192.0.2.1")
	outerDst = netip.MustParseAddr("192.0.2.2")
	innerSrc = netip.MustParseAddr("10.1.0.10")
	innerDst = netip.MustParseAddr("10.2.0.20")
)

// espHeadroom is the headroom of every buffer: the most ESP puts in front.
const espHeadroom = 128

// innerPacket builds an IPv4 UDP packet of n bytes.
func innerPacket(n int) []byte {
	b := make([]byte, n)
	for i := MinESPSize; i < n; i++ {
		b[i] = byte(i*7 + 3)
	}
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(n), TTL: 64, Protocol: packet.ProtoUDP, ID: 7,
		Src: innerSrc.As4(), Dst: innerDst.As4()})
	packet.UDP(b[packet.IPv4MinHeader:]).Encode(1234, 5678, uint16(n-packet.IPv4MinHeader))
	return b
}

// espPayloadLen is what ESP encrypts for an inner packet of n bytes: the
// packet, its padding and the 2-byte trailer (RFC 4303 section 2.4).
func espPayloadLen(alg cryptodev.Alg, n int) int {
	bs := alg.Info().BlockSize
	pad := (bs - (n+esp.TrailerLen)%bs) % bs
	return n + pad + esp.TrailerLen
}

// sizeCycle walks a run's size cycle: sizes holds the distinct sizes, and
// order the index into sizes of each position of the cycle.
type sizeCycle struct {
	sizes []int
	order []int
	pos   int
}

func newSizeCycle(cycle []int) sizeCycle {
	var c sizeCycle
	for _, n := range cycle {
		i := 0
		for i < len(c.sizes) && c.sizes[i] != n {
			i++
		}
		if i == len(c.sizes) {
			c.sizes = append(c.sizes, n)
		}
		c.order = append(c.order, i)
	}
	return c
}

// next returns the index (into sizes) of the next packet's size.
func (c *sizeCycle) next() int {
	i := c.order[c.pos]
	if c.pos++; c.pos == len(c.order) {
		c.pos = 0
	}
	return i
}

func (c *sizeCycle) max() int { return maxOf(c.sizes) }

func maxOf(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// espLoops builds the workers of s and returns them with the function that
// releases their queues, keys and engine.
func espLoops(s *ESPSpec) (loops []loop, cleanup func(), err error) {
	var cleanups cleanupStack
	cleanup = cleanups.run
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	info := s.Alg.Info()
	keys := make([][2][]byte, s.Tunnels) // encryption, authentication key per tunnel
	for t := range keys {
		keys[t] = [2][]byte{make([]byte, s.Alg.EncKeyLen()), make([]byte, info.AuthKeyLen)}
		rand.Read(keys[t][0])
		rand.Read(keys[t][1])
	}
	cyc := newSizeCycle(s.cycle())
	owned := func(w int) (lo, hi int) { return w * s.Tunnels / s.Workers, (w + 1) * s.Tunnels / s.Workers }

	if b := findBaseline(s.Engine); b != nil {
		// The library's own loop sealing the ESP payloads: the floor of
		// its engine's encap rows, as raw is soft's.
		if s.Dir != esp.Outbound || s.Size == IMIX {
			return nil, cleanup, fmt.Errorf("%w: %s seals packets of one size: encap rows only", cryptodev.ErrUnsupported, s.Engine)
		}
		n := espPayloadLen(s.Alg, int(s.Size))
		for w := range s.Workers {
			lo, _ := owned(w)
			l, free, err := b.symLoop(s.Alg, keys[lo][0], n, int(s.Size), s.Batch, opSlotLen(n))
			if err != nil {
				return nil, cleanup, err
			}
			cleanups.push(free)
			loops = append(loops, l)
		}
		return loops, cleanup, nil
	}
	if s.Engine == Raw {
		for w := range s.Workers {
			lo, hi := owned(w)
			l, err := newRawESPLoop(s, keys[lo:hi], cyc)
			if err != nil {
				return nil, cleanup, err
			}
			loops = append(loops, l)
		}
		return loops, cleanup, nil
	}

	e, err := openEngine(s.Engine, s.SchedWorkers)
	if err != nil {
		return nil, cleanup, err
	}
	cleanups.push(func() { e.Close() })
	if !e.Supports(s.Alg) {
		return nil, cleanup, fmt.Errorf("%w: %s does not support %v", cryptodev.ErrUnsupported, e.Name(), s.Alg)
	}
	outs := make([]*esp.SA, s.Tunnels)
	ins := make([]*esp.SA, s.Tunnels)
	for t := range outs {
		spi := uint32(0x10000 + t)
		for dir := range 2 {
			k, err := e.NewKey(s.Alg, keys[t][0], keys[t][1])
			if err != nil {
				return nil, cleanup, err
			}
			cleanups.push(k.Destroy)
			cfg := esp.Config{SPI: spi, Mode: esp.Tunnel, Src: outerSrc, Dst: outerDst, Alg: s.Alg, Key: k, ESN: true}
			if dir == 0 {
				outs[t], err = esp.NewOutbound(cfg)
			} else {
				ins[t], err = esp.NewInbound(cfg) // ReplayWindow 0: anti-replay off
			}
			if err != nil {
				return nil, cleanup, err
			}
		}
	}
	var cts [][][]byte // per tunnel, per distinct size
	if s.Dir == esp.Inbound {
		if cts, err = sealAll(e, outs, cyc.sizes); err != nil {
			return nil, cleanup, err
		}
	}
	sas := outs
	if s.Dir == esp.Inbound {
		sas = ins
	}
	for w := range s.Workers {
		lo, hi := owned(w)
		var wcts [][][]byte
		if cts != nil {
			wcts = cts[lo:hi]
		}
		l, err := newESPLoop(e, s, sas[lo:hi], wcts, cyc)
		if err != nil {
			return nil, cleanup, err
		}
		cleanups.push(l.close)
		loops = append(loops, l)
	}
	return loops, cleanup, nil
}

// espSlotLen is the buffer size for inner packets of up to n bytes: the
// headroom, the packet, and what ESP adds behind it (or, for decapsulation,
// the outer packet's extra length).
func espSlotLen(n int) int { return espHeadroom + n + 128 }

// sealAll encapsulates one inner packet of each size for each SA, on e, and
// returns the ESP packets (the outer IP packets).
func sealAll(e cryptodev.Engine, outs []*esp.SA, sizes []int) ([][][]byte, error) {
	q, err := e.NewQueue()
	if err != nil {
		return nil, err
	}
	defer q.Close()
	pl := esp.NewPipeline(q)
	pool := packet.NewPool(1, espSlotLen(maxOf(sizes)), espHeadroom)
	p := pool.Get()
	defer p.Release()
	b := esp.NewBatch(1)
	cts := make([][][]byte, len(outs))
	for t, sa := range outs {
		for _, n := range sizes {
			p.Write(espHeadroom, innerPacket(n))
			b.Reset(esp.Outbound, 1)
			b.Bufs[0], b.SAs[0] = p, sa
			if err := pl.Run(b); err != nil {
				return nil, err
			}
			if r := b.Reasons[0]; r != esp.ReasonNone {
				return nil, fmt.Errorf("bench: sealing a %d-byte packet: %v", n, r)
			}
			cts[t] = append(cts[t], append([]byte(nil), p.Bytes()...))
		}
	}
	return cts, nil
}

// espSlot is one batch of a worker with its buffers.
type espSlot struct {
	b     *esp.Batch
	bufs  []*packet.Buf
	bytes int // inner bytes of the packets in b
}

// espLoop is one ESP worker.
type espLoop struct {
	pl    *esp.Pipeline
	dir   esp.Direction
	all   []*espSlot
	free  []*espSlot
	sas   []*esp.SA  // the worker's tunnels
	cts   [][][]byte // decapsulation: per tunnel, per size
	hdrs  [][]byte   // encapsulation: per size, the inner packet's headers
	cyc   sizeCycle
	rr    int // next tunnel
	natt  []uint16
	batch int
}

func newESPLoop(e cryptodev.Engine, s *ESPSpec, sas []*esp.SA, cts [][][]byte, cyc sizeCycle) (*espLoop, error) {
	q, err := e.NewQueue()
	if err != nil {
		return nil, err
	}
	l := &espLoop{pl: esp.NewPipeline(q), dir: s.Dir, sas: sas, cts: cts, cyc: cyc,
		natt: []uint16{esp.NATTPort}, batch: s.Batch}
	for _, n := range cyc.sizes {
		l.hdrs = append(l.hdrs, innerPacket(n)[:MinESPSize])
	}
	depth := inFlight(e, s.InFlight)
	pool := packet.NewPool(depth*s.Batch, espSlotLen(cyc.max()), espHeadroom)
	for range depth {
		sl := &espSlot{b: esp.NewBatch(s.Batch), bufs: make([]*packet.Buf, s.Batch)}
		pool.GetN(sl.bufs)
		for _, p := range sl.bufs {
			// Every byte of the inner packets is written once here;
			// steps only restore the headers.
			p.Write(espHeadroom, innerPacket(cyc.max()))
		}
		l.all = append(l.all, sl)
		l.free = append(l.free, sl)
	}
	return l, nil
}

// fill prepares sl's batch for the next round.
func (l *espLoop) fill(sl *espSlot) {
	b := sl.b
	b.Reset(l.dir, l.batch)
	sl.bytes = 0
	for i, p := range sl.bufs {
		si, t := l.cyc.next(), l.rr
		if l.rr++; l.rr == len(l.sas) {
			l.rr = 0
		}
		n := l.cyc.sizes[si]
		if l.dir == esp.Outbound {
			p.SetWindow(espHeadroom, n)
			copy(p.Bytes(), l.hdrs[si])
		} else {
			p.Write(espHeadroom, l.cts[t][si])
			b.Reasons[i] = esp.Parse(p.Bytes(), l.natt, &b.Parsed[i])
		}
		b.Bufs[i], b.SAs[i] = p, l.sas[t]
		sl.bytes += n
	}
}

func (l *espLoop) step() (pkts, bytes int, err error) {
	wait := true
	if k := len(l.free); k > 0 {
		sl := l.free[k-1]
		l.fill(sl)
		switch err := l.pl.Submit(sl.b); {
		case err == nil:
			l.free = l.free[:k-1]
			wait = k == 1
		case errors.Is(err, cryptodev.ErrQueueFull):
		default:
			return 0, 0, err
		}
	}
	for b := l.pl.Complete(wait); b != nil; b = l.pl.Complete(false) {
		sl := l.slotOf(b)
		for i, r := range b.Reasons {
			if r != esp.ReasonNone {
				return pkts, bytes, fmt.Errorf("bench: %s packet %d dropped: %v", DirName(l.dir), i, r)
			}
		}
		pkts += b.Len()
		bytes += sl.bytes
		l.free = append(l.free, sl)
	}
	return pkts, bytes, nil
}

func (l *espLoop) slotOf(b *esp.Batch) *espSlot {
	for _, sl := range l.all {
		if sl.b == b {
			return sl
		}
	}
	panic("bench: pipeline returned a batch it was not given")
}

func (l *espLoop) drain() {
	for l.pl.InFlight() > 0 {
		if b := l.pl.Complete(true); b != nil {
			l.free = append(l.free, l.slotOf(b))
		}
	}
}

func (l *espLoop) close() { l.pl.Queue().Close() }

// rawESPLoop is one raw worker: ESP payloads sealed or opened with the
// tunnels' ciphers directly.
type rawESPLoop struct {
	dir     esp.Direction
	ciphers []*rawSym
	slots   [][]byte
	cts     [][][]byte // decapsulation: per tunnel, per size: payload and ICV
	lens    []int      // per size: the ESP payload length
	cyc     sizeCycle
	rr      int
	iv      []byte
	aad     []byte
	ivCtr   uint64
}

func newRawESPLoop(s *ESPSpec, keys [][2][]byte, cyc sizeCycle) (*rawESPLoop, error) {
	info := s.Alg.Info()
	l := &rawESPLoop{dir: s.Dir, cyc: cyc, iv: make([]byte, info.IVLen), aad: make([]byte, 8)}
	for _, n := range cyc.sizes {
		l.lens = append(l.lens, espPayloadLen(s.Alg, n))
	}
	slotLen := (maxOf(l.lens) + tagRoom + 63) &^ 63
	arena := make([]byte, s.Batch*slotLen)
	for i := range s.Batch {
		l.slots = append(l.slots, arena[i*slotLen:(i+1)*slotLen:(i+1)*slotLen])
	}
	for _, k := range keys {
		r, err := newRawSym(s.Alg, k[0], k[1])
		if err != nil {
			return nil, err
		}
		l.ciphers = append(l.ciphers, r)
		if s.Dir == esp.Inbound {
			var ct [][]byte
			for si, n := range l.lens {
				c := make([]byte, n+info.ICVLen)
				copy(c, innerPacket(cyc.sizes[si]))
				r.seal(c, n, l.iv, l.aad)
				ct = append(ct, c)
			}
			l.cts = append(l.cts, ct)
		}
	}
	return l, nil
}

func (l *rawESPLoop) step() (pkts, bytes int, err error) {
	for _, slot := range l.slots {
		si, t := l.cyc.next(), l.rr
		if l.rr++; l.rr == len(l.ciphers) {
			l.rr = 0
		}
		n := l.lens[si]
		if l.dir == esp.Outbound {
			if len(l.iv) >= 8 {
				binary.BigEndian.PutUint64(l.iv, l.ivCtr)
				l.ivCtr++
			}
			l.ciphers[t].seal(slot, n, l.iv, l.aad)
		} else {
			copy(slot, l.cts[t][si])
			if !l.ciphers[t].open(slot, n, l.iv, l.aad) {
				return pkts, bytes, errors.New("bench: raw open failed")
			}
		}
		pkts++
		bytes += l.cyc.sizes[si]
	}
	return pkts, bytes, nil
}

func (l *rawESPLoop) drain() {}
