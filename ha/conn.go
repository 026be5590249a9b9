package ha

// The sync channel, one TLS connection to the peer:
//
//  1. dialer (the member whose name sorts lower) or acceptor: TCP with
//     TCP_NODELAY and TCP_USER_TIMEOUT, then the mutual TLS handshake
//  2. the event loop adopts the connection (a newer one replaces an older)
//  3. writer: frames from a bounded queue, flushed when the queue is empty
//  4. reader: frames to the event loop; the connection's end to the loop

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxHandshakes bounds the TLS handshakes in progress on the listener,
// all from the peer's address (admit.go); a connection beyond it closes
// the oldest (whose handshake is counted as failed). The peer dials one
// at a time, so a few suffice.
const maxHandshakes = 4

// queueLen is how many frames wait for the writer before the queue
// counts as overflowing.
const queueLen = 4096

// conn is one sync connection. The event loop owns the choice of the
// current one; the writer and reader goroutines end when closed is closed.
type conn struct {
	m        *Member
	tc       *tls.Conn
	raw      net.Conn
	out      chan []byte   // frames to send; never closed
	closed   chan struct{} // closed by close
	once     sync.Once
	ver      int          // wire version (wire.go), from the handshake
	overflow atomic.Bool  // a frame was dropped: resync when drained
	lastRx   atomic.Int64 // unix nanoseconds of the last frame read
}

func newConn(m *Member, raw net.Conn, tc *tls.Conn) *conn {
	c := &conn{m: m, tc: tc, raw: raw, out: make(chan []byte, queueLen), closed: make(chan struct{}), ver: wireV1}
	if tc != nil && tc.ConnectionState().NegotiatedProtocol == alpnV2 {
		c.ver = wireV2
	}
	c.lastRx.Store(time.Now().UnixNano())
	return c
}

// close ends the connection; it may be called more than once, from any
// goroutine.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.closed)
		c.raw.Close()
	})
}

// start runs the connection's writer and reader.
func (c *conn) start() {
	c.m.wg.Add(2)
	go c.writer()
	go c.reader()
}

// writer sends queued frames, flushing whenever the queue is empty, and
// tells the event loop when an overflowed queue has drained.
func (c *conn) writer() {
	defer c.m.wg.Done()
	w := bufio.NewWriterSize(c.tc, 64<<10)
	timeout := c.m.cfg.Interval * time.Duration(c.m.cfg.Misses)
	for {
		var f []byte
		select {
		case f = <-c.out:
		case <-c.closed:
			return
		}
		if !c.m.mute.Load() {
			c.raw.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := w.Write(f); err != nil {
				c.close()
				return
			}
		}
		if len(c.out) > 0 {
			continue
		}
		if err := w.Flush(); err != nil {
			c.close()
			return
		}
		if c.overflow.Load() {
			select {
			case c.m.drained <- c:
			default:
			}
		}
	}
}

// reader hands the peer's messages to the event loop until the
// connection ends, then reports how it ended.
func (c *conn) reader() {
	defer c.m.wg.Done()
	r := bufio.NewReaderSize(c.tc, 64<<10)
	var buf []byte
	for {
		f, err := readFrame(r, buf)
		buf = f[:0]
		var m *msg
		if err == nil {
			c.m.ctr.framesIn.Add(1)
			if c.m.mute.Load() {
				continue
			}
			c.lastRx.Store(time.Now().UnixNano())
			m, err = decodeMsg(f, c.ver)
			if err != nil {
				err = &protocolError{err}
			}
		} else if errors.Is(err, errFrameSize) {
			err = &protocolError{err}
		}
		ev := event{c: c, msg: m, err: err}
		select {
		case c.m.events <- ev:
		case <-c.m.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// protocolError is a peer's frame that breaks the protocol: the
// connection is dropped, but the peer is not taken for dead at once.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

// event is a message from the peer, or (err set) the end of a connection.
type event struct {
	c   *conn
	msg *msg
	err error
}

// setSockopts sets TCP_NODELAY and TCP_USER_TIMEOUT (unacknowledged data
// older than Interval*Misses ends the connection).
func (m *Member) setSockopts(raw net.Conn) {
	tcp, ok := raw.(*net.TCPConn)
	if !ok {
		return
	}
	tcp.SetNoDelay(true)
	ms := int((m.cfg.Interval * time.Duration(m.cfg.Misses)).Milliseconds())
	if sc, err := tcp.SyscallConn(); err == nil {
		sc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, max(ms, 1))
		})
	}
}

// handshakeTimeout bounds a TLS handshake.
func (m *Member) handshakeTimeout() time.Duration {
	return max(m.cfg.Interval*time.Duration(m.cfg.Misses), time.Second)
}

// handshake runs the TLS handshake on raw as client or server and returns
// the connection, or nil (counted, logged) if it failed.
func (m *Member) handshake(raw net.Conn, client bool) *conn {
	m.setSockopts(raw)
	var tc *tls.Conn
	if client {
		tc = tls.Client(raw, m.cfg.TLS)
	} else {
		tc = tls.Server(raw, m.cfg.TLS)
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.handshakeTimeout())
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		if m.ctx.Err() == nil {
			m.ctr.handshakeFailures.Add(1)
			m.failLog.Log(m.log, time.Now(), slog.LevelWarn, "ha: sync handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		}
		return nil
	}
	return newConn(m, raw, tc)
}

// deliver hands a new connection to the event loop.
func (m *Member) deliver(c *conn) {
	select {
	case m.newConns <- c:
	case <-m.ctx.Done():
		c.raw.Close()
	}
}

// acceptLoop accepts connections from the peer.
func (m *Member) acceptLoop() {
	defer m.wg.Done()
	for {
		raw, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("ha: accept", "err", err)
			select {
			case <-time.After(m.cfg.Interval):
			case <-m.ctx.Done():
				return
			}
			continue
		}
		if !m.fromPeer(raw) {
			// A reset, not a close: a flood leaves no TIME_WAIT
			// sockets behind here.
			if tc, ok := raw.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			raw.Close()
			m.ctr.refusedSources.Add(1)
			m.refuseLog.Log(m.log, time.Now(), slog.LevelWarn, "ha: sync connection refused before TLS: not from the peer's address",
				"remote", raw.RemoteAddr().String(), "peer", m.cfg.PeerName, "peer_address", m.cfg.Peer.Addr().String())
			continue
		}
		if old := m.handshakes.add(raw); old != nil {
			// Its handshake fails, counted and logged there.
			m.failLog.Log(m.log, time.Now(), slog.LevelWarn, "ha: too many sync handshakes at once from the peer's address: the oldest closed", "remote", old.RemoteAddr().String())
			old.Close()
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			c := m.handshake(raw, false)
			m.handshakes.done(raw)
			if c != nil {
				m.deliver(c)
			}
		}()
	}
}

// dialLoop keeps one connection to the peer: it dials, and dials again
// Interval after a failure or after the connection ended.
func (m *Member) dialLoop() {
	defer m.wg.Done()
	d := net.Dialer{Timeout: m.handshakeTimeout()}
	if src := m.dialSource(); src != nil {
		d.LocalAddr = src
	}
	addr := m.cfg.Peer.String()
	for {
		if raw, err := d.DialContext(m.ctx, "tcp", addr); err == nil {
			if c := m.handshake(raw, true); c != nil {
				m.deliver(c)
				select {
				case <-c.closed:
				case <-m.ctx.Done():
					return
				}
			}
		}
		select {
		case <-time.After(m.cfg.Interval):
		case <-m.ctx.Done():
			return
		}
	}
}
