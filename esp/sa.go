// Package esp implements the ESP wire format and security association
// runtime of RFC 4303: outbound sealing and inbound opening of batches of
// packets in place, in pooled buffers with headroom and tailroom; tunnel and
// transport mode over IPv4 and IPv6; 32-bit and extended (RFC 4304)
// sequence numbers; anti-replay; padding and dummy packets; lifetimes; and
// UDP encapsulation (RFC 3948).
//
// The crypto runs through a cryptodev.Queue, so the same code drives a
// synchronous engine and an asynchronous one. Work on a packet is split in
// two: Prepare (before crypto: sequence number, headers, replay pre-check)
// and Finish (after crypto: status, replay update, trailer). Both run with
// the SA's lock held (Pipeline takes it once per run of consecutive packets
// of one SA), so several data-plane goroutines may carry one SA while its
// sequence numbers and replay window still have one writer at a time; only
// the crypto in between runs unlocked, here or elsewhere (DESIGN.md
// decisions 3 and 4).
//
// # AEAD nonces
//
// AES-GCM (RFC 4106) and ChaCha20-Poly1305 (RFC 7634) fail catastrophically
// if one (key, nonce) pair seals two packets, and sluice's keys come from a
// configuration file, so a restarted gateway meets the same key again. The
// nonce is the SA's salt and an 8-byte explicit IV, which RFC 4106 section
// 3.1 requires only to be unique under the key. An outbound AEAD SA
// therefore does not use its sequence number as the IV (that would make
// uniqueness depend on the sequence number surviving a restart, and a lost
// or unwritable state directory would repeat it); it uses
//
//	IV = epoch (32 bits) || counter (32 bits)
//
// where the counter counts the packets this SA instance sealed under the
// epoch, and the epoch moves on by one every 2^32 packets. Within one
// instance the IVs are distinct by construction (epochs only grow, and a
// Resume moves to an epoch above those the instance used, see below).
// Across instances of one key, two cases:
//
// An SA of a hot-standby pair (Config.Lease) is given its epochs: it
// starts under Config.IVEpoch and resumes under the epoch Resume names,
// from a block of IVBlock epochs (2^40 packets) that package ha hands to
// each acquisition of the SA's group. The member whose name sorts lower
// has the epochs below 2^31, the other those above, so the two members'
// instances never meet, however long both seal: the old owner goes on
// sealing until it is fenced (or, without a witness, until the link
// returns) while the new one seals too, each in its own half, rollovers
// included. Within a member, blocks are taken in increasing order and
// both members' next blocks travel in every heartbeat, so a member that
// restarts learns where it stood from its peer and starts a margin above
// (the blocks it may have taken after its last heartbeat the peer heard).
// No two acquisitions, takeovers and handovers in any number, share a
// block while either member remembers (package ha's doc states what that
// covers). Where nothing remembers (both members restarted together, or a
// member starts alone with its peer gone, or the peer is of a version
// that sends no blocks), the member starts at a random block of its half
// (2^22 choices) and counts up from there: the chance that this meets a
// block an earlier life used is at most the blocks used before over 2^22
// per such start, and handovers add nothing to it. An instance that seals
// more than 2^40 packets under one acquisition goes on into the next
// block, which its own later acquisitions skip (Resume never moves below
// the epoch it is at); another instance of its key on the same member
// could meet it, which IKE's lifetimes, far below 2^40 packets, rule out
// for negotiated keys.
//
// Any other SA draws a random epoch when it is made. Its IVs repeat under
// a key only if the epochs of two draws under that key meet, whatever
// happened to the state on disk. With n epochs drawn under one key over
// its whole life (one per start, restart, reload or control-socket install
// of an SA with that key, plus one per 2^32 packets), the probability of
// any repeat is at most the birthday bound n(n-1)/2^33 < n^2/2^33: about
// 1.2e-4 after 10,000 restarts, 1.2e-8 after 100.
//
// The receiver takes the IV from the packet, so all this is invisible on
// the wire. The sequence number keeps its own job (anti-replay) and its
// own durable reservation (Config.SeqReserve).
package esp

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp/replay"
	"github.com/sluicegw/sluice/packet"
)

// Mode is tunnel or transport (RFC 4303 section 3.1).
type Mode uint8

