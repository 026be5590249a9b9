// Package tun is the Linux TUN Link, on wireguard-go's tun package
// (golang.zx2c4.com/wireguard/tun), with its offloads: the device is opened
// with IFF_VNET_HDR, so the kernel may hand over a TCP (TSO) or UDP (USO)
// super-packet that wireguard-go splits into up to BatchSize packets on
// Read, and wireguard-go coalesces TCP and UDP packets of one flow (GRO)
// before writing them.
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
// queue thus has the same offloads, at no cost but wireguard-go's copy out
// of its read buffer, which the single queue pays too.
//
// # Buffers
//
// Read needs buffers with room (pktio.Room) for at least MTU bytes
// (packets are copied from wireguard-go's read buffer into them at their
// data offsets); buffers with less are not used. Write needs 10 bytes of
// headroom in front of each packet, where the virtio-net header goes; a
// packet with less is dropped and counted (TxInvalid), as is anything that
// is not a consistent IPv4 or IPv6 packet.
//
// # Coalescing on write (GRO)
//
// wireguard-go coalesces TCP and UDP segments of one flow into the tailroom
// of the flow's first buffer and writes the result as one super-packet, so
// the kernel runs its receive path once per 64 KiB instead of once per
// segment. Packet buffers are about 2 KiB, with no tailroom to coalesce
// into, so Write first finds each run of consecutive packets of one flow
// (same addresses, protocol and ports: the shape a GRO'd UDP receive or a
// TSO burst has) and copies the run's first packet into a 64 KiB buffer of
// the queue's own (one copy of one packet per run); the rest are copied
// behind it by the coalescing, the one copy GRO needs. A batch of single
// packets of different flows costs nothing extra. The caller's buffers are
// never written beyond their windows.
//
// The device disappears when the last queue is closed.
package tun

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

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
	tun   wgtun.Device
	index int
	batch int

	// Reader's scratch.
	rbufs [][]byte
	sizes []int
	// Writer's scratch.
	wbufs [][]byte
	heads [][]byte // groHeads buffers of headBufSize bytes (see Write)

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
		links[i] = newQueue(dev, d, i)
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

func newQueue(dev *device, t wgtun.Device, index int) *Queue {
	batch := max(t.BatchSize(), 1)
	return &Queue{
		dev: dev, tun: t, index: index, batch: batch,
		rbufs: make([][]byte, batch),
		sizes: make([]int, batch),
		wbufs: make([][]byte, 0, batch),
	}
}

// Coalescing buffers: how many super-packets one write can build, and
// their size (the virtio-net header and the largest IP packet).
const (
	groHeads    = 16
	headBufSize = VirtioHeaderRoom + pktio.MaxPacket
)

// segment is what the coalescing needs to know of a TCP or UDP packet.
type segment struct {
	key     []byte // addresses (and, for flowOf, the ports behind them)
	ports   []byte
	proto   byte
	payload int    // bytes after the transport header
	seq     uint32 // TCP
	push    bool   // TCP: PSH, FIN, or anything but a plain data segment
}

// segmentOf parses p as far as the coalescing needs; ok is false for a
// packet it cannot take (not TCP or UDP, a fragment, IP options, too
// short).
func segmentOf(p []byte) (s segment, ok bool) {
	var hl int
	switch packet.IPVersion(p) {
	case 4:
		ip := packet.IPv4(p)
		if len(p) < packet.IPv4MinHeader || ip.HeaderLength() != packet.IPv4MinHeader ||
			ip.MoreFragments() || ip.FragmentOffset() != 0 {
			return s, false
		}
		hl, s.proto, s.key = packet.IPv4MinHeader, ip.Protocol(), p[12:20]
	case 6:
		if len(p) < packet.IPv6Header {
			return s, false
		}
		hl, s.proto, s.key = packet.IPv6Header, p[6], p[8:40]
	default:
		return s, false
	}
	switch s.proto {
	case packet.ProtoTCP:
		if len(p) < hl+20 {
			return s, false
		}
		th := int(p[hl+12]>>4) * 4
		if th < 20 || len(p) < hl+th {
			return s, false
		}
		s.seq = uint32(p[hl+4])<<24 | uint32(p[hl+5])<<16 | uint32(p[hl+6])<<8 | uint32(p[hl+7])
		s.push = p[hl+13] != 0x10 // anything but a bare ACK flag ends a super-packet
		s.payload = len(p) - hl - th
	case packet.ProtoUDP:
		if len(p) < hl+packet.UDPHeader {
			return s, false
		}
		s.payload = len(p) - hl - packet.UDPHeader
	default:
		return s, false
	}
	s.ports = p[hl : hl+4]
	return s, true
}

func (a *segment) sameFlow(b *segment) bool {
	return a.proto == b.proto && len(a.key) == len(b.key) && string(a.key) == string(b.key) && string(a.ports) == string(b.ports)
}

