// Package tun is the Linux TUN Link with its offloads. The device is
// opened with IFF_VNET_HDR: every packet read is preceded by a virtio-net
// header, with which the kernel may hand over a TCP (TSO) or UDP (USO)
// super-packet that Read splits into up to BatchSize packets, and every
// packet written carries one, with which Write hands the kernel runs of
// TCP and UDP packets of one flow as one super-packet (GRO).
// wireguard-go's tun package (golang.zx2c4.com/wireguard/tun) creates the
// device, asks for the offloads, watches its MTU and closes it; Read and
// Write are this package's own, on the device's file descriptor through
// the Go netpoller.
//
// # Queues
//
// Open with one queue is wireguard-go's tun.CreateTUN. With several, the
// device is created with IFF_MULTI_QUEUE and every queue is a file
// descriptor of its own, one per worker; the kernel picks the queue a
// packet leaves on by a hash of its flow. wireguard-go's CreateTUN makes a
// single-queue device, which no further queue can join (TUNSETIFF with
// IFF_MULTI_QUEUE fails with EINVAL), and on a multi-queue device a queue
// attached later gets the device's flags whatever it asks for, so a queue
// opened "plain" would still be handed virtio-net headers: an offload-free
// extra queue beside an offloading first one is not possible. Therefore
// Open attaches every queue itself with TUNSETIFF (IFF_TUN | IFF_NO_PI |
// IFF_VNET_HDR | IFF_MULTI_QUEUE) and hands each file descriptor to
// wireguard-go: the first to tun.CreateTUNFromFile (which sets the MTU and
// watches the device), the others to tun.CreateUnmonitoredTUNFromFD. Every
// queue thus has the same offloads.
//
// # Reading
//
// Read needs buffers with room (pktio.Room) for at least MTU bytes;
// buffers with less are not used. One readv puts the virtio-net header
// into the queue's scratch, the packet into the buffers, and what does not
// fit there into a 64 KiB spill buffer. A plain packet lands in the first
// buffer and is not copied (a partial checksum the kernel left,
// VIRTIO_NET_HDR_F_NEEDS_CSUM, is completed in place). After a
// super-packet, the next read lays the buffers out for another like it:
// the first gets its headers and first segment, each following one the
// next segment's payload behind room for its headers. A bulk flow's
// segments thus land each in a buffer of its own and only their headers
// are copied (from the first segment). A super-packet of another shape is
// split with one copy per segment (two if the layout expected another).
// Every segment gets its lengths, IPv4 identification and checksum, TCP
// sequence number and flags, and transport checksum.
//
// # Writing, and coalescing (GRO)
//
// Write needs 10 bytes of headroom in front of each packet, where the
// virtio-net header goes; a packet with less is dropped and counted
// (TxInvalid), as is anything that is not a consistent IPv4 or IPv6
// packet. Each run of consecutive TCP or UDP packets of one flow that the
// receiving kernel's own GRO would have merged (same headers but for
// lengths, IPv4 identification and TCP sequence number; equal sizes but
// the last; contiguous TCP sequence numbers; no flag but ACK, PSH on the
// last) is written as one super-packet with one writev: the virtio-net
// header in the first packet's headroom, the first packet with its
// headers rewritten for the whole, then the other packets' payloads where
// they lie. Nothing is copied, and no segment's checksum is verified:
// ESP's ICV has vouched for every packet, and the super-packet goes with
// VIRTIO_NET_HDR_F_NEEDS_CSUM (CHECKSUM_PARTIAL), so the kernel does not
// verify it either; it computes the segments' checksums only if it
// forwards them to a device that does not offload checksums. A TCP or UDP
// packet written alone goes the same way, with a partial checksum. UDP
// runs are coalesced only where the kernel takes UDP super-packets
// (TUN_F_USO4/6, Linux 6.2). What the kernel still checks: the IPv4
// header checksum and the IP and transport lengths, that the partial
// checksum's offsets lie within the packet, and everything TCP and UDP
// check beyond the checksum. The caller's buffers are not written beyond
// their windows and headroom.
//
// The device disappears when the last queue is closed.
package tun

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// VirtioHeaderRoom is the headroom Write needs in front of each packet for
// the virtio-net header.
const VirtioHeaderRoom = 10

// device is what the queues of one TUN device share.
type device struct {
	name string
	mtu  atomic.Int32 // tracked from the first queue's events
	// ctl is a socket made in the namespace the device was created in,
	// for SIOCGIFMTU: wireguard-go's Device.MTU looks the name up in the
	// namespace of whichever thread calls it, which for the watcher
	// goroutine need not be the device's.
	ctl int
}

