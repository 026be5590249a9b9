package ike

// Snapshots of established IKE SAs, for a hot standby (issue 18): an
// Endpoint reports each IKE SA's state through Config.OnSnapshot, and
// another Endpoint with the same configuration continues it with Adopt,
// with the same SPIs and the next message IDs, so that the peer sees no
// new negotiation.
//
//	owner:   state changes ──> changedLocked (dirty) ──> flushSnapshotsLocked
//	         (before any datagram leaves, and before Endpoint.mu is released)
//	         ──> OnSnapshot(s, false), or OnSnapshot(s, true) once it is gone
//	standby: keeps the last Data per (SPIi, SPIr); on takeover Adopt(Data)
//	         ──> IKE SA installed, OnChildSA per Child SA, timers restarted,
//	         the outstanding request retransmitted
//
// Because a snapshot is reported before each message of the IKE SA
// leaves, whatever the peer has seen of it is in the last snapshot: a
// request the peer retransmits because the owner died before answering is
// answered by the adopter from the replicated last response (byte for
// byte what the owner sent, or would have sent), or, if the owner died
// before it processed the request, processed afresh.
//
// Data is a version byte followed by fields, each a tag byte, a uvarint
// length and that many bytes; nested records (the outstanding request, a
// Child SA) are fields whose value is itself a field list. Decoding
// checks every length and value and returns an error, never panics.
// Unknown tags are skipped, so a newer writer can add fields that an
// older reader may ignore; a field it must not ignore comes with a new
// version, which an older reader refuses. Version 2 added the virtual IPs
// and pool leases, the MOBIKE flag and the suite's additional key
// exchanges: a version 1 reader ignoring the leases would let the
// standby's pools hand a road warrior's address to another. A version 1
// snapshot still decodes (none of those). The last
// field is a CRC-32C of all before it, so that a snapshot cut at a field
// boundary (a Child SA lost) or damaged in transit is refused, not
// adopted in part.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/big"
	"net/netip"
	"slices"
	"time"

	"github.com/sluicegw/sluice/ike/ippool"
)

// Snapshot is the replicated state of one established IKE SA: its SPIs,
// which name it, and Data, an opaque encoding that Adopt takes. Data
// holds the IKE SA's and its Child SAs' keys: keep it in memory only.
type Snapshot struct {
	SPIi, SPIr uint64
	// Local is the address the IKE SA uses here: which virtual address
	// (and so which group of a pair) it belongs to.
	Local netip.AddrPort
	Data  []byte
}

// snapVersion is the version byte that opens Data; decodeSnapshot also
// takes snapVersion1's.
const (
	snapVersion  = 2
	snapVersion1 = 1
)

// Field tags of an IKE SA's record.
const (
	tagPeer        = 1  // string: Peer.Name
	tagFlags       = 2  // u8: snapInitiator | ...
	tagSPIs        = 3  // u64 SPIi, u64 SPIr
	tagLocal       = 4  // addrport
	tagRemote      = 5  // addrport
	tagRespLocal   = 6  // addrport: where the last response went from
	tagRespRemote  = 7  // addrport: and to
	tagSuite       = 8  // u8 protocol, u16 encr, keylen, prf, integ, dh, u8 esn
	tagKeyD        = 9  // SK_d
	tagKeyAi       = 10 // SK_ai
	tagKeyAr       = 11 // SK_ar
	tagKeyEi       = 12 // SK_ei
	tagKeyEr       = 13 // SK_er
	tagKeyPi       = 14 // SK_pi
	tagKeyPr       = 15 // SK_pr
	tagNi          = 16
	tagNr          = 17
	tagMsgIDs      = 18  // u32 our next request's ID, u32 the peer's next
	tagLastReq     = 19  // the peer's last request as received
	tagLastResp    = 20  // repeated: our response to it, message or fragments
	tagRemoteID    = 21  // u8 type, data
	tagEstablished = 22  // time
	tagHashes      = 23  // u16 each: the peer's signature hashes
	tagRekeyAt     = 24  // time: the IKE SA's rekey
	tagExpireAt    = 25  // time: its expiry
	tagPending     = 26  // record: our outstanding request
	tagChild       = 27  // record, repeated: a Child SA
	tagAddKE       = 28  // u16 each, 7: Suite.AddKE (version 2)
	tagVIP         = 29  // addr, repeated: ikeSA.vips (version 2)
	tagLease       = 30  // record, repeated: a pool lease (version 2)
	tagEnd         = 255 // u32: CRC-32C of everything before it; the last field
)

// IKE SA flags.
const (
	snapInitiator = 1 << iota
	snapEncap
	snapNATHere
	snapFrag
	snapDeleting // our Delete of the IKE SA is outstanding
	snapMOBIKE   // both announced MOBIKE_SUPPORTED (version 2)
	snapNATThere // NAT detection found the peer's address translated
)

// Field tags of a pool lease's record.
const (
	tagLsPool = 1 // string: the pool's name
	tagLsAddr = 2 // addr
	tagLsID   = 3 // string: the identity it is leased to
)

// Field tags of the outstanding request's record.
const (
	tagReqHeader   = 1 // u32 message ID, u8 exchange, u8 kind
	tagReqPkt      = 2 // repeated: the datagrams as sent, without marker
	tagReqRekey    = 3 // record: a Child SA rekey or additional Child SA
	tagReqIKERekey = 4 // record: an IKE SA rekey
	tagReqDelete   = 5 // u32 the deleted Child SA's InSPI, u32 its successor's (0: none)
)

// Field tags of a Child SA rekey's record (rekeyState) and an IKE SA
// rekey's (ikeRekeyState).
const (
	tagRkOld     = 1 // u32: InSPI of the Child SA rekeyed; absent for a new one
	tagRkConf    = 2 // string: the child's name
	tagRkSPI     = 3 // u32 (Child SA) or u64 (IKE SA): our new SPI
	tagRkNi      = 4
	tagRkDH      = 5 // u16 group, private key
	tagRkTSi     = 6 // selector, repeated
	tagRkTSr     = 7 // selector, repeated
	tagRkRetries = 8 // u8
)