const (
	Tunnel Mode = iota
	Transport
)

func (m Mode) String() string {
	if m == Transport {
		return "transport"
	}
	return "tunnel"
}

// Encap is the outer framing of ESP packets.
type Encap uint8

const (
	// EncapNone sends ESP as IP protocol 50.
	EncapNone Encap = iota
	// EncapUDP sends ESP in UDP (RFC 3948).
	EncapUDP
)

func (e Encap) String() string {
	if e == EncapUDP {
		return "udp"
	}
	return "none"
}

// Fixed sizes of the ESP format.
const (
	HeaderLen  = 8 // SPI and sequence number
	TrailerLen = 2 // pad length and next header
	// NATTPort is the IKE/ESP-in-UDP port (RFC 3948).
	NATTPort = 4500
	// Overhead bounds: the most an SA adds in front of and behind a packet.
	MaxHeadroom = 40 + 8 + HeaderLen + 16 // IPv6 + UDP + ESP + CBC IV
	MaxTailroom = 15 + TrailerLen + 32    // CBC padding + trailer + HMAC-SHA-512-256
)

// Lifetime bounds an SA's use (RFC 4301 section 4.4.2.1). Zero means no
// limit. Crossing a soft limit marks the SA as wanting a rekey; crossing a
// hard limit stops it.
type Lifetime struct {
	SoftPackets, HardPackets uint64
	SoftBytes, HardBytes     uint64
}

// Config describes one SA.
type Config struct {
	SPI   uint32
	Mode  Mode
	Encap Encap
	// Src and Dst are the outer addresses in tunnel mode; in transport mode
	// they are informational. Outbound tunnel SAs need both.
	Src, Dst     netip.Addr
	SPort, DPort uint16 // UDP ports with EncapUDP; 0 means 4500
	Alg          cryptodev.Alg
	// Key is the engine key for Alg. The SA does not own it: whoever made
	// it destroys it after the SA's last batch completes.
	Key          *cryptodev.Key
	ESN          bool
	ReplayWindow int    // inbound only; 0 turns anti-replay off
	Seq          uint64 // outbound: last number sent; inbound: highest received
	Lifetime     Lifetime
	// TTL of outer IPv4 headers and hop limit of outer IPv6 headers; 0 means 64.
	TTL uint8
	// SeqReserve, if set, is called on the owner's goroutine before an
	// outbound SA uses a sequence number above its last reservation, with
	// the new upper bound (SeqReserveBlock numbers ahead). It must record
	// the bound durably before returning; a restarted SA then starts above
	// it (Seq), so no sequence number is used twice under a configured key
	// (DESIGN.md decision 7; AEAD IVs do not depend on it, see the package
	// doc). An error stops the SA from sealing (ReasonSeqReserve) until a
	// later call succeeds.
	//
	// Inbound, with anti-replay on, it is called on the owner's goroutine
	// after a packet authenticated and before the replay window moves above
	// the last reservation, with the new upper bound (a step ahead, see
	// ReplayReserveMin). A restarted inbound SA given the recorded bound as
	// Seq treats every number up to it as received (replay.Window.ResetSeen),
	// so no packet is accepted twice across restarts of the receiver. An
	// error drops the packet (ReasonSeqReserve) without moving the window.
	SeqReserve func(upTo uint64) error
	// Lease, if set, grants the bounds asynchronously, from a hot standby
	// that records them (see Lease); Seq is where the SA starts. With
	// SeqReserve too, a number must be covered by both (a member that
	// restarts alone then starts above what it used itself). Inbound it needs anti-replay
	// (ReplayWindow > 0). Fenced makes the SA start fenced (SA.Fence): a
	// standby's copy, which carries nothing until it takes over (Resume).
	Lease  *Lease
	Fenced bool
	// IVEpoch, with Lease and FixedIVEpoch, is the AEAD IV epoch an
	// outbound SA starts under, given by the HA pair (package doc);
	// without them a random one is drawn.
	IVEpoch      uint32
	FixedIVEpoch bool
}

// IVBlock is how many AEAD IV epochs the HA pair gives an acquisition of
// a group (package ha's IVBlockEpochs): an instance of an SA seals up to
// IVBlock * 2^32 packets before it leaves its block.
const IVBlock = 1 << 8

