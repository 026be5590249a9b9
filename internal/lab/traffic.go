package lab

// Traffic generation and measurement over UDP sockets, in this process:
//
//   - Flood sends sequence-numbered datagrams from one socket to another for
//     a while, as fast as the path takes them with at most Window of them
//     in flight (sent and not yet seen by the receiver), so that no queue on
//     the way (TUN, socket buffers, handoff queues) overflows because of the
//     generator; it reports throughput, packet rate and loss.
//   - Echo answers each datagram with itself; Ping sends timestamped
//     requests to an Echo, one at a time, and reports round-trip latency
//     percentiles.
//
// Both work on kernel sockets (*net.UDPConn, opened in a namespace with
// Netns.ListenUDP) and on MemHost sockets alike.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Conn is what the traffic functions need of a UDP socket: *net.UDPConn
// and *MemConn have it. A read past the deadline must fail with an error
// that is os.ErrDeadlineExceeded.
type Conn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	SetReadDeadline(t time.Time) error
	Close() error
}

// floodHeader is the start of every flood datagram: the run's random id and
// the sequence number.
const floodHeader = 16

// FloodOptions shape a Flood. Zero fields take the defaults.
type FloodOptions struct {
	// Size is the UDP payload of each datagram, at least 16 bytes;
	// default 1000.
	Size int
	// Duration is how long the sender sends; default 1s.
	Duration time.Duration
	// Window is the most datagrams in flight; default 64.
	Window int
	// Stall is how long a full window may see no progress before its
	// datagrams are given up as lost and the sender goes on; default
	// 200ms.
	Stall time.Duration
	// Drain is how long the receiver waits for the last datagrams after
	// the sender stopped, from the last one that arrived; default 500ms.
	Drain time.Duration
}

func (o *FloodOptions) defaults() {
	if o.Size <= 0 {
		o.Size = 1000
	}
	o.Size = max(o.Size, floodHeader)
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if o.Window <= 0 {
		o.Window = 64
	}
	if o.Stall <= 0 {
		o.Stall = 200 * time.Millisecond
	}
	if o.Drain <= 0 {
		o.Drain = 500 * time.Millisecond
	}
}

// FloodResult is what a Flood measured.
type FloodResult struct {
	Size       int           `json:"size"`        // UDP payload bytes per datagram
	Sent       uint64        `json:"sent"`        // datagrams sent
	Received   uint64        `json:"received"`    // datagrams of this flood received
	Lost       uint64        `json:"lost"`        // sent and not received
	Reordered  uint64        `json:"reordered"`   // received after a later one
	SendErrors uint64        `json:"send_errors"` // sends the socket refused (retried)
	Stalls     uint64        `json:"stalls"`      // windows given up after Stall
	Elapsed    time.Duration `json:"elapsed_ns"`  // first send to last receipt
}

// Mbps is the received UDP payload rate in Mbit/s.
func (r FloodResult) Mbps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Received) * float64(r.Size) * 8 / r.Elapsed.Seconds() / 1e6
}

// PPS is the received datagram rate per second.
func (r FloodResult) PPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Received) / r.Elapsed.Seconds()
}

// LossRatio is Lost/Sent.
func (r FloodResult) LossRatio() float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.Lost) / float64(r.Sent)
}

// Flood sends datagrams from src to dst, where sink receives them, for
// o.Duration, and waits up to o.Drain for the last ones. It stops early,
// with what it measured and ctx's error, when ctx ends. sink's read
// deadline is used to stop its reader and is cleared on return; neither
// socket is closed.
func Flood(ctx context.Context, src Conn, dst netip.AddrPort, sink Conn, o FloodOptions) (FloodResult, error) {
	o.defaults()
	res := FloodResult{Size: o.Size}
	var run [8]byte
	rand.Read(run[:])

	// The receiver publishes how far it got; the sender waits on it.
	var (
		acked    atomic.Uint64 // 1 + the highest sequence number received
		received atomic.Uint64
		lastRecv atomic.Int64 // nanoseconds since start
		progress = make(chan struct{}, 1)
		rxDone   = make(chan rxEnd, 1)
	)
	sink.SetReadDeadline(time.Time{})
	defer sink.SetReadDeadline(time.Time{})
	start := time.Now()
	go func() {
		buf := make([]byte, 64<<10)
		var reordered uint64
		for {
			n, _, err := sink.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil
				} else {
					err = fmt.Errorf("lab: flood sink: %w", err)
				}
				rxDone <- rxEnd{reordered, err}
				return
			}
			if n < floodHeader || [8]byte(buf[:8]) != run {
				continue // not ours
			}
			seq := binary.BigEndian.Uint64(buf[8:])
			received.Add(1)
			lastRecv.Store(int64(time.Since(start)))
			if seq+1 > acked.Load() {
				acked.Store(seq + 1)
			} else {
				reordered++
			}
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()

	// The sender.
	pkt := make([]byte, o.Size)
	copy(pkt, run[:])
	stall := time.NewTimer(time.Hour)
	stall.Stop()
	var (
		seq, floor uint64 // floor: sequence numbers below it are not waited for
		sendErr    error
		consecErr  int
	)
	end := start.Add(o.Duration)
send:
	for ctx.Err() == nil && time.Now().Before(end) {
		for seq-max(acked.Load(), floor) >= uint64(o.Window) {
			stall.Reset(o.Stall)
			select {
			case <-progress:
			case <-stall.C:
				floor = seq
				res.Stalls++
			case <-ctx.Done():
				break send
			}
			stall.Stop()
		}
		binary.BigEndian.PutUint64(pkt[8:], seq)
		if _, err := src.WriteToUDPAddrPort(pkt, dst); err != nil {
			res.SendErrors++
			consecErr++
			if errors.Is(err, net.ErrClosed) || consecErr >= 1000 {
				sendErr = fmt.Errorf("lab: flood to %v: %w", dst, err)
				break
			}
			time.Sleep(100 * time.Microsecond) // a full queue: let it drain
			continue
		}
		consecErr = 0
		seq++
	}
	res.Sent = seq
	sentFor := time.Since(start)

	// Drain: until everything arrived, or nothing did for o.Drain.
	drain := time.NewTimer(o.Drain)
	for received.Load() < seq && ctx.Err() == nil {
		drain.Reset(o.Drain)
		select {
		case <-progress:
			continue
		case <-drain.C:
		case <-ctx.Done():
		}
		break
	}
	drain.Stop()
	sink.SetReadDeadline(time.Unix(1, 0)) // ends the receiver's read
	rx := <-rxDone
	res.Reordered = rx.reordered

	res.Received = received.Load()
	if res.Sent > res.Received {
		res.Lost = res.Sent - res.Received
	}
	res.Elapsed = sentFor
	if res.Received > 0 {
		res.Elapsed = time.Duration(lastRecv.Load())
	}
	return res, errors.Join(sendErr, rx.err, ctx.Err())
}

