package sockio

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// GSO limits: the kernel takes at most UDP_MAX_SEGMENTS (64 on older
// kernels) segments and a 64 KiB datagram.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65000
)

// Writer is the send half of a socket Link:
//
//  1. per packet: parse the outer header the ESP layer wrote, drop and
//     count what cannot be sent, point an iovec at the payload behind it;
//  2. with GSO, chain consecutive packets to the same destination, from the
//     same source, with the same TOS and the same size (the last may be
//     shorter) into one message whose iovecs the kernel segments
//     (UDP_SEGMENT) — no copy;
//  3. sendmmsg; a message the kernel refuses is counted and skipped, a
//     refused GSO message is resent packet by packet (and EIO turns GSO
//     off for good: the route cannot do it).
//
// Only one goroutine may call Write at a time.
type Writer struct {
	conn     *Conn
	proto    uint8 // packet.ProtoUDP or packet.ProtoESP
	v6sock   bool  // the socket is AF_INET6
	mapV4    bool  // an IPv4 destination may be sent to as v4-mapped (dual-stack socket)
	wildcard bool  // the socket is bound to a wildcard address: name the source with PKTINFO
	gso      atomic.Bool
	batch    *Batch
	msgs     []txMsg
	stats    *pktio.LinkStats
	o        Outer
}

// txMsg is one message being built: bufs[first:end] (some of which may have
// been dropped) sent as segs segments.
type txMsg struct {
	first, end int
	iov, segs  int
	seg, last  int // size of the first and of the last segment
	total      int
	bytes      uint64 // data window bytes of the packets in the message
	dst        netip.AddrPort
	src        netip.Addr
	tos        uint8
	namelen    uint32
}

// WriterConfig describes a Writer.
type WriterConfig struct {
	Proto    uint8
	V6Socket bool
	MapV4    bool
	Wildcard bool
	GSO      bool
	Batch    int
}

// NewWriter makes the send half of a Link over conn, counting in stats.
func NewWriter(conn *Conn, cfg WriterConfig, stats *pktio.LinkStats) *Writer {
	w := &Writer{
		conn: conn, proto: cfg.Proto, v6sock: cfg.V6Socket, mapV4: cfg.MapV4,
		wildcard: cfg.Wildcard, stats: stats,
		batch: NewBatch(cfg.Batch, cfg.Batch, SendCtrlSize),
		msgs:  make([]txMsg, cfg.Batch),
	}
	w.gso.Store(cfg.GSO)
	return w
}

// GSO reports whether the writer uses UDP GSO (it turns it off after the
// kernel refuses it with EIO).
func (w *Writer) GSO() bool { return w.gso.Load() }

// Write implements pktio.Link.Write.
func (w *Writer) Write(bufs []*packet.Buf) (int, error) {
	if w.conn.Closed() {
		return 0, pktio.ErrClosed
	}
	var t pktio.Tally
	done := 0
	counted := 0 // drops of bufs before this index are counted
	plainTo := 0 // bufs before this index go without GSO (after a refused GSO message)
	for done < len(bufs) {
		m, end := w.build(bufs, done, &counted, plainTo, &t)
		if m == 0 {
			done = end
			continue
		}
		sent, err := w.conn.Send(w.batch, m)
		if err != nil {
			if err == pktio.ErrClosed {
				t.AddTo(w.stats)
				return done, err
			}
			first := &w.msgs[0]
			if first.segs > 1 {
				if errors.Is(err, unix.EIO) {
					w.gso.Store(false)
				}
				plainTo = first.end
				continue
			}
			t.TxErrors++
			done = first.end
			continue
		}
		for _, tm := range w.msgs[:sent] {
			t.TxPackets += uint64(tm.segs)
			t.TxBytes += tm.bytes
			if tm.segs > 1 {
				t.TxGSO += uint64(tm.segs)
			}
		}
		done = w.msgs[sent-1].end
	}
	t.AddTo(w.stats)
	return len(bufs), nil
}

// build prepares up to a batch of messages from bufs[from:]. It returns how
// many and the index of the first buf it did not look at.
func (w *Writer) build(bufs []*packet.Buf, from int, counted *int, plainTo int, t *pktio.Tally) (int, int) {
	gso := w.gso.Load() && w.proto == packet.ProtoUDP
	m, iov := 0, 0
	i := from
	for ; i < len(bufs) && iov < len(w.batch.Iovs); i++ {
		data := bufs[i].Bytes()
		start, stop, ok := ParseOuter(data, w.proto, &w.o)
		if ok && (w.o.Dst.Is4() && w.v6sock && !w.mapV4 || w.o.Dst.Is6() && !w.v6sock) {
			ok = false // wrong family for this socket
		}
		if !ok {
			if i >= *counted {
				t.TxInvalid++
			}
			continue
		}
		payload := data[start:stop]
		dst := netip.AddrPortFrom(w.o.Dst, w.o.DPort)
		if m > 0 && gso && i >= plainTo && w.joins(&w.msgs[m-1], dst, len(payload)) {
			tm := &w.msgs[m-1]
			w.batch.SetIov(iov, payload)
			iov++
			tm.segs++
			tm.end = i + 1
			tm.last = len(payload)
			tm.total += len(payload)
			tm.bytes += uint64(len(data))
			continue
		}
		if m == len(w.msgs) {
			break
		}
		namelen, ok := PutSockaddr(&w.batch.Names[m], w.o.Dst, w.o.DPort, w.v6sock)
		if !ok {
			if i >= *counted {
				t.TxInvalid++
			}
			continue
		}
		w.batch.SetIov(iov, payload)
		w.msgs[m] = txMsg{
			first: i, end: i + 1, iov: iov, segs: 1,
			seg: len(payload), last: len(payload), total: len(payload), bytes: uint64(len(data)),
			dst: dst, src: w.o.Src, tos: w.o.TOS, namelen: namelen,
		}
		iov++
		m++
	}
	*counted = max(*counted, i)
	for j := range m {
		tm := &w.msgs[j]
		var src netip.Addr
		if w.wildcard {
			src = tm.src
		}
		gsoSize := 0
		if tm.segs > 1 {
			gsoSize = tm.seg
		}
		cl := PutSend(w.batch.CtrlBuf(j), tm.dst.Addr().Is4(), src, tm.tos, gsoSize)
		w.batch.SetSend(j, tm.iov, tm.segs, tm.namelen, cl)
	}
	return m, i
}

// joins reports whether a packet with a payload of n bytes to dst can be
// one more segment of tm.
func (w *Writer) joins(tm *txMsg, dst netip.AddrPort, n int) bool {
	return tm.dst == dst && tm.tos == w.o.TOS && (!w.wildcard || tm.src == w.o.Src) &&
		tm.last == tm.seg && n > 0 && n <= tm.seg &&
		tm.segs < maxGSOSegments && tm.total+n <= maxGSOBytes
}
