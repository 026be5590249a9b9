package ike

import (
	"bytes"
	"hash/crc32"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// snapStore is what a standby keeps of an Endpoint's IKE SAs: the last
// snapshot of each (OnSnapshot), until it is gone.
type snapStore struct {
	mu      sync.Mutex
	last    map[[2]uint64][]byte
	reports int
	gone    int
}

func newSnapStore() *snapStore { return &snapStore{last: map[[2]uint64][]byte{}} }

func (s *snapStore) on(sn Snapshot, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]uint64{sn.SPIi, sn.SPIr}
	if gone {
		s.gone++
		delete(s.last, k)
		return
	}
	s.reports++
	s.last[k] = sn.Data
}

func (s *snapStore) all() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, d := range s.last {
		out = append(out, d)
	}
	return out
}

func (s *snapStore) get(spii, spir uint64) *snapIKE {
	s.mu.Lock()
	d := s.last[[2]uint64{spii, spir}]
	s.mu.Unlock()
	if d == nil {
		return nil
	}
	sn, err := decodeSnapshot(d)
	if err != nil {
		panic(err)
	}
	return sn
}

// childLog records the Child SAs an Endpoint reports.
type childLog struct {
	mu sync.Mutex
	cs []*ChildSA
}

func (l *childLog) add(c *ChildSA) { l.mu.Lock(); l.cs = append(l.cs, c); l.mu.Unlock() }

func (l *childLog) list() []*ChildSA {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cs)
}

// haPair is a pair whose side a reports its snapshots to st, with the
// configuration a replacement for a takes.
type haPair struct {
	*pair
	st   *snapStore
	aCfg Config
	// failedOver is set once the replacement is in place.
	failedOver atomic.Bool
}

func newHAPair(t *testing.T, pa, pb *Peer, tweak func(a, b *Config)) *haPair {
	t.Helper()
	h := &haPair{st: newSnapStore()}
	h.pair = newPair(t, pa, pb, func(a, b *Config) {
		a.OnSnapshot = h.st.on
		if tweak != nil {
			tweak(a, b)
		}
		h.aCfg = *a
	})
	return h
}

// failover closes a (as a crash would: nothing is sent) and puts in its
// place, on a's address, a new Endpoint with a's configuration that
// adopts every IKE SA st holds. It returns the new Endpoint's snapshots
// and the Child SAs it reported.
func (h *haPair) failover(t *testing.T) (*snapStore, *childLog) {
	t.Helper()
	h.a.Close()
	st2, log := newSnapStore(), &childLog{}
	cfg := h.aCfg
	cfg.OnSnapshot, cfg.OnChildSA = st2.on, log.add
	a2, err := NewEndpoint(cfg, memPort{h.net})
	if err != nil {
		t.Fatal(err)
	}
	h.net.mu.Lock()
	h.net.eps[addrA] = a2
	h.a = a2
	h.net.mu.Unlock()
	h.failedOver.Store(true)
	snaps := h.st.all()
	if len(snaps) == 0 {
		t.Fatal("no snapshot to adopt")
	}
	for _, d := range snaps {
		if err := a2.Adopt(d); err != nil {
			t.Fatal(err)
		}
	}
	return st2, log
}

