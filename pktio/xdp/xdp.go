// Package xdp is an AF_XDP Link for the ciphertext side: an XDP program
// on the gateway's interface steers ESP for the gateway's addresses into
// AF_XDP sockets, one per receive queue, and everything else (IKE
// included) to the kernel as before.
//
// The program (written with cilium/ebpf's asm package, so that building it
// needs no C compiler) redirects to the socket of the frame's receive
// queue, through an XSKMAP, the frames that are IPv4 (no options, not a
// fragment) or IPv6 (UDP or ESP directly after the fixed header) to one of
// the Link's addresses, and either UDP to its port with at least four
// payload bytes of which the first four are not zero (ESP: not IKE's
// non-ESP marker, and a one-byte NAT-keepalive is too short), or, with
// Options.RawESP, IP protocol 50. A queue without a socket passes its
// frames to the kernel. The program is attached natively when the driver
// supports XDP and generically otherwise; sockets bind in zero-copy mode
// when the driver supports it (and the program is native), in copy mode
// otherwise (veth, for example). Mode tells which.
//
// # What Read and Write carry
//
// Read delivers what udp.Conn.Read delivers: the outer IPv4 or IPv6 header
// and UDP header (or just the IP header for raw ESP) in front of the ESP
// packet, so that esp.Parse takes it unchanged. The ESP packet lands at
// the buffer's data offset and the headers in the headroom in front of it
// (HeaderRoom bytes are needed; 28 for IPv4-only Links), one copy out of
// the UMEM frame. Unlike udp.Conn, the headers are the ones that arrived
// (TTL, UDP checksum and all) rather than synthesised ones.
//
// Write takes what udp.Conn.Write takes: the outer IP and UDP header the
// ESP layer wrote, in front of the ESP packet (or an IP header and raw
// ESP). It looks up the next hop's MAC address (route and neighbour
// tables over netlink, cached and refreshed by a goroutine), copies the
// packet behind an Ethernet header into a UMEM frame, sets the IPv4 header
// checksum, and sets the UDP checksum: zero over IPv4 (RFC 3948 section
// 3.1.2 allows it, and the ESP ICV protects the payload) and computed over
// IPv6 (RFC 8200 requires it). A packet whose next hop is not resolved
// (yet), or whose route leaves by another interface, goes to
// Options.Fallback (the gateway's UDP socket, which makes the kernel
// resolve the neighbour) and is counted (Link.Fallbacks); so does one
// packet now and then to a neighbour the kernel has not confirmed lately,
// so that the kernel keeps the entry fresh.
//
// Everything is bounded: the UMEM, the rings, the resolver's destinations.
// A packet that finds no free TX frame after a bounded wait is dropped and
// counted (TxFull). Read and Write allocate nothing per packet.
package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// HeaderRoom is the headroom Read needs in each buffer for the outer IPv6
// and UDP header in front of the ESP packet.
const HeaderRoom = packet.IPv6Header + packet.UDPHeader

// Defaults and limits.
const (
	DefaultFrames = 4096 // UMEM frames per socket (half receive, half send)
	minFrames     = 64
	maxFrames     = 1 << 16
	maxQueues     = 64
	// txWait bounds how long Write waits for a free TX frame.
	txWait = 10 * time.Millisecond
	// kickTries bounds the sendto calls that push one Write's frames.
	kickTries = 64
)

// Options configure Open.
type Options struct {
	// Local is the gateway's address and port. An unspecified IPv4
	// address means every IPv4 address of the interface; the IPv6
	// unspecified address or the zero Addr every address of either
	// family (refreshed every second).
	Local netip.AddrPort
	// RawESP steers IP protocol 50 to Local's address(es) too.
	RawESP bool
	// Queues is the number of sockets, one per receive queue from queue
	// 0, each a pktio.Link; 0 means the interface's receive queues
	// (at most 64).
	Queues int
	// Fallback, if set, has a Link per queue (Fallback[i] for queue i)
	// to which Write hands the packets it cannot send itself.
	Fallback []pktio.Link
	// Frames is the number of UMEM frames per socket (a power of two;
	// others are rounded up); 0 means DefaultFrames.
	Frames int
	// Log receives the resolver's warnings; nil discards.
	Log *slog.Logger
}

// shared is what the Links of one Open share: the program and the
// resolver. The last Link to close releases it.
type shared struct {
	att  *attachment
	res  *resolver
	refs atomic.Int32
}

func (s *shared) release() {
	if s.refs.Add(-1) == 0 {
		s.res.stop()
		s.att.close()
	}
}

