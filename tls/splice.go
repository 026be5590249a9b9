package tls

// The tcp:// backend and origins: the plaintext stream both ways.
//
//  1. Two goroutines, one per direction, each reading one side into a
//     pooled buffer and writing the other.
//  2. A side's EOF half-closes the other side (CloseWrite: a TCP FIN, or
//     a TLS close_notify); the connection ends when both directions have.
//  3. Idle: both directions stamp a shared clock on every read; a read
//     deadline is only moved when it is a quarter period stale, and when it
//     fires the shared stamp decides whether the other direction kept the
//     connection alive.

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// spliceBufSize is the buffer each direction reads into: large enough for
// a full TLS record's plaintext and then some, so a bulk transfer makes
// few calls.
const spliceBufSize = 64 << 10

var splicePool = sync.Pool{New: func() any { b := make([]byte, spliceBufSize); return &b }}

// idleClock is the activity of one connection, shared by its two
// directions.
type idleClock struct {
	idle   time.Duration
	last   atomic.Int64 // UnixNano of the last byte either way
	closed atomic.Bool  // set once by whichever direction closes for idleness
}

func (c *idleClock) touch(now time.Time) { c.last.Store(now.UnixNano()) }

// expired reports whether the connection has seen no byte for c.idle, and
// otherwise when it will be idle next.
func (c *idleClock) expired(now time.Time) (bool, time.Time) {
	next := time.Unix(0, c.last.Load()).Add(c.idle)
	return !now.Before(next), next
}

type closeWriter interface{ CloseWrite() error }

// splice copies client<->backend until both directions end, an error, or
// idleness; it counts bytes into ctr and closes neither connection (the
// caller does).
func splice(client, backend net.Conn, idle time.Duration, ctr *counters) {
	clk := &idleClock{idle: idle}
	clk.touch(time.Now())
	done := make(chan struct{})
	go func() {
		pipe(backend, client, clk, &ctr.bytesIn, ctr)
		close(done)
	}()
	pipe(client, backend, clk, &ctr.bytesOut, ctr)
	<-done
}

// pipe copies src to dst. On src's EOF it half-closes dst; on any other
// end it closes both, so that the other direction ends too.
func pipe(dst, src net.Conn, clk *idleClock, n *atomic.Uint64, ctr *counters) {
	bp := splicePool.Get().(*[]byte)
	defer splicePool.Put(bp)
	buf := *bp
	var setAt time.Time
	refresh := clk.idle / 4
	for {
		now := time.Now()
		if now.Sub(setAt) > refresh {
			src.SetReadDeadline(now.Add(clk.idle))
			dst.SetWriteDeadline(now.Add(clk.idle))
			setAt = now
		}
		k, err := src.Read(buf)
		if k > 0 {
			now = time.Now()
			clk.touch(now)
			if now.Sub(setAt) > refresh {
				dst.SetWriteDeadline(now.Add(clk.idle))
				src.SetReadDeadline(now.Add(clk.idle))
				setAt = now
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				abort(dst, src, clk, werr, ctr)
				return
			}
			n.Add(uint64(k))
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if exp, next := clk.expired(time.Now()); !exp {
				// The other direction kept the connection busy.
				src.SetReadDeadline(next)
				setAt = time.Time{}
				continue
			}
			abort(dst, src, clk, err, ctr)
			return
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
				return
			}
		}
		abort(dst, src, clk, err, ctr)
		return
	}
}

// abort closes both sides, counting an idle close once.
func abort(a, b net.Conn, clk *idleClock, err error, ctr *counters) {
	if errors.Is(err, os.ErrDeadlineExceeded) && clk.closed.CompareAndSwap(false, true) {
		ctr.idleClosed.Add(1)
	}
	a.Close()
	b.Close()
}