// checkSentAfterSnapshot makes h's network check, for every datagram a
// sends on an IKE SA a standby knows, that the last snapshot already
// carries it: a request as the outstanding one, a response as the last.
// It runs with the sender's lock held, as OnSnapshot does.
func (h *haPair) checkSentAfterSnapshot(t *testing.T, stores func() *snapStore) *int {
	checked := new(int)
	h.net.mu.Lock()
	defer h.net.mu.Unlock()
	h.net.drop = func(_ int, from, _ netip.AddrPort, pkt []byte) bool {
		if from.Addr() != addrA {
			return false
		}
		hd, err := ParseHeader(pkt)
		if err != nil || hd.Exchange == IKE_SA_INIT || hd.Exchange == IKE_AUTH {
			return false
		}
		sn := stores().get(hd.SPIi, hd.SPIr)
		if sn == nil {
			return false // not established, or replaced by a rekey
		}
		*checked++
		if hd.IsResponse() {
			if sn.nextPeer != hd.MessageID+1 || !slices.ContainsFunc(sn.lastResp, func(b []byte) bool { return bytes.Equal(b, pkt) }) {
				t.Errorf("response %d left before its snapshot (next %d)", hd.MessageID, sn.nextPeer)
			}
		} else if sn.pending == nil || sn.pending.id != hd.MessageID || !slices.ContainsFunc(sn.pending.pkts, func(b []byte) bool { return bytes.Equal(b, pkt) }) {
			t.Errorf("request %d (%v) left before its snapshot", hd.MessageID, hd.Exchange)
		}
		return false
	}
	return checked
}

// TestAdoptContinues: a standby that adopts an IKE SA's last snapshot
// continues it with the peer: the peer's liveness check is answered with
// the right message IDs, a Child SA rekey and an IKE SA rekey of the
// standby's are accepted, and the peer sees no new IKE_SA_INIT or
// IKE_AUTH. Every request and response left only after the snapshot
// that carries it was reported.
func TestAdoptContinues(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16-ecp256", "aes128-sha256-x25519", "aes128gcm16-ecp256")
	pb.DPDDelay = 30 * time.Second
	clk := newFakeClock()
	h := newHAPair(t, pa, pb, withClock(clk))
	clk.settleOn(t, h.pair)
	var mu sync.Mutex
	cur := h.st
	checked := h.checkSentAfterSnapshot(t, func() *snapStore { mu.Lock(); defer mu.Unlock(); return cur })
	ca, err := h.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(h.pair))
	cb := h.respChild(t)
	// One more exchange on the IKE SA before the failure, so that the
	// message IDs are not where IKE_AUTH left them.
	ca = rekeyOnClock(t, clk, h.a, ca)
	waitFor(t, settled(h.pair))
	_, cb = checkPair(t, h.pair)

	snaps := h.a.Snapshots()
	stored := h.st.all()
	if len(snaps) != 1 || len(stored) != 1 || !bytes.Equal(snaps[0].Data, stored[0]) {
		t.Fatalf("Snapshots gave %d, OnSnapshot's last differs or is missing (%d)", len(snaps), len(stored))
	}
	if err := h.a.Adopt(snaps[0].Data); err == nil {
		t.Fatal("Adopt of an IKE SA the Endpoint holds succeeded")
	}
	bs0 := h.b.Stats()
	st2, log := h.failover(t)
	mu.Lock()
	cur = st2
	mu.Unlock()
	cs := log.list()
	if len(cs) != 1 {
		t.Fatalf("Adopt reported %d Child SAs, want 1", len(cs))
	}
	if c := cs[0]; c.InSPI != ca.InSPI || c.OutSPI != ca.OutSPI || !bytes.Equal(c.InKey, ca.InKey) || !bytes.Equal(c.OutKey, ca.OutKey) ||
		!reflect.DeepEqual(c.LocalTS, ca.LocalTS) || c.Suite != ca.Suite || c.Child != ca.Child || c.Name != ca.Name || !c.Initiator {
		t.Fatalf("adopted Child SA %+v, was %+v", c, ca)
	}
	if s := h.a.Stats(); s.Adopted != 1 || s.TxPackets != 0 {
		t.Fatalf("adopter's stats %+v", s)
	}

	// (a) The peer's liveness check.
	clk.Advance(31 * time.Second)
	waitFor(t, func() bool { return h.b.Stats().LivenessChecks == 1 && idle(h.b) })
	if s := h.a.Stats(); s.InformationalAnswered != 1 || s.RxOutOfWindow+s.RxUnknownSPI+s.RxIntegrityFailed != 0 {
		t.Fatalf("adopter's stats %+v", s)
	}
	// (b) A Child SA rekey and an IKE SA rekey of the adopter's.
	ca2 := rekeyOnClock(t, clk, h.a, cs[0])
	waitFor(t, settled(h.pair))
	ca3, cb3 := checkPair(t, h.pair)
	if ca3 != ca2 || cb3 == cb {
		t.Fatal("the Child SA rekey did not replace the Child SA on both sides")
	}
	saBefore, _ := only(t, h.b)
	oldSPIs := [2]uint64{saBefore.spii, saBefore.spir}
	if err := h.a.RekeyIKE(ctx(t), ca2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(h.pair))
	checkPair(t, h.pair)
	saAfter, _ := only(t, h.b)
	if [2]uint64{saAfter.spii, saAfter.spir} == oldSPIs {
		t.Fatal("the IKE SA was not rekeyed")
	}
	// The adopter reports the new IKE SA and the old one's end.
	waitFor(t, func() bool {
		return st2.get(saAfter.spii, saAfter.spir) != nil && st2.get(oldSPIs[0], oldSPIs[1]) == nil
	})
	// (c) No new negotiation, as the peer counts it.
	bs := h.b.Stats()
	if bs.IKESAInitAnswered != bs0.IKESAInitAnswered || bs.IKEAuthAnswered != bs0.IKEAuthAnswered || bs.InitialContacts != 0 ||
		bs.RxOutOfWindow+bs.RxUnknownSPI+bs.RxIntegrityFailed+bs.RxUnexpected != 0 {
		t.Fatalf("peer's stats %+v", bs)
	}
	if s := h.a.Stats(); s.IKESAInitInitiated+s.IKEAuthInitiated != 0 {
		t.Fatalf("the adopter negotiated: %+v", s)
	}
	if *checked < 6 {
		t.Fatalf("only %d datagrams checked against snapshots", *checked)
	}
	// Its deletion is reported: the standby forgets it.
	st2.mu.Lock()
	gone := st2.gone
	st2.mu.Unlock()
	if err := h.a.Delete(ctx(t), ca2); err != nil {
		t.Fatal(err)
	}
	st2.mu.Lock()
	defer st2.mu.Unlock()
	if len(st2.last) != 0 || st2.gone != gone+1 {
		t.Fatalf("after the Delete the standby holds %d snapshots (%d gone, %d before)", len(st2.last), st2.gone, gone)
	}
}