// coalesceHeads gives a buffer with room for a whole super-packet to every
// packet in q.wbufs at which wireguard-go's GRO will start one: the first
// of a run of consecutive packets of one flow, and each packet that
// follows the end of a super-packet within the run (after a segment with
// PSH or FIN, or a shorter one; at a gap in the TCP sequence; when 64 KiB
// are full). Each such packet is copied once; the others are appended to
// it by the coalescing, the one copy GRO needs.
func (q *Queue) coalesceHeads() {
	used := 0
	var head, prev segment
	size, gso := 0, 0 // the super-packet being built: bytes, segment size
	open := false
	var next segment // the look-ahead's parse of packet i+1, reused as cur
	nextOK, haveNext := false, false
	for i := range q.wbufs {
		cur, ok := next, nextOK
		if !haveNext {
			cur, ok = segmentOf(q.wbufs[i][VirtioHeaderRoom:])
		}
		haveNext = false
		if !ok {
			open = false
			continue
		}
		n := len(q.wbufs[i]) - VirtioHeaderRoom
		cont := open && cur.sameFlow(&head) && cur.payload > 0 && cur.payload <= gso &&
			prev.payload == gso && size+cur.payload <= pktio.MaxPacket
		if cont && cur.proto == packet.ProtoTCP {
			cont = !prev.push && cur.seq == prev.seq+uint32(prev.payload)
		}
		if cont {
			size += cur.payload
			prev = cur
			continue
		}
		// cur starts a super-packet if the next packet may join it.
		open = false
		if used == groHeads || cur.payload == 0 || i+1 == len(q.wbufs) {
			continue
		}
		next, nextOK = segmentOf(q.wbufs[i+1][VirtioHeaderRoom:])
		haveNext = true
		if !nextOK || !next.sameFlow(&cur) {
			continue
		}
		if q.heads == nil {
			q.heads = make([][]byte, groHeads)
			for k := range q.heads {
				q.heads[k] = make([]byte, headBufSize)
			}
		}
		h := q.heads[used][:VirtioHeaderRoom+n]
		copy(h[VirtioHeaderRoom:], q.wbufs[i][VirtioHeaderRoom:])
		q.wbufs[i] = h
		used++
		head, prev, size, gso, open = cur, cur, n, cur.payload, true
		// The parsed slices pointed into the old buffer; same bytes.
	}
}

// Read implements pktio.Link.Read. Give it BatchSize buffers: one TSO
// super-packet may split into that many, and segments beyond len(bufs) are
// lost (counted in RxErrors).
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
		q.rbufs[k] = b.Slot()[b.Offset():]
		k++
	}
	if k == 0 {
		return 0, pktio.ErrShortBuffer
	}
	for {
		n, err := q.readDevice(k)
		var t pktio.Tally
		out := 0
		for i := range n {
			b := bufs[i]
			if q.sizes[i] > len(q.rbufs[i]) {
				t.RxShort++
				continue
			}
			b.SetWindow(b.Offset(), q.sizes[i])
			t.RxPackets++
			t.RxBytes += uint64(q.sizes[i])
			bufs[out], bufs[i] = bufs[i], bufs[out]
			out++
		}
		if err != nil {
			switch {
			case q.closed.Load() || errors.Is(err, os.ErrClosed):
				t.AddTo(&q.stats)
				if out > 0 {
					return out, nil
				}
				return 0, pktio.ErrClosed
			case isIOError(err):
				t.AddTo(&q.stats)
				if out > 0 {
					return out, nil
				}
				return 0, fmt.Errorf("tun: read: %w", err)
			default:
				// wireguard-go could not split what the kernel handed
				// over (bad virtio header, more segments than buffers,
				// a packet longer than the buffer): those packets are
				// lost.
				t.RxErrors++
			}
		}
		t.AddTo(&q.stats)
		if out > 0 {
			return out, nil
		}
	}
}

// readDevice calls wireguard-go's Read into rbufs[:k]. Its segmentation
// code slices each buffer to the segment's length, which would panic if a
// segment were longer than the buffer: that can only happen if the MTU was
// raised behind our back and the event saying so is not processed yet. Such
// a read is a counted loss, not a crash of the data plane.
func (q *Queue) readDevice(k int) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(runtime.Error); !ok {
				panic(r)
			}
			n, err = 0, errSegmentTooLong
		}
	}()
	return q.tun.Read(q.rbufs[:k], q.sizes[:k], 0)
}

var errSegmentTooLong = errors.New("tun: segment longer than the buffer")

// isIOError reports whether err came from the file itself (the device is
// gone or broken) rather than from wireguard-go's parsing of what it read.
func isIOError(err error) bool {
	var pe *os.PathError
	var errno unix.Errno
	return errors.As(err, &pe) || errors.As(err, &errno)
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
	q.wbufs = q.wbufs[:0]
	for _, b := range bufs {
		data := b.Bytes()
		if b.Headroom() < VirtioHeaderRoom || !validIP(data) {
			t.TxInvalid++
			continue
		}
		off := b.Offset()
		q.wbufs = append(q.wbufs, b.Slot()[off-VirtioHeaderRoom:off+len(data)])
		t.TxBytes += uint64(len(data))
	}
	if len(q.wbufs) == 0 {
		t.AddTo(&q.stats)
		return nil
	}
	q.coalesceHeads()
	_, err := q.tun.Write(q.wbufs, VirtioHeaderRoom)
	t.TxPackets += uint64(len(q.wbufs))
	if err != nil {
		if q.closed.Load() || errors.Is(err, os.ErrClosed) {
			t.TxPackets, t.TxBytes = 0, 0
			t.AddTo(&q.stats)
			return pktio.ErrClosed
		}
		// wireguard-go joins one error per packet the kernel refused.
		failed := uint64(1)
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			failed = uint64(len(j.Unwrap()))
		}
		failed = min(failed, t.TxPackets)
		t.TxErrors += failed
		t.TxPackets -= failed
	}
	t.AddTo(&q.stats)
	return nil
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