// Link is one AF_XDP socket, bound to one receive queue, as a pktio.Link.
type Link struct {
	sh       *shared
	s        *socket
	f        *os.File
	rc       syscall.RawConn
	queue    int
	room     int
	fallback pktio.Link
	srcMAC   [6]byte
	stats    pktio.LinkStats
	fellBack atomic.Uint64
	closed   atomic.Bool
	once     sync.Once
	// rmu and wmu are held by Read and Write around their use of the
	// rings, and by Close before it unmaps them. (Closing the file
	// already waits for a ring access in progress, but through runtime
	// semaphores the race detector does not see.)
	rmu, wmu sync.Mutex

	// Read's state (one reader at a time).
	rbufs  []*packet.Buf
	rout   int
	rtally pktio.Tally
	readFn func(fd uintptr) bool

	// Write's state (one writer at a time).
	wbufs   []*packet.Buf
	wtally  pktio.Tally
	writeFn func(fd uintptr) bool
	free    []uint64 // TX frames not in the kernel's hands
	fb      []*packet.Buf
	nfb     int
}

// Open attaches the program to ifname and opens the sockets, one Link per
// queue. Close of the last Link detaches the program. Open must run in the
// interface's network namespace (on a goroutine locked to a thread inside
// it); the Links may then be used from any goroutine.
func Open(ifname string, opts Options) (links []pktio.Link, err error) {
	if opts.Local.Port() == 0 {
		return nil, errors.New("xdp: Options.Local needs a port")
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("xdp: netlink: %w", err)
	}
	closeHandle := true
	defer func() {
		if closeHandle {
			nh.Close()
		}
	}()
	nl, err := nh.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("xdp: interface %s: %w", ifname, err)
	}
	attrs := nl.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		return nil, fmt.Errorf("xdp: interface %s is not Ethernet", ifname)
	}
	if attrs.MTU+ethLen > frameSize-unix.XDP_PACKET_HEADROOM {
		return nil, fmt.Errorf("xdp: interface %s: MTU %d does not fit a %d-byte frame after the kernel's %d bytes of headroom",
			ifname, attrs.MTU, frameSize, unix.XDP_PACKET_HEADROOM)
	}
	queues := opts.Queues
	auto := queues <= 0
	if auto {
		queues = min(max(attrs.NumRxQueues, 1), maxQueues)
	}
	if queues > maxQueues {
		return nil, fmt.Errorf("xdp: %d queues, at most %d", queues, maxQueues)
	}
	frames := opts.Frames
	if frames <= 0 {
		frames = DefaultFrames
	}
	frames = min(max(1<<bits.Len(uint(frames-1)), minFrames), maxFrames)

	la := opts.Local.Addr().Unmap()
	family := netlink.FAMILY_ALL
	var local []netip.Addr
	room := HeaderRoom
	switch {
	case la.IsValid() && !la.IsUnspecified():
		local = []netip.Addr{la}
	case la.Is4():
		family = netlink.FAMILY_V4
	}
	if la.Is4() {
		room = packet.IPv4MinHeader + packet.UDPHeader
	}
	listAddrs := func() []netip.Addr {
		as, err := nh.AddrList(nl, family)
		if err != nil {
			log.Warn("xdp: addresses", "interface", ifname, "err", err)
			return nil
		}
		out := make([]netip.Addr, 0, len(as))
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
		return out
	}
	if local == nil {
		local = listAddrs()
	}
	att, err := attach(attrs.Index, queues, local, opts.Local.Port(), opts.RawESP)
	if err != nil {
		return nil, err
	}
	sh := &shared{att: att, res: newResolver(nh, attrs.Index, log)}
	closeHandle = false
	if !la.IsValid() || la.IsUnspecified() {
		sh.res.addrs = func() {
			if as := listAddrs(); as != nil {
				if err := att.setAddrs(as); err != nil {
					log.Warn("xdp: addresses", "interface", ifname, "err", err)
				}
			}
		}
	}
	sh.refs.Store(1) // Open's own, released below
	defer sh.release()
	for q := range queues {
		s, err := openSocket(attrs.Index, q, frames, att.native)
		if err != nil && auto && q > 0 && errors.Is(err, unix.EINVAL) {
			// The interface has fewer queues in use than allocated
			// (veth: one of as many as CPUs): bind stops at the last.
			break
		}
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, err
		}
		l, err := newLink(sh, s, q, room, [6]byte(attrs.HardwareAddr))
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, err
		}
		links = append(links, l)
	}
	if len(opts.Fallback) != 0 {
		if len(opts.Fallback) < len(links) {
			for _, l := range links {
				l.Close()
			}
			return nil, fmt.Errorf("xdp: %d fallback links for %d queues", len(opts.Fallback), len(links))
		}
		for i, l := range links {
			l.(*Link).fallback = opts.Fallback[i]
		}
	}
	sh.res.start()
	return links, nil
}