// TestAdoptAnswersRetransmission: the peer's request that the owner
// processed, but whose response was lost before the owner died, is
// answered by the adopter from the replicated response (processing it
// again would make other SPIs and nonces than those the owner may have
// sent); one that the owner never processed is processed by the adopter.
func TestAdoptAnswersRetransmission(t *testing.T) {
	for _, processed := range []bool{true, false} {
		name := "processed"
		if !processed {
			name = "unseen"
		}
		t.Run(name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			h := newHAPair(t, pa, pb, nil)
			if _, err := h.a.Initiate(ctx(t), "to-b"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(h.pair))
			_, cb := checkPair(t, h.pair)
			var mu sync.Mutex
			lost := 0
			h.net.mu.Lock()
			h.net.drop = func(_ int, from, to netip.AddrPort, pkt []byte) bool {
				hd, err := ParseHeader(pkt)
				if err != nil || hd.Exchange != CREATE_CHILD_SA {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				// Until the failover, CREATE_CHILD_SA requests to a are
				// lost (unseen), or a's answers to them (processed).
				if !h.failedOver.Load() && ((processed && from.Addr() == addrA && hd.IsResponse()) || (!processed && to.Addr() == addrA && !hd.IsResponse())) {
					lost++
					return true
				}
				return false
			}
			h.net.mu.Unlock()
			done := make(chan error, 1)
			var nb *ChildSA
			go func() {
				var err error
				nb, err = h.b.Rekey(ctx(t), cb)
				done <- err
			}()
			waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return lost >= 1 })
			if processed {
				waitFor(t, func() bool { return h.a.Stats().CreateChildSAAnswered == 1 })
			}
			_, log := h.failover(t)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(h.pair))
			ca, cb2 := checkPair(t, h.pair)
			if cb2 != nb {
				t.Fatal("the peer's Child SA is not its rekey's")
			}
			s := h.a.Stats()
			if processed {
				if s.RxRetransmits == 0 || s.CreateChildSAAnswered != 0 {
					t.Fatalf("the adopter did not answer from the replicated response: %+v", s)
				}
				// The rekeyed Child SA came with the snapshot.
				if cs := log.list(); len(cs) != 2 || !slices.Contains(cs, ca) || !ca.HoldOutbound {
					t.Fatalf("adopted Child SAs %v, left %+v", cs, ca)
				}
			} else if s.CreateChildSAAnswered != 1 {
				t.Fatalf("the adopter did not process the request: %+v", s)
			}
			if bs := h.b.Stats(); bs.IKESAInitAnswered != 1 || bs.TxRetransmits == 0 {
				t.Fatalf("peer's stats %+v", bs)
			}
		})
	}
}

