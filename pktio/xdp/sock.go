package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// frameSize is the size of a UMEM frame: a page, which every driver's
// zero-copy mode accepts, and room for a 1500-byte MTU with plenty to
// spare.
const frameSize = 4096

// xdpOptions is struct xdp_options (getsockopt XDP_OPTIONS).
type xdpOptions struct{ flags uint32 }

// ring is one of the four rings the kernel shares with a socket: two
// indices that run freely (the producer's and the consumer's), flags, and
// the entries, which are frame addresses (fill, completion) or
// descriptors (RX, TX).
type ring struct {
	mem    []byte
	prod   *uint32
	cons   *uint32
	flags  *uint32
	mask   uint32
	cached uint32 // our own index: the producer's for fill and TX, the consumer's for RX and completion
	addrs  []uint64
	descs  []unix.XDPDesc
}

func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// socket is an AF_XDP socket with its UMEM: frames [0, rxFrames) belong
// to the fill and RX rings, the rest to the TX and completion rings.
type socket struct {
	fd       int
	umem     []byte
	fill     ring
	comp     ring
	rx       ring
	tx       ring
	rxFrames int
	txFrames int
	zerocopy bool
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// openSocket makes an AF_XDP socket with frames UMEM frames (half for
// receiving, half for sending; frames is a power of two, at least 2) and
// binds it to queue of ifindex: in zero-copy mode when zc and the driver
// allows it, in copy mode otherwise.
func openSocket(ifindex, queue, frames int, zc bool) (*socket, error) {
	if zc {
		s, err := newSocket(ifindex, queue, frames, unix.XDP_ZEROCOPY)
		if err == nil {
			return s, nil
		}
	}
	return newSocket(ifindex, queue, frames, unix.XDP_COPY)
}

func newSocket(ifindex, queue, frames int, mode uint16) (_ *socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xdp: socket: %w", err)
	}
	s := &socket{fd: fd, rxFrames: frames / 2, txFrames: frames / 2}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.umem, err = unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xdp: UMEM of %d frames: %w", frames, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: frameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("xdp: register UMEM: %w", err)
	}
	for _, o := range []struct {
		opt, n int
	}{
		{unix.XDP_UMEM_FILL_RING, s.rxFrames}, {unix.XDP_UMEM_COMPLETION_RING, s.txFrames},
		{unix.XDP_RX_RING, s.rxFrames}, {unix.XDP_TX_RING, s.txFrames},
	} {
		n := int32(o.n)
		if err := setsockopt(fd, o.opt, unsafe.Pointer(&n), 4); err != nil {
			return nil, fmt.Errorf("xdp: ring size %d: %w", o.n, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("xdp: ring offsets: %w", err)
	}
	if err := s.fill.mmap(fd, unix.XDP_UMEM_PGOFF_FILL_RING, &off.Fr, s.rxFrames, false); err != nil {
		return nil, err
	}
	if err := s.comp.mmap(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, &off.Cr, s.txFrames, false); err != nil {
		return nil, err
	}
	if err := s.rx.mmap(fd, unix.XDP_PGOFF_RX_RING, &off.Rx, s.rxFrames, true); err != nil {
		return nil, err
	}
	if err := s.tx.mmap(fd, unix.XDP_PGOFF_TX_RING, &off.Tx, s.txFrames, true); err != nil {
		return nil, err
	}
	// Every receive frame goes to the kernel through the fill ring.
	for i := range s.rxFrames {
		s.fill.addrs[i] = uint64(i * frameSize)
	}
	s.fill.cached = uint32(s.rxFrames)
	atomic.StoreUint32(s.fill.prod, s.fill.cached)
	// A send buffer that holds every TX frame, so that the kernel's
	// accounting never stops a send the ring has room for (root only;
	// otherwise the default stays).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, s.txFrames*frameSize*2)
	sa := &unix.SockaddrXDP{Flags: mode | unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if err := unix.Bind(fd, sa); err != nil {
		what := "copy"
		if mode == unix.XDP_ZEROCOPY {
			what = "zero-copy"
		}
		return nil, fmt.Errorf("xdp: bind to queue %d in %s mode: %w", queue, what, err)
	}
	var xo xdpOptions
	if err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&xo), unsafe.Sizeof(xo)); err == nil {
		s.zerocopy = xo.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	return s, nil
}

// mmap maps a ring of n entries (descriptors if desc, else addresses).
func (r *ring) mmap(fd int, pgoff int64, off *unix.XDPRingOffset, n int, desc bool) error {
	size := uintptr(8)
	if desc {
		size = unsafe.Sizeof(unix.XDPDesc{})
	}
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc)+n*int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xdp: map ring: %w", err)
	}
	r.mem = mem
	r.prod = (*uint32)(unsafe.Pointer(&mem[off.Producer]))
	r.cons = (*uint32)(unsafe.Pointer(&mem[off.Consumer]))
	r.flags = (*uint32)(unsafe.Pointer(&mem[off.Flags]))
	r.mask = uint32(n - 1)
	if desc {
		r.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), n)
	} else {
		r.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), n)
	}
	return nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.prod, r.cons, r.flags, r.addrs, r.descs = nil, nil, nil, nil, nil, nil
	}
}

// unmapAll releases the rings and the UMEM; the descriptor must be closed
// and nothing may use them any more.
func (s *socket) unmapAll() {
	s.fill.unmap()
	s.comp.unmap()
	s.rx.unmap()
	s.tx.unmap()
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
}

// close closes the descriptor and unmaps everything (for a socket that
// never got to a Link).
func (s *socket) close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	s.unmapAll()
}

// stats reads the kernel's counters of the socket.
func stats(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}
