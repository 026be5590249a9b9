package lab

// A paced flow of sequence-numbered UDP datagrams, and what its receiver
// saw of it: the instrument of the failover tests (issue 18), which
// measure the outage a takeover or a restart causes from the receivers'
// sequence numbers.
//
//  1. The sender sends Rate datagrams a second, in small bursts on a
//     ticker (20 each millisecond at 20,000 a second), each carrying the
//     flow's random id, a 64-bit sequence number and its send time
//     (nanoseconds since the flow started, on this process's monotonic
//     clock). It allocates nothing per datagram.
//  2. The receiver records, per sequence number, when it was sent and when
//     it arrived; a number seen twice is a duplicate, one below the highest
//     seen is reordered.
//  3. StopSending ends the sender and waits for stragglers; Stop (after
//     it or not) ends the receiver and computes the loss and the gaps.
//     Between the two, the receiver still counts: a test can replay
//     captured packets then and see whether any arrives twice.
//
// Sender and receiver run in this process on sockets opened in any
// namespaces (Netns.ListenUDP), so both clocks are the same and one-way
// latency is measured too. Two flows, one each way, run side by side.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// seqHeader is the start of every datagram of a SeqFlow: the flow's id,
// the sequence number and the send time.
const seqHeader = 24

// maxSeqFlow bounds the sequence numbers a receiver keeps track of (about
// 55 minutes at 20,000 a second); datagrams beyond it are counted as
// foreign.
const maxSeqFlow = 1 << 26

// SeqFlowOptions shape a SeqFlow. Zero fields take the defaults.
type SeqFlowOptions struct {
	// Rate is the datagrams sent per second; default 20,000.
	Rate int
	// Size is the UDP payload of each datagram, at least 24 bytes;
	// default 64.
	Size int
	// Tick is the sender's pacing interval: each tick sends what is due
	// since the last; default 1ms.
	Tick time.Duration
	// Expect is how many datagrams the receiver makes room for up front
	// (it grows past it); default 10 seconds' worth.
	Expect int
	// GapsOver, if set, makes the result list every run of lost numbers
	// at least this long in send time (SeqResult.Gaps): one per outage
	// of a flow that crosses several.
	GapsOver time.Duration
}

func (o *SeqFlowOptions) defaults() {
	if o.Rate <= 0 {
		o.Rate = 20000
	}
	if o.Size <= 0 {
		o.Size = 64
	}
	o.Size = max(o.Size, seqHeader)
	if o.Tick <= 0 {
		o.Tick = time.Millisecond
	}
	if o.Expect <= 0 {
		o.Expect = 10 * o.Rate
	}
}

// SeqResult is what a SeqFlow measured. Times are durations since the
// flow started.
type SeqResult struct {
	Rate int `json:"rate"` // datagrams per second asked for
	Size int `json:"size"` // UDP payload bytes

	Sent       uint64 `json:"sent"`        // sequence numbers used (sends that failed included)
	SendErrors uint64 `json:"send_errors"` // sends the socket refused (the datagram is lost)
	Skipped    uint64 `json:"skipped"`     // sends left out because the sender fell 100 ms behind
	Received   uint64 `json:"received"`    // distinct sequence numbers received
	Lost       uint64 `json:"lost"`        // Sent - Received
	Duplicates uint64 `json:"duplicates"`  // datagrams whose sequence number had arrived before
	Reordered  uint64 `json:"reordered"`   // datagrams that arrived after a higher sequence number
	Foreign    uint64 `json:"foreign"`     // datagrams on the socket that were not this flow's
	// Runs is how many runs of consecutive lost numbers there were: one
	// outage is one run, losses spread by a queue that overflows now and
	// then are many.
	Runs uint64 `json:"runs"`

	// Gap is the longest run of lost sequence numbers, in send time:
	// from the send of the last number received before the run (the
	// flow's start if none) to the send of the first received after it
	// (the last send if none). It is 0 when nothing was lost. GapFirst
	// and GapLast are the first and last numbers of the run, GapLost
	// how many it holds, GapStart when it began.
	Gap      time.Duration `json:"gap_ns"`
	GapFirst uint64        `json:"gap_first"`
	GapLast  uint64        `json:"gap_last"`
	GapLost  uint64        `json:"gap_lost"`
	GapStart time.Duration `json:"gap_start_ns"`

	// Silence is the longest time between two arrivals (any numbers),
	// SilenceStart when it began: the outage as the receiver lived it,
	// queueing delays included.
	Silence      time.Duration `json:"silence_ns"`
	SilenceStart time.Duration `json:"silence_start_ns"`

	// One-way latency of the received datagrams (nearest rank).
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	LatencyMax time.Duration `json:"latency_max_ns"`

	// Elapsed is from the first send to the last.
	Elapsed time.Duration `json:"elapsed_ns"`

	// Gaps are the runs of lost numbers at least SeqFlowOptions.GapsOver
	// long, in order (nil without GapsOver).
	Gaps []SeqGap `json:"gaps,omitempty"`
}