// TestAdoptFinishesOutstandingRequest: a rekey the owner had sent when it
// died (the peer answered, the answer was lost) is retransmitted by the
// adopter as it was sent, answered by the peer from its cache, and
// finished with the replicated nonce and Diffie-Hellman key.
func TestAdoptFinishesOutstandingRequest(t *testing.T) {
	for _, ike := range []bool{false, true} {
		name := "child"
		if ike {
			name = "ike"
		}
		t.Run(name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16-ecp256", "aes128-sha256-x25519", "aes128gcm16-ecp256")
			h := newHAPair(t, pa, pb, nil)
			ca, err := h.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, settled(h.pair))
			saB, cb := only(t, h.b)
			oldSPIs := [2]uint64{saB.spii, saB.spir}
			h.net.mu.Lock()
			h.net.drop = func(_ int, from, _ netip.AddrPort, pkt []byte) bool {
				hd, err := ParseHeader(pkt)
				return err == nil && hd.Exchange == CREATE_CHILD_SA && hd.IsResponse() && from.Addr() == addrB && !h.failedOver.Load()
			}
			h.net.mu.Unlock()
			done := make(chan error, 1)
			go func() {
				if ike {
					done <- h.a.RekeyIKE(ctx(t), ca)
				} else {
					_, err := h.a.Rekey(ctx(t), ca)
					done <- err
				}
			}()
			waitFor(t, func() bool { return h.b.Stats().CreateChildSAAnswered == 1 })
			_, log := h.failover(t)
			if err := <-done; err == nil {
				t.Fatal("the dead owner's rekey succeeded")
			}
			waitFor(t, settled(h.pair))
			ca2, cb2 := checkPair(t, h.pair)
			if bs := h.b.Stats(); bs.RxRetransmits == 0 || bs.CreateChildSAAnswered != 1 || bs.IKESAInitAnswered != 1 {
				t.Fatalf("peer's stats %+v", bs)
			}
			saB2, _ := only(t, h.b)
			if ike {
				if [2]uint64{saB2.spii, saB2.spir} == oldSPIs || cb2 != cb || ca2 != log.list()[0] {
					t.Fatal("the IKE SA rekey did not finish")
				}
				if s := h.a.Stats(); s.IKESARekeyed != 1 {
					t.Fatalf("adopter's stats %+v", s)
				}
			} else if cb2 == cb || len(log.list()) != 2 || ca2 != log.list()[1] {
				t.Fatalf("the Child SA rekey did not finish: %d reported", len(log.list()))
			}
		})
	}
}

