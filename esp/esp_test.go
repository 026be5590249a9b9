package esp_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

var (
	v4a = netip.MustParseAddr("192.0.2.1")
	v4b = netip.MustParseAddr("192.0.2.2")
	v6a = netip.MustParseAddr("2001:db8::1")
	v6b = netip.MustParseAddr("2001:db8::2")
)

// ipPacket builds an IPv4 or IPv6 UDP packet with n bytes of payload.
func ipPacket(v6 bool, n int) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + 3)
	}
	if v6 {
		b := make([]byte, 40+8+n)
		packet.IPv6(b).Encode(&packet.IPv6Fields{PayloadLength: uint16(8 + n), NextHeader: packet.ProtoUDP, HopLimit: 64,
			Src: netip.MustParseAddr("2001:db8:1::10").As16(), Dst: netip.MustParseAddr("2001:db8:2::20").As16()})
		packet.UDP(b[40:]).Encode(1234, 5678, uint16(8+n))
		copy(b[48:], payload)
		packet.UDP(b[40:]).SetChecksumIPv6(b[8:24], b[24:40])
		return b
	}
	b := make([]byte, 20+8+n)
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(28 + n), TTL: 64, Protocol: packet.ProtoUDP, ID: 7,
		Src: netip.MustParseAddr("10.1.0.10").As4(), Dst: netip.MustParseAddr("10.2.0.20").As4()})
	packet.UDP(b[20:]).Encode(1234, 5678, uint16(8+n))
	copy(b[28:], payload)
	return b
}

type pairOpts struct {
	alg     cryptodev.Alg
	mode    esp.Mode
	encap   esp.Encap
	outer6  bool
	esn     bool
	seq     uint64
	window  int
	lt      esp.Lifetime
	engine  cryptodev.Engine
	sameKey bool
	// keySeed, when not 0, makes the keys keySeed, keySeed+1, ... rather
	// than random, so that packets sealed in one run (a fuzz corpus) open
	// in another.
	keySeed byte
}

// saPair makes an outbound SA and the matching inbound SA, keyed alike.
func saPair(t testing.TB, o pairOpts) (out, in *esp.SA) {
	t.Helper()
	eng := o.engine
	if eng == nil {
		eng = soft.New()
	}
	info := o.alg.Info()
	enc := make([]byte, o.alg.EncKeyLen())
	auth := make([]byte, info.AuthKeyLen)
	rand.Read(enc)
	rand.Read(auth)
	if o.keySeed != 0 {
		for i := range enc {
			enc[i] = o.keySeed + byte(i)
		}
		for i := range auth {
			auth[i] = o.keySeed + byte(len(enc)+i)
		}
	}
	k1, err := eng.NewKey(o.alg, enc, auth)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := eng.NewKey(o.alg, enc, auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k1.Destroy(); k2.Destroy() })
	src, dst := v4a, v4b
	if o.outer6 {
		src, dst = v6a, v6b
	}
	window := o.window
	if window == 0 {
		window = 64
	}
	cfg := esp.Config{SPI: 0x1001, Mode: o.mode, Encap: o.encap, Src: src, Dst: dst, Alg: o.alg, Key: k1,
		ESN: o.esn, Seq: o.seq, ReplayWindow: window, Lifetime: o.lt}
	if out, err = esp.NewOutbound(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Key = k2
	if window < 0 {
		cfg.ReplayWindow = 0
	}
	if in, err = esp.NewInbound(cfg); err != nil {
		t.Fatal(err)
	}
	return out, in
}

// harness runs single packets through a pipeline on the soft engine.
type harness struct {
	t    testing.TB
	pool *packet.Pool
	pl   *esp.Pipeline
	b    *esp.Batch
	natt []uint16
}

func newHarness(t testing.TB) *harness {
	q, err := soft.New().NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, pool: packet.NewPool(64, 2048+256, 128), pl: esp.NewPipeline(q), b: esp.NewBatch(64), natt: []uint16{esp.NATTPort}}
}

func (h *harness) buf(data []byte) *packet.Buf {
	p := h.pool.Get()
	if p == nil {
		h.t.Fatal("pool empty")
	}
	if !p.Write(h.pool.Headroom(), data) {
		h.t.Fatal("packet too big for pool")
	}
	return p
}

