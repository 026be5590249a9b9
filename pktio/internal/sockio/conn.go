// Package sockio drives datagram sockets (UDP and raw IP) with
// recvmmsg/sendmmsg through the Go netpoller, without allocating per call:
// message headers, iovecs, socket addresses and control buffers live in a
// Batch made once, and the functions handed to syscall.RawConn are method
// values made once.
//
// It also builds and parses what the udp and rawesp Links put around the
// payload: control messages, socket addresses, and the outer IP (and UDP)
// headers they synthesise on receive and strip on send.
package sockio

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/pktio"
)

// Conn is a datagram socket. One goroutine may Recv while another Sends.
type Conn struct {
	rc     syscall.RawConn
	closer interface{ Close() error }
	closed atomic.Bool

	rx, tx op
}

// op is the state of one direction's pending system call; fn is the method
// value given to RawConn.Read/Write, made once so that the call does not
// allocate a closure.
type op struct {
	b   *Batch
	n   int
	got int
	err unix.Errno
	fn  func(fd uintptr) bool
}

// NewConn wraps a socket from the net package (a *net.UDPConn or
// *net.IPConn). Close closes it.
func NewConn(c interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}) (*Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &Conn{rc: rc, closer: c}
	s.rx.fn = s.recvmmsg
	s.tx.fn = s.sendmmsg
	return s, nil
}

// Control runs f with the socket's file descriptor (for setsockopt).
func (c *Conn) Control(f func(fd int) error) error {
	var ferr error
	err := c.rc.Control(func(fd uintptr) { ferr = f(int(fd)) })
	if err != nil {
		return err
	}
	return ferr
}

// Write runs f with the socket's file descriptor when it is writable, for
// a single send outside the batch path; f returns false to wait for the
// socket to become writable again (EAGAIN). It may run concurrently with
// Recv and Send (the kernel serialises the calls); it allocates.
func (c *Conn) Write(f func(fd int) bool) error {
	if err := c.rc.Write(func(fd uintptr) bool { return f(int(fd)) }); err != nil {
		return c.wrap(err)
	}
	return nil
}

// Close closes the socket; a blocked Recv or Send returns pktio.ErrClosed.
// It is idempotent.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.closer.Close()
}

// Closed reports whether Close was called.
func (c *Conn) Closed() bool { return c.closed.Load() }

// Recv receives up to n messages into b.Msgs[:n] (which the caller has
// prepared with Batch.Prepare), blocking until at least one arrives. It
// returns how many arrived, or the errno of the call, or pktio.ErrClosed.
func (c *Conn) Recv(b *Batch, n int) (int, error) {
	c.rx.b, c.rx.n = b, n
	if err := c.rc.Read(c.rx.fn); err != nil {
		return 0, c.wrap(err)
	}
	if c.rx.err != 0 {
		return 0, c.rx.err
	}
	return c.rx.got, nil
}

// Send sends b.Msgs[:n], blocking while the socket buffer is full. It
// returns how many messages the kernel took; when that is zero, the error
// is the errno that refused the first one (or pktio.ErrClosed).
func (c *Conn) Send(b *Batch, n int) (int, error) {
	c.tx.b, c.tx.n = b, n
	if err := c.rc.Write(c.tx.fn); err != nil {
		return 0, c.wrap(err)
	}
	if c.tx.err != 0 {
		return 0, c.tx.err
	}
	return c.tx.got, nil
}

func (c *Conn) recvmmsg(fd uintptr) bool { return c.mmsg(fd, unix.SYS_RECVMMSG, &c.rx) }
func (c *Conn) sendmmsg(fd uintptr) bool { return c.mmsg(fd, unix.SYS_SENDMMSG, &c.tx) }

// mmsg makes the system call; it returns false (wait for readiness) only on
// EAGAIN, as syscall.RawConn requires.
func (c *Conn) mmsg(fd uintptr, trap uintptr, o *op) bool {
	for {
		r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&o.b.Msgs[0])), uintptr(o.n), 0, 0, 0)
		switch e {
		case 0:
			o.got, o.err = int(r), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			o.got, o.err = 0, e
			return true
		}
	}
}

func (c *Conn) wrap(err error) error {
	if c.closed.Load() || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		return pktio.ErrClosed
	}
	return err
}

// Transient reports whether a receive errno is the kind a datagram socket
// reports for one packet or one ICMP error, after which receiving goes on.
func Transient(err error) bool {
	var e unix.Errno
	if !errors.As(err, &e) {
		return false
	}
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN,
		unix.ENETDOWN, unix.EMSGSIZE, unix.ENOBUFS, unix.ENOMEM, unix.EPROTO:
		return true
	}
	return false
}