// Queue is one queue of a TUN device as a pktio.Link.
type Queue struct {
	dev   *device
	tun   wgtun.Device // creation, the MTU watch and Close
	rc    syscall.RawConn
	index int
	batch int

	// Reader's state: readv puts the virtio-net header into vhdr, the
	// packet into the first buffer and what does not fit into spill.
	vhdr   [VirtioHeaderRoom]byte
	spill  []byte
	riov   []unix.Iovec // the header, then rsegs
	rsegs  [][]byte     // where the packet goes, in order (see layout)
	rn     int
	rerr   unix.Errno
	readFn func(fd uintptr) bool
	sp     superPacket
	// The headers' and segments' size of the last super-packet read, 0
	// if the last packet was not one: the next read lays the buffers
	// out for another like it.
	predHL, predGSO int
	linear          []byte // a mispredicted super-packet, gathered

	// Writer's state.
	wpkts   [][]byte     // the valid packets of a chunk
	wfull   [][]byte     // the same with the virtio-net header room in front
	wiov    []unix.Iovec // the current writev
	wn      int
	werr    unix.Errno
	writeFn func(fd uintptr) bool
	uso     bool // the kernel takes UDP super-packets (GSO_UDP_L4)
	partial bool // single TCP and UDP packets are written with NEEDS_CSUM

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stats     pktio.LinkStats
}

// Open creates the TUN device name (which may contain %d for the kernel to
// choose a number) with the given MTU and returns queues Links, one per
// queue (*Queue). The device is not brought up and has no address: see
// package netutil.
func Open(name string, mtu int, queues int) ([]pktio.Link, error) {
	if queues < 1 {
		return nil, fmt.Errorf("tun: need at least one queue, got %d", queues)
	}
	if mtu < 68 || mtu > pktio.MaxPacket {
		return nil, fmt.Errorf("tun: MTU %d out of range 68..%d", mtu, pktio.MaxPacket)
	}
	// Attaching to a multi-queue device that exists would silently share
	// another process's traffic: the device must be new.
	if !strings.Contains(name, "%") {
		if _, err := net.InterfaceByName(name); err == nil {
			return nil, fmt.Errorf("tun: device %q already exists (is another sluice running?)", name)
		}
	}
	var devs []wgtun.Device
	fail := func(err error) ([]pktio.Link, error) {
		for _, d := range devs {
			d.Close()
		}
		return nil, err
	}
	if queues == 1 {
		d, err := wgtun.CreateTUN(name, mtu)
		if err != nil {
			return fail(fmt.Errorf("tun: create %q: %w", name, err))
		}
		devs = append(devs, d)
	} else {
		for i := range queues {
			fd, err := attachQueue(name)
			if err != nil {
				return fail(fmt.Errorf("tun: queue %d of %q: %w", i, name, err))
			}
			var d wgtun.Device
			if i == 0 {
				if err := unix.SetNonblock(fd, true); err != nil {
					unix.Close(fd)
					return fail(fmt.Errorf("tun: %w", err))
				}
				f := os.NewFile(uintptr(fd), "/dev/net/tun")
				d, err = wgtun.CreateTUNFromFile(f, mtu)
				if err != nil {
					f.Close()
					return fail(fmt.Errorf("tun: create %q: %w", name, err))
				}
				if name, err = d.Name(); err != nil { // the kernel's choice for %d
					d.Close()
					return fail(fmt.Errorf("tun: %w", err))
				}
			} else {
				d, _, err = wgtun.CreateUnmonitoredTUNFromFD(fd)
				if err != nil {
					unix.Close(fd)
					return fail(fmt.Errorf("tun: queue %d of %q: %w", i, name, err))
				}
			}
			devs = append(devs, d)
		}
	}
	actual, err := devs[0].Name()
	if err != nil {
		return fail(fmt.Errorf("tun: %w", err))
	}
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("tun: control socket: %w", err))
	}
	dev := &device{name: actual, ctl: ctl}
	dev.mtu.Store(int32(mtu))
	go dev.watch(devs[0])
	links := make([]pktio.Link, len(devs))
	for i, d := range devs {
		q, err := newQueue(dev, d, i)
		if err != nil {
			return fail(err)
		}
		links[i] = q
	}
	return links, nil
}

// attachQueue opens /dev/net/tun and attaches it as a queue of the
// multi-queue device name, creating the device if it does not exist.
func attachQueue(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	return fd, nil
}

