// Package pktio is sluice's packet I/O: the Link interface that data-plane
// workers read batches from and write batches to, and (in sub-packages) its
// backends:
//
//	pktio/tun     Linux TUN with its offloads (virtio-net header: TSO/USO
//	              split on read, GRO on write, read and written with
//	              readv/writev, no copy but the split's) and one queue per
//	              worker (IFF_MULTI_QUEUE)
//	pktio/udp     ESP-in-UDP (RFC 3948) sockets: recvmmsg/sendmmsg, UDP
//	              GSO/GRO, SO_REUSEPORT groups (one socket per worker)
//	pktio/rawesp  ESP as IP protocol 50 on raw IPv4 and IPv6 sockets
//	pktio/pipe    an in-memory pair of Links for tests and benchmarks
//	pktio/fault   a Link wrapper for tests that loses, corrupts, duplicates,
//	              reorders and delays what is written through it (seeded)
//	pktio/netutil netlink helpers: bring a link up, add addresses and routes
//
// # Packets are whole IP packets
//
// Every Link carries whole IPv4 or IPv6 packets in both directions, so the
// data plane has one shape of packet whatever the backend:
//
//   - A TUN device carries IP packets natively.
//   - A udp Link receives the UDP payload from the kernel directly into the
//     buffer and then writes an IP and UDP header in the headroom in front of
//     it, built from the datagram's source and destination addresses and
//     ports (the destination from IP_PKTINFO/IPV6_PKTINFO when the socket is
//     bound to a wildcard address) and its TOS/traffic class (for RFC 6040
//     ECN decapsulation), so that esp.Parse sees what it would see on the
//     wire. The synthesised IPv4 header has a valid checksum; the UDP checksum
//     is zero (the kernel has verified the real one). On send it strips the
//     outer IP and UDP header that the ESP layer wrote and sends the rest to
//     the destination address and port that header names, from the source
//     address it names (IP_PKTINFO, when the socket is bound to a wildcard
//     address) with its TOS (IP_TOS/IPV6_TCLASS).
//   - A raw IPv4 socket delivers the IP header itself; a raw IPv6 socket does
//     not, so the rawesp Link synthesises it in the headroom as udp does. On
//     send it strips the outer header and lets the kernel write its own.
//
// IKE packets (the RFC 3948 non-ESP marker) and NAT-keepalives arriving on
// a udp Link are never delivered as packets: they are counted and handed to
// an optional callback.
//
// # Buffers
//
// Read receives each packet at the data offset its buffer has when Read is
// called (callers Get buffers from a packet.Pool or Reset them to the
// headroom they want) and sets the buffer's data window to the packet; the
// room it has is from that offset to the end of the slot (Room), whatever
// the window held before. A backend that synthesises headers puts them in
// the headroom in front of that offset, so the window may start earlier;
// such a backend states the headroom it needs (udp.HeaderRoom,
// rawesp.HeaderRoom). A packet longer than the room is dropped and counted
// (RxShort). Read may reorder the pointers in bufs: on return bufs[:n] hold
// the packets, and the others keep their data offsets (their slots' bytes
// may have been overwritten), so they can be passed to the next Read as
// they are. Buffers without the room a backend needs are not used; if the
// first one lacks it Read returns ErrShortBuffer.
//
// Write sends the data window of each buffer. It never takes ownership: the
// buffers are the caller's again when Write returns, and it may have
// modified their bytes (headers stripped in place, headers rewritten for
// TUN GRO coalescing). Write returns how many buffers it handled,
// in order: sent, or dropped and counted (malformed, wrong family, no room,
// a full pipe, a packet the kernel refused). An error says why it stopped
// before len(bufs); after Close it is ErrClosed.
//
// # Concurrency
//
// One goroutine may Read and another Write the same Link at the same time;
// Read must not be called concurrently with itself, nor Write. Close and
// Stats may be called from any goroutine at any time. Close is idempotent
// and makes a blocked Read return ErrClosed.
//
// # Counters
//
// Each Link has a LinkStats of atomic counters, one per drop reason as well
// as packets and bytes moved (DESIGN.md decision 9). Counters are added once
// per batch, not per packet.
package pktio

import (
	"errors"

	"github.com/sluicegw/sluice/packet"
)

// Link is a batch packet interface.
type Link interface {
	// Read fills bufs with packets, each one's data window set to the
	// packet, and returns how many. It blocks until at least one packet
	// is available or an error occurs (ErrClosed after Close).
	Read(bufs []*packet.Buf) (n int, err error)
	// Write sends the data windows of bufs and returns how many buffers it
	// handled (sent, or dropped and counted).
	Write(bufs []*packet.Buf) (n int, err error)
	// BatchSize is the number of buffers Read and Write handle per call at
	// most; Read should be given at least this many (a TUN device splits
	// one TSO super-packet into up to BatchSize packets).
	BatchSize() int
	// Close releases the link and unblocks a blocked Read. It is
	// idempotent.
	Close() error
	// Stats returns the link's counters.
	Stats() *LinkStats
}

// Errors common to every backend.
var (
	// ErrClosed is returned by Read and Write after Close.
	ErrClosed = errors.New("pktio: link closed")
	// ErrShortBuffer is returned by Read when the first buffer has not
	// the headroom or room the backend needs.
	ErrShortBuffer = errors.New("pktio: buffer has too little room")
)

// DefaultBatchSize is the batch size of the socket and pipe backends, the
// same as wireguard-go's conn.IdealBatchSize.
const DefaultBatchSize = 128

// Room is the space Read may fill in b: from its data offset to the end of
// its slot.
func Room(b *packet.Buf) int { return b.Cap() - b.Offset() }

// MaxPacket is the largest IP packet a Link carries (IPv4 total length;
// IPv6 jumbograms are not supported).
const MaxPacket = 65535