// Field tags of a Child SA's record.
const (
	tagChName     = 1 // string: ChildSA.Name
	tagChChild    = 2 // string: ChildSA.Child
	tagChFlags    = 3 // u8: chInitiator | ...
	tagChLocal    = 4 // addrport
	tagChRemote   = 5 // addrport
	tagChSPIs     = 6 // u32 InSPI, u32 OutSPI
	tagChSuite    = 7 // string
	tagChInKey    = 8
	tagChOutKey   = 9
	tagChInAuth   = 10
	tagChOutAuth  = 11
	tagChLocalTS  = 12 // selector, repeated
	tagChRemoteTS = 13 // selector, repeated
	tagChIKESPIs  = 14 // u64, u64
	tagChRekeyAt  = 15 // time
	tagChExpireAt = 16 // time
	tagChHeldNext = 17 // u32: InSPI of the Child SA that replaced it, when its Delete is due
)

// Child SA flags.
const (
	chInitiator = 1 << iota
	chESN
	chEncap
	chHoldOutbound
	chReplaced  // a rekey made its successor
	chDeleteDue // a Delete of ours is due (held after a rekey, or queued)
)

// snapIKE is the decoded form of an IKE SA's snapshot.
type snapIKE struct {
	peer                              string
	flags                             uint8
	spii, spir                        uint64
	local, remote, respLocal, respRem netip.AddrPort
	suite                             Suite
	keys                              Keys
	ni, nr                            []byte
	nextReq, nextPeer                 uint32
	lastReq                           []byte
	lastResp                          [][]byte
	remoteID                          Identity
	established, rekeyAt, expireAt    time.Time
	hashes                            []uint16
	pending                           *snapRequest
	children                          []snapChild
	vips                              []netip.Addr
	leases                            []snapLease
}

// snapLease is a vipLease: the pool by name.
type snapLease struct {
	pool string
	addr netip.Addr
	id   string
}

type snapRequest struct {
	id       uint32
	exch     ExchangeType
	kind     requestKind
	pkts     [][]byte
	rekey    *snapRekey
	ikeRekey *snapRekey
	old      uint32 // reqDeleteChild: the Child SA deleted
	next     uint32 // and its successor (0: none)
}

// snapRekey is a rekeyState (spi a uint32) or an ikeRekeyState (spi a
// uint64; old, conf and the selectors unused).
type snapRekey struct {
	old      uint32
	conf     string
	spi      uint64
	ni       []byte
	dhGroup  uint16
	dhPriv   []byte
	tsi, tsr []Selector
	retries  uint8
}

type snapChild struct {
	c                 ChildSA
	flags             uint8
	rekeyAt, expireAt time.Time
	heldNext          uint32
}

// ---------------------------------------------------------------------
// Reporting

// changedLocked notes that sa's replicated state changed: the next
// flushSnapshotsLocked reports it.
func (sa *ikeSA) changedLocked() {
	e := sa.ep
	if e.cfg.OnSnapshot == nil || e.closed || sa.snapDirty {
		return
	}
	sa.snapDirty = true
	e.snapDirty = append(e.snapDirty, sa)
}

// replicable reports whether sa is an IKE SA that snapshots carry: an
// established one (or one whose Delete of ours is out) that no rekey
// replaced.
func (sa *ikeSA) replicable() bool {
	return !sa.removed && !sa.rekeyed && sa.keys != nil && sa.out != nil &&
		(sa.state == stateEstablished || sa.state == stateDeleting)
}

// flushSnapshotsLocked reports the IKE SAs whose state changed through
// Config.OnSnapshot: the live ones first, then those gone (so that an IKE
// SA rekey's successor is known before its predecessor goes). It runs
// before every datagram leaves (sendLocked) and before Endpoint.mu is
// released (unlock).
func (e *Endpoint) flushSnapshotsLocked() {
	if len(e.snapDirty) == 0 {
		return
	}
	dirty := e.snapDirty
	e.snapDirty = nil
	f := e.cfg.OnSnapshot
	if f == nil || e.closed {
		return
	}
	for _, sa := range dirty {
		sa.snapDirty = false
		if sa.replicable() {
			f(Snapshot{SPIi: sa.spii, SPIr: sa.spir, Local: sa.local, Data: sa.snapLocked().encode()}, false)
			sa.snapShown = true
		}
	}
	for _, sa := range dirty {
		if !sa.replicable() && sa.snapShown {
			sa.snapShown = false
			f(Snapshot{SPIi: sa.spii, SPIr: sa.spir, Local: sa.local}, true)
		}
	}
	clear(dirty)
}

// unlock releases Endpoint.mu after reporting what changed
// (flushSnapshotsLocked), then sends the datagrams queued meanwhile
// (sendLocked): Transport.Send runs without the lock.
func (e *Endpoint) unlock() {
	e.flushSnapshotsLocked()
	out := e.outbox
	e.outbox = nil
	e.mu.Unlock()
	for _, d := range out {
		if err := e.tr.Send(d.local, d.remote, d.pkt); err != nil {
			e.cfg.Log.Debug("ike: send failed", "to", d.remote, "err", err)
		}
	}
}