// SeqGap is one run of lost sequence numbers: from Start (the send of the
// last number received before it) for Length (to the send of the first
// received after it), Lost numbers.
type SeqGap struct {
	Start  time.Duration `json:"start_ns"`
	Length time.Duration `json:"length_ns"`
	Lost   uint64        `json:"lost"`
}

// String is a one-line summary.
func (r SeqResult) String() string {
	s := fmt.Sprintf("%d sent (%d pps asked, %d send errors, %d skipped), %d received, %d lost in %d runs, %d duplicates, %d reordered; "+
		"longest gap %v (%d lost", r.Sent, r.Rate, r.SendErrors, r.Skipped, r.Received, r.Lost, r.Runs, r.Duplicates, r.Reordered,
		r.Gap.Round(time.Microsecond), r.GapLost)
	if r.GapLost > 0 {
		s += fmt.Sprintf(", seq %d..%d, at %v", r.GapFirst, r.GapLast, r.GapStart.Round(time.Millisecond))
	}
	s += fmt.Sprintf("), longest silence %v at %v, latency p50 %v p99 %v max %v",
		r.Silence.Round(time.Microsecond), r.SilenceStart.Round(time.Millisecond),
		r.LatencyP50.Round(time.Microsecond), r.LatencyP99.Round(time.Microsecond), r.LatencyMax.Round(time.Microsecond))
	return s
}

// SeqFlow is a running flow: StartSeqFlow starts it, Stop ends it. Sent
// and Received may be called at any time, from any goroutine.
type SeqFlow struct {
	src  Conn
	dst  netip.AddrPort
	sink Conn
	o    SeqFlowOptions
	run  [8]byte

	start time.Time

	stop     chan struct{} // closed by Stop: the sender ends
	sendDone chan struct{}
	recvDone chan struct{}
	stopped  atomic.Bool

	stopSendOnce sync.Once

	sent     atomic.Uint64
	received atomic.Uint64 // datagrams of this flow, duplicates included

	// The sender's, read after sendDone.
	sendErrors, skipped uint64
	lastSend            time.Duration
	sendErr             error

	// The receiver's, read after recvDone.
	rx seqReceiver
}

// seqReceiver is the receiver's record. Its methods are called from one
// goroutine.
type seqReceiver struct {
	// sendAt and arriveAt are per sequence number: the send time and
	// the arrival time, in nanoseconds since the start, plus 1 (0: not
	// received).
	sendAt, arriveAt []int64
	highest          uint64
	any              bool
	distinct         uint64
	dups, reordered  uint64
	foreign          uint64
	lastArrival      int64
	arrived          bool
	silence, silAt   int64
	err              error
	gapsOver         time.Duration
}

// StartSeqFlow starts sending from src to dst, where sink receives, and
// returns at once. The flow runs until Stop. src and sink are not closed;
// sink's read deadline is used to end the receiver.
func StartSeqFlow(src Conn, dst netip.AddrPort, sink Conn, o SeqFlowOptions) *SeqFlow {
	o.defaults()
	f := &SeqFlow{src: src, dst: dst, sink: sink, o: o,
		stop: make(chan struct{}), sendDone: make(chan struct{}), recvDone: make(chan struct{})}
	rand.Read(f.run[:])
	f.rx.gapsOver = o.GapsOver
	f.rx.sendAt = make([]int64, 0, o.Expect)
	f.rx.arriveAt = make([]int64, 0, o.Expect)
	sink.SetReadDeadline(time.Time{})
	f.start = time.Now()
	go f.receive()
	go f.send()
	return f
}