// SeqReserveBlock is how many sequence numbers one reservation covers: a
// restart skips at most this many.
const SeqReserveBlock = 1 << 20

// Counters are an SA's statistics. The SA's owner writes them; anyone may
// read them. Packets and Bytes grow once per run of packets (when the
// owner unlocks the SA, see SA.Unlock), not per packet; the exported
// Finish methods publish at once.
type Counters struct {
	Packets atomic.Uint64 // packets sealed or opened
	Bytes   atomic.Uint64 // their plaintext bytes (inner packet or transport payload)
	Drops   DropCounters
}

// SA is the runtime of one security association in one direction. Its
// mutable state (sequence number, replay window, lifetime, counters) is
// guarded by its lock: Prepare and Finish are called with it held (Lock and
// Unlock; Pipeline does this), so the goroutine holding it is the state's
// one writer. Counters may be read by any goroutine.
type SA struct {
	mu   sync.Mutex
	cfg  Config
	info *cryptodev.AlgInfo
	out  bool

	seq      uint64      // outbound: last sequence number assigned
	reserved reservation // sequence numbers recorded ahead of use (SeqReserve)
	maxSeq   uint64
	window   *replay.Window
	ipID     uint16
	// Outbound tunnel: the headers every packet starts with (outer IP,
	// UDP with EncapUDP, the ESP header's SPI) with every per-SA field
	// filled in, their layout, and the one's complement sum of the
	// constant IPv4 words, so a packet costs one fixed-size copy, its
	// lengths, sequence number and IV, and three additions for the IPv4
	// checksum (RFC 1624).
	hdrTmpl  [tmplMax]byte
	hdrKind  uint8
	outerSum uint32
	// Per-SA constants of Prepare: the outer IP header's length (tunnel
	// mode), the UDP header's (EncapUDP), the ESP header's with the IV,
	// and what the trailer adds besides padding (pad length, next header,
	// ICV).
	outerLen, udpLen, ehl, tailLen int
	// front is what a tunnel packet gets in front (outerLen + udpLen +
	// ehl), limit the most its outer header's length field holds with the
	// outer header included, padMask the block size less one.
	front, limit, padMask int
	// limited says that the SA has a lifetime (Config.Lifetime); without
	// one, Prepare and Finish do not look at the counters.
	limited bool
	// Packets and bytes processed and not yet added to Counters: the
	// owner counts here, under the lock, and publishes with one atomic
	// add per run of packets (Unlock), not per packet.
	pendPackets, pendBytes uint64
	// Packets prepared and not yet finished, counted only when limited:
	// a hard lifetime counts them too, so that packets in flight (a
	// batch, batches queued at an engine) cannot carry the SA past it.
	flightPackets, flightBytes uint64

	ivGen        cipher.Block // CBC IV generator (outbound)
	ivSalt       uint64
	ivEpoch      uint32    // AEAD (outbound): high half of the explicit IV, drawn or given (package doc)
	ivCount      uint64    // AEAD (outbound): packets sealed under ivEpoch, < 1<<32
	ivGiven      bool      // AEAD (outbound): ivEpoch came from Config.IVEpoch or Resume, not a draw
	resumedAt    uint64    // inbound: the bound of the last Resume (ReasonTakeover at or below it)
	resumedUntil time.Time // inbound: until when (TakeoverWindow)
	testIV       []byte    // tests only: the IV every packet carries (known-answer tests)

	// Outbound: the outer addresses and UDP ports the SA seals with,
	// Config's until SetOuter moves them (MOBIKE); guarded by mu.
	outerSrc, outerDst netip.Addr
	udpSrc, udpDst     uint16

	user any // the owner's handle for the SA (the gateway's SAD entry)

	softExpired atomic.Bool
	exhausted   atomic.Bool
	Counters    Counters
}