// Snapshots returns a snapshot of every established IKE SA (for a standby
// that just joined); from then on OnSnapshot reports their changes and
// their end. It is safe for concurrent use.
func (e *Endpoint) Snapshots() []Snapshot {
	e.mu.Lock()
	defer e.unlock()
	var out []Snapshot
	for _, sa := range e.sas {
		if sa.replicable() && !e.closed {
			out = append(out, Snapshot{SPIi: sa.spii, SPIr: sa.spir, Local: sa.local, Data: sa.snapLocked().encode()})
			sa.snapShown = true
		}
	}
	slices.SortFunc(out, func(a, b Snapshot) int {
		if a.SPIi != b.SPIi {
			return cmpU64(a.SPIi, b.SPIi)
		}
		return cmpU64(a.SPIr, b.SPIr)
	})
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// snapLocked captures sa's replicated state.
func (sa *ikeSA) snapLocked() *snapIKE {
	e := sa.ep
	s := &snapIKE{peer: sa.peer.Name, spii: sa.spii, spir: sa.spir, local: sa.local, remote: sa.remote,
		respLocal: sa.respLocal, respRem: sa.respRem, suite: sa.suite, keys: *sa.keys, ni: sa.ni, nr: sa.nr,
		nextReq: sa.nextReq, nextPeer: sa.nextPeer, lastReq: sa.lastReq, lastResp: sa.lastResp,
		remoteID: sa.remoteID, established: sa.established, rekeyAt: sa.rekeyAt, expireAt: sa.expireAt, hashes: sa.hashes,
		vips: sa.vips}
	for _, l := range sa.leases {
		s.leases = append(s.leases, snapLease{pool: l.pool.Name(), addr: l.addr, id: l.id})
	}
	for _, b := range []struct {
		on   bool
		flag uint8
	}{{sa.initiator, snapInitiator}, {sa.encap, snapEncap}, {sa.natHere, snapNATHere}, {sa.frag, snapFrag}, {sa.state == stateDeleting, snapDeleting}, {sa.mobike, snapMOBIKE}, {sa.natThere, snapNATThere}} {
		if b.on {
			s.flags |= b.flag
		}
	}
	var deleting *ChildSA // the subject of our outstanding Delete
	if p := sa.pending; p != nil {
		r := &snapRequest{id: p.id, exch: p.exch, kind: p.kind, pkts: p.pkts}
		switch p.kind {
		case reqRekey, reqNewChild:
			rk := &snapRekey{conf: p.rekey.conf.name, spi: uint64(p.rekey.spi), ni: p.rekey.ni,
				tsi: p.rekey.tsi, tsr: p.rekey.tsr, retries: uint8(min(p.rekey.retries, 255))}
			if p.rekey.old != nil {
				rk.old = p.rekey.old.InSPI
			}
			if !rk.setDH(p.rekey.dh) {
				r.kind = reqOther // cannot be finished elsewhere (a test's DH)
				break
			}
			r.rekey = rk
		case reqRekeyIKE:
			rk := &snapRekey{spi: p.ikeRekey.spi, ni: p.ikeRekey.ni, retries: uint8(min(p.ikeRekey.retries, 255))}
			if !rk.setDH(p.ikeRekey.dh) {
				r.kind = reqOther
				break
			}
			r.ikeRekey = rk
		case reqDeleteChild:
			deleting = p.old
			r.old = p.old.InSPI
			if p.next != nil {
				r.next = p.next.InSPI
			}
		}
		s.pending = r
	}
	for _, c := range sa.children {
		sc := snapChild{c: *c}
		for _, b := range []struct {
			on   bool
			flag uint8
		}{{c.Initiator, chInitiator}, {c.ESN, chESN}, {c.Encap, chEncap}, {c.HoldOutbound, chHoldOutbound}} {
			if b.on {
				sc.flags |= b.flag
			}
		}
		if ent := e.children[c.InSPI]; ent != nil && ent.c == c {
			// Where its ESP goes now (childaddr.go): a standby that
			// adopts it sends there.
			sc.c.Local, sc.c.Remote = ent.local, ent.remote
			sc.rekeyAt, sc.expireAt = ent.rekeyAt, ent.expireAt
			if ent.replaced {
				sc.flags |= chReplaced
			}
			if ent.deleting && c != deleting {
				sc.flags |= chDeleteDue
				if ent.held != nil && ent.held.next != nil {
					sc.heldNext = ent.held.next.InSPI
				}
			}
		}
		s.children = append(s.children, sc)
	}
	return s
}

// setDH records dh's group and private key; false if dh is of a kind
// that cannot be exported (a test's).
func (r *snapRekey) setDH(dh DH) bool {
	if dh == nil {
		return true
	}
	priv, ok := dhPrivate(dh)
	if !ok {
		return false
	}
	r.dhGroup, r.dhPriv = dh.Group(), priv
	return true
}

// dhPrivate returns dh's private key, for a snapshot.
func dhPrivate(dh DH) ([]byte, bool) {
	switch k := dh.(type) {
	case *ecKey:
		return k.k.Bytes(), true
	case *modpKey:
		return k.x.Bytes(), true
	}
	return nil, false
}

// dhFromPrivate is the DH key of group with private key priv (dhPrivate).
func dhFromPrivate(group uint16, priv []byte) (DH, error) {
	switch group {
	case DHModp2048, DHModp1536, DHModp1024:
		if len(priv) == 0 || len(priv) > 32 {
			return nil, fmt.Errorf("ike: DH group %d private key of %d bytes", group, len(priv))
		}
		p := modpPrime(group)
		x := new(big.Int).SetBytes(priv)
		y := new(big.Int).Exp(big.NewInt(2), x, p)
		return &modpKey{group: group, p: p, x: x, pub: y.FillBytes(make([]byte, (p.BitLen()+7)/8))}, nil
	case DHECP256, DHECP384, DHCurve25519:
		return ecFromPrivate(group, priv)
	}
	return nil, fmt.Errorf("ike: DH group %d is not supported", group)
}

// ---------------------------------------------------------------------
// Encoding

type snapWriter struct{ b []byte }

func (w *snapWriter) field(tag byte, v []byte) {
	w.b = append(w.b, tag)
	w.b = binary.AppendUvarint(w.b, uint64(len(v)))
	w.b = append(w.b, v...)
}

func (w *snapWriter) bytesIf(tag byte, v []byte) {
	if v != nil {
		w.field(tag, v)
	}
}

func (w *snapWriter) u8(tag, v byte)         { w.field(tag, []byte{v}) }
func (w *snapWriter) u32(tag byte, v uint32) { w.field(tag, binary.BigEndian.AppendUint32(nil, v)) }
func (w *snapWriter) u64(tag byte, v uint64) { w.field(tag, binary.BigEndian.AppendUint64(nil, v)) }

func (w *snapWriter) pair32(tag byte, a, b uint32) {
	w.field(tag, binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, a), b))
}

func (w *snapWriter) pair64(tag byte, a, b uint64) {
	w.field(tag, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, a), b))
}

func (w *snapWriter) time(tag byte, t time.Time) {
	if !t.IsZero() {
		w.u64(tag, uint64(t.UnixNano()))
	}
}

func (w *snapWriter) addrPort(tag byte, a netip.AddrPort) {
	if a.IsValid() {
		w.field(tag, binary.BigEndian.AppendUint16(a.Addr().Unmap().AsSlice(), a.Port()))
	}
}

func (w *snapWriter) selector(tag byte, s Selector) {
	b := []byte{s.IPProto}
	b = binary.BigEndian.AppendUint16(b, s.StartPort)
	b = binary.BigEndian.AppendUint16(b, s.EndPort)
	b = append(b, s.Start.Unmap().AsSlice()...)
	b = append(b, s.End.Unmap().AsSlice()...)
	w.field(tag, b)
}

