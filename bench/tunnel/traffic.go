package tunnel

// The built-in traffic of a cell, from sockets this process opens inside
// the namespaces (lab.Netns.ListenUDP):
//
//   - flood: an open-loop UDP flood from site A to site B, spread round
//     robin over every path (one per tunnel), sent in batches with
//     sendmmsg and received with recvmmsg, as fast as the sending socket
//     takes them (iperf3 -u -b 0 does the same, one path at a time);
//     counted: datagrams sent, received, and the time they took.
//   - probe: UDP echo requests at a fixed rate, round robin over the paths,
//     each stamped with its send time, answered by an echo in site B from
//     the address it was sent to (so that the answer goes back through the
//     same tunnel); counted: the round-trip times.
//
// A path's source address is set per datagram (IP_PKTINFO), so that one
// socket reaches every tunnel: a gateway accepts from a tunnel only inner
// addresses of that tunnel's prefixes.

import (
	"context"
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

	"golang.org/x/net/ipv4"

	"github.com/sluicegw/sluice/internal/lab"
)

// Path is one way through the system under test: from Src in site A to Dst
// in site B.
type Path struct {
	Src, Dst netip.Addr
}

// Ports of the built-in traffic in site B.
const (
	floodPort = 9100
	echoPort  = 9101
)

// headerBytes starts each datagram: run id (8), sequence number (8).
const headerBytes = 16

// udpIPHeaders is what an inner IPv4 packet has besides its UDP payload.
const udpIPHeaders = 28

// floodBatch is the datagrams per sendmmsg and recvmmsg.
const floodBatch = 64

// FloodResult is what one flood counted.
type FloodResult struct {
	Payload  int           // UDP payload bytes per datagram
	Sent     uint64        // datagrams the sending socket took
	Received uint64        // datagrams of this flood received in site B
	Elapsed  time.Duration // from the first send to the last receipt
}

// PPS is the received datagrams per second.
func (r FloodResult) PPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Received) / r.Elapsed.Seconds()
}

// Gbps is the received UDP payload in Gbit/s.
func (r FloodResult) Gbps() float64 { return r.PPS() * float64(r.Payload) * 8 / 1e9 }

// LossPercent is the share of the sent datagrams not received.
func (r FloodResult) LossPercent() float64 {
	if r.Sent == 0 || r.Received >= r.Sent {
		return 0
	}
	return 100 * float64(r.Sent-r.Received) / float64(r.Sent)
}

// pktinfo returns the control message that sends from src, or nil when src
// is not set (the kernel picks the source).
func pktinfo(src netip.Addr) []byte {
	if !src.IsValid() {
		return nil
	}
	cm := &ipv4.ControlMessage{Src: src.AsSlice()}
	return cm.Marshal()
}

// runID returns 8 random bytes that mark one run's datagrams.
func runID() [8]byte {
	var b [8]byte
	rand.Read(b[:])
	return b
}

// flood sends payload-byte datagrams from src (a socket in site A) over
// the paths, round robin, for d, to sink (a socket in site B bound to
// floodPort on every address), and counts what arrives. It waits for the
// last datagrams until none arrived for 200 ms (2 s at most). Neither
// socket is closed; sink's read deadline is used and cleared.
func flood(ctx context.Context, src, sink *net.UDPConn, paths []Path, payload int, d time.Duration) (FloodResult, error) {
	res := FloodResult{Payload: payload}
	if payload < headerBytes {
		return res, fmt.Errorf("bench: flood payload %d: want at least %d bytes", payload, headerBytes)
	}
	run := runID()
	var received atomic.Uint64
	var lastRecv atomic.Int64 // ns since start
	start := time.Now()
	rxErr := make(chan error, 1)
	sink.SetReadDeadline(time.Time{})
	defer sink.SetReadDeadline(time.Time{})
	go func() {
		pc := ipv4.NewPacketConn(sink)
		ms := make([]ipv4.Message, floodBatch)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			n, err := pc.ReadBatch(ms, 0)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil
				}
				rxErr <- err
				return
			}
			k := uint64(0)
			for _, m := range ms[:n] {
				if m.N >= headerBytes && [8]byte(m.Buffers[0][:8]) == run {
					k++
				}
			}
			if k > 0 {
				received.Add(k)
				lastRecv.Store(int64(time.Since(start)))
			}
		}
	}()

	pc := ipv4.NewPacketConn(src)
	dsts := make([]net.Addr, len(paths))
	oobs := make([][]byte, len(paths))
	for i, p := range paths {
		dsts[i] = net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.Dst, floodPort))
		oobs[i] = pktinfo(p.Src)
	}
	ms := make([]ipv4.Message, floodBatch)
	for i := range ms {
		b := make([]byte, payload)
		copy(b, run[:])
		ms[i].Buffers = [][]byte{b}
	}
	var sendErr error
	next, seq := 0, uint64(0)
	end := start.Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		for i := range ms {
			binary.BigEndian.PutUint64(ms[i].Buffers[0][8:], seq+uint64(i))
			ms[i].Addr, ms[i].OOB = dsts[(next+i)%len(paths)], oobs[(next+i)%len(paths)]
		}
		n, err := pc.WriteBatch(ms, 0)
		if err != nil && n <= 0 {
			if errors.Is(err, net.ErrClosed) {
				sendErr = err
				break
			}
			// A full queue (ENOBUFS) on the way: the datagram is not
			// counted as sent; yield and go on.
			time.Sleep(50 * time.Microsecond)
			continue
		}
		seq += uint64(n)
		next = (next + n) % len(paths)
	}
	res.Sent = seq
	sentFor := time.Since(start)

	// The last datagrams: until nothing arrived for 200 ms.
	_ = lab.WaitFor(ctx, "the flood's last datagrams", 2*time.Second, 20*time.Millisecond, func() (bool, error) {
		if received.Load() >= seq {
			return true, nil
		}
		return time.Since(start)-time.Duration(lastRecv.Load()) > 200*time.Millisecond, nil
	})
	sink.SetReadDeadline(time.Unix(1, 0))
	err := <-rxErr
	res.Received = received.Load()
	res.Elapsed = sentFor
	if res.Received > 0 {
		res.Elapsed = max(time.Duration(lastRecv.Load()), time.Millisecond)
	}
	if sendErr != nil || err != nil {
		return res, fmt.Errorf("bench: flood: %w", errors.Join(sendErr, err))
	}
	return res, ctx.Err()
}