func newSA(cfg Config, out bool) (*SA, error) {
	if !cfg.Alg.Valid() || cfg.Alg.IsAsymmetric() {
		return nil, fmt.Errorf("esp: %v is not an ESP algorithm", cfg.Alg)
	}
	if cfg.Key == nil || cfg.Key.Alg() != cfg.Alg {
		return nil, errors.New("esp: SA needs an engine key made for its algorithm")
	}
	// Any SPI is accepted here, so that published vectors (which use
	// reserved values such as 0 and 52) can be reproduced; configuration
	// refuses the reserved range 0..255 (RFC 4303 section 2.1).
	sa := &SA{cfg: cfg, info: cfg.Alg.Info(), out: out, seq: cfg.Seq}
	sa.maxSeq = 1<<32 - 1
	if cfg.ESN {
		sa.maxSeq = 1<<64 - 1
	}
	if cfg.Seq > sa.maxSeq {
		return nil, fmt.Errorf("esp: sequence number %d does not fit in 32 bits without ESN", cfg.Seq)
	}
	switch {
	case cfg.Lease != nil:
		if !out && cfg.ReplayWindow == 0 {
			return nil, errors.New("esp: a leased inbound SA needs anti-replay (a replay window)")
		}
		sa.reserved = newLeased(cfg.Lease, cfg.SeqReserve, cfg.Seq, out, cfg.Fenced)
	case out:
		sa.reserved = newReservation(cfg.SeqReserve, cfg.Seq, SeqReserveBlock, SeqReserveBlock)
	case cfg.ReplayWindow > 0:
		sa.reserved = newReservation(cfg.SeqReserve, cfg.Seq, ReplayReserveMin, ReplayReserveMax)
	}
	if sa.cfg.SPort == 0 {
		sa.cfg.SPort = NATTPort
	}
	if sa.cfg.DPort == 0 {
		sa.cfg.DPort = NATTPort
	}
	if sa.cfg.TTL == 0 {
		sa.cfg.TTL = 64
	}
	sa.outerSrc, sa.outerDst, sa.udpSrc, sa.udpDst = sa.cfg.Src, sa.cfg.Dst, sa.cfg.SPort, sa.cfg.DPort
	lt := &sa.cfg.Lifetime
	sa.limited = lt.SoftPackets != 0 || lt.HardPackets != 0 || lt.SoftBytes != 0 || lt.HardBytes != 0
	sa.ehl = HeaderLen + sa.info.IVLen
	sa.tailLen = TrailerLen + sa.info.ICVLen
	if cfg.Encap == EncapUDP {
		sa.udpLen = packet.UDPHeader
	}
	sa.padMask = sa.info.BlockSize - 1 // 4 or 16
	if sa.info.ICVLen < 16 {
		// Prepare writes the padding pattern whole into the trailer's
		// room (padPattern).
		return nil, fmt.Errorf("esp: %v: an ICV shorter than 16 bytes is not supported", cfg.Alg)
	}
	sa.limit = 0xffff
	if cfg.Mode == Tunnel {
		sa.outerLen = packet.IPv4MinHeader
		if cfg.Dst.Is6() {
			sa.outerLen = packet.IPv6Header
			sa.limit += packet.IPv6Header
		}
	}
	sa.front = sa.outerLen + sa.udpLen + sa.ehl
	return sa, nil
}

// NewOutbound makes an outbound SA. Tunnel mode needs Src and Dst of one
// family.
func NewOutbound(cfg Config) (*SA, error) {
	sa, err := newSA(cfg, true)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == Tunnel {
		if !cfg.Src.IsValid() || !cfg.Dst.IsValid() || cfg.Src.Is4() != cfg.Dst.Is4() {
			return nil, errors.New("esp: an outbound tunnel SA needs src and dst addresses of one family")
		}
	}
	if sa.info.IVLen == 16 {
		// CBC IVs must be unpredictable (RFC 3602 section 2.3): encrypt a
		// counter under a random key of the SA's own, which costs one block
		// encryption instead of a system call per packet.
		var k [16 + 8]byte
		if _, err := rand.Read(k[:]); err != nil {
			return nil, err
		}
		sa.ivGen, _ = aes.NewCipher(k[:16])
		sa.ivSalt = binary.BigEndian.Uint64(k[16:])
		clear(k[:])
	}
	if sa.info.AEAD {
		if cfg.Lease != nil && cfg.FixedIVEpoch {
			sa.ivEpoch, sa.ivCount, sa.ivGiven = cfg.IVEpoch, 0, true
		} else {
			sa.newEpoch()
		}
	}
	var id [2]byte
	rand.Read(id[:])
	sa.ipID = binary.BigEndian.Uint16(id[:])
	if cfg.Mode == Tunnel {
		sa.buildOuterTemplate()
	}
	return sa, nil
}

