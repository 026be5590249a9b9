package esp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

// TestLeaseOutbound: a leased outbound SA never seals above what was
// granted, asks ahead so that a standby answering in time never stops it,
// is stopped by Fence, and, resumed elsewhere at the granted bound, sends
// above it under another IV epoch.
func TestLeaseOutbound(t *testing.T) {
	h := newHarness(t)
	eng := soft.New()
	key, _ := eng.NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	defer key.Destroy()
	var asks []uint64
	lease := esp.NewLease(func(upTo uint64) { asks = append(asks, upTo) }) // granted later, by hand
	cfg := esp.Config{SPI: 0x1001, Alg: cryptodev.AES128GCM16, Key: key, Src: v4a, Dst: v4b, Lease: lease}
	out, err := esp.NewOutbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing granted: the first packet asks and is dropped, not held.
	if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonSeqReserve {
		t.Fatalf("sealing before any grant: %v, want %v", r, esp.ReasonSeqReserve)
	}
	if len(asks) != 1 || asks[0] != esp.SeqReserveBlock {
		t.Fatalf("asks %v, want one for %d", asks, esp.SeqReserveBlock)
	}
	// Another packet does not ask again while the ask is outstanding.
	h.seal(out, ipPacket(false, 10))
	if len(asks) != 1 {
		t.Fatalf("asked again while an ask was outstanding: %v", asks)
	}
	lease.Grant(asks[0])
	var ivs [][8]byte
	var lastSeq uint32
	for lastSeq < esp.SeqReserveBlock/2+10 {
		ct, r := h.seal(out, ipPacket(false, 10))
		if r != esp.ReasonNone {
			t.Fatalf("seq %d: %v", lastSeq+1, r)
		}
		lastSeq = binary.BigEndian.Uint32(ct[24:])
		if uint64(lastSeq) > lease.Granted() {
			t.Fatalf("sealed seq %d above the granted %d", lastSeq, lease.Granted())
		}
		if len(ivs) < 4 {
			ivs = append(ivs, [8]byte(ct[28:36]))
		}
	}
	// Half the block used: it asked for the next one ahead, while it still
	// had numbers to send.
	if len(asks) != 2 || asks[1] != 2*esp.SeqReserveBlock {
		t.Fatalf("asks %v after %d packets, want a second for %d", asks, lastSeq, 2*esp.SeqReserveBlock)
	}
	// A fenced SA drops; a copy elsewhere resumes above the grant.
	out.Fence(true)
	if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonFenced {
		t.Fatalf("sealing while fenced: %v, want %v", r, esp.ReasonFenced)
	}
	cfg.Lease, cfg.Fenced = esp.NewLease(func(uint64) {}), true
	standby, err := esp.NewOutbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := h.seal(standby, ipPacket(false, 10)); r != esp.ReasonFenced {
		t.Fatalf("a standby's copy sealed: %v", r)
	}
	if err := standby.Resume(lease.Granted(), 1<<31|esp.IVBlock); err != nil {
		t.Fatal(err)
	}
	cfg.Lease.Grant(lease.Granted() + esp.SeqReserveBlock) // as its own standby would
	ct, r := h.seal(standby, ipPacket(false, 10))
	if r != esp.ReasonNone {
		t.Fatalf("after Resume: %v", r)
	}
	if seq := binary.BigEndian.Uint32(ct[24:]); uint64(seq) != esp.SeqReserveBlock+1 {
		t.Fatalf("resumed at seq %d, want %d", seq, esp.SeqReserveBlock+1)
	}
	for _, iv := range ivs {
		if binary.BigEndian.Uint32(iv[:4]) == binary.BigEndian.Uint32(ct[28:32]) {
			t.Fatalf("resumed SA kept the IV epoch %x", iv[:4])
		}
	}
	if got := binary.BigEndian.Uint64(ct[28:36]); got != uint64(1<<31|esp.IVBlock)<<32 {
		t.Fatalf("resumed SA's first IV %#016x, want the given epoch and counter 0", got)
	}
	if err := standby.Resume(1, 0); err != nil || standby.Seq() != esp.SeqReserveBlock+1 {
		t.Fatalf("Resume moved the SA back: seq %d, %v", standby.Seq(), err)
	}
}