// Sent is how many sequence numbers the sender has used so far.
func (f *SeqFlow) Sent() uint64 { return f.sent.Load() }

// Received is how many of the flow's datagrams have arrived so far,
// duplicates included.
func (f *SeqFlow) Received() uint64 { return f.received.Load() }

// Since returns the time since the flow started: the time base of its
// result (SeqResult.Gaps).
func (f *SeqFlow) Since() time.Duration { return time.Since(f.start) }

// send is the sender: each tick it sends what is due.
func (f *SeqFlow) send() {
	defer close(f.sendDone)
	pkt := make([]byte, f.o.Size)
	copy(pkt, f.run[:])
	perTick := max(1, int(int64(f.o.Rate)*int64(f.o.Tick)/int64(time.Second)))
	maxBurst := uint64(4 * perTick)
	behind := uint64(f.o.Rate / 10) // 100 ms
	tick := time.NewTicker(f.o.Tick)
	defer tick.Stop()
	var seq uint64
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		due := uint64(time.Since(f.start).Seconds()*float64(f.o.Rate)) - f.skipped
		if due <= seq {
			continue
		}
		if due-seq > behind {
			f.skipped += due - seq - maxBurst
			due = seq + maxBurst
		}
		var err error
		seq, err = f.sendBurst(pkt, seq, min(due-seq, maxBurst))
		f.sent.Store(seq)
		if err != nil {
			f.sendErr = err
			return
		}
	}
}

// sendBurst sends n datagrams from pkt numbered from seq on and returns
// the next number. It fails only when the socket is closed. It does not
// allocate.
func (f *SeqFlow) sendBurst(pkt []byte, seq, n uint64) (uint64, error) {
	for range n {
		now := time.Since(f.start)
		binary.BigEndian.PutUint64(pkt[8:], seq)
		binary.BigEndian.PutUint64(pkt[16:], uint64(now))
		if _, err := f.src.WriteToUDPAddrPort(pkt, f.dst); err != nil {
			f.sendErrors++
			if errors.Is(err, net.ErrClosed) {
				return seq, fmt.Errorf("lab: seq flow to %v: %w", f.dst, err)
			}
		}
		seq++
		f.lastSend = now
	}
	return seq, nil
}

// receive is the receiver: it records each datagram until its read
// deadline passes.
func (f *SeqFlow) receive() {
	defer close(f.recvDone)
	buf := make([]byte, 64<<10)
	for {
		n, _, err := f.sink.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && f.stopped.Load() {
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			f.rx.err = fmt.Errorf("lab: seq flow receiver: %w", err)
			return
		}
		now := int64(time.Since(f.start))
		if n < seqHeader || [8]byte(buf[:8]) != f.run {
			f.rx.foreign++
			continue
		}
		f.received.Add(1)
		f.rx.record(binary.BigEndian.Uint64(buf[8:]), int64(binary.BigEndian.Uint64(buf[16:])), now)
	}
}

// record notes that sequence number seq, sent at sentAt, arrived at now.
func (r *seqReceiver) record(seq uint64, sentAt, now int64) {
	if seq >= maxSeqFlow {
		r.foreign++
		return
	}
	if r.arrived {
		if d := now - r.lastArrival; d > r.silence {
			r.silence, r.silAt = d, r.lastArrival
		}
	}
	r.lastArrival, r.arrived = now, true
	if int(seq) >= len(r.sendAt) {
		r.sendAt = slices.Grow(r.sendAt, int(seq)+1-len(r.sendAt))[:seq+1]
		r.arriveAt = slices.Grow(r.arriveAt, int(seq)+1-len(r.arriveAt))[:seq+1]
	}
	if r.sendAt[seq] != 0 {
		r.dups++
		return
	}
	r.sendAt[seq], r.arriveAt[seq] = sentAt+1, now+1
	r.distinct++
	if r.any && seq < r.highest {
		r.reordered++
	}
	if !r.any || seq > r.highest {
		r.highest = seq
	}
	r.any = true
}