// randReader is where AEAD IV epochs come from; tests replace it
// (export_test.go) to make them deterministic.
var randReader io.Reader = rand.Reader

// newEpoch draws the SA's next AEAD IV epoch, different from the current
// one, and restarts the counter below it. crypto/rand does not fail (it
// ends the program instead), so neither does this.
func (sa *SA) newEpoch() {
	old := sa.ivEpoch
	for {
		var b [4]byte
		if _, err := io.ReadFull(randReader, b[:]); err != nil {
			panic("esp: no randomness for an IV epoch: " + err.Error())
		}
		sa.ivEpoch = binary.BigEndian.Uint32(b[:])
		if sa.ivEpoch != old || sa.ivCount == 0 {
			break
		}
	}
	sa.ivCount = 0
}

// nextAEADIV returns the explicit IV of the next AEAD packet: epoch ||
// counter (package doc). Only the owner calls it, with the lock held; it
// does not allocate. prepareOutboundLocked has it inline.
func (sa *SA) nextAEADIV() uint64 {
	if sa.ivCount == 1<<32 {
		// The next epoch, not a new draw: a draw may return one this
		// instance used before.
		sa.ivEpoch++
		sa.ivCount = 0
	}
	iv := uint64(sa.ivEpoch)<<32 | sa.ivCount
	sa.ivCount++
	return iv
}

// NewInbound makes an inbound SA with its anti-replay window.
func NewInbound(cfg Config) (*SA, error) {
	sa, err := newSA(cfg, false)
	if err != nil {
		return nil, err
	}
	if sa.window, err = replay.New(cfg.ReplayWindow); err != nil {
		return nil, fmt.Errorf("esp: %w", err)
	}
	if cfg.SeqReserve != nil || cfg.Lease != nil {
		sa.window.ResetSeen(cfg.Seq) // a restart or takeover: anything up to the bound may have been accepted
	} else {
		sa.window.Reset(cfg.Seq)
	}
	return sa, nil
}

// Config returns the SA's configuration.
func (sa *SA) Config() Config { return sa.cfg }

// SetOuter moves an outbound tunnel SA to new outer addresses and, with
// EncapUDP, ports (MOBIKE, RFC 4555: the peer moved): the packets it
// seals from now on carry them; those sealed before keep the old ones.
// The address family stays the SA's (the tunnel's MTU was computed for
// it). It takes the SA's lock, so it waits for a batch being prepared;
// it allocates nothing the data path sees. Config keeps the addresses
// the SA was made with; Outer returns the current ones.
func (sa *SA) SetOuter(src, dst netip.AddrPort) error {
	if !sa.out || sa.cfg.Mode != Tunnel {
		return errors.New("esp: only an outbound tunnel SA has outer addresses to move")
	}
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.IsValid() || !d.IsValid() || s.Is4() != sa.cfg.Dst.Is4() || d.Is4() != sa.cfg.Dst.Is4() {
		return fmt.Errorf("esp: SA %#x: outer addresses %v -> %v are not of its family", sa.cfg.SPI, src, dst)
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	sa.outerSrc, sa.outerDst = s, d
	if sa.cfg.Encap == EncapUDP {
		sa.udpSrc, sa.udpDst = cmp.Or(src.Port(), NATTPort), cmp.Or(dst.Port(), NATTPort)
	}
	sa.buildOuterTemplate()
	return nil
}

// Outer returns the outer addresses and UDP ports an outbound SA seals
// with now (see SetOuter). It takes the SA's lock.
func (sa *SA) Outer() (src, dst netip.AddrPort) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return netip.AddrPortFrom(sa.outerSrc, sa.udpSrc), netip.AddrPortFrom(sa.outerDst, sa.udpDst)
}

// SetUser attaches the owner's handle to the SA; call it before the SA is
// shared.
func (sa *SA) SetUser(v any) { sa.user = v }

// User returns the handle SetUser attached.
func (sa *SA) User() any { return sa.user }