// newLink makes a Link of s and enters it in the socket map; on failure s
// is closed.
func newLink(sh *shared, s *socket, queue, room int, mac [6]byte) (*Link, error) {
	if err := unix.SetNonblock(s.fd, true); err != nil {
		s.close()
		return nil, fmt.Errorf("xdp: %w", err)
	}
	f := os.NewFile(uintptr(s.fd), fmt.Sprintf("xdp-queue-%d", queue))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		s.fd = -1
		s.close()
		return nil, fmt.Errorf("xdp: %w", err)
	}
	l := &Link{
		sh: sh, s: s, f: f, rc: rc, queue: queue, room: room, srcMAC: mac,
		free: make([]uint64, 0, s.txFrames),
		fb:   make([]*packet.Buf, pktio.DefaultBatchSize),
	}
	for i := range s.txFrames {
		l.free = append(l.free, uint64((s.rxFrames+i)*frameSize))
	}
	l.readFn = l.readRing
	l.writeFn = l.writeRing
	sh.refs.Add(1)
	if err := sh.att.xsks.Update(uint32(queue), uint32(s.fd), 0); err != nil {
		l.Close()
		return nil, fmt.Errorf("xdp: socket map: %w", err)
	}
	return l, nil
}

// Mode reports how an open Link runs: "zerocopy" or "copy", then "native"
// or "generic" (the program's attachment), as in "copy native". It is ""
// for a Link that is not from this package.
func Mode(l pktio.Link) string {
	x, ok := l.(*Link)
	if !ok {
		return ""
	}
	m := "copy"
	if x.s.zerocopy {
		m = "zerocopy"
	}
	if x.sh.att.native {
		return m + " native"
	}
	return m + " generic"
}

// Queue is the receive queue the Link's socket is bound to.
func (l *Link) Queue() int { return l.queue }

// Fallbacks is how many packets Write handed to the fallback Link (or, when
// there is none, dropped as TxErrors) because it could not send them
// itself.
func (l *Link) Fallbacks() uint64 { return l.fellBack.Load() }

// KernelStats are the kernel's counters of the socket (XDP_STATISTICS):
// frames dropped for want of a fill ring entry or of room in the RX ring,
// and invalid descriptors.
func (l *Link) KernelStats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	var serr error
	err := l.rc.Control(func(fd uintptr) { st, serr = stats(int(fd)) })
	if err != nil {
		return st, l.wrap(err)
	}
	return st, serr
}

// BatchSize is pktio.DefaultBatchSize.
func (l *Link) BatchSize() int { return pktio.DefaultBatchSize }

// Stats returns the counters.
func (l *Link) Stats() *pktio.LinkStats { return &l.stats }

// Close closes the socket (waiting for a Read or Write inside the rings
// to leave them), unmaps its memory, and detaches the program if it was
// the last Link of its Open. It is idempotent and unblocks a blocked Read.
func (l *Link) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		l.sh.att.xsks.Delete(uint32(l.queue))
		l.f.Close() // unblocks a Read
		l.rmu.Lock()
		l.wmu.Lock()
		l.s.unmapAll()
		l.wmu.Unlock()
		l.rmu.Unlock()
		l.sh.release()
	})
	return nil
}

func (l *Link) wrap(err error) error {
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		return pktio.ErrClosed
	}
	return fmt.Errorf("xdp: %w", err)
}

// Read implements pktio.Link.Read: see the package comment.
func (l *Link) Read(bufs []*packet.Buf) (int, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.closed.Load() {
		return 0, pktio.ErrClosed
	}
	k := 0
	for _, b := range bufs[:min(len(bufs), l.s.rxFrames)] {
		if b.Headroom() < l.room || pktio.Room(b) == 0 {
			break
		}
		k++
	}
	if k == 0 {
		return 0, pktio.ErrShortBuffer
	}
	l.rbufs = bufs[:k]
	for {
		l.rout = 0
		if err := l.rc.Read(l.readFn); err != nil {
			l.rbufs = nil
			return 0, l.wrap(err)
		}
		if l.rout > 0 {
			l.rbufs = nil
			return l.rout, nil
		}
	}
}