// seal runs one packet outbound; it returns the ESP packet or the drop reason.
func (h *harness) seal(sa *esp.SA, inner []byte) ([]byte, esp.Reason) {
	return h.sealWith(sa, inner, nil)
}

// sealWith lets a test change the plaintext ESP payload before encryption
// (to build dummy, badly padded or TFC-padded packets).
func (h *harness) sealWith(sa *esp.SA, inner []byte, edit func(pt []byte)) ([]byte, esp.Reason) {
	p := h.buf(inner)
	defer p.Release()
	op := cryptodev.Op{}
	var w esp.Work
	if r := sa.PrepareOutbound(p, &w, &op); r != esp.ReasonNone {
		return nil, r
	}
	if edit != nil {
		edit(op.Src)
	}
	q, _ := soft.New().NewQueue()
	b := &cryptodev.Batch{Ops: []cryptodev.Op{op}}
	if err := cryptodev.Run(q, b); err != nil {
		h.t.Fatal(err)
	}
	if r := sa.FinishOutbound(p, &w, &b.Ops[0]); r != esp.ReasonNone {
		return nil, r
	}
	return bytes.Clone(p.Bytes()), esp.ReasonNone
}

// open runs one ESP packet inbound through the pipeline.
func (h *harness) open(sa *esp.SA, pkt []byte) ([]byte, esp.Reason) {
	p := h.buf(pkt)
	defer p.Release()
	b := h.b
	b.Reset(esp.Inbound, 1)
	b.Bufs[0] = p
	if r := esp.Parse(p.Bytes(), h.natt, &b.Parsed[0]); r != esp.ReasonNone {
		return nil, r
	}
	if b.Parsed[0].SPI == sa.SPI() {
		b.SAs[0] = sa
	}
	if err := h.pl.Run(b); err != nil {
		h.t.Fatal(err)
	}
	if b.Reasons[0] != esp.ReasonNone {
		return nil, b.Reasons[0]
	}
	return bytes.Clone(p.Bytes()), esp.ReasonNone
}