// SPI returns the SA's SPI.
func (sa *SA) SPI() uint32 { return sa.cfg.SPI }

// Encap returns the SA's encapsulation, without copying its Config.
func (sa *SA) Encap() Encap { return sa.cfg.Encap }

// Lock takes the SA's lock, which PrepareOutbound, PrepareInbound,
// FinishOutbound and FinishInbound must be called with. It is held for a
// run of packets, never across the crypto of an asynchronous engine.
func (sa *SA) Lock() { sa.mu.Lock() }

// Unlock adds the packets processed under the lock to Counters and
// releases the lock.
func (sa *SA) Unlock() {
	sa.publishLocked()
	sa.mu.Unlock()
}

// publishLocked adds the packets and bytes counted since the last call to
// Counters: one atomic add each per run of packets instead of per packet.
func (sa *SA) publishLocked() {
	if sa.pendPackets != 0 {
		sa.Counters.Packets.Add(sa.pendPackets)
		sa.Counters.Bytes.Add(sa.pendBytes)
		sa.pendPackets, sa.pendBytes = 0, 0
	}
}

// Outbound reports the SA's direction.
func (sa *SA) Outbound() bool { return sa.out }

// Seq returns the last sequence number sent (outbound) or the highest
// authenticated one received (inbound). It takes the SA's lock: any
// goroutine may call it, but not one that holds the lock.
func (sa *SA) Seq() uint64 {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if sa.out {
		return sa.seq
	}
	return sa.window.Highest()
}

// Fence stops a leased SA (Config.Lease) from sealing and opening
// packets (on), or lets it go on (off): they are dropped as ReasonFenced
// from the next packet on. A standby's copy of an SA is fenced until it
// takes over, and an owner cut off from its standby fences its SAs (package
// ha). It takes the SA's lock; it does nothing to an SA without a lease.
func (sa *SA) Fence(on bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if sa.reserved.lease == nil {
		return
	}
	sa.reserved.fenced = on
	sa.reserved.next = 0 // the next packet looks at the lease
}

// Resume makes a leased SA continue where another instance of it left
// off, and lets it carry packets (Fence(false)). Outbound, it sends above
// bound, and an AEAD SA under ivEpoch with its counter at 0 (the HA pair
// gives each acquisition epochs no other instance of the key used,
// package doc), or under the epoch after its current one if that is
// higher: an instance never goes back to an epoch it used. Inbound,
// everything up to bound is treated as received. bound is what the other
// instance reserved (a takeover) or its exact last number (a planned
// handover); Resume never moves an SA back. It takes the SA's lock.
func (sa *SA) Resume(bound uint64, ivEpoch uint32) error {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	r := &sa.reserved
	if r.lease == nil {
		return errors.New("esp: only a leased SA resumes")
	}
	// Above the last number there is nothing to send: the SA is
	// exhausted and asks for a rekey.
	bound = min(bound, sa.maxSeq)
	r.lease.Grant(bound)
	r.upTo = max(r.upTo, bound)
	r.asked = max(r.asked, bound)
	if sa.out {
		sa.seq = max(sa.seq, bound)
		if sa.info.AEAD {
			if sa.ivGiven && ivEpoch <= sa.ivEpoch {
				// It sealed here since this block began (a
				// handover and back within it, or past its
				// end): on from its own epoch.
				ivEpoch = sa.ivEpoch + 1
			}
			sa.ivEpoch, sa.ivCount, sa.ivGiven = ivEpoch, 0, true
		}
	} else if bound > sa.window.Highest() {
		sa.window.ResetSeen(bound)
		sa.resumedAt, sa.resumedUntil = bound, leaseNow().Add(TakeoverWindow)
	}
	r.fenced = false
	r.next = 0
	return nil
}

// IVEpoch returns the AEAD IV epoch an outbound SA seals under now. It
// takes the SA's lock.
func (sa *SA) IVEpoch() uint32 {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return sa.ivEpoch
}

