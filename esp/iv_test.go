package esp_test

import (
	"bytes"
	"encoding/binary"
	mrand "math/rand/v2"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// sealedIV is the explicit IV of an ESP packet sealed by a tunnel SA over
// IPv4 without UDP encapsulation.
func sealedIV(pkt []byte) uint64 { return binary.BigEndian.Uint64(pkt[20+esp.HeaderLen:]) }

// TestAEADIVIndependentOfSeq: two instances of one AEAD SA made from the same
// configuration, as a gateway restarted after losing its state directory
// makes them (both start at sequence number 1, no reservation), never seal
// two packets under the same IV; every packet still opens at the peer.
// Before the IV was an epoch and a counter it was the sequence number, and
// every packet of the second instance repeated a nonce of the first.
func TestAEADIVIndependentOfSeq(t *testing.T) {
	defer esp.SetRandom(mrand.NewChaCha8([32]byte{8}))()
	const n = 2000
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES256GCM16, cryptodev.ChaCha20Poly1305} {
		t.Run(alg.String(), func(t *testing.T) {
			h := newHarness(t)
			out1, in := saPair(t, pairOpts{alg: alg, window: 1024})
			out2, err := esp.NewOutbound(out1.Config()) // same key, same start: the restart
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint64]int{}
			for inst, out := range []*esp.SA{out1, out2} {
				for i := range n {
					pkt, r := h.seal(out, ipPacket(false, 40))
					if r != esp.ReasonNone {
						t.Fatal(r)
					}
					iv := sealedIV(pkt)
					if prev, dup := seen[iv]; dup {
						t.Fatalf("instance %d packet %d (seq %d) reuses IV %#016x of instance %d", inst+1, i+1, out.Seq(), iv, prev+1)
					}
					seen[iv] = inst
					if inst == 0 {
						if _, r := h.open(in, pkt); r != esp.ReasonNone {
							t.Fatalf("packet %d does not open: %v", i+1, r)
						}
					}
				}
			}
		})
	}
}

// TestAEADIVNormalPath: a fresh AEAD SA's IVs are its epoch in the high half
// and 0, 1, 2, ... below, independent of the sequence number it starts from,
// and each opens at the peer.
func TestAEADIVNormalPath(t *testing.T) {
	defer esp.SetRandom(bytes.NewReader([]byte{0xa1, 0xb2, 0xc3, 0xd4}))()
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, seq: 1000})
	for i := range 5 {
		pkt, r := h.seal(out, ipPacket(false, 40))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		if iv, want := sealedIV(pkt), uint64(0xa1b2c3d4)<<32|uint64(i); iv != want {
			t.Fatalf("packet %d: IV %#016x, want %#016x", i+1, iv, want)
		}
		if seq := binary.BigEndian.Uint32(pkt[24:]); seq != 1001+uint32(i) {
			t.Fatalf("packet %d: seq %d", i+1, seq)
		}
		if _, r := h.open(in, pkt); r != esp.ReasonNone {
			t.Fatalf("packet %d does not open: %v", i+1, r)
		}
	}
}

// TestAEADIVEpochRollover: after 2^32 packets under one epoch the SA draws
// another, never the same one again, and the counter restarts below it.
func TestAEADIVEpochRollover(t *testing.T) {
	// The first draw; the rollover takes the next epoch, not a draw.
	defer esp.SetRandom(bytes.NewReader([]byte{0, 0, 0, 7, 0, 0, 0, 7, 0, 0, 0, 9}))()
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.ChaCha20Poly1305, esn: true})
	esp.SetIVCount(out, 1<<32-1)
	var ivs []uint64
	for range 2 {
		pkt, r := h.seal(out, ipPacket(false, 40))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		ivs = append(ivs, sealedIV(pkt))
		if _, r := h.open(in, pkt); r != esp.ReasonNone {
			t.Fatal(r)
		}
	}
	if ivs[0] != 7<<32|0xffffffff || ivs[1] != 8<<32 {
		t.Fatalf("IVs across the rollover: %#016x, %#016x; want 0x00000007ffffffff, 0x0000000800000000", ivs[0], ivs[1])
	}
}