func TestRoundTripAllSuites(t *testing.T) {
	h := newHarness(t)
	for _, alg := range cryptodev.Algs() {
		for _, mode := range []esp.Mode{esp.Tunnel, esp.Transport} {
			for _, encap := range []esp.Encap{esp.EncapNone, esp.EncapUDP} {
				for _, outer6 := range []bool{false, true} {
					for _, inner6 := range []bool{false, true} {
						if mode == esp.Transport && inner6 != outer6 {
							continue
						}
						for _, esn := range []bool{false, true} {
							name := fmt.Sprintf("%v/%v/%v/outer6=%v/inner6=%v/esn=%v", alg, mode, encap, outer6, inner6, esn)
							t.Run(name, func(t *testing.T) {
								h.t = t
								out, in := saPair(t, pairOpts{alg: alg, mode: mode, encap: encap, outer6: outer6, esn: esn, seq: 0xfffffffd * uint64(boolInt(esn))})
								for _, n := range []int{0, 1, 13, 14, 15, 16, 17, 100, 1372} {
									inner := ipPacket(inner6, n)
									ct, r := h.seal(out, inner)
									if r != esp.ReasonNone {
										t.Fatalf("seal %d: %v", n, r)
									}
									checkOuter(t, ct, mode, encap, outer6, inner)
									pt, r := h.open(in, ct)
									if r != esp.ReasonNone {
										t.Fatalf("open %d: %v", n, r)
									}
									if !bytes.Equal(pt, inner) {
										t.Fatalf("size %d: inner packet differs:\n got %x\nwant %x", n, pt, inner)
									}
								}
								if got := in.Counters.Packets.Load(); got != 9 {
									t.Fatalf("inbound packets = %d, want 9", got)
								}
								if esn && in.Seq() <= 1<<32 {
									t.Fatalf("ESN did not carry into the high bits: %#x", in.Seq())
								}
							})
						}
					}
				}
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkOuter checks the ESP packet's framing: IP header, UDP, SPI, length
// alignment.
func checkOuter(t *testing.T, ct []byte, mode esp.Mode, encap esp.Encap, outer6 bool, inner []byte) {
	t.Helper()
	var pp esp.Parsed
	if r := esp.Parse(ct, []uint16{4500}, &pp); r != esp.ReasonNone {
		t.Fatalf("own output does not parse: %v", r)
	}
	if pp.UDP != (encap == esp.EncapUDP) || pp.SPI != 0x1001 || pp.End != len(ct) {
		t.Fatalf("bad framing %+v", pp)
	}
	if outer6 != pp.Dst.Is6() {
		t.Fatalf("outer family wrong")
	}
	if encap == esp.EncapUDP && outer6 {
		u := ct[40:]
		if packet.Checksum(u, packet.PseudoHeaderSum(ct[8:24], ct[24:40], packet.ProtoUDP, len(u))) != 0xffff {
			t.Fatalf("bad UDP checksum")
		}
	}
	if mode == esp.Transport && !bytes.Equal(ct[12:20], inner[12:20]) && !outer6 {
		t.Fatalf("transport mode changed the addresses")
	}
}

func TestTamperedDropped(t *testing.T) {
	h := newHarness(t)
	for _, alg := range cryptodev.Algs() {
		out, in := saPair(t, pairOpts{alg: alg})
		inner := ipPacket(false, 100)
		ct, _ := h.seal(out, inner)
		for _, pos := range []int{20 + 4, 20 + 8, len(ct) / 2, len(ct) - 1} {
			bad := bytes.Clone(ct)
			bad[pos] ^= 0x40
			if pos == 24 {
				// the sequence number: a different number inside the window
				binary.BigEndian.PutUint32(bad[24:], 5)
			}
			if _, r := h.open(in, bad); r != esp.ReasonAuthFailed {
				t.Errorf("%v: tamper at %d: got %v, want auth_failed", alg, pos, r)
			}
		}
		if _, r := h.open(in, ct); r != esp.ReasonNone {
			t.Errorf("%v: original rejected after tampered copies: %v", alg, r)
		}
		if in.Counters.Drops[esp.ReasonAuthFailed].Load() != 4 {
			t.Errorf("%v: auth_failed counter = %d", alg, in.Counters.Drops[esp.ReasonAuthFailed].Load())
		}
	}
}

func TestReplayAndWindow(t *testing.T) {
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 32})
	var pkts [][]byte
	for range 100 {
		ct, _ := h.seal(out, ipPacket(false, 10))
		pkts = append(pkts, ct)
	}
	// Deliver 0..49, replay 49, deliver 99, then an old one outside the window.
	for i := range 50 {
		if _, r := h.open(in, pkts[i]); r != esp.ReasonNone {
			t.Fatalf("packet %d: %v", i, r)
		}
	}
	if _, r := h.open(in, pkts[49]); r != esp.ReasonReplay {
		t.Fatalf("replay: %v", r)
	}
	if _, r := h.open(in, pkts[99]); r != esp.ReasonNone {
		t.Fatalf("jump: %v", r)
	}
	if _, r := h.open(in, pkts[60]); r != esp.ReasonReplay {
		t.Fatalf("outside window (seq 61 < 100-32): %v", r)
	}
	if _, r := h.open(in, pkts[80]); r != esp.ReasonNone {
		t.Fatalf("inside window, out of order: %v", r)
	}
	if got := in.Counters.Drops[esp.ReasonReplay].Load(); got != 2 {
		t.Fatalf("replay counter %d", got)
	}

	// Window 0: replays are accepted.
	out, in = saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: -1})
	ct, _ := h.seal(out, ipPacket(false, 10))
	for range 3 {
		if _, r := h.open(in, ct); r != esp.ReasonNone {
			t.Fatalf("window off: %v", r)
		}
	}
}