// watch drains the monitored queue's events (wireguard-go's listener
// blocks when nobody does) and tracks the MTU. It ends when that queue is
// closed.
func (d *device) watch(t wgtun.Device) {
	defer unix.Close(d.ctl)
	for ev := range t.Events() {
		if ev&wgtun.EventMTUUpdate == 0 {
			continue
		}
		ifr, err := unix.NewIfreq(d.name)
		if err != nil {
			continue
		}
		if unix.IoctlIfreq(d.ctl, unix.SIOCGIFMTU, ifr) == nil && ifr.Uint32() > 0 {
			d.mtu.Store(int32(ifr.Uint32()))
		}
	}
}

func newQueue(dev *device, t wgtun.Device, index int) (*Queue, error) {
	rc, err := t.File().SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tun: %w", err)
	}
	batch := max(t.BatchSize(), 1)
	q := &Queue{
		dev: dev, tun: t, rc: rc, index: index, batch: batch,
		spill:   make([]byte, 1<<16),
		linear:  make([]byte, 1<<16),
		riov:    make([]unix.Iovec, 0, batch+2),
		rsegs:   make([][]byte, 0, batch+1),
		wpkts:   make([][]byte, 0, batch),
		wfull:   make([][]byte, 0, batch),
		wiov:    make([]unix.Iovec, 0, maxSegments),
		partial: true,
	}
	q.readFn = q.readv
	q.writeFn = q.writev
	// wireguard-go asked for TSO and, where the kernel has it (6.2), USO;
	// ask again to learn which the device took.
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tunOffloads|unix.TUN_F_USO4|unix.TUN_F_USO6)
		q.uso = serr == nil
		if serr != nil {
			serr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tunOffloads)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("tun: TUNSETOFFLOAD: %w", err)
	}
	return q, nil
}

// tunOffloads are what the device is asked to hand over: packets with a
// partial checksum, TCP super-packets over IPv4 and IPv6.
const tunOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}

// readv is the function given to RawConn.Read, made once (readFn).
func (q *Queue) readv(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&q.riov[0])), uintptr(len(q.riov)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		q.rn, q.rerr = int(n), e
		return true
	}
}

// writev is the function given to RawConn.Write, made once (writeFn).
func (q *Queue) writev(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&q.wiov[0])), uintptr(len(q.wiov)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		q.wn, q.werr = int(n), e
		return true
	}
}

// Read implements pktio.Link.Read. Give it BatchSize buffers: one TSO
// super-packet may split into that many, and segments beyond len(bufs) are
// lost (counted in RxErrors).
//
// One readv puts the virtio-net header into the queue's scratch, the
// packet into the buffers and what does not fit there into a 64 KiB spill
// buffer (see layout). A plain packet lands in the first buffer and is not
// copied. A super-packet like the one before it (the same header and
// segment sizes: a bulk TCP or UDP flow) lands with each segment's payload
// in a buffer of its own, behind room for its headers, which are copied
// from the first segment: its payload is not copied either. Any other
// super-packet is split with one copy per segment (and a second if the
// layout expected another).
func (q *Queue) Read(bufs []*packet.Buf) (int, error) {
	if q.closed.Load() {
		return 0, pktio.ErrClosed
	}
	room := int(q.dev.mtu.Load())
	k := 0
	for _, b := range bufs[:min(len(bufs), q.batch)] {
		if pktio.Room(b) < room {
			break
		}
		k++
	}
	if k == 0 {
		return 0, pktio.ErrShortBuffer
	}
	bufs = bufs[:k]
	for {
		placed := q.layout(bufs)
		err := q.rc.Read(q.readFn)
		if err == nil && q.rerr != 0 {
			err = q.rerr
		}
		if err != nil {
			if q.closed.Load() || errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EBADFD) {
				return 0, pktio.ErrClosed
			}
			return 0, fmt.Errorf("tun: read: %w", err)
		}
		var t pktio.Tally
		out := q.split(bufs, placed, q.rn-VirtioHeaderRoom, &t)
		t.AddTo(&q.stats)
		if out > 0 {
			return out, nil
		}
	}
}