func (s *snapIKE) encode() []byte {
	w := &snapWriter{b: []byte{snapVersion}}
	w.field(tagPeer, []byte(s.peer))
	w.u8(tagFlags, s.flags)
	w.pair64(tagSPIs, s.spii, s.spir)
	w.addrPort(tagLocal, s.local)
	w.addrPort(tagRemote, s.remote)
	w.addrPort(tagRespLocal, s.respLocal)
	w.addrPort(tagRespRemote, s.respRem)
	su := []byte{s.suite.Protocol}
	for _, v := range []uint16{s.suite.Encr, s.suite.KeyLen, s.suite.PRF, s.suite.Integ, s.suite.DH} {
		su = binary.BigEndian.AppendUint16(su, v)
	}
	su = append(su, boolByte(s.suite.ESN))
	w.field(tagSuite, su)
	if s.suite.AddKE != ([7]uint16{}) {
		var b []byte
		for _, m := range s.suite.AddKE {
			b = binary.BigEndian.AppendUint16(b, m)
		}
		w.field(tagAddKE, b)
	}
	k := &s.keys
	for i, b := range [][]byte{k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr} {
		w.field(byte(tagKeyD+i), b)
	}
	w.field(tagNi, s.ni)
	w.field(tagNr, s.nr)
	w.pair32(tagMsgIDs, s.nextReq, s.nextPeer)
	w.bytesIf(tagLastReq, s.lastReq)
	for _, p := range s.lastResp {
		w.field(tagLastResp, p)
	}
	if !s.remoteID.IsZero() {
		w.field(tagRemoteID, append([]byte{byte(s.remoteID.Type)}, s.remoteID.Data...))
	}
	w.time(tagEstablished, s.established)
	if len(s.hashes) > 0 {
		var b []byte
		for _, h := range s.hashes {
			b = binary.BigEndian.AppendUint16(b, h)
		}
		w.field(tagHashes, b)
	}
	w.time(tagRekeyAt, s.rekeyAt)
	w.time(tagExpireAt, s.expireAt)
	if p := s.pending; p != nil {
		pw := &snapWriter{}
		pw.field(tagReqHeader, append(binary.BigEndian.AppendUint32(nil, p.id), byte(p.exch), byte(p.kind)))
		for _, b := range p.pkts {
			pw.field(tagReqPkt, b)
		}
		if p.rekey != nil {
			pw.field(tagReqRekey, p.rekey.encode(false))
		}
		if p.ikeRekey != nil {
			pw.field(tagReqIKERekey, p.ikeRekey.encode(true))
		}
		if p.kind == reqDeleteChild {
			pw.pair32(tagReqDelete, p.old, p.next)
		}
		w.field(tagPending, pw.b)
	}
	for i := range s.children {
		w.field(tagChild, s.children[i].encode())
	}
	for _, a := range s.vips {
		w.field(tagVIP, a.Unmap().AsSlice())
	}
	for _, l := range s.leases {
		lw := &snapWriter{}
		lw.field(tagLsPool, []byte(l.pool))
		lw.field(tagLsAddr, l.addr.Unmap().AsSlice())
		lw.field(tagLsID, []byte(l.id))
		w.field(tagLease, lw.b)
	}
	w.u32(tagEnd, crc32.Checksum(w.b, castagnoli))
	return w.b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (r *snapRekey) encode(ike bool) []byte {
	w := &snapWriter{}
	if r.old != 0 {
		w.u32(tagRkOld, r.old)
	}
	if !ike {
		w.field(tagRkConf, []byte(r.conf))
		w.u32(tagRkSPI, uint32(r.spi))
	} else {
		w.u64(tagRkSPI, r.spi)
	}
	w.field(tagRkNi, r.ni)
	if r.dhGroup != 0 {
		w.field(tagRkDH, append(binary.BigEndian.AppendUint16(nil, r.dhGroup), r.dhPriv...))
	}
	for _, s := range r.tsi {
		w.selector(tagRkTSi, s)
	}
	for _, s := range r.tsr {
		w.selector(tagRkTSr, s)
	}
	w.u8(tagRkRetries, r.retries)
	return w.b
}

func (sc *snapChild) encode() []byte {
	c := &sc.c
	w := &snapWriter{}
	w.field(tagChName, []byte(c.Name))
	w.field(tagChChild, []byte(c.Child))
	w.u8(tagChFlags, sc.flags)
	w.addrPort(tagChLocal, c.Local)
	w.addrPort(tagChRemote, c.Remote)
	w.pair32(tagChSPIs, c.InSPI, c.OutSPI)
	w.field(tagChSuite, []byte(c.Suite))
	w.field(tagChInKey, c.InKey)
	w.field(tagChOutKey, c.OutKey)
	w.field(tagChInAuth, c.InAuthKey)
	w.field(tagChOutAuth, c.OutAuthKey)
	for _, s := range c.LocalTS {
		w.selector(tagChLocalTS, s)
	}
	for _, s := range c.RemoteTS {
		w.selector(tagChRemoteTS, s)
	}
	w.pair64(tagChIKESPIs, c.IKESPIi, c.IKESPIr)
	w.time(tagChRekeyAt, sc.rekeyAt)
	w.time(tagChExpireAt, sc.expireAt)
	if sc.heldNext != 0 {
		w.u32(tagChHeldNext, sc.heldNext)
	}
	return w.b
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// ---------------------------------------------------------------------
// Decoding

var errSnapTruncated = errors.New("ike: snapshot: truncated field")

// fields calls f with each field of b, in order; it stops at the first
// error.
func fields(b []byte, f func(tag byte, v []byte) error) error {
	for len(b) > 0 {
		tag := b[0]
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n > uint64(len(b)-1-k) {
			return errSnapTruncated
		}
		v := b[1+k : 1+k+int(n)]
		b = b[1+k+int(n):]
		if err := f(tag, v); err != nil {
			return err
		}
	}
	return nil
}

func fixed(v []byte, n int, what string) error {
	if len(v) != n {
		return fmt.Errorf("ike: snapshot: %s of %d bytes, want %d", what, len(v), n)
	}
	return nil
}

func snapTime(v []byte, what string) (time.Time, error) {
	if err := fixed(v, 8, what); err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v))), nil
}

func snapAddrPort(v []byte, what string) (netip.AddrPort, error) {
	if len(v) != 6 && len(v) != 18 {
		return netip.AddrPort{}, fmt.Errorf("ike: snapshot: %s of %d bytes", what, len(v))
	}
	a, _ := netip.AddrFromSlice(v[:len(v)-2])
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(v[len(v)-2:])), nil
}