// echo answers every datagram on c (bound to echoPort on every address of
// site B) with itself, from the address it was sent to, until ctx ends.
func echo(ctx context.Context, c *net.UDPConn) error {
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return fmt.Errorf("bench: echo: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 2048)
	for {
		n, cm, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("bench: echo: %w", err)
		}
		var reply *ipv4.ControlMessage
		if cm != nil && cm.Dst != nil {
			reply = &ipv4.ControlMessage{Src: cm.Dst}
		}
		pc.WriteTo(buf[:n], reply, from)
	}
}

// ProbeResult is what a probe run measured.
type ProbeResult struct {
	Sent int
	RTTs []time.Duration // of the answered probes, sorted
}

// Quantile returns the q-quantile of the round trips (nearest rank).
func (r ProbeResult) Quantile(q float64) time.Duration { return lab.Percentile(r.RTTs, q) }

// LossPercent is the share of probes unanswered.
func (r ProbeResult) LossPercent() float64 {
	if r.Sent == 0 {
		return 0
	}
	return 100 * float64(r.Sent-len(r.RTTs)) / float64(r.Sent)
}

// probeBytes is the UDP payload of a latency probe.
const probeBytes = 36 // a 64-byte inner IPv4 packet

// probe sends echo requests from c (a socket in site A) over the paths,
// round robin, at rate per second for d, and collects the answers until
// 500 ms after the last request (or until every one is answered). c's read
// deadline is used and cleared.
func probe(ctx context.Context, c *net.UDPConn, paths []Path, rate int, d time.Duration) (ProbeResult, error) {
	run := runID()
	pc := ipv4.NewPacketConn(c)
	var (
		mu   sync.Mutex
		rtts = make([]time.Duration, 0, int(float64(rate)*d.Seconds())+16)
	)
	start := time.Now()
	rxErr := make(chan error, 1)
	c.SetReadDeadline(time.Time{})
	defer c.SetReadDeadline(time.Time{})
	var answered atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, _, err := pc.ReadFrom(buf)
			now := time.Since(start)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil
				}
				rxErr <- err
				return
			}
			if n < headerBytes+8 || [8]byte(buf[:8]) != run {
				continue
			}
			sent := time.Duration(binary.BigEndian.Uint64(buf[16:]))
			mu.Lock()
			rtts = append(rtts, now-sent)
			mu.Unlock()
			answered.Add(1)
		}
	}()
	dsts := make([]net.Addr, len(paths))
	cms := make([]*ipv4.ControlMessage, len(paths))
	for i, p := range paths {
		dsts[i] = net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.Dst, echoPort))
		if p.Src.IsValid() {
			cms[i] = &ipv4.ControlMessage{Src: p.Src.AsSlice()}
		}
	}
	interval := time.Second / time.Duration(rate)
	req := make([]byte, probeBytes)
	copy(req, run[:])
	sent := 0
	var sendErr error
	for ctx.Err() == nil {
		due := time.Duration(sent) * interval
		if due >= d {
			break
		}
		if wait := due - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		binary.BigEndian.PutUint64(req[8:], uint64(sent))
		binary.BigEndian.PutUint64(req[16:], uint64(time.Since(start)))
		i := sent % len(paths)
		if _, err := pc.WriteTo(req, cms[i], dsts[i]); errors.Is(err, net.ErrClosed) {
			sendErr = err
			break
		}
		sent++ // a refused send counts as a lost probe
	}
	_ = lab.WaitFor(ctx, "the last probes", 500*time.Millisecond, 10*time.Millisecond, func() (bool, error) {
		return answered.Load() >= int64(sent), nil
	})
	c.SetReadDeadline(time.Unix(1, 0))
	err := <-rxErr
	mu.Lock()
	res := ProbeResult{Sent: sent, RTTs: slices.Clone(rtts)}
	mu.Unlock()
	slices.Sort(res.RTTs)
	if sendErr != nil || err != nil {
		return res, fmt.Errorf("bench: probe: %w", errors.Join(sendErr, err))
	}
	return res, ctx.Err()
}

// reachAll waits until one probe over each path has been answered, each
// path within timeout.
func reachAll(ctx context.Context, c *net.UDPConn, paths []Path, timeout time.Duration) error {
	for i, p := range paths {
		err := lab.WaitFor(ctx, fmt.Sprintf("an answer through path %d (%v -> %v)", i, p.Src, p.Dst), timeout, time.Millisecond, func() (bool, error) {
			r, err := probe(ctx, c, []Path{p}, 1000, time.Millisecond)
			if err != nil {
				return false, err
			}
			return len(r.RTTs) > 0, errors.New("no answer")
		})
		if err != nil {
			return err
		}
	}
	return nil
}