func TestSequenceNeverWraps(t *testing.T) {
	h := newHarness(t)
	out, _ := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, seq: 1<<32 - 2})
	if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonNone {
		t.Fatal(r)
	}
	if out.NeedsRekey() {
		t.Fatal("rekey wanted too early")
	}
	for range 2 {
		if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonSeqExhausted {
			t.Fatalf("got %v, want seq_exhausted", r)
		}
	}
	if !out.NeedsRekey() || out.Seq() != 1<<32-1 {
		t.Fatalf("rekey=%v seq=%#x", out.NeedsRekey(), out.Seq())
	}
	out, _ = saPair(t, pairOpts{alg: cryptodev.AES128CBCSHA256, esn: true, seq: 1<<64 - 1})
	if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonSeqExhausted {
		t.Fatalf("ESN: got %v", r)
	}
}

func TestLifetime(t *testing.T) {
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.ChaCha20Poly1305, lt: esp.Lifetime{SoftPackets: 2, HardPackets: 3}})
	for i := range 4 {
		ct, r := h.seal(out, ipPacket(false, 10))
		want := esp.ReasonNone
		if i == 3 {
			want = esp.ReasonLifetime
		}
		if r != want {
			t.Fatalf("packet %d: %v", i, r)
		}
		if i < 3 {
			if _, r := h.open(in, ct); r != esp.ReasonNone {
				t.Fatalf("open %d: %v", i, r)
			}
		}
		if got := out.NeedsRekey(); got != (i >= 1) {
			t.Fatalf("packet %d: NeedsRekey=%v", i, got)
		}
	}
}

func TestTrailerHandling(t *testing.T) {
	h := newHarness(t)
	for _, alg := range []cryptodev.Alg{cryptodev.AES256GCM16, cryptodev.AES128CBCSHA256} {
		out, in := saPair(t, pairOpts{alg: alg})
		// 21 bytes of UDP payload: 49-byte inner packet, padding is not empty.
		inner := ipPacket(false, 21)

		ct, _ := h.sealWith(out, inner, func(pt []byte) { pt[len(pt)-1] = packet.ProtoNoNext })
		if _, r := h.open(in, ct); r != esp.ReasonDummy {
			t.Errorf("%v dummy: %v", alg, r)
		}
		ct, _ = h.sealWith(out, inner, func(pt []byte) { pt[len(pt)-3] ^= 0xff })
		if _, r := h.open(in, ct); r != esp.ReasonBadPadding {
			t.Errorf("%v bad padding byte: %v", alg, r)
		}
		ct, _ = h.sealWith(out, inner, func(pt []byte) { pt[len(pt)-2] = 255 })
		if _, r := h.open(in, ct); r != esp.ReasonBadPadding {
			t.Errorf("%v pad length too long: %v", alg, r)
		}
		ct, _ = h.sealWith(out, inner, func(pt []byte) { pt[len(pt)-1] = packet.ProtoTCP })
		if _, r := h.open(in, ct); r != esp.ReasonBadInner {
			t.Errorf("%v wrong next header in tunnel mode: %v", alg, r)
		}
		// TFC padding: the inner packet claims fewer bytes than were sent.
		ct, _ = h.sealWith(out, inner, func(pt []byte) {
			ip := packet.IPv4(pt)
			ip.SetTotalLength(ip.TotalLength() - 5)
			ip.SetChecksum()
		})
		got, r := h.open(in, ct)
		if r != esp.ReasonNone || len(got) != len(inner)-5 {
			t.Errorf("%v TFC padding: %v, %d bytes", alg, r, len(got))
		}
	}
}

