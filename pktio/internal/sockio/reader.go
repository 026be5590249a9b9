package sockio

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// Reader is the receive half of a socket Link:
//
//  1. recvmmsg straight into the caller's buffers, at their data offsets
//     (or, with GRO, into staging buffers that are then split into the
//     caller's buffers by segment size, one copy per packet);
//  2. per datagram: drop truncated ones, let Filter take non-ESP ones
//     (IKE, keepalives), and synthesise the outer header in the headroom;
//  3. compact the delivered buffers to the front of the slice.
//
// Only one goroutine may call Read at a time.
type Reader struct {
	conn  *Conn
	proto uint8          // protocol of the synthesised header: UDP or ESP
	synth bool           // synthesise a header (false: raw IPv4, which delivers its own)
	local netip.AddrPort // the bound address; its address is the destination when PKTINFO is absent
	room  int            // headroom a buffer needs for the synthesised header
	batch *Batch
	// Filter, if set, looks at each datagram's payload first; when it
	// returns true the datagram was consumed (and counted in t) and is not
	// delivered. p aliases the receive buffer; to is the address the
	// datagram was sent to (its PKTINFO destination, else the bound one).
	filter func(p []byte, from, to netip.AddrPort, t *pktio.Tally) bool
	stats  *pktio.LinkStats
	ri     RecvInfo
	tally  pktio.Tally // kept here: passed to filter, a local one would escape

	// GRO staging (nil without GRO).
	stage [][]byte
	st    stagedState
}

type stagedState struct {
	n, i, off int // datagrams staged, the current one, offset within it
	meta      []stagedMeta
}

type stagedMeta struct {
	from  netip.AddrPort
	ri    RecvInfo
	size  int
	trunc bool
}

// ReaderConfig describes a Reader.
type ReaderConfig struct {
	Proto    uint8          // packet.ProtoUDP or packet.ProtoESP
	Synth    bool           // synthesise the outer header
	Local    netip.AddrPort // bound address
	Headroom int            // headroom each buffer needs
	Batch    int            // messages per recvmmsg
	// GROStage, if > 0, receives into that many 64 KiB staging buffers
	// and splits coalesced datagrams (UDP_GRO) into packets.
	GROStage int
	Filter   func(p []byte, from, to netip.AddrPort, t *pktio.Tally) bool
}

// NewReader makes the receive half of a Link over conn, counting in stats.
func NewReader(conn *Conn, cfg ReaderConfig, stats *pktio.LinkStats) *Reader {
	r := &Reader{
		conn: conn, proto: cfg.Proto, synth: cfg.Synth, local: cfg.Local,
		room: cfg.Headroom, filter: cfg.Filter, stats: stats,
		batch: NewBatch(cfg.Batch, cfg.Batch, RecvCtrlSize),
	}
	if cfg.GROStage > 0 {
		n := min(cfg.GROStage, cfg.Batch)
		r.stage = make([][]byte, n)
		for i := range r.stage {
			r.stage[i] = make([]byte, 1<<16)
		}
		r.st.meta = make([]stagedMeta, n)
	}
	return r
}

// Read implements pktio.Link.Read.
func (r *Reader) Read(bufs []*packet.Buf) (int, error) {
	if r.conn.Closed() {
		return 0, pktio.ErrClosed
	}
	k := 0
	for _, b := range bufs[:min(len(bufs), len(r.batch.Msgs))] {
		if b.Headroom() < r.room || pktio.Room(b) == 0 {
			break
		}
		k++
	}
	if k == 0 {
		return 0, pktio.ErrShortBuffer
	}
	bufs = bufs[:k]
	if r.stage != nil {
		return r.readStaged(bufs)
	}
	for {
		for i, b := range bufs {
			r.batch.Prepare(i, b.Slot()[b.Offset():])
		}
		n, err := r.recv(len(bufs))
		if err != nil {
			return 0, err
		}
		if out := r.deliver(bufs, n); out > 0 {
			return out, nil
		}
	}
}

// recv runs recvmmsg; transient errors are counted and retried.
func (r *Reader) recv(n int) (int, error) {
	for {
		got, err := r.conn.Recv(r.batch, n)
		switch {
		case err == nil:
			return got, nil
		case err == pktio.ErrClosed:
			return 0, err
		case Transient(err):
			r.stats.RxErrors.Add(1)
		default:
			return 0, fmt.Errorf("pktio: recvmmsg: %w", err)
		}
	}
}