// Record makes a leased SA's durable reservation (Config.SeqReserve
// beside Config.Lease) cover upTo, writing a new bound if it does not:
// a standby keeps in its own state the bounds its owner was granted, so
// that started alone it begins above them. It takes the SA's lock; it
// does nothing to an SA without both.
func (sa *SA) Record(upTo uint64) error {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	d := sa.reserved.durable
	if d == nil || upTo <= d.upTo {
		return nil
	}
	if !d.cover(min(upTo, sa.maxSeq), sa.maxSeq) {
		return errors.New("esp: the bound could not be recorded")
	}
	return nil
}

// LeaseStep returns a leased SA's current step (Config.Lease): how far
// above its last number a handover's new owner may start with its first
// grant already recorded. It takes the SA's lock; 0 without a lease.
func (sa *SA) LeaseStep() uint64 {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if sa.reserved.lease == nil {
		return 0
	}
	return sa.reserved.step
}

// NeedsRekey reports that the SA crossed a soft lifetime or ran out of
// sequence numbers.
func (sa *SA) NeedsRekey() bool { return sa.softExpired.Load() || sa.exhausted.Load() }

// Overhead is the most the SA adds to a packet of n bytes, outer headers
// included.
func (sa *SA) Overhead(n int) int {
	bs := sa.info.BlockSize
	pad := (bs - (n+TrailerLen)%bs) % bs
	o := HeaderLen + sa.info.IVLen + pad + TrailerLen + sa.info.ICVLen
	if sa.cfg.Mode == Tunnel {
		if sa.cfg.Dst.Is6() {
			o += 40
		} else {
			o += 20
		}
	}
	if sa.cfg.Encap == EncapUDP {
		o += 8
	}
	return o
}

// account adds a processed packet to the counts the next Unlock publishes
// (publishLocked) and marks the SA for rekey when it crosses a soft
// lifetime. The owner calls it with the lock held.
func (sa *SA) account(n int) {
	sa.pendPackets++
	sa.pendBytes += uint64(n)
	if sa.limited {
		sa.checkSoftLocked()
	}
}

// checkSoftLocked marks the SA for rekey if it crossed a soft lifetime.
func (sa *SA) checkSoftLocked() {
	p, b := sa.totals()
	lt := &sa.cfg.Lifetime
	if (lt.SoftPackets != 0 && p >= lt.SoftPackets) || (lt.SoftBytes != 0 && b >= lt.SoftBytes) {
		sa.softExpired.Store(true)
	}
}

// totals returns the packets and bytes processed so far, published or
// not. The owner calls it with the lock held.
func (sa *SA) totals() (packets, bytes uint64) {
	return sa.Counters.Packets.Load() + sa.pendPackets, sa.Counters.Bytes.Load() + sa.pendBytes
}

// hardExpired reports whether the hard lifetime is reached.
func (sa *SA) hardExpired() bool { return sa.limited && sa.hardExpiredSlow() }

func (sa *SA) hardExpiredSlow() bool {
	p, b := sa.totals()
	p, b = p+sa.flightPackets, b+sa.flightBytes
	lt := &sa.cfg.Lifetime
	return (lt.HardPackets != 0 && p >= lt.HardPackets) || (lt.HardBytes != 0 && b >= lt.HardBytes)
}

// takeOffLocked counts a packet of a limited SA as in flight (see
// flightPackets).
func (sa *SA) takeOffLocked(n int) {
	sa.flightPackets++
	sa.flightBytes += uint64(n)
}

// landLocked ends a packet's flight: it was finished, or it will never
// be.
func (sa *SA) landLocked(w *Work) {
	if sa.limited {
		sa.flightPackets--
		sa.flightBytes -= uint64(w.n)
	}
}

// Work is a packet's state between Prepare and Finish. The caller keeps one
// per packet in flight, next to the packet (it holds bytes the op points to).
type Work struct {
	seq    uint64
	aad    [12]byte // SPI || seq hi || seq lo, for AEAD with ESN
	seqHi  [4]byte  // ESN high bits, authenticated after the ciphertext (chained suites)
	espOff int      // ESP header offset within the packet data
	hdrLen int      // inbound transport: length of the IP header kept
	nhOff  int      // inbound transport: where the next header byte is in it
	n      int      // plaintext length accounted (outbound); inbound, the ciphertext length in flight (limited SAs)
}

// Seq returns the full sequence number assigned (outbound) or inferred
// (inbound) for the packet.
func (w *Work) Seq() uint64 { return w.seq }