// readRing takes what the RX ring holds (up to the buffers), copies it out,
// and gives the frames back through the fill ring. It returns false, to
// wait for the socket to become readable, when the ring is empty.
func (l *Link) readRing(fd uintptr) bool {
	s := l.s
	rx, fill := &s.rx, &s.fill
	prod := atomic.LoadUint32(rx.prod)
	cons := rx.cached
	if prod == cons {
		if fill.needWakeup() {
			unix.Syscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		}
		return false
	}
	n := min(prod-cons, uint32(len(l.rbufs)))
	fp := fill.cached
	t := &l.rtally
	out := 0
	for i := range n {
		d := rx.descs[(cons+i)&rx.mask]
		if end := d.Addr + uint64(d.Len); end <= uint64(len(s.umem)) && d.Len <= frameSize {
			if l.deliver(s.umem[d.Addr:end], l.rbufs[out], t) {
				out++
			}
		} else {
			t.RxErrors++
		}
		fill.addrs[fp&fill.mask] = d.Addr &^ (frameSize - 1)
		fp++
	}
	fill.cached = fp
	atomic.StoreUint32(fill.prod, fp)
	rx.cached = cons + n
	atomic.StoreUint32(rx.cons, cons+n)
	if fill.needWakeup() {
		// A zero-copy driver that ran out of fill entries waits for
		// this (copy mode never sets the flag).
		unix.Syscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
	t.AddTo(&l.stats)
	l.rout = out
	return true
}

// deliver copies the IP packet in an Ethernet frame into b: its ESP packet
// at b's data offset, the headers in front.
func (l *Link) deliver(frame []byte, b *packet.Buf, t *pktio.Tally) bool {
	if len(frame) < ethLen {
		t.RxInvalid++
		return false
	}
	ip := frame[ethLen:]
	var hl, total int
	var proto uint8
	switch packet.IPVersion(ip) {
	case 4:
		h := packet.IPv4(ip)
		if !h.IsValid() {
			t.RxInvalid++
			return false
		}
		hl, total, proto = h.HeaderLength(), int(h.TotalLength()), h.Protocol()
	case 6:
		h := packet.IPv6(ip)
		if !h.IsValid() {
			t.RxInvalid++
			return false
		}
		hl, total, proto = packet.IPv6Header, packet.IPv6Header+int(h.PayloadLength()), h.NextHeader()
	default:
		t.RxInvalid++
		return false
	}
	switch proto {
	case packet.ProtoUDP:
		u := packet.UDP(ip[hl:total])
		if len(u) < packet.UDPHeader || int(u.Length()) != len(u) {
			t.RxInvalid++
			return false
		}
		hl += packet.UDPHeader
		p := ip[hl:total]
		switch {
		case len(p) == 1 && p[0] == 0xff:
			t.RxKeepalive++
			return false
		case len(p) >= 4 && p[0]|p[1]|p[2]|p[3] == 0:
			t.RxIKE++
			return false
		}
	case packet.ProtoESP:
	default:
		t.RxInvalid++
		return false
	}
	n := total - hl
	if n > pktio.Room(b) {
		t.RxShort++
		return false
	}
	if b.Headroom() < hl {
		t.RxInvalid++
		return false
	}
	off := b.Offset()
	copy(b.Slot()[off-hl:off+n], ip[:total])
	b.SetWindow(off-hl, total)
	t.RxPackets++
	t.RxBytes += uint64(total)
	return true
}

// Write implements pktio.Link.Write: see the package comment.
func (l *Link) Write(bufs []*packet.Buf) (int, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed.Load() {
		return 0, pktio.ErrClosed
	}
	done := 0
	for done < len(bufs) {
		chunk := bufs[done:min(len(bufs), done+len(l.fb))]
		l.wbufs, l.nfb = chunk, 0
		err := l.rc.Write(l.writeFn)
		l.wbufs = nil
		t := &l.wtally
		if err != nil {
			t.AddTo(&l.stats)
			return done, l.wrap(err)
		}
		if l.nfb > 0 {
			l.fellBack.Add(uint64(l.nfb))
			if l.fallback == nil {
				t.TxErrors += uint64(l.nfb)
			} else if n, _ := l.fallback.Write(l.fb[:l.nfb]); n < l.nfb {
				t.TxErrors += uint64(l.nfb - n)
			}
			clear(l.fb[:l.nfb])
		}
		t.AddTo(&l.stats)
		done += len(chunk)
	}
	return done, nil
}

// writeRing puts l.wbufs into TX frames and pushes them to the kernel;
// packets it cannot send itself go to l.fb. It always returns true.
func (l *Link) writeRing(fd uintptr) bool {
	s := l.s
	tx := &s.tx
	t := &l.wtally
	l.reap()
	prod := tx.cached
	for _, b := range l.wbufs {
		data := b.Bytes()
		total, dst, ok := outer(data)
		if !ok || total+ethLen > frameSize {
			t.TxInvalid++
			continue
		}
		h, ok := l.sh.res.lookup(dst)
		if !ok || h.probe.Load() && h.probe.CompareAndSwap(true, false) {
			l.fb[l.nfb] = b
			l.nfb++
			continue
		}
		if len(l.free) == 0 && !l.waitFrame(fd, prod) {
			t.TxFull++
			continue
		}
		addr := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		f := s.umem[addr : addr+frameSize]
		copy(f[0:6], h.mac[:])
		copy(f[6:12], l.srcMAC[:])
		ip := f[ethLen : ethLen+total]
		copy(ip, data[:total])
		if packet.IPVersion(ip) == 4 {
			f[12], f[13] = 0x08, 0x00
			finish4(ip)
		} else {
			f[12], f[13] = 0x86, 0xdd
			finish6(ip)
		}
		tx.descs[prod&tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(ethLen + total)}
		prod++
		t.TxPackets++
		t.TxBytes += uint64(len(data))
	}
	l.push(fd, prod)
	return true
}

// push publishes the TX ring up to prod and makes the kernel send it
// (copy mode sends in sendto), a bounded number of tries.
func (l *Link) push(fd uintptr, prod uint32) {
	tx := &l.s.tx
	if prod != tx.cached {
		tx.cached = prod
		atomic.StoreUint32(tx.prod, prod)
	}
	for range kickTries {
		if atomic.LoadUint32(tx.cons) == prod || !tx.needWakeup() {
			return
		}
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		default:
			return // ENETDOWN and the like: the frames go with the next push
		}
		l.reap()
	}
}

