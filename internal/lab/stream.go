package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// StreamResult is what one TCP stream carried.
type StreamResult struct {
	Bytes   uint64        `json:"bytes"`      // received by the server
	Elapsed time.Duration `json:"elapsed_ns"` // connect to the server's EOF
}

// Mbps is the received rate in Mbit/s.
func (r StreamResult) Mbps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e6
}

// streamLimit bounds how long a stream may go on past its duration while
// the server reads what is still on the way.
const streamLimit = 10 * time.Second

// TCPStream measures one TCP stream: dial connects to a server that ln
// accepts, the client writes as fast as the path takes for d, then
// closes its side, and the server counts what arrives until that close.
// It stops early with ctx. ln is not closed.
func TCPStream(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error), d time.Duration) (StreamResult, error) {
	type served struct {
		n   uint64
		end time.Time
		err error
	}
	srv := make(chan served, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srv <- served{err: err}
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(d + streamLimit))
		n, err := io.Copy(io.Discard, c)
		srv <- served{n: uint64(n), end: time.Now(), err: err}
	}()
	start := time.Now()
	c, err := dial(ctx)
	if err != nil {
		if dl, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
			dl.SetDeadline(time.Now()) // the server's Accept returns
			<-srv
			dl.SetDeadline(time.Time{})
		}
		return StreamResult{}, fmt.Errorf("lab: TCP stream: %w", err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	end := start.Add(d)
	c.SetWriteDeadline(end)
	var werr error
	for time.Now().Before(end) && ctx.Err() == nil {
		if _, werr = c.Write(buf); werr != nil {
			break
		}
	}
	if errors.Is(werr, os.ErrDeadlineExceeded) {
		werr = nil
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
	var s served
	select {
	case s = <-srv:
	case <-ctx.Done():
		c.Close()
		s = <-srv
	}
	res := StreamResult{Bytes: s.n, Elapsed: s.end.Sub(start)}
	if err := errors.Join(werr, s.err, ctx.Err()); err != nil {
		return res, fmt.Errorf("lab: TCP stream: %w", err)
	}
	return res, nil
}