// TestLeaseInbound: a leased inbound SA accepts only up to its grant,
// asks in steps that grow with the rate, and a copy resumed at the grant
// refuses every packet the first accepted and takes the ones above it.
func TestLeaseInbound(t *testing.T) {
	h := newHarness(t)
	out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	var asks []uint64
	var lease *esp.Lease
	lease = esp.NewLease(func(upTo uint64) { asks = append(asks, upTo); lease.Grant(upTo) }) // a standby at once
	cfg := in1.Config()
	cfg.Lease = lease
	in, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pkts [][]byte
	for range 2000 {
		pkt, r := h.seal(out, ipPacket(false, 10))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		pkts = append(pkts, pkt)
		if _, r := h.open(in, pkt); r != esp.ReasonNone {
			t.Fatalf("seq %d: %v", len(pkts), r)
		}
		if lease.Granted() < uint64(len(pkts)) {
			t.Fatalf("accepted seq %d above the grant %d", len(pkts), lease.Granted())
		}
	}
	// 2000 packets in well under a step's time: the step grew, so there
	// were far fewer asks than the 2000/32 of a fixed minimum step.
	if len(asks) == 0 || len(asks) >= 2000/(esp.ReplayReserveMin/2) {
		t.Fatalf("%d asks for 2000 packets: %v", len(asks), asks)
	}
	bound := lease.Granted()
	cfg.Lease, cfg.Fenced = esp.NewLease(func(uint64) {}), true
	standby, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := h.open(standby, pkts[0]); r != esp.ReasonFenced {
		t.Fatalf("a standby's copy opened a packet: %v", r)
	}
	if err := standby.Resume(bound, 0); err != nil {
		t.Fatal(err)
	}
	cfg.Lease.Grant(1 << 40)
	// Refused, and told apart as what the takeover refused
	// (replay_takeover) for esp.TakeoverWindow.
	for i, pkt := range pkts {
		if _, r := h.open(standby, pkt); r != esp.ReasonTakeover {
			t.Fatalf("packet %d after the takeover at %d: %v, want %v", i+1, bound, r, esp.ReasonTakeover)
		}
	}
	refused := 0
	for out.Seq() < bound {
		pkt, _ := h.seal(out, ipPacket(false, 10))
		if _, r := h.open(standby, pkt); r != esp.ReasonTakeover {
			t.Fatalf("seq %d under the bound %d: %v, want %v", out.Seq(), bound, r, esp.ReasonTakeover)
		}
		refused++
	}
	pkt, _ := h.seal(out, ipPacket(false, 10))
	if _, r := h.open(standby, pkt); r != esp.ReasonNone {
		t.Fatalf("seq %d above the bound: %v", out.Seq(), r)
	}
	t.Logf("bound %d after 2000 packets: %d of the peer's packets refused after the takeover", bound, refused)
	// Past the window, a replay is an ordinary one.
	defer esp.SetLeaseClock(func() time.Time { return time.Now().Add(esp.TakeoverWindow) })()
	if _, r := h.open(standby, pkts[len(pkts)-1]); r != esp.ReasonReplay {
		t.Fatalf("a replay %v after the takeover: %v, want %v", esp.TakeoverWindow, r, esp.ReasonReplay)
	}
}

// TestLeaseNoAlloc: a leased SA's steady state, asks and grants
// included, does not allocate (DESIGN.md decision 10).
func TestLeaseNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	out0, in0 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	var lo, li *esp.Lease
	lo = esp.NewLease(func(upTo uint64) { lo.Grant(upTo) })
	li = esp.NewLease(func(upTo uint64) { li.Grant(upTo) })
	ocfg, icfg := out0.Config(), in0.Config()
	ocfg.Lease, icfg.Lease = lo, li
	out, _ := esp.NewOutbound(ocfg)
	in, _ := esp.NewInbound(icfg)
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
	allocs := testing.AllocsPerRun(200, run)
	for i := range n {
		if bi.Reasons[i] != esp.ReasonNone || !bytes.Equal(bufs[i].Bytes(), inner) {
			t.Fatalf("packet %d did not round-trip: %v", i, bi.Reasons[i])
		}
	}
	if allocs != 0 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, n)
	}
	if li.Granted() <= uint64(n) {
		t.Fatalf("inbound lease never asked (granted %d)", li.Granted())
	}
}