// waitFrame pushes what is queued and reaps completions until a TX frame
// is free, for at most txWait.
func (l *Link) waitFrame(fd uintptr, prod uint32) bool {
	var deadline time.Time
	for {
		l.push(fd, prod)
		l.reap()
		if len(l.free) > 0 {
			return true
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(txWait)
		} else if now.After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}

// reap takes the sent frames back from the completion ring.
func (l *Link) reap() {
	c := &l.s.comp
	prod := atomic.LoadUint32(c.prod)
	for ; c.cached != prod; c.cached++ {
		l.free = append(l.free, c.addrs[c.cached&c.mask]&^(frameSize-1))
	}
	atomic.StoreUint32(c.cons, c.cached)
}

// outer checks the outer header Write was given: IPv4 or IPv6 carrying
// UDP (with a consistent length) or ESP. It returns the IP packet's length
// and its destination.
func outer(data []byte) (total int, dst netip.Addr, ok bool) {
	var hl int
	var proto uint8
	switch packet.IPVersion(data) {
	case 4:
		h := packet.IPv4(data)
		if !h.IsValid() {
			return 0, dst, false
		}
		hl, total, proto, dst = h.HeaderLength(), int(h.TotalLength()), h.Protocol(), h.Dst()
	case 6:
		h := packet.IPv6(data)
		if !h.IsValid() {
			return 0, dst, false
		}
		hl, total, proto, dst = packet.IPv6Header, packet.IPv6Header+int(h.PayloadLength()), h.NextHeader(), h.Dst()
	default:
		return 0, dst, false
	}
	switch proto {
	case packet.ProtoUDP:
		u := packet.UDP(data[hl:total])
		if len(u) < packet.UDPHeader || int(u.Length()) != len(u) {
			return 0, dst, false
		}
	case packet.ProtoESP:
	default:
		return 0, dst, false
	}
	return total, dst, true
}

// finish4 sets an IPv4 packet's header checksum and, for UDP, a zero UDP
// checksum.
func finish4(ip []byte) {
	h := packet.IPv4(ip)
	if h.Protocol() == packet.ProtoUDP {
		hl := h.HeaderLength()
		ip[hl+6], ip[hl+7] = 0, 0
	}
	h.SetChecksum()
}

// finish6 sets an IPv6 UDP packet's checksum.
func finish6(ip []byte) {
	h := packet.IPv6(ip)
	if h.NextHeader() == packet.ProtoUDP {
		packet.UDP(ip[packet.IPv6Header:]).SetChecksumIPv6(ip[8:24], ip[24:40])
	}
}