// layout sets the readv iovecs for bufs and returns how many buffers
// they place a segment in. Without a prediction the packet goes into the
// first buffer's room, then the spill. With one (hl bytes of headers and
// gso of payload per segment, from the last super-packet), the first
// buffer gets hl+gso bytes, each following one gso bytes at offset hl
// (where its segment's payload belongs), as many as a 64 KiB packet
// needs, then the spill.
func (q *Queue) layout(bufs []*packet.Buf) int {
	b0 := bufs[0]
	head := b0.Slot()[b0.Offset():]
	hl, gso := q.predHL, q.predGSO
	q.rsegs = q.rsegs[:0]
	placed := 1
	if gso == 0 || len(bufs) == 1 || hl+gso > len(head) {
		q.rsegs = append(q.rsegs, head)
	} else {
		q.rsegs = append(q.rsegs, head[:hl+gso])
		most := min(len(bufs), (pktio.MaxPacket-hl+gso-1)/gso)
		for _, b := range bufs[1:most] {
			d := b.Slot()[b.Offset():]
			if hl+gso > len(d) {
				break
			}
			q.rsegs = append(q.rsegs, d[hl:hl+gso])
			placed++
		}
	}
	q.rsegs = append(q.rsegs, q.spill)
	q.riov = append(q.riov[:0], iovec(q.vhdr[:]))
	for _, r := range q.rsegs {
		q.riov = append(q.riov, iovec(r))
	}
	return placed
}

// gather copies bytes [off, off+len(dst)) of what readv read, laid out in
// q.rsegs, into dst.
func (q *Queue) gather(dst []byte, off int) {
	for _, r := range q.rsegs {
		if len(dst) == 0 {
			return
		}
		if off >= len(r) {
			off -= len(r)
			continue
		}
		n := copy(dst, r[off:])
		dst, off = dst[n:], 0
	}
}

// split turns what readv read (size bytes of packet, laid out in q.rsegs
// with a segment in each of bufs[:placed]) into packets in bufs and
// returns how many. It sets the prediction for the next read.
func (q *Queue) split(bufs []*packet.Buf, placed, size int, t *pktio.Tally) int {
	if size <= 0 {
		t.RxErrors++
		return 0
	}
	var h virtioHdr
	h.decode(q.vhdr[:])
	b0 := bufs[0]
	head := b0.Slot()[b0.Offset():]
	first := len(q.rsegs[0])
	if h.gsoType == gsoNone {
		q.predHL, q.predGSO = 0, 0
		if size > len(head) {
			t.RxShort++
			return 0
		}
		if size > first {
			// Longer than the super-packets before it.
			q.gather(head[first:size], first)
		}
		p := head[:size]
		if h.flags&flagNeedsCsum != 0 && !completeChecksum(p, int(h.csumStart), int(h.csumOffset)) {
			t.RxErrors++
			return 0
		}
		b0.SetWindow(b0.Offset(), size)
		t.RxPackets++
		t.RxBytes += uint64(size)
		return 1
	}
	sp := &q.sp
	inPlace := placed > 1
	if inPlace {
		inPlace = parseSuper(&h, head[:min(size, first)], nil, size, sp) && sp.hl == q.predHL && sp.gso == q.predGSO
	}
	if !inPlace {
		src, spill := head[:min(size, first)], q.spill
		if placed > 1 {
			// Laid out for another shape: gather it first.
			q.gather(q.linear[:size], 0)
			src, spill = q.linear[:size], nil
		}
		if !parseSuper(&h, src, spill, size, sp) {
			q.predHL, q.predGSO = 0, 0
			t.RxErrors++
			return 0
		}
		if sp.hl+sp.segLen(0) > len(head) {
			// Gathered, its first segment does not fit the first
			// buffer (parseSuper saw the gathered copy).
			q.predHL, q.predGSO = 0, 0
			t.RxShort++
			return 0
		}
	}
	q.predHL, q.predGSO = sp.hl, sp.gso
	// The other segments first: they take their headers from the first.
	out := 1
	for i := 1; i < sp.segs; i++ {
		if out == len(bufs) || (inPlace && out == placed) {
			t.RxErrors += uint64(sp.segs - i)
			break
		}
		b := bufs[out]
		dst := b.Slot()[b.Offset():]
		var n int
		if inPlace {
			// bufs[i] (out is i): its payload is in place, and
			// layout made sure the headers fit in front.
			n = sp.hl + sp.segLen(i)
			copy(dst, head[:sp.hl])
		} else {
			if sp.hl+sp.segLen(i) > len(dst) {
				t.RxShort++
				continue
			}
			n = sp.copySegment(dst, i)
		}
		sp.finishSegment(dst[:n], i)
		b.SetWindow(b.Offset(), n)
		t.RxPackets++
		t.RxBytes += uint64(n)
		out++
	}
	n := sp.hl + sp.segLen(0)
	if placed > 1 && !inPlace {
		sp.copySegment(head, 0)
	}
	sp.finishSegment(head[:n], 0)
	b0.SetWindow(b0.Offset(), n)
	t.RxPackets++
	t.RxBytes += uint64(n)
	return out
}