func TestMalformedInput(t *testing.T) {
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.AES128CBCSHA256, encap: esp.EncapUDP})
	ct, _ := h.seal(out, ipPacket(false, 40))
	fix := func(b []byte) []byte {
		ip := packet.IPv4(b)
		ip.SetTotalLength(uint16(len(b)))
		ip.SetChecksum()
		binary.BigEndian.PutUint16(b[24:], uint16(len(b)-20))
		return b
	}
	cases := []struct {
		name string
		pkt  []byte
		want esp.Reason
	}{
		{"empty", nil, esp.ReasonMalformed},
		{"ip header only", ct[:20], esp.ReasonMalformed},
		{"truncated capture", ct[:len(ct)-10], esp.ReasonMalformed},
		{"short ciphertext", fix(bytes.Clone(ct[:20+8+8+16+16])), esp.ReasonBadLength},
		{"ciphertext not block aligned", fix(bytes.Clone(ct[:len(ct)-1])), esp.ReasonBadLength},
		{"keepalive", fix(append(bytes.Clone(ct[:28]), 0xff)), esp.ReasonKeepalive},
		{"ike", fix(append(bytes.Clone(ct[:28]), 0, 0, 0, 0, 1, 2, 3, 4)), esp.ReasonIKE},
	}
	for _, c := range cases {
		if _, r := h.open(in, c.pkt); r != c.want {
			t.Errorf("%s: got %v, want %v", c.name, r, c.want)
		}
	}
	wrong := bytes.Clone(ct)
	binary.BigEndian.PutUint32(wrong[28:], 0x9999)
	if _, r := h.open(in, wrong); r != esp.ReasonUnknownSPI {
		t.Errorf("wrong SPI: %v", r)
	}
	if _, r := h.open(in, ct); r != esp.ReasonNone {
		t.Errorf("original: %v", r)
	}
}

// TestNoAllocations: the steady state of the ESP data path allocates
// nothing per packet (DESIGN.md decision 10).
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	for _, alg := range cryptodev.Algs() {
		for _, esn := range []bool{false, true} {
			out, in := saPair(t, pairOpts{alg: alg, encap: esp.EncapUDP, outer6: true, esn: esn})
			q1, _ := soft.New().NewQueue()
			q2, _ := soft.New().NewQueue()
			plo, pli := esp.NewPipeline(q1), esp.NewPipeline(q2)
			pool := packet.NewPool(32, 2048, 128)
			const n = 32
			bo, bi := esp.NewBatch(n), esp.NewBatch(n)
			inner := ipPacket(false, 1000)
			natt := []uint16{esp.NATTPort}
			bufs := make([]*packet.Buf, n)
			pool.GetN(bufs)
			run := func() {
				bo.Reset(esp.Outbound, n)
				for i := range n {
					bufs[i].Write(128, inner)
					bo.Bufs[i], bo.SAs[i] = bufs[i], out
				}
				plo.Run(bo)
				bi.Reset(esp.Inbound, n)
				for i := range n {
					bi.Bufs[i] = bufs[i]
					esp.Parse(bufs[i].Bytes(), natt, &bi.Parsed[i])
					bi.SAs[i] = in
				}
				pli.Run(bi)
			}
			run()
			allocs := testing.AllocsPerRun(50, run)
			for i := range n {
				if bi.Reasons[i] != esp.ReasonNone || !bytes.Equal(bufs[i].Bytes(), inner) {
					t.Fatalf("%v: packet %d did not round-trip: %v", alg, i, bi.Reasons[i])
				}
			}
			if allocs != 0 {
				t.Errorf("%v esn=%v: %v allocations per batch of %d, want 0", alg, esn, allocs, n)
			}
		}
	}
}

// TestIPv6ExtensionHeadersInbound: ESP behind a hop-by-hop header (RFC 8200
// section 4.1) in transport mode comes out with the extension header kept
// and its next header rewritten.
func TestIPv6ExtensionHeadersInbound(t *testing.T) {
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, mode: esp.Transport, outer6: true})
	inner := ipPacket(true, 30)
	ct, r := h.seal(out, inner)
	if r != esp.ReasonNone {
		t.Fatal(r)
	}
	hbh := []byte{packet.ProtoESP, 0, 1, 4, 0, 0, 0, 0} // next header ESP, PadN option
	withExt := append(append(bytes.Clone(ct[:40]), hbh...), ct[40:]...)
	packet.IPv6(withExt).SetNextHeader(0)
	packet.IPv6(withExt).SetPayloadLength(uint16(len(withExt) - 40))
	got, r := h.open(in, withExt)
	if r != esp.ReasonNone {
		t.Fatalf("open: %v", r)
	}
	want := append(append(bytes.Clone(inner[:40]), hbh...), inner[40:]...)
	want[40] = packet.ProtoUDP
	packet.IPv6(want).SetNextHeader(0)
	packet.IPv6(want).SetPayloadLength(uint16(len(want) - 40))
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}

