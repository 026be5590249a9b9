package failover

// The instruments around one disruption, as e2e's runDisruption has them
// (e2e/ha_test.go): sequence-numbered UDP both ways between the lan host
// and the remote host (lab.SeqFlow), and a paced TCP stream from the host
// to the remote host whose receiver times the longest silence between two
// reads (the TCP stall). The ESP capture and replay checks of the tests
// are left to them: the bench measures.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// Ports of the instruments on the two hosts.
const (
	portUp   = 7001 // host -> remote datagrams
	portDown = 7002 // remote -> host datagrams
	portTCP  = 7003 // the TCP stream's server on the remote host
)

// Phases of a run's traffic around the disruption.
const (
	before = 700 * time.Millisecond  // traffic before the kill
	after  = 1300 * time.Millisecond // traffic once it is back both ways
)

// flows are the two sequence-numbered flows of a run and their sockets.
type flows struct {
	up, down *lab.SeqFlow
	conns    []*net.UDPConn
}

// startFlows opens the sockets and starts both flows at rate.
func startFlows(t *lab.HATopology, rate int) (*flows, error) {
	f := &flows{}
	open := func(ns *lab.Netns, a netip.Addr, port uint16) (*net.UDPConn, error) {
		c, err := ns.ListenUDP(netip.AddrPortFrom(a, port))
		if err != nil {
			return nil, err
		}
		c.SetReadBuffer(8 << 20)
		f.conns = append(f.conns, c)
		return c, nil
	}
	var cs [4]*net.UDPConn
	var err error
	for i, s := range []struct {
		ns   *lab.Netns
		a    netip.Addr
		port uint16
	}{{t.Host, t.HostAddr, portUp}, {t.Host, t.HostAddr, portDown}, {t.Remote, t.RemoteAddr, portDown}, {t.Remote, t.RemoteAddr, portUp}} {
		if cs[i], err = open(s.ns, s.a, s.port); err != nil {
			f.close()
			return nil, err
		}
	}
	o := lab.SeqFlowOptions{Rate: rate, Size: 64}
	f.up = lab.StartSeqFlow(cs[0], netip.AddrPortFrom(t.RemoteAddr, portUp), cs[3], o)
	f.down = lab.StartSeqFlow(cs[2], netip.AddrPortFrom(t.HostAddr, portDown), cs[1], o)
	return f, nil
}

func (f *flows) sent() [2]uint64     { return [2]uint64{f.up.Sent(), f.down.Sent()} }
func (f *flows) received() [2]uint64 { return [2]uint64{f.up.Received(), f.down.Received()} }

// waitSent waits until each flow has sent n more datagrams than from.
func (f *flows) waitSent(ctx context.Context, what string, from [2]uint64, n uint64, timeout time.Duration) error {
	return lab.WaitFor(ctx, what, timeout, 5*time.Millisecond, func() (bool, error) {
		s := f.sent()
		return s[0] >= from[0]+n && s[1] >= from[1]+n, nil
	})
}

// stop ends both flows and returns what their receivers saw.
func (f *flows) stop() (up, down lab.SeqResult, err error) {
	f.up.StopSending(100 * time.Millisecond)
	f.down.StopSending(100 * time.Millisecond)
	up, err1 := f.up.Stop(0)
	down, err2 := f.down.Stop(0)
	f.close()
	return up, down, errors.Join(err1, err2)
}

func (f *flows) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

// tcpStream is a TCP stream paced at a fixed rate from the lan host to the
// remote host; its receiver notes the longest time between two reads.
type tcpStream struct {
	ln   net.Listener
	conn net.Conn // the client's
	srv  chan net.Conn
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	bytes    uint64
	first    time.Time // first read
	last     time.Time // latest read
	maxGap   time.Duration
	serveErr error
}

// tcpTick is the sender's pacing interval.
const tcpTick = 5 * time.Millisecond

// startTCP connects and starts sending mbps megabits a second.
func startTCP(ctx context.Context, t *lab.HATopology, mbps float64) (*tcpStream, error) {
	addr := netip.AddrPortFrom(t.RemoteAddr, portTCP).String()
	ln, err := t.Remote.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tcpStream{ln: ln, stop: make(chan struct{}), srv: make(chan net.Conn, 1)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			s.serveErr = err
			s.mu.Unlock()
			return
		}
		s.srv <- c
		s.serve(c)
	}()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if s.conn, err = t.Host.Dial(dctx, "tcp", addr); err != nil {
		ln.Close()
		s.wg.Wait()
		return nil, fmt.Errorf("bench: TCP stream: %w", err)
	}
	s.wg.Add(1)
	go s.send(mbps)
	return s, nil
}

// serve reads until the client closes, timing the silences.
func (s *tcpStream) serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		now := time.Now()
		s.mu.Lock()
		if n > 0 {
			if s.first.IsZero() {
				s.first = now
			} else {
				s.maxGap = max(s.maxGap, now.Sub(s.last))
			}
			s.last = now
			s.bytes += uint64(n)
		}
		s.mu.Unlock()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
				s.mu.Lock()
				s.serveErr = err
				s.mu.Unlock()
			}
			return
		}
	}
}