// deliver turns the n datagrams received into bufs[:n] into packets and
// moves them to the front; it returns how many.
func (r *Reader) deliver(bufs []*packet.Buf, n int) int {
	t := &r.tally
	out := 0
	for i := 0; i < n; i++ {
		m := &r.batch.Msgs[i]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			t.RxShort++
			continue
		}
		b := bufs[i]
		size := int(m.Len)
		from := Sockaddr(&r.batch.Names[i])
		ParseRecv(r.batch.Control(i), &r.ri)
		off := b.Offset()
		if r.filter != nil && r.filter(b.Slot()[off:off+size], from, r.dest(&r.ri), t) {
			continue
		}
		b.SetWindow(off, size)
		if !r.finish(b, from, &r.ri, t) {
			continue
		}
		bufs[out], bufs[i] = bufs[i], bufs[out]
		out++
	}
	t.AddTo(r.stats)
	return out
}

// dest is the address a datagram was sent to: its PKTINFO destination (the
// bound address without one) and the bound port.
func (r *Reader) dest(ri *RecvInfo) netip.AddrPort {
	dst := ri.Dst
	if !dst.IsValid() {
		dst = r.local.Addr()
	}
	return netip.AddrPortFrom(dst.Unmap(), r.local.Port())
}

// finish makes the payload in b's window a whole IP packet.
func (r *Reader) finish(b *packet.Buf, from netip.AddrPort, ri *RecvInfo, t *pktio.Tally) bool {
	if !r.synth {
		// A raw IPv4 socket delivers the IP header.
		if packet.IPVersion(b.Bytes()) != 4 || b.Len() < packet.IPv4MinHeader {
			t.RxInvalid++
			return false
		}
	} else {
		src := from.Addr()
		if !src.IsValid() || b.Headroom() < HeaderLen(src, r.proto == packet.ProtoUDP) {
			t.RxInvalid++
			return false
		}
		dst := ri.Dst
		if !dst.IsValid() {
			dst = r.local.Addr().Unmap()
		}
		PrependHeader(b, src, dst, from.Port(), r.local.Port(), ri.TOS, r.proto)
	}
	t.RxPackets++
	t.RxBytes += uint64(b.Len())
	return true
}

// readStaged is Read with UDP GRO: datagrams land in staging buffers and
// are split into bufs; segments that do not fit this call wait for the
// next.
func (r *Reader) readStaged(bufs []*packet.Buf) (int, error) {
	st := &r.st
	for {
		if st.i >= st.n {
			for i, s := range r.stage {
				r.batch.Prepare(i, s)
			}
			n, err := r.recv(len(r.stage))
			if err != nil {
				return 0, err
			}
			for i := range n {
				m := &r.batch.Msgs[i]
				md := &st.meta[i]
				md.trunc = m.Hdr.Flags&unix.MSG_TRUNC != 0
				md.size = int(m.Len)
				md.from = Sockaddr(&r.batch.Names[i])
				ParseRecv(r.batch.Control(i), &md.ri)
			}
			st.n, st.i, st.off = n, 0, 0
		}
		if out := r.drain(bufs); out > 0 {
			return out, nil
		}
	}
}

func (r *Reader) drain(bufs []*packet.Buf) int {
	st := &r.st
	t := &r.tally
	out := 0
	for out < len(bufs) && st.i < st.n {
		md := &st.meta[st.i]
		if md.trunc {
			t.RxShort++
			st.i++
			continue
		}
		seg := md.ri.GSOSize
		if seg <= 0 || seg > md.size {
			seg = md.size
		}
		chunk := min(seg, md.size-st.off)
		p := r.stage[st.i][st.off : st.off+chunk]
		if st.off += chunk; st.off >= md.size {
			st.i, st.off = st.i+1, 0
		}
		if md.ri.GSOSize > 0 {
			t.RxGRO++
		}
		if r.filter != nil && r.filter(p, md.from, r.dest(&md.ri), t) {
			continue
		}
		b := bufs[out]
		if chunk > pktio.Room(b) {
			t.RxShort++
			continue
		}
		off := b.Offset()
		copy(b.Slot()[off:], p)
		b.SetWindow(off, chunk)
		if r.finish(b, md.from, &md.ri, t) {
			out++
		}
	}
	t.AddTo(r.stats)
	return out
}