func snapAddr(v []byte, what string) (netip.Addr, error) {
	a, ok := netip.AddrFromSlice(v)
	if !ok {
		return netip.Addr{}, fmt.Errorf("ike: snapshot: %s of %d bytes", what, len(v))
	}
	return a, nil
}

func snapSelector(v []byte) (Selector, error) {
	if len(v) != 5+8 && len(v) != 5+32 {
		return Selector{}, fmt.Errorf("ike: snapshot: selector of %d bytes", len(v))
	}
	n := (len(v) - 5) / 2
	s, _ := netip.AddrFromSlice(v[5 : 5+n])
	e, _ := netip.AddrFromSlice(v[5+n:])
	sel := Selector{IPProto: v[0], StartPort: binary.BigEndian.Uint16(v[1:]), EndPort: binary.BigEndian.Uint16(v[3:]), Start: s, End: e}
	if sel.StartPort > sel.EndPort || s.Compare(e) > 0 {
		return Selector{}, errors.New("ike: snapshot: empty selector")
	}
	return sel, nil
}

// clone copies v; empty is nil.
func clone(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

// decodeSnapshot parses Data. The result shares no memory with data. It
// checks the form of every field and that the fields a continued IKE SA
// needs are there; Adopt checks the rest against the configuration.
func decodeSnapshot(data []byte) (*snapIKE, error) {
	if len(data) == 0 {
		return nil, errors.New("ike: snapshot: empty")
	}
	if data[0] != snapVersion && data[0] != snapVersion1 {
		return nil, fmt.Errorf("ike: snapshot: version %d, want %d or %d", data[0], snapVersion1, snapVersion)
	}
	v2 := data[0] >= 2
	// The CRC field is 1+1+4 bytes at the end.
	if n := len(data) - 6; n < 1 || data[n] != tagEnd || data[n+1] != 4 ||
		binary.BigEndian.Uint32(data[n+2:]) != crc32.Checksum(data[:n], castagnoli) {
		return nil, errors.New("ike: snapshot: truncated or damaged (checksum)")
	}
	data = data[:len(data)-6]
	s := &snapIKE{}
	seen := map[byte]bool{}
	err := fields(data[1:], func(tag byte, v []byte) error {
		if !v2 && (tag == tagAddKE || tag == tagVIP || tag == tagLease) {
			return fmt.Errorf("ike: snapshot: version 1 with field %d of version 2", tag)
		}
		if tag != tagLastResp && tag != tagChild && tag != tagVIP && tag != tagLease {
			if seen[tag] {
				return fmt.Errorf("ike: snapshot: field %d twice", tag)
			}
			seen[tag] = true
		}
		var err error
		switch tag {
		case tagPeer:
			s.peer = string(v)
		case tagFlags:
			if err = fixed(v, 1, "flags"); err == nil {
				s.flags = v[0]
			}
		case tagSPIs:
			if err = fixed(v, 16, "SPIs"); err == nil {
				s.spii, s.spir = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
			}
		case tagLocal:
			s.local, err = snapAddrPort(v, "local address")
		case tagRemote:
			s.remote, err = snapAddrPort(v, "remote address")
		case tagRespLocal:
			s.respLocal, err = snapAddrPort(v, "response address")
		case tagRespRemote:
			s.respRem, err = snapAddrPort(v, "response address")
		case tagSuite:
			if err = fixed(v, 12, "suite"); err == nil {
				u := func(i int) uint16 { return binary.BigEndian.Uint16(v[1+2*i:]) }
				s.suite = Suite{Protocol: v[0], Encr: u(0), KeyLen: u(1), PRF: u(2), Integ: u(3), DH: u(4), ESN: v[11] != 0}
			}
		case tagKeyD, tagKeyAi, tagKeyAr, tagKeyEi, tagKeyEr, tagKeyPi, tagKeyPr:
			k := &s.keys
			ptrs := []*[]byte{&k.D, &k.Ai, &k.Ar, &k.Ei, &k.Er, &k.Pi, &k.Pr}
			*ptrs[tag-tagKeyD] = clone(v)
		case tagNi:
			s.ni = clone(v)
		case tagNr:
			s.nr = clone(v)
		case tagMsgIDs:
			if err = fixed(v, 8, "message IDs"); err == nil {
				s.nextReq, s.nextPeer = binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:])
			}
		case tagLastReq:
			s.lastReq = clone(v)
		case tagLastResp:
			s.lastResp = append(s.lastResp, clone(v))
		case tagRemoteID:
			if len(v) < 1 {
				return errSnapTruncated
			}
			s.remoteID = Identity{Type: IDType(v[0]), Data: clone(v[1:])}
		case tagEstablished:
			s.established, err = snapTime(v, "established")
		case tagHashes:
			if len(v)%2 != 0 {
				return errSnapTruncated
			}
			for i := 0; i < len(v); i += 2 {
				s.hashes = append(s.hashes, binary.BigEndian.Uint16(v[i:]))
			}
		case tagRekeyAt:
			s.rekeyAt, err = snapTime(v, "rekey time")
		case tagExpireAt:
			s.expireAt, err = snapTime(v, "expiry")
		case tagPending:
			s.pending, err = decodeRequest(v)
		case tagChild:
			var c snapChild
			if c, err = decodeChild(v); err == nil {
				s.children = append(s.children, c)
			}
		case tagAddKE:
			if err = fixed(v, 14, "additional key exchanges"); err == nil {
				for i := range s.suite.AddKE {
					s.suite.AddKE[i] = binary.BigEndian.Uint16(v[2*i:])
				}
			}
		case tagVIP:
			var a netip.Addr
			if a, err = snapAddr(v, "virtual IP"); err == nil {
				s.vips = append(s.vips, a)
			}
		case tagLease:
			var l snapLease
			if l, err = decodeLease(v); err == nil {
				s.leases = append(s.leases, l)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, t := range []byte{tagPeer, tagFlags, tagSPIs, tagLocal, tagRemote, tagSuite, tagKeyD, tagKeyAi, tagKeyAr,
		tagKeyEi, tagKeyEr, tagKeyPi, tagKeyPr, tagNi, tagNr, tagMsgIDs} {
		if !seen[t] {
			return nil, fmt.Errorf("ike: snapshot: field %d missing", t)
		}
	}
	if s.peer == "" || s.spii == 0 || s.spir == 0 {
		return nil, errors.New("ike: snapshot: no peer name or a zero SPI")
	}
	if (s.lastReq == nil) != (len(s.lastResp) == 0) || len(s.lastResp) > maxFragments {
		return nil, errors.New("ike: snapshot: last request and response do not go together")
	}
	if p := s.pending; p != nil && p.id+1 != s.nextReq {
		return nil, fmt.Errorf("ike: snapshot: outstanding request %d, next %d", p.id, s.nextReq)
	}
	return s, nil
}

func decodeLease(b []byte) (snapLease, error) {
	var l snapLease
	err := fields(b, func(tag byte, v []byte) error {
		var err error
		switch tag {
		case tagLsPool:
			l.pool = string(v)
		case tagLsAddr:
			l.addr, err = snapAddr(v, "leased address")
		case tagLsID:
			l.id = string(v)
		}
		return err
	})
	if err == nil && !l.addr.IsValid() {
		err = errors.New("ike: snapshot: lease without address") // a pool without a name is found by address
	}
	return l, err
}

func decodeRequest(b []byte) (*snapRequest, error) {
	r := &snapRequest{}
	hdr := false
	err := fields(b, func(tag byte, v []byte) error {
		var err error
		switch tag {
		case tagReqHeader:
			if err = fixed(v, 6, "request header"); err == nil {
				r.id, r.exch, r.kind, hdr = binary.BigEndian.Uint32(v), ExchangeType(v[4]), requestKind(v[5]), true
			}
		case tagReqPkt:
			r.pkts = append(r.pkts, clone(v))
		case tagReqRekey:
			r.rekey, err = decodeRekey(v, false)
		case tagReqIKERekey:
			r.ikeRekey, err = decodeRekey(v, true)
		case tagReqDelete:
			if err = fixed(v, 8, "deleted Child SA"); err == nil {
				r.old, r.next = binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:])
			}
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case !hdr || len(r.pkts) == 0 || len(r.pkts) > maxFragments:
		return nil, errors.New("ike: snapshot: outstanding request without header or datagrams")
	case (r.kind == reqRekey || r.kind == reqNewChild) && r.rekey == nil,
		r.kind == reqRekeyIKE && r.ikeRekey == nil,
		r.kind == reqDeleteChild && r.old == 0,
		r.kind == reqRekey && r.rekey.old == 0,
		r.kind > reqNewChild:
		return nil, fmt.Errorf("ike: snapshot: outstanding request of kind %d without its state", r.kind)
	}
	return r, nil
}

func decodeRekey(b []byte, ike bool) (*snapRekey, error) {
	r := &snapRekey{}
	hasSPI := false
	err := fields(b, func(tag byte, v []byte) error {
		var err error
		switch tag {
		case tagRkOld:
			if err = fixed(v, 4, "rekeyed SPI"); err == nil {
				r.old = binary.BigEndian.Uint32(v)
			}
		case tagRkConf:
			r.conf = string(v)
		case tagRkSPI:
			if ike {
				if err = fixed(v, 8, "new IKE SPI"); err == nil {
					r.spi = binary.BigEndian.Uint64(v)
				}
			} else if err = fixed(v, 4, "new SPI"); err == nil {
				r.spi = uint64(binary.BigEndian.Uint32(v))
			}
			hasSPI = err == nil
		case tagRkNi:
			r.ni = clone(v)
		case tagRkDH:
			if len(v) < 3 {
				return errSnapTruncated
			}
			r.dhGroup, r.dhPriv = binary.BigEndian.Uint16(v), clone(v[2:])
		case tagRkTSi, tagRkTSr:
			sel, err := snapSelector(v)
			if err != nil {
				return err
			}
			if tag == tagRkTSi {
				r.tsi = append(r.tsi, sel)
			} else {
				r.tsr = append(r.tsr, sel)
			}
		case tagRkRetries:
			if err = fixed(v, 1, "retries"); err == nil {
				r.retries = v[0]
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !hasSPI || r.spi == 0 || len(r.ni) == 0 || (ike && r.dhGroup == 0) || (!ike && (len(r.tsi) == 0 || len(r.tsr) == 0)) {
		return nil, errors.New("ike: snapshot: rekey without SPI, nonce, DH or selectors")
	}
	return r, nil
}

func decodeChild(b []byte) (snapChild, error) {
	var sc snapChild
	c := &sc.c
	hasSPIs := false
	err := fields(b, func(tag byte, v []byte) error {
		var err error
		switch tag {
		case tagChName:
			c.Name = string(v)
		case tagChChild:
			c.Child = string(v)
		case tagChFlags:
			if err = fixed(v, 1, "child flags"); err == nil {
				sc.flags = v[0]
			}
		case tagChLocal:
			c.Local, err = snapAddrPort(v, "child local address")
		case tagChRemote:
			c.Remote, err = snapAddrPort(v, "child remote address")
		case tagChSPIs:
			if err = fixed(v, 8, "child SPIs"); err == nil {
				c.InSPI, c.OutSPI, hasSPIs = binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:]), true
			}
		case tagChSuite:
			c.Suite = string(v)
		case tagChInKey:
			c.InKey = clone(v)
		case tagChOutKey:
			c.OutKey = clone(v)
		case tagChInAuth:
			c.InAuthKey = clone(v)
		case tagChOutAuth:
			c.OutAuthKey = clone(v)
		case tagChLocalTS, tagChRemoteTS:
			sel, err := snapSelector(v)
			if err != nil {
				return err
			}
			if tag == tagChLocalTS {
				c.LocalTS = append(c.LocalTS, sel)
			} else {
				c.RemoteTS = append(c.RemoteTS, sel)
			}
		case tagChIKESPIs:
			if err = fixed(v, 16, "child's IKE SPIs"); err == nil {
				c.IKESPIi, c.IKESPIr = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
			}
		case tagChRekeyAt:
			sc.rekeyAt, err = snapTime(v, "child rekey time")
		case tagChExpireAt:
			sc.expireAt, err = snapTime(v, "child expiry")
		case tagChHeldNext:
			if err = fixed(v, 4, "successor SPI"); err == nil {
				sc.heldNext = binary.BigEndian.Uint32(v)
			}
		}
		return err
	})
	if err != nil {
		return sc, err
	}
	if !hasSPIs || c.InSPI < 256 || c.OutSPI == 0 || c.Suite == "" || len(c.InKey) == 0 || len(c.OutKey) == 0 ||
		len(c.LocalTS) == 0 || len(c.RemoteTS) == 0 || !c.Local.IsValid() || !c.Remote.IsValid() {
		return sc, errors.New("ike: snapshot: Child SA without SPIs, suite, keys, selectors or addresses")
	}
	c.Initiator, c.ESN, c.Encap, c.HoldOutbound = sc.flags&chInitiator != 0, sc.flags&chESN != 0, sc.flags&chEncap != 0, sc.flags&chHoldOutbound != 0
	return sc, nil
}

// ---------------------------------------------------------------------
// Adoption

// Adopt continues, on this Endpoint, the IKE SA that data (a
// Snapshot.Data another Endpoint with the same peers reported) describes:
// it is installed as established with the same SPIs, keys and message
// IDs, so that the peer sees no new negotiation. Each of its Child SAs is
// reported through OnChildSA as a newly negotiated one would be (before
// Adopt returns: it must not be called from OnChildSA), its lifetime,
// rekey and liveness timers restart with the times left, and its
// outstanding request, if any, is retransmitted as it was sent. No
// INITIAL_CONTACT and no negotiation start. A retransmission of the
// peer's last request is answered with the response the snapshot holds.
//
// Adopt refuses, with an error and without side effects, data that does
// not decode, an IKE SA of a peer that this Endpoint's configuration does
// not name (by Peer.Name, with its Local address), an IKE SA or Child
// SA whose SPI is in use here, and an IKE SA whose virtual IPs cannot be
// leased again from the peer's pools (adoptLeases: a pool it does not
// have, or an address another identity holds online here).
//
// Not carried, and so not continued: a rekey collision in progress (the
// adopter finishes its own exchange as if the peer's had not crossed
// it; a redundant SA may then live until its lifetime), requests queued
// behind the outstanding one (a due rekey fires again at once, since its
// time has passed; a Delete of an expired Child SA is not sent, and the
// peer's copy lives to its own expiry), and an IKE SA replaced by a
// rekey whose Delete is outstanding (the peer removes it on its own).
func (e *Endpoint) Adopt(data []byte) error {
	s, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	e.mu.Lock()
	sa, after, err := e.adoptLocked(s)
	e.unlock()
	if err != nil {
		return err
	}
	run(after)
	// Messages of the peer's for the IKE SA wait (dropped as busy: the
	// peer retransmits) until OnChildSA has put its Child SAs in the
	// data plane, and so does the outstanding request (its answer may
	// make ESP flow).
	e.mu.Lock()
	sa.job = 0
	if p := sa.pending; p != nil && !sa.removed && !e.closed && sa.timer == nil {
		e.stats.TxRetransmits++
		e.sendAllLocked(sa.local, sa.remote, p.pkts)
		sa.armLocked()
	}
	e.unlock()
	return nil
}

func (e *Endpoint) adoptLocked(s *snapIKE) (*ikeSA, []func(), error) {
	if e.closed {
		return nil, nil, errors.New("ike: endpoint closed")
	}
	peer := e.peerLocked(s.peer)
	if peer == nil {
		return nil, nil, fmt.Errorf("ike: snapshot of an IKE SA with peer %q, which is not configured", s.peer)
	}
	if s.local.Addr() != peer.Local {
		return nil, nil, fmt.Errorf("ike: snapshot of an IKE SA on %v, but peer %q is on %v", s.local.Addr(), peer.Name, peer.Local)
	}
	if len(e.sas) >= e.cfg.MaxSAs {
		return nil, nil, errors.New("ike: too many IKE SAs")
	}
	if len(s.children) > 2*e.cfg.MaxChildSAs {
		return nil, nil, fmt.Errorf("ike: snapshot of an IKE SA with %d Child SAs", len(s.children))
	}
	initiator := s.flags&snapInitiator != 0
	ours := s.spir
	if initiator {
		ours = s.spii
	}
	if e.sas[ours] != nil {
		return nil, nil, fmt.Errorf("ike: IKE SA %s/%s is here already", IKESPI(s.spii), IKESPI(s.spir))
	}
	prf, err := NewPRF(s.suite.PRF)
	if err != nil {
		return nil, nil, err
	}
	ek, _ := cipherKeyLen(s.suite.Encr, s.suite.KeyLen)
	k := &s.keys
	if len(k.D) != prf.Size() || len(k.Pi) != prf.Size() || len(k.Pr) != prf.Size() || len(k.Ei) != ek || len(k.Er) != ek ||
		len(k.Ai) != integKeyLen(s.suite.Integ) || len(k.Ar) != len(k.Ai) {
		return nil, nil, errors.New("ike: snapshot: keys do not fit the suite")
	}
	bySPI := map[uint32]*ChildSA{}
	for i := range s.children {
		c := &s.children[i].c
		if e.children[c.InSPI] != nil || bySPI[c.InSPI] != nil {
			return nil, nil, fmt.Errorf("ike: Child SA %s is here already", ESPSPI(c.InSPI))
		}
		bySPI[c.InSPI] = c
	}
	if p := s.pending; p != nil {
		if p.kind == reqDeleteChild && bySPI[p.old] == nil {
			return nil, nil, errors.New("ike: snapshot: outstanding Delete of a Child SA it does not carry")
		}
		if p.kind == reqRekey && bySPI[p.rekey.old] == nil {
			return nil, nil, errors.New("ike: snapshot: outstanding rekey of a Child SA it does not carry")
		}
		if rk := p.rekey; rk != nil && (rk.spi < 256 || rk.spi > 0xffffffff || e.children[uint32(rk.spi)] != nil || bySPI[uint32(rk.spi)] != nil) {
			return nil, nil, errors.New("ike: snapshot: outstanding rekey's SPI is in use")
		}
		if rk := p.ikeRekey; rk != nil && e.sas[rk.spi] != nil {
			return nil, nil, errors.New("ike: snapshot: outstanding IKE SA rekey's SPI is in use")
		}
	}

	sa := &ikeSA{ep: e, peer: peer, initiator: initiator, state: stateEstablished,
		spii: s.spii, spir: s.spir, local: s.local, remote: s.remote,
		respLocal: s.respLocal, respRem: s.respRem,
		encap: s.flags&snapEncap != 0, natHere: s.flags&snapNATHere != 0, natThere: s.flags&snapNATThere != 0, frag: s.flags&snapFrag != 0,
		ni: s.ni, nr: s.nr, nextReq: s.nextReq, nextPeer: s.nextPeer, lastReq: s.lastReq, lastResp: s.lastResp,
		remoteID: s.remoteID, hashes: s.hashes, established: s.established,
		mobike: s.flags&snapMOBIKE != 0, vips: s.vips}
	if s.flags&snapDeleting != 0 {
		sa.state = stateDeleting
	}
	if !sa.remote.IsValid() || (sa.lastResp != nil && !sa.respRem.IsValid()) {
		return nil, nil, errors.New("ike: snapshot: no remote address")
	}
	keys := s.keys
	if err := sa.installKeysLocked(s.suite, prf, &keys); err != nil {
		return nil, nil, err
	}
	var req *request
	if p := s.pending; p != nil {
		req = &request{id: p.id, exch: p.exch, kind: p.kind, pkts: p.pkts}
		switch p.kind {
		case reqRekey, reqNewChild:
			rk := p.rekey
			conf, ok := peer.childConf(rk.conf)
			if !ok {
				conf = peer.childConfs()[0]
			}
			r := &rekeyState{old: bySPI[rk.old], conf: conf, spi: uint32(rk.spi), ni: rk.ni, tsi: rk.tsi, tsr: rk.tsr, retries: int(rk.retries)}
			if rk.dhGroup != 0 {
				if r.dh, err = dhFromPrivate(rk.dhGroup, rk.dhPriv); err != nil {
					return nil, nil, err
				}
			}
			req.rekey = r
		case reqRekeyIKE:
			rk := p.ikeRekey
			r := &ikeRekeyState{spi: rk.spi, ni: rk.ni, retries: int(rk.retries)}
			if r.dh, err = dhFromPrivate(rk.dhGroup, rk.dhPriv); err != nil {
				return nil, nil, err
			}
			req.ikeRekey = r
			sa.rekeying = true
		case reqDeleteChild:
			req.old, req.next = bySPI[p.old], bySPI[p.next]
		}
	}

	// The virtual IPs leased to the peer are leased again here, so that
	// this Endpoint's pools hand them to nobody else.
	if sa.leases, err = adoptLeases(peer, s.leases); err != nil {
		return nil, nil, err
	}

	// From here nothing fails. The IKE SA is busy (as during a
	// computation off the lock, job.go) until Adopt has reported its
	// Child SAs.
	e.jobSeq++
	sa.job = e.jobSeq
	e.sas[sa.ourSPI()] = sa
	e.stats.Adopted++
	sa.pending = req
	sa.startTimersAtLocked(s.rekeyAt, s.expireAt)
	var after []func()
	for i := range s.children {
		sc := &s.children[i]
		c := bySPI[sc.c.InSPI]
		c.VIPs = s.vips // as every Child SA of the IKE SA carries them (rekey.go)
		sa.children = append(sa.children, c)
		ent := &childEntry{c: c, sa: sa, local: c.Local, remote: c.Remote, replaced: sc.flags&chReplaced != 0}
		e.children[c.InSPI] = ent
		e.scheduleChildAtLocked(ent, sc.rekeyAt, sc.expireAt)
		if req != nil && req.rekey != nil && req.rekey.old == c {
			ent.rekeying, ent.ours = true, req.rekey
		}
		if req != nil && req.kind == reqDeleteChild && req.old == c {
			ent.deleting = true
		}
		if sc.flags&chDeleteDue != 0 {
			// Our Delete of it was held or queued: it goes again.
			ent.deleting = true
			ent.held = &heldDelete{next: bySPI[sc.heldNext]}
			ent.holdT = e.cfg.clock.AfterFunc(max(e.cfg.RekeyDeleteDelay, 0), func() { e.heldDeleteDue(ent) })
		}
		if f := e.cfg.OnChildSA; f != nil {
			after = append(after, func() { f(c) })
		}
	}
	sa.changedLocked()
	e.cfg.Log.Info("ike: IKE SA adopted", sa.logAttrs("children", len(sa.children), "next_msgid", sa.nextReq, "peer_next_msgid", sa.nextPeer,
		"outstanding", req != nil)...)
	return sa, after, nil
}

// adoptLeases leases again, in peer's pools, the addresses a snapshot's
// IKE SA holds: each to the same identity, in the pool of the same name
// (or, with none of that name, the one of peer's pools that holds the
// address). An address leased here to another identity that is online,
// or a pool that peer does not have, fails the adoption: the peer keeps
// its address in its Child SAs' selectors, so the IKE SA cannot go on
// with another, and two peers with one address would take each other's
// traffic. On failure the leases taken so far are released (offline, kept
// for the identity they belong to).
func adoptLeases(peer *Peer, ls []snapLease) ([]vipLease, error) {
	var out []vipLease
	for _, l := range ls {
		var pool *ippool.Pool
		for _, p := range peer.Pools {
			if l.pool != "" && p.Name() == l.pool {
				pool = p
				break
			}
		}
		if pool == nil {
			for _, p := range peer.Pools {
				if p.Contains(l.addr) {
					pool = p
					break
				}
			}
		}
		err := fmt.Errorf("ike: snapshot: virtual IP %v of pool %q, which peer %q does not have", l.addr, l.pool, peer.Name)
		if pool != nil {
			if err = pool.Take(l.id, l.addr); err != nil {
				err = fmt.Errorf("ike: snapshot: virtual IP %v of %q not leased again: %w", l.addr, l.id, err)
			}
		}
		if err != nil {
			for _, o := range out {
				o.pool.Release(o.id, o.addr)
			}
			return nil, err
		}
		out = append(out, vipLease{pool: pool, addr: l.addr, id: l.id})
	}
	return out, nil
}

// Release drops the IKE SA named by spii and spir, and its Child SAs,
// without a word to the peer and without OnDelete: another member of a
// pair continues it (Adopt) from its last snapshot. It reports the SA gone
// (OnSnapshot) and returns an error if there is no such IKE SA.
func (e *Endpoint) Release(spii, spir uint64) error {
	e.mu.Lock()
	var found *ikeSA
	for _, sa := range e.sas {
		if sa.spii == spii && sa.spir == spir {
			found = sa
			break
		}
	}
	if found == nil {
		e.unlock()
		return fmt.Errorf("ike: no IKE SA %016x_i %016x_r to release", spii, spir)
	}
	found.released = true
	after := e.removeLocked(found, errReleased)
	e.unlock()
	run(after)
	return nil
}

// errReleased is why the waiters of a released IKE SA stop waiting.
var errReleased = errors.New("ike: IKE SA released to another member of the pair")