// send writes what is due every tick; after a blocked write it sends at
// most one more tick's worth than the rate, not the whole backlog.
func (s *tcpStream) send(mbps float64) {
	defer s.wg.Done()
	perTick := int(mbps * 1e6 / 8 * tcpTick.Seconds())
	buf := make([]byte, perTick)
	tk := time.NewTicker(tcpTick)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		if _, err := s.conn.Write(buf[:perTick]); err != nil {
			return
		}
	}
}

// end stops the stream and returns the longest stall and the rate it
// carried. A stream that is silent when it ends counts that silence too.
func (s *tcpStream) end() (stall time.Duration, mbps float64, err error) {
	now := time.Now()
	close(s.stop)
	s.conn.Close()
	s.ln.Close()
	// The client's FIN may never arrive (a tunnel that is still down):
	// the server stops reading now.
	select {
	case c := <-s.srv:
		c.SetReadDeadline(now)
	default:
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		return 0, 0, fmt.Errorf("bench: the TCP stream carried nothing: %v", s.serveErr)
	}
	stall = max(s.maxGap, now.Sub(s.last))
	if el := s.last.Sub(s.first); el > 0 {
		mbps = float64(s.bytes) * 8 / el.Seconds() / 1e6
	}
	return stall, mbps, nil
}

// measure runs the instruments across a disruption: both flows and the TCP
// stream start, run for a while, disrupt kills (and restarts, or waits for
// a takeover) and returns the daemon that carries the tunnel afterwards
// (nil if not a sluice), traffic must come back both ways within
// Options.GiveUp of the kill, and runs a while more. from is the sluice
// that carries the tunnel before (nil if not a sluice): its drops just
// before the kill are kept.
func (b *bed) measure(from *daemon, disrupt func() (*daemon, error)) (Sample, error) {
	var s Sample
	ctx, t, o := b.ctx, b.topo, b.o
	f, err := startFlows(t, o.Rate)
	if err != nil {
		return s, err
	}
	defer f.close()
	tcp, err := startTCP(ctx, t, o.TCPMbps)
	if err != nil {
		f.stop()
		return s, err
	}
	tcpDone := false
	defer func() {
		if !tcpDone {
			tcp.end()
		}
	}()
	if err := f.waitSent(ctx, "traffic before the kill", [2]uint64{}, uint64(float64(o.Rate)*before.Seconds()), 30*time.Second); err != nil {
		return s, err
	}
	if r := f.received(); r[0] == 0 || r[1] == 0 {
		return s, fmt.Errorf("bench: no traffic through the tunnel before the kill (received %v)", r)
	}
	if from != nil {
		if _, s.DropsBefore, err = b.refused(from); err != nil {
			return s, err
		}
	}
	sent, recv := f.sent(), f.received()
	s.LostBeforeUp, s.LostBeforeDown = sent[0]-min(recv[0], sent[0]), sent[1]-min(recv[1], sent[1])
	start := time.Now()
	to, err := disrupt()
	s.Outage = time.Since(start)
	if err != nil {
		return s, err
	}
	back := f.received()
	err = lab.WaitFor(ctx, "traffic both ways after the kill", max(o.GiveUp-time.Since(start), time.Millisecond), 5*time.Millisecond, func() (bool, error) {
		r := f.received()
		return r[0] > back[0]+100 && r[1] > back[1]+100, nil
	})
	switch {
	case ctx.Err() != nil:
		return s, ctx.Err()
	case err != nil:
		s.GaveUp = true
	default:
		if err := f.waitSent(ctx, "traffic after the kill", f.sent(), uint64(float64(o.Rate)*after.Seconds()), 30*time.Second); err != nil {
			return s, err
		}
	}
	tcpDone = true
	stall, mbps, tcpErr := tcp.end()
	s.TCPStall, s.TCPMbps = stall, mbps
	if tcpErr != nil {
		// The stream, not the run, failed (on a loaded machine its
		// handshake can be lost and its retransmission fall past the
		// run): the run keeps its gaps, without a stall.
		s.TCPError = firstLine(tcpErr)
	}
	up, down, err := f.stop()
	if err != nil {
		return s, err
	}
	s.GapUp, s.GapDown, s.LostUp, s.LostDown, s.RunsUp, s.RunsDown = up.Gap, down.Gap, up.Lost, down.Lost, up.Runs, down.Runs
	if s.GaveUp {
		// Censored: the outage lasted at least the bound.
		s.GapUp, s.GapDown = max(s.GapUp, o.GiveUp), max(s.GapDown, o.GiveUp)
		if s.TCPError == "" {
			s.TCPStall = max(s.TCPStall, o.GiveUp)
		}
	}
	s.Refused = -1
	if to != nil {
		if s.Refused, s.Drops, err = b.refused(to); err != nil {
			return s, err
		}
	}
	return s, nil
}