// TestLeaseDurable: with SeqReserve beside a lease, a number is used only
// once both cover it: the member's own record too.
func TestLeaseDurable(t *testing.T) {
	h := newHarness(t)
	eng := soft.New()
	key, _ := eng.NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	defer key.Destroy()
	var lease *esp.Lease
	lease = esp.NewLease(func(upTo uint64) { lease.Grant(upTo) })
	var recorded uint64
	fail := true
	out, err := esp.NewOutbound(esp.Config{SPI: 0x1001, Alg: cryptodev.AES128GCM16, Key: key, Src: v4a, Dst: v4b, Lease: lease,
		SeqReserve: func(upTo uint64) error {
			if fail {
				return fmt.Errorf("disk full")
			}
			recorded = upTo
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonSeqReserve || lease.Granted() == 0 {
		t.Fatalf("granted %d but not recorded: %v, want %v", lease.Granted(), r, esp.ReasonSeqReserve)
	}
	fail = false
	for range 3 {
		if _, r := h.seal(out, ipPacket(false, 10)); r != esp.ReasonNone {
			t.Fatal(r)
		}
	}
	if recorded != esp.SeqReserveBlock || out.Seq() != 3 {
		t.Fatalf("recorded %d after 3 packets", recorded)
	}
}

// TestLeaseSlowStandby: when grants take long, a leased inbound SA's
// steps grow to cover LeaseLeadFactor times that, so that it asks early
// enough: after the first steps, no packet waits for a grant (none is
// dropped as seq_reserve_failed). A fake clock: 100,000 packets per
// second, grants 2 ms after their ask.
func TestLeaseSlowStandby(t *testing.T) {
	h := newHarness(t)
	out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	now := time.Unix(0, 0)
	defer esp.SetLeaseClock(func() time.Time { return now })()
	type ask struct {
		upTo uint64
		at   time.Time
	}
	var asks []ask
	lease := esp.NewLease(func(upTo uint64) { asks = append(asks, ask{upTo, now}) })
	cfg := in1.Config()
	cfg.Lease = lease
	in, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const lat = 2 * time.Millisecond
	waited, waitedLate := 0, 0
	for i := range 20000 {
		now = now.Add(10 * time.Microsecond)
		for len(asks) > 0 && now.Sub(asks[0].at) >= lat {
			lease.Grant(asks[0].upTo)
			asks = asks[1:]
		}
		pkt, r := h.seal(out, ipPacket(false, 10))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		switch _, r := h.open(in, pkt); r {
		case esp.ReasonNone:
		case esp.ReasonSeqReserve:
			waited++
			if i >= 5000 {
				waitedLate++
			}
		default:
			t.Fatalf("packet %d: %v", i+1, r)
		}
	}
	t.Logf("%d packets dropped waiting for a grant, %d of them after the first 5000", waited, waitedLate)
	if waitedLate != 0 {
		t.Errorf("%d packets dropped waiting for a grant in steady state: the steps did not grow to the standby's 2 ms", waitedLate)
	}
}

// TestLeaseWait: with LeaseOptions.Wait, a packet that reaches an
// ungranted bound waits for the grant of the ask outstanding instead of
// being dropped (a grantor that writes to disk answers in milliseconds),
// and while the grantor reports failure (Lease.Fail) it is dropped at once
// however soon the grant would come.
func TestLeaseWait(t *testing.T) {
	h := newHarness(t)
	out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	delay := 20 * time.Millisecond
	var lease *esp.Lease
	lease = esp.NewLeaseWith(func(upTo uint64) {
		time.AfterFunc(delay, func() { lease.Grant(upTo) })
	}, esp.LeaseOptions{Step: time.Second, StepMax: 10 * time.Second, Wait: time.Minute})
	cfg := in1.Config()
	cfg.Lease = lease
	in, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing granted: the first packet waits for its grant.
	pkt, _ := h.seal(out, ipPacket(false, 10))
	if _, r := h.open(in, pkt); r != esp.ReasonNone {
		t.Fatalf("first packet, its grant 20 ms after the ask: %v, want it accepted after the wait", r)
	}
	bound := lease.Granted()
	for out.Seq() < bound {
		pkt, _ := h.seal(out, ipPacket(false, 10))
		if _, r := h.open(in, pkt); r != esp.ReasonNone {
			t.Fatalf("seq %d under the bound %d: %v", out.Seq(), bound, r)
		}
	}
	// The grantor fails: the grant of the next ask comes, but a packet
	// above the bound does not wait for it.
	for deadline := time.Now().Add(10 * time.Second); lease.Granted() == bound; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // the ask made half a step ago
			t.Fatal("the ask made half a step before the bound was not granted in 10 s")
		}
	}
	bound = lease.Granted()
	lease.Fail(true)
	delay = 200 * time.Millisecond
	for out.Seq() <= bound {
		pkt, _ := h.seal(out, ipPacket(false, 10))
		granted := lease.Granted()
		_, r := h.open(in, pkt)
		switch {
		case out.Seq() <= granted && r != esp.ReasonNone:
			t.Fatalf("seq %d: %v", out.Seq(), r)
		case out.Seq() > granted && r != esp.ReasonSeqReserve:
			t.Fatalf("seq %d above the bound %d while the grantor fails: %v, want %v at once", out.Seq(), granted, r, esp.ReasonSeqReserve)
		}
	}
}

// TestLeaseStepOption: LeaseOptions.Step makes an inbound lease's steps
// aim at that much traffic: at 10,000 packets a second for ten seconds
// (a fake clock), a lease aiming at 2 s asks a few times, where a
// standby's (LeaseStep, 3 ms) asks hundreds of times.
func TestLeaseStepOption(t *testing.T) {
	h := newHarness(t)
	asks := func(o *esp.LeaseOptions) int {
		out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
		now := time.Unix(0, 0)
		defer esp.SetLeaseClock(func() time.Time { return now })()
		n := 0
		var lease *esp.Lease
		ask := func(upTo uint64) { n++; lease.Grant(upTo) }
		if o == nil {
			lease = esp.NewLease(ask)
		} else {
			lease = esp.NewLeaseWith(ask, *o)
		}
		cfg := in1.Config()
		cfg.Lease = lease
		in, err := esp.NewInbound(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 100000 {
			now = now.Add(100 * time.Microsecond)
			pkt, _ := h.seal(out, ipPacket(false, 10))
			if _, r := h.open(in, pkt); r != esp.ReasonNone {
				t.Fatalf("seq %d: %v", out.Seq(), r)
			}
		}
		return n
	}
	standby, disk := asks(nil), asks(&esp.LeaseOptions{Step: 2 * time.Second, StepMax: 20 * time.Second})
	t.Logf("asks in 10 s at 10,000/s: %d aiming at LeaseStep, %d aiming at 2 s", standby, disk)
	if disk > 20 || disk >= standby/10 {
		t.Errorf("a lease aiming at 2 s asked %d times in 10 s (a standby's %d)", disk, standby)
	}
}

// TestLeaseWaitOncePerAsk: a packet that waited LeaseOptions.Wait for the
// grant of an ask and gave up is the last to wait for that ask: the
// packets after it, while the same ask is outstanding, are dropped at
// once. Each waits with the SA's lock held, so otherwise a batch of them
// would stall the lane (and every lane that needs the SA) a Wait per
// packet: 64 x 500 ms behind a writer stuck on a slow disk.
func TestLeaseWaitOncePerAsk(t *testing.T) {
	h := newHarness(t)
	out, in1 := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, window: 128})
	const wait = time.Second
	asks := 0
	lease := esp.NewLeaseWith(func(uint64) { asks++ }, esp.LeaseOptions{Step: time.Second, StepMax: 10 * time.Second, Wait: wait})
	cfg := in1.Config()
	cfg.Lease = lease
	in, err := esp.NewInbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pkt, _ := h.seal(out, ipPacket(false, 10))
	if _, r := h.open(in, pkt); r != esp.ReasonSeqReserve {
		t.Fatalf("first packet, never granted: %v, want %v after the wait", r, esp.ReasonSeqReserve)
	}
	const more = 3
	start := time.Now()
	for range more {
		pkt, _ := h.seal(out, ipPacket(false, 10))
		if _, r := h.open(in, pkt); r != esp.ReasonSeqReserve {
			t.Fatalf("seq %d, never granted: %v, want %v", out.Seq(), r, esp.ReasonSeqReserve)
		}
	}
	if d := time.Since(start); d >= wait {
		t.Fatalf("%d packets behind one that gave up waiting for the same ask took %v: each waited again (Wait %v)", more, d, wait)
	}
	if asks != 1 {
		t.Errorf("%d asks, want 1 (the one outstanding)", asks)
	}
}