// Write implements pktio.Link.Write.
func (q *Queue) Write(bufs []*packet.Buf) (int, error) {
	if q.closed.Load() {
		return 0, pktio.ErrClosed
	}
	done := 0
	for done < len(bufs) {
		chunk := bufs[done:min(len(bufs), done+q.batch)]
		if err := q.writeChunk(chunk); err != nil {
			return done, err
		}
		done += len(chunk)
	}
	return done, nil
}

func (q *Queue) writeChunk(bufs []*packet.Buf) error {
	var t pktio.Tally
	q.wpkts, q.wfull = q.wpkts[:0], q.wfull[:0]
	for _, b := range bufs {
		data := b.Bytes()
		if b.Headroom() < VirtioHeaderRoom || !validIP(data) {
			t.TxInvalid++
			continue
		}
		off := b.Offset()
		q.wpkts = append(q.wpkts, b.Slot()[off:off+len(data)])
		q.wfull = append(q.wfull, b.Slot()[off-VirtioHeaderRoom:off+len(data)])
	}
	for i := 0; i < len(q.wpkts); {
		j := q.runEnd(i)
		bytes := 0
		for _, p := range q.wpkts[i:j] {
			bytes += len(p)
		}
		if j > i+1 {
			q.coalesce(i, j)
		} else {
			q.single(i)
		}
		err := q.rc.Write(q.writeFn)
		if err == nil && q.werr != 0 {
			err = q.werr
		}
		switch {
		case err == nil:
			t.TxPackets += uint64(j - i)
			t.TxBytes += uint64(bytes)
		case q.closed.Load() || errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EBADFD):
			t.AddTo(&q.stats)
			return pktio.ErrClosed
		default:
			// The kernel refused it (the device is down, a header it
			// does not accept): those packets are lost.
			t.TxErrors += uint64(j - i)
		}
		i = j
	}
	t.AddTo(&q.stats)
	return nil
}

// single prepares the write of q.wpkts[i] alone. A TCP or UDP packet
// (with partial set) goes with VIRTIO_NET_HDR_F_NEEDS_CSUM and the
// pseudo-header sum in its checksum field, as a coalesced one does: the
// kernel takes it as CHECKSUM_PARTIAL and does not verify the checksum
// (ESP's ICV has vouched for the packet), where it would otherwise run
// over the whole packet again. VIRTIO_NET_HDR_F_DATA_VALID, which would
// say the same without touching the packet, is ignored by the TUN driver
// (Linux 6.18 counts such a packet with a wrong checksum in
// InCsumErrors). Anything else, and a UDP packet without a checksum, goes
// with an empty header.
func (q *Queue) single(i int) {
	h := virtioHdr{}
	if s, ok := segmentOf(q.wpkts[i]); ok && q.partial {
		p := s.p
		at := s.l4 + tcpCsumOffset
		h.csumOffset = tcpCsumOffset
		if s.proto == packet.ProtoUDP {
			at = s.l4 + udpCsumOffset
			h.csumOffset = udpCsumOffset
		}
		if s.proto == packet.ProtoTCP || p[at]|p[at+1] != 0 {
			h.flags = flagNeedsCsum
			h.csumStart = uint16(s.l4)
			h.hdrLen = uint16(s.hl)
			setPseudoSum(p, len(p), s.l4, at, s.proto)
		}
	}
	full := q.wfull[i]
	h.encode(full)
	q.wiov = append(q.wiov[:0], iovec(full))
}

// validIP reports whether p is one whole IPv4 or IPv6 packet, as the GRO
// code and the kernel expect.
func validIP(p []byte) bool {
	switch packet.IPVersion(p) {
	case 4:
		ip := packet.IPv4(p)
		return ip.IsValid() && int(ip.TotalLength()) == len(p)
	case 6:
		ip := packet.IPv6(p)
		return ip.IsValid() && packet.IPv6Header+int(ip.PayloadLength()) == len(p)
	}
	return false
}

// BatchSize is wireguard-go's: conn.IdealBatchSize (128) with offloads, 1
// without.
func (q *Queue) BatchSize() int { return q.batch }

// Close closes the queue. It is idempotent and unblocks a blocked Read.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		q.closed.Store(true)
		q.closeErr = q.tun.Close()
	})
	return q.closeErr
}

// Stats returns the counters.
func (q *Queue) Stats() *pktio.LinkStats { return &q.stats }

// Name is the device's name.
func (q *Queue) Name() string { return q.dev.name }

// Index is the queue's number, 0 to queues-1.
func (q *Queue) Index() int { return q.index }

// MTU is the device's MTU as last seen.
func (q *Queue) MTU() int { return int(q.dev.mtu.Load()) }