// TestAEADIVEpochsDistinctInInstance: within one SA instance the IVs are
// distinct by construction (package doc), across any number of 2^32-packet
// rollovers, even when the random source would hand back an epoch the
// instance used before.
func TestAEADIVEpochsDistinctInInstance(t *testing.T) {
	defer esp.SetRandom(bytes.NewReader(bytes.Repeat([]byte{0, 0, 0, 7, 0, 0, 0, 9}, 8)))()
	h := newHarness(t)
	out, _ := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, esn: true})
	seen := map[uint64]int{}
	for i := range 8 {
		if i%2 == 1 {
			esp.SetIVCount(out, 1<<32-1) // the last IV of the epoch, then a rollover
		}
		pkt, r := h.seal(out, ipPacket(false, 40))
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		iv := sealedIV(pkt)
		if prev, dup := seen[iv]; dup {
			t.Fatalf("packet %d repeats IV %#016x of packet %d", i, iv, prev)
		}
		seen[iv] = i
	}
}

// TestResumeIVEpochsNeverRepeat: two instances of one leased AEAD SA (the
// members of an HA pair) hand it back and forth 5000 times, each resuming
// under the epoch its member was given (package ha: a block per
// acquisition, the lower name's below 2^31); they never seal two packets
// under one IV, each packet carries the given epoch, and an instance made
// while its member owns the group starts under Config.IVEpoch. The random
// source hands back the same epoch every time, as a birthday collision
// would: before, each Resume drew one, and the second instance repeated
// the first's IVs at once.
func TestResumeIVEpochsNeverRepeat(t *testing.T) {
	defer esp.SetRandom(bytes.NewReader(bytes.Repeat([]byte{0x5a, 0x5a, 0x5a, 0x5a}, 1<<16)))()
	h := newHarness(t)
	out, in := saPair(t, pairOpts{alg: cryptodev.AES256GCM16, window: 1024, esn: true})
	// given is where member m's n-th block starts.
	next := [2]uint32{7, 1 << 22}
	given := func(m int) uint32 {
		e := uint32(m)<<31 | next[m]*esp.IVBlock
		next[m]++
		return e
	}
	var insts [2]*esp.SA
	for m := range insts {
		cfg := out.Config()
		grant := func(uint64) {}
		cfg.Lease, cfg.Fenced = esp.NewLease(func(upTo uint64) { grant(upTo) }), m == 1
		if m == 0 {
			cfg.IVEpoch, cfg.FixedIVEpoch = given(0), true // made while member 0 owns
		}
		sa, err := esp.NewOutbound(cfg)
		if err != nil {
			t.Fatal(err)
		}
		grant = func(upTo uint64) { cfg.Lease.Grant(upTo) } // a standby that answers at once
		cfg.Lease.Grant(esp.SeqReserveBlock)
		insts[m] = sa
	}
	seen := map[uint64]int{}
	seal := func(turn, m int, epoch uint32, n int) {
		t.Helper()
		for i := range n {
			pkt, r := h.seal(insts[m], ipPacket(false, 40))
			if r != esp.ReasonNone {
				t.Fatalf("turn %d, member %d: %v", turn, m, r)
			}
			iv := sealedIV(pkt)
			if uint32(iv>>32) != epoch || uint32(iv) != uint32(i) {
				t.Fatalf("turn %d, member %d: IV %#016x, want epoch %08x and counter %d", turn, m, iv, epoch, i)
			}
			if prev, dup := seen[iv]; dup {
				t.Fatalf("turn %d: member %d repeats IV %#016x of turn %d", turn, m, iv, prev)
			}
			seen[iv] = turn
			if _, r := h.open(in, pkt); r != esp.ReasonNone {
				t.Fatalf("turn %d: packet does not open: %v", turn, r)
			}
		}
	}
	seal(0, 0, next[0]*esp.IVBlock-esp.IVBlock, 3)
	const turns = 5000
	for turn := 1; turn <= turns; turn++ {
		m := turn % 2
		insts[1-m].Fence(true)
		e := given(m)
		if err := insts[m].Resume(insts[1-m].Seq(), e); err != nil {
			t.Fatal(err)
		}
		if got := insts[m].IVEpoch(); got != e {
			t.Fatalf("turn %d: resumed under %08x, want %08x", turn, got, e)
		}
		seal(turn, m, e, 2)
	}
	if len(seen) != 3+2*turns {
		t.Fatalf("%d distinct IVs, want %d", len(seen), 3+2*turns)
	}
	// Given an epoch at or below its own, an instance goes on above it.
	cur := insts[0].IVEpoch()
	if err := insts[0].Resume(insts[0].Seq(), 7*esp.IVBlock); err != nil {
		t.Fatal(err)
	}
	if got := insts[0].IVEpoch(); got != cur+1 {
		t.Fatalf("resumed under an old block: epoch %08x, want %08x", got, cur+1)
	}
}