// TestSeqReserve: an outbound SA reserves sequence numbers before it uses
// them, a restart that starts from the reservation never repeats a number
// (so never an AEAD nonce), and a failed reservation stops sealing.
func TestSeqReserve(t *testing.T) {
	h := newHarness(t)
	eng := soft.New()
	key, _ := eng.NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	var recorded uint64
	fail := false
	cfg := esp.Config{SPI: 0x1001, Alg: cryptodev.AES128GCM16, Key: key, Src: v4a, Dst: v4b,
		SeqReserve: func(upTo uint64) error {
			if fail {
				return fmt.Errorf("disk full")
			}
			recorded = upTo
			return nil
		}}
	out, err := esp.NewOutbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonNone {
			t.Fatal(r)
		}
	}
	if recorded != esp.SeqReserveBlock || out.Seq() != 3 {
		t.Fatalf("reserved %d after 3 packets (seq %d)", recorded, out.Seq())
	}
	// "Restart" from the reservation: the first number is above every one
	// the old SA could have used.
	cfg.Seq = recorded
	fail = true
	again, _ := esp.NewOutbound(cfg)
	if _, r := h.seal(again, ipPacket(false, 10)); r != esp.ReasonSeqReserve {
		t.Fatalf("sealing without a reservation: %v", r)
	}
	fail = false
	ct, r := h.seal(again, ipPacket(false, 10))
	if r != esp.ReasonNone {
		t.Fatal(r)
	}
	if seq := binary.BigEndian.Uint32(ct[24:]); seq != esp.SeqReserveBlock+1 || recorded != 2*esp.SeqReserveBlock {
		t.Fatalf("restarted SA sent seq %d, reserved %d", seq, recorded)
	}
}

// TestReplayReserve: an inbound SA records a bound above a sequence number
// before its window moves there; an SA restarted from the bound refuses
// every packet the first one accepted and accepts the ones after the bound;
// a failed reservation drops the packet without moving the window.
func TestReplayReserve(t *testing.T) {
	h := newHarness(t)
	out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	var recorded uint64
	fail := false
	record := func(upTo uint64) error {
		if fail {
			return fmt.Errorf("read-only file system")
		}
		recorded = upTo
		return nil
	}
	cfg := in1.Config()
	cfg.SeqReserve = record
	in, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pkts [][]byte
	for range 50 {
		pkt, r := h.seal(out, ipPacket(false, 10))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		pkts = append(pkts, pkt)
		if _, r := h.open(in, pkt); r != esp.ReasonNone {
			t.Fatal(r)
		}
	}
	if recorded < 50 || recorded > 50+esp.ReplayReserveMax {
		t.Fatalf("recorded bound %d after accepting 1..50", recorded)
	}
	// The restart: a new SA from the same configuration and the bound.
	cfg.Seq = recorded
	again, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, pkt := range pkts {
		if _, r := h.open(again, pkt); r != esp.ReasonReplay {
			t.Fatalf("packet %d replayed after the restart: %v, want replay", i+1, r)
		}
	}
	// The sender goes on past the bound (a restart costs at most a step of
	// its packets): the ones above it are accepted.
	fail = true
	bound := recorded
	lost, accepted := 0, 0
	for out.Seq() < bound+10 {
		pkt, r := h.seal(out, ipPacket(false, 10))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		switch _, r := h.open(again, pkt); {
		case out.Seq() <= bound && r == esp.ReasonReplay:
			lost++
		case out.Seq() > bound && r == esp.ReasonSeqReserve:
			// The bound cannot be recorded: dropped, window unmoved.
			fail = false
			if _, r := h.open(again, pkt); r != esp.ReasonNone {
				t.Fatalf("seq %d after the reservation recovered: %v", out.Seq(), r)
			}
			accepted++
		case out.Seq() > bound && r == esp.ReasonNone && !fail:
			accepted++
		default:
			t.Fatalf("seq %d (bound %d): %v", out.Seq(), bound, r)
		}
	}
	if lost != int(bound-50) || accepted != 10 || recorded <= bound {
		t.Fatalf("after the restart: %d lost (want %d), %d accepted (want 10), bound %d then %d", lost, bound-50, accepted, bound, recorded)
	}
}