// rxEnd is how a flood's receiver ended.
type rxEnd struct {
	reordered uint64
	err       error
}

// Echo answers each datagram that arrives on c with its payload, to its
// sender, until ctx ends or c is closed. It returns how many it answered.
// c's read deadline is used to stop it.
func Echo(ctx context.Context, c Conn) (uint64, error) {
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 64<<10)
	var n uint64
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return n, nil
			}
			return n, fmt.Errorf("lab: echo: %w", err)
		}
		if _, err := c.WriteToUDPAddrPort(buf[:k], from); err == nil {
			n++
		}
	}
}

// PingOptions shape a Ping. Zero fields take the defaults.
type PingOptions struct {
	// Duration is how long probes are sent; default 1s.
	Duration time.Duration
	// Count, if > 0, stops after that many probes, even before Duration.
	Count int
	// Timeout is how long a probe waits for its answer before it counts
	// as lost; default 1s.
	Timeout time.Duration
	// Interval is the pause between an answer and the next probe;
	// default none (back to back).
	Interval time.Duration
	// Size is the UDP payload of a probe, at least 24 bytes; default 64.
	Size int
}

// Latency is what a Ping measured. The percentiles are of the round-trip
// times of the answered probes (nearest rank).
type Latency struct {
	Sent     int           `json:"sent"`
	Received int           `json:"received"`
	Lost     int           `json:"lost"`
	Min      time.Duration `json:"min_ns"`
	Mean     time.Duration `json:"mean_ns"`
	P50      time.Duration `json:"p50_ns"`
	P90      time.Duration `json:"p90_ns"`
	P99      time.Duration `json:"p99_ns"`
	Max      time.Duration `json:"max_ns"`
	// RTTs are the round-trip times in the order the probes were sent.
	RTTs []time.Duration `json:"-"`
}

// Ping sends probes from c to an Echo at dst, one at a time, and measures
// their round trips. It stops early, with what it measured and ctx's
// error, when ctx ends.
func Ping(ctx context.Context, c Conn, dst netip.AddrPort, o PingOptions) (Latency, error) {
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Size <= 0 {
		o.Size = 64
	}
	o.Size = max(o.Size, 24)
	defer c.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	var lat Latency
	var run [8]byte
	rand.Read(run[:])
	req := make([]byte, o.Size)
	copy(req, run[:])
	buf := make([]byte, 64<<10)
	start := time.Now()
	end := start.Add(o.Duration)
	for seq := uint64(0); ctx.Err() == nil && time.Now().Before(end) && (o.Count <= 0 || lat.Sent < o.Count); seq++ {
		binary.BigEndian.PutUint64(req[8:], seq)
		sent := time.Since(start)
		binary.BigEndian.PutUint64(req[16:], uint64(sent))
		if _, err := c.WriteToUDPAddrPort(req, dst); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return lat.finish(), fmt.Errorf("lab: ping %v: %w", dst, err)
			}
			lat.Sent++ // counts as lost
			continue
		}
		lat.Sent++
		c.SetReadDeadline(start.Add(sent + o.Timeout))
		for {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break // lost, or ctx ended
				}
				return lat.finish(), fmt.Errorf("lab: ping %v: %w", dst, err)
			}
			if n < 24 || [8]byte(buf[:8]) != run || binary.BigEndian.Uint64(buf[8:]) != seq {
				continue // not ours, or the late answer to an earlier probe
			}
			lat.RTTs = append(lat.RTTs, time.Since(start)-time.Duration(binary.BigEndian.Uint64(buf[16:])))
			break
		}
		if o.Interval > 0 {
			select {
			case <-time.After(o.Interval):
			case <-ctx.Done():
			}
		}
	}
	return lat.finish(), ctx.Err()
}

// finish fills in the counts and statistics from RTTs.
func (l Latency) finish() Latency {
	l.Received = len(l.RTTs)
	l.Lost = l.Sent - l.Received
	if l.Received == 0 {
		return l
	}
	s := slices.Clone(l.RTTs)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	l.Min, l.Max, l.Mean = s[0], s[len(s)-1], sum/time.Duration(len(s))
	l.P50, l.P90, l.P99 = Percentile(s, 0.50), Percentile(s, 0.90), Percentile(s, 0.99)
	return l
}

// Percentile returns the q-quantile (0 < q <= 1) of sorted by nearest
// rank: the smallest value that at least q of the values do not exceed.
// It returns 0 for an empty slice.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