// StopSending ends the sender and waits until every datagram sent has
// arrived or none has for drain (default 500ms). The receiver goes on
// recording (a datagram that arrives now counts, as a duplicate if its
// number came before) until Stop. It is idempotent.
func (f *SeqFlow) StopSending(drain time.Duration) {
	f.stopSendOnce.Do(func() {
		if drain <= 0 {
			drain = 500 * time.Millisecond
		}
		close(f.stop)
		<-f.sendDone
		sent := f.sent.Load()
		last, quiet := f.received.Load(), time.Now()
		for time.Since(quiet) < drain && last < sent {
			select {
			case <-f.recvDone:
				return // the receiver failed: nothing more comes
			case <-time.After(5 * time.Millisecond):
			}
			if n := f.received.Load(); n != last {
				last, quiet = n, time.Now()
			}
		}
	})
}

// Stop ends the sender as StopSending does (if it has not yet), then the
// receiver, and returns what the flow measured. The error is the
// sender's or the receiver's, if one failed. Stop must be called once.
func (f *SeqFlow) Stop(drain time.Duration) (SeqResult, error) {
	f.StopSending(drain)
	f.stopped.Store(true)
	f.sink.SetReadDeadline(time.Unix(1, 0))
	<-f.recvDone
	f.sink.SetReadDeadline(time.Time{})
	r := f.rx.result(f.sent.Load(), f.lastSend)
	r.Rate, r.Size = f.o.Rate, f.o.Size
	r.SendErrors, r.Skipped = f.sendErrors, f.skipped
	return r, errors.Join(f.sendErr, f.rx.err)
}

// result computes the loss, the gaps and the latency of a flow that sent
// sent sequence numbers, the last at lastSend.
func (r *seqReceiver) result(sent uint64, lastSend time.Duration) SeqResult {
	res := SeqResult{Sent: sent, Received: r.distinct, Duplicates: r.dups, Reordered: r.reordered, Foreign: r.foreign,
		Silence: time.Duration(r.silence), SilenceStart: time.Duration(r.silAt), Elapsed: lastSend}
	if sent > r.distinct {
		res.Lost = sent - r.distinct
	}
	// The longest run of lost numbers below sent.
	var prevSend int64 // send time of the last received number; 0: the start
	runStart := uint64(0)
	inRun := false
	end := min(uint64(len(r.sendAt)), sent)
	closeRun := func(last uint64, until int64) {
		d := time.Duration(until - prevSend)
		if res.GapLost == 0 || d > res.Gap {
			res.Gap, res.GapFirst, res.GapLast, res.GapLost, res.GapStart = d, runStart, last, last-runStart+1, time.Duration(prevSend)
		}
		if r.gapsOver > 0 && d >= r.gapsOver {
			res.Gaps = append(res.Gaps, SeqGap{Start: time.Duration(prevSend), Length: d, Lost: last - runStart + 1})
		}
	}
	for seq := uint64(0); seq < sent; seq++ {
		if seq < end && r.sendAt[seq] != 0 {
			if inRun {
				closeRun(seq-1, r.sendAt[seq]-1)
				inRun = false
			}
			prevSend = r.sendAt[seq] - 1
			continue
		}
		if !inRun {
			inRun, runStart = true, seq
			res.Runs++
		}
	}
	if inRun {
		closeRun(sent-1, int64(lastSend))
	}
	// Latency.
	lat := make([]time.Duration, 0, r.distinct)
	for i := range r.sendAt[:end] {
		if r.sendAt[i] != 0 {
			lat = append(lat, time.Duration(r.arriveAt[i]-r.sendAt[i]))
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.LatencyP50, res.LatencyP99, res.LatencyMax = Percentile(lat, 0.5), Percentile(lat, 0.99), lat[len(lat)-1]
	}
	return res
}