// TestAdoptRefuses: snapshots that are garbage, cut short anywhere,
// damaged, of another version, of a peer the Endpoint does not know or
// of an IKE SA it holds already are refused with an error.
func TestAdoptRefuses(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	h := newHAPair(t, pa, pb, nil)
	if _, err := h.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(h.pair))
	good := h.a.Snapshots()[0].Data

	other := *pa
	other.Name = "someone-else"
	cfg := h.aCfg
	cfg.Peers = []*Peer{&other}
	cfg.OnSnapshot = nil
	e, err := NewEndpoint(cfg, memPort{newMemNet(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Adopt(good); err == nil {
		t.Fatal("a snapshot of an unknown peer was adopted")
	}
	cfg.Peers = []*Peer{pa}
	e2, err := NewEndpoint(cfg, memPort{newMemNet(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2.Close() })
	for n := 0; n < len(good); n++ {
		if err := e2.Adopt(good[:n]); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes was adopted", n, len(good))
		}
	}
	for i := 0; i < len(good); i++ {
		bad := bytes.Clone(good)
		bad[i] ^= 0x10
		if err := e2.Adopt(bad); err == nil {
			t.Fatalf("a snapshot damaged at byte %d was adopted", i)
		}
	}
	for _, bad := range [][]byte{nil, {snapVersion}, {snapVersion + 1}, []byte("garbage, not a snapshot")} {
		if err := e2.Adopt(bad); err == nil {
			t.Fatalf("%q was adopted", bad)
		}
	}
	if e2.Stats().Adopted != 0 || len(e2.IKESAs()) != 0 {
		t.Fatal("a refused snapshot left state")
	}
	if err := e2.Adopt(good); err != nil {
		t.Fatal(err)
	}
	if err := e2.Adopt(good); err == nil {
		t.Fatal("the same IKE SA was adopted twice")
	}
}

// snapSeed is a snapshot with every field, for the fuzzer's corpus and
// the round trip.
func snapSeed() *snapIKE {
	sel := SelectorFromPrefix(netip.MustParsePrefix("10.1.0.0/16"))
	sel6 := SelectorFromPrefix(netip.MustParsePrefix("2001:db8::/64"))
	ap := netip.MustParseAddrPort("192.0.2.1:4500")
	ap6 := netip.MustParseAddrPort("[2001:db8::2]:500")
	k := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	t0 := time.Unix(1_700_000_000, 123)
	return &snapIKE{peer: "to-b", flags: snapInitiator | snapFrag | snapMOBIKE, spii: 1, spir: 2, local: ap, remote: ap6, respLocal: ap, respRem: ap6,
		suite: Suite{Protocol: ProtoIKE, Encr: EncrAESGCM16, KeyLen: 128, PRF: PRFHMACSHA256, DH: DHCurve25519, AddKE: [7]uint16{0: 36}},
		keys:  Keys{D: k(32, 1), Ei: k(20, 2), Er: k(20, 3), Pi: k(32, 4), Pr: k(32, 5)},
		ni:    k(32, 6), nr: k(32, 7), nextReq: 5, nextPeer: 3, lastReq: k(60, 8), lastResp: [][]byte{k(40, 9), k(30, 10)},
		remoteID: Identity{Type: IDFQDN, Data: []byte("b.example.net")}, established: t0, rekeyAt: t0.Add(time.Hour), expireAt: t0.Add(2 * time.Hour),
		hashes: []uint16{2, 3, 4},
		vips:   []netip.Addr{netip.MustParseAddr("10.3.0.7"), netip.MustParseAddr("fd00:3::7")},
		leases: []snapLease{{pool: "rw4", addr: netip.MustParseAddr("10.3.0.7"), id: "carol"}, {pool: "rw6", addr: netip.MustParseAddr("fd00:3::7"), id: "carol"}},
		pending: &snapRequest{id: 4, exch: CREATE_CHILD_SA, kind: reqRekey, pkts: [][]byte{k(80, 11)},
			rekey: &snapRekey{old: 300, conf: "net", spi: 400, ni: k(32, 12), dhGroup: DHECP256, dhPriv: k(32, 13), tsi: []Selector{sel}, tsr: []Selector{sel6}, retries: 1}},
		children: []snapChild{{c: ChildSA{Name: "to-b", Child: "net", Initiator: true, Local: ap, Remote: ap6, InSPI: 300, OutSPI: 301,
			Suite: "aes128gcm16", InKey: k(20, 14), OutKey: k(20, 15), LocalTS: []Selector{sel}, RemoteTS: []Selector{sel6}, IKESPIi: 1, IKESPIr: 2},
			flags: chInitiator | chDeleteDue, rekeyAt: t0.Add(time.Minute), expireAt: t0.Add(2 * time.Minute), heldNext: 302}}}
}

// TestSnapshotRoundTrip: encoding and decoding keep every field.
func TestSnapshotRoundTrip(t *testing.T) {
	s := snapSeed()
	got, err := decodeSnapshot(s.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
}

// FuzzSnapshotDecode feeds arbitrary bytes to the snapshot decoder and
// to Adopt: errors, never a panic, and whatever decodes encodes back to
// the same state. With seal, the input gets a valid checksum first, so
// that the fuzzer reaches the field parsers behind it.
func FuzzSnapshotDecode(f *testing.F) {
	seed := snapSeed().encode()
	body := seed[:len(seed)-6]
	f.Add(seed, false)
	f.Add(body, true)
	f.Add(body[:len(body)/2], true)
	f.Add([]byte{snapVersion}, true)
	pa, _ := peers(&testing.T{}, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	e, err := NewEndpoint(Config{Peers: []*Peer{pa}}, nopTransport{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		if seal {
			w := &snapWriter{b: bytes.Clone(data)}
			w.u32(tagEnd, crc32.Checksum(w.b, castagnoli))
			data = w.b
		}
		s, err := decodeSnapshot(data)
		if err == nil {
			again, err := decodeSnapshot(s.encode())
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Fatalf("re-encoded snapshot differs: %v", err)
			}
		}
		e.Adopt(data)
	})
}

type nopTransport struct{}

func (nopTransport) Send(netip.AddrPort, netip.AddrPort, []byte) error { return nil }

// TestRelease: a released IKE SA goes without a word to the peer and
// without OnDelete; the peer keeps it, and the snapshot taken at the
// release, adopted elsewhere, goes on: a Child SA rekey there is answered.
func TestRelease(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	var deleted atomic.Int32
	h := newHAPair(t, pa, pb, func(a, b *Config) {
		a.OnDelete = func(*ChildSA) { deleted.Add(1) }
	})
	if _, err := h.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settled(h.pair))
	sn := h.a.Snapshots()
	if len(sn) != 1 || sn[0].Local.Addr() != addrA {
		t.Fatalf("snapshots %+v: want one, on %v", sn, addrA)
	}
	tx := h.a.Stats().TxPackets
	if err := h.a.Release(sn[0].SPIi, sn[0].SPIr); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Release(sn[0].SPIi, sn[0].SPIr); err == nil {
		t.Fatal("released twice")
	}
	if n := deleted.Load(); n != 0 || len(h.a.IKESAs()) != 0 || h.a.Stats().TxPackets != tx {
		t.Fatalf("after Release: %d OnDelete, %d IKE SAs, %d datagrams sent", n, len(h.a.IKESAs()), h.a.Stats().TxPackets-tx)
	}
	if len(h.b.IKESAs()) != 1 {
		t.Fatal("the peer lost its IKE SA")
	}
	h.st.mu.Lock()
	if h.st.gone != 1 {
		t.Errorf("Release reported %d IKE SAs gone, want 1", h.st.gone)
	}
	h.st.last[[2]uint64{sn[0].SPIi, sn[0].SPIr}] = sn[0].Data // what the new owner got in the handover
	h.st.mu.Unlock()
	_, log := h.failover(t)
	cs := log.list()
	if len(cs) != 1 {
		t.Fatalf("adopted %d Child SAs", len(cs))
	}
	if err := h.a.RequestRekey(cs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.b.Stats().CreateChildSAAnswered == 1 })
}
