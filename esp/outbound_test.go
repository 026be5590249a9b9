package esp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

// constReader reads as an endless run of one byte: it makes every AEAD IV
// epoch the same known value.
type constReader byte

func (r constReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestTunnelPrepareBytes checks every byte PrepareOutbound writes in
// tunnel mode, and the op it describes, against headers built here field
// by field: outer IPv4 or IPv6 (DSCP and ECN from the inner header, the
// SA's TTL, no DF), the UDP header, the ESP header, the IV, the padding
// and the trailer, for each outer family, encapsulation, inner family,
// suite kind (AEAD, CBC, null) and padding length, with and without ESN.
// It guards the header template and the per-packet arithmetic
// (prepareOutboundLocked) against the RFC layout; the inner packet must
// stay where it was, uncopied.
func TestTunnelPrepareBytes(t *testing.T) {
	defer esp.SetRandom(constReader(0xa5))()
	const epoch = 0xa5a5a5a5
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES256CBCSHA512, cryptodev.NullSHA256} {
		for _, outer6 := range []bool{false, true} {
			for _, encap := range []esp.Encap{esp.EncapNone, esp.EncapUDP} {
				for _, inner6 := range []bool{false, true} {
					for _, esn := range []bool{false, true} {
						name := fmt.Sprintf("%v/outer6=%v/%v/inner6=%v/esn=%v", alg, outer6, encap, inner6, esn)
						t.Run(name, func(t *testing.T) {
							checkTunnelPrepare(t, alg, outer6, encap, inner6, esn, epoch)
						})
					}
				}
			}
		}
	}
}

func checkTunnelPrepare(t *testing.T, alg cryptodev.Alg, outer6 bool, encap esp.Encap, inner6, esn bool, epoch uint32) {
	info := alg.Info()
	key, err := soft.New().NewKey(alg, make([]byte, alg.EncKeyLen()), make([]byte, info.AuthKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(key.Destroy)
	src, dst := v4a, v4b
	if outer6 {
		src, dst = v6a, v6b
	}
	const ttl, spi = 17, 0x01020304
	cfg := esp.Config{SPI: spi, Mode: esp.Tunnel, Encap: encap, Src: src, Dst: dst, SPort: 4501, Alg: alg, Key: key,
		ESN: esn, TTL: ttl, Seq: 0xfffffff0 * uint64(boolInt(esn))}
	sa, err := esp.NewOutbound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := packet.NewPool(1, 2048, 128)
	p := pool.Get()
	defer p.Release()
	var ipID uint16
	for k, n := range []int{0, 1, 2, 3, 13, 14, 15, 16, 17, 100} {
		tos := uint8(0x5c + k) // DSCP and ECN bits that must reach the outer header
		inner := ipPacket(inner6, n)
		if inner6 {
			inner[0], inner[1] = 0x60|tos>>4, tos<<4|inner[1]&0x0f
		} else {
			inner[1] = tos
		}
		p.Write(128, inner)
		innerAt := &p.Bytes()[0]
		var w esp.Work
		var op cryptodev.Op
		op.Status, op.N = cryptodev.StatusAuthFailed, 99 // stale fields of a reused op
		sa.Lock()
		r := sa.PrepareOutbound(p, &w, &op)
		sa.Unlock()
		if r != esp.ReasonNone {
			t.Fatalf("size %d: %v", n, r)
		}
		got := p.Bytes()
		seq := cfg.Seq + uint64(k) + 1

		// The expected packet, field by field.
		outerLen, udpLen := 20, 0
		if outer6 {
			outerLen = 40
		}
		if encap == esp.EncapUDP {
			udpLen = 8
		}
		ehl := esp.HeaderLen + info.IVLen
		padLen := (info.BlockSize - (len(inner)+2)%info.BlockSize) % info.BlockSize
		total := outerLen + udpLen + ehl + len(inner) + padLen + 2 + info.ICVLen
		want := make([]byte, total)
		proto := uint8(packet.ProtoESP)
		if udpLen > 0 {
			proto = packet.ProtoUDP
		}
		if outer6 {
			packet.IPv6(want).Encode(&packet.IPv6Fields{TrafficClass: tos, PayloadLength: uint16(total - 40),
				NextHeader: proto, HopLimit: ttl, Src: src.As16(), Dst: dst.As16()})
		} else {
			id := binary.BigEndian.Uint16(got[4:])
			if k > 0 && id != ipID+1 {
				t.Errorf("size %d: IPv4 ID %d after %d", n, id, ipID)
			}
			ipID = id
			packet.IPv4(want).Encode(&packet.IPv4Fields{TOS: tos, Length: uint16(total), ID: id, TTL: ttl,
				Protocol: proto, Src: src.As4(), Dst: dst.As4()})
		}
		if udpLen > 0 {
			packet.UDP(want[outerLen:]).Encode(4501, esp.NATTPort, uint16(total-outerLen))
		}
		e := want[outerLen+udpLen:]
		binary.BigEndian.PutUint32(e[0:], spi)
		binary.BigEndian.PutUint32(e[4:], uint32(seq))
		iv := e[esp.HeaderLen:ehl]
		switch {
		case info.AEAD:
			binary.BigEndian.PutUint64(iv, uint64(epoch)<<32|uint64(k))
		case info.IVLen > 0:
			copy(iv, got[outerLen+udpLen+esp.HeaderLen:]) // encrypted counter: random by design
		}
		pl := e[ehl:]
		copy(pl, inner)
		for i := range padLen {
			pl[len(inner)+i] = byte(i + 1)
		}
		nh := uint8(packet.ProtoIPv4)
		if inner6 {
			nh = packet.ProtoIPv6
		}
		pl[len(inner)+padLen], pl[len(inner)+padLen+1] = byte(padLen), nh
		icv := total - info.ICVLen
		copy(want[icv:], got[icv:]) // the ICV's room: the engine's to write

		if !bytes.Equal(got, want) {
			t.Fatalf("size %d:\n got %x\nwant %x", n, got, want)
		}
		if &got[outerLen+udpLen+ehl] != innerAt {
			t.Errorf("size %d: the inner packet moved", n)
		}
		start := outerLen + udpLen
		if !sameSlice(op.Src, got[start+ehl:icv]) || !sameSlice(op.Dst, op.Src) || !sameSlice(op.Tag, got[icv:]) ||
			!sameSlice(op.IV, got[start+esp.HeaderLen:start+ehl]) {
			t.Errorf("size %d: op slices do not frame the packet", n)
		}
		if op.Key != key || op.Dir != cryptodev.Encrypt || op.Status != cryptodev.StatusPending || op.N != 0 {
			t.Errorf("size %d: op key, direction or stale fields wrong: %+v", n, op)
		}
		var wantAAD, wantTrailer []byte = got[start : start+esp.HeaderLen], nil
		if esn && info.AEAD {
			wantAAD = append(binary.BigEndian.AppendUint32(nil, spi), binary.BigEndian.AppendUint64(nil, seq)...)
		} else if esn {
			wantTrailer = binary.BigEndian.AppendUint32(nil, uint32(seq>>32))
		}
		if !bytes.Equal(op.AAD, wantAAD) || !bytes.Equal(op.AuthTrailer, wantTrailer) {
			t.Errorf("size %d: AAD %x trailer %x, want %x %x", n, op.AAD, op.AuthTrailer, wantAAD, wantTrailer)
		}
		if w.Seq() != seq {
			t.Errorf("size %d: work seq %d, want %d", n, w.Seq(), seq)
		}
	}
}

// sameSlice reports whether a and b are the same bytes of memory.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// TestIPv4ChecksumValid: Parse's 20-byte header check agrees with the
// general one (packet.IPv4.ChecksumValid) on valid headers, headers with
// one bit or the checksum wrong, and the carries of all-ones words.
func TestIPv4ChecksumValid(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	check := func(h []byte) {
		t.Helper()
		if got, want := esp.IPv4ChecksumValid(packet.IPv4(h)), packet.IPv4(h).ChecksumValid(); got != want {
			t.Fatalf("%x: got %v, want %v", h, got, want)
		}
	}
	for range 20000 {
		h := make([]byte, 24)
		for i := range h {
			h[i] = byte(rng.Uint32())
		}
		h[0] = 0x45
		if rng.IntN(4) == 0 {
			for i := 2; i < 20; i++ {
				h[i] = 0xff
			}
		}
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], ^packet.Checksum(h[:20], 0))
		check(h)
		h[1+rng.IntN(19)] ^= 1 << rng.IntN(8) // not the version and header length
		check(h)
		h[0] = 0x46 // with an option word: the general path
		check(h)
	}
}

// TestCountersAndSeqWhileSealing: while a pipeline seals batches, other
// goroutines (the control socket, Prometheus) read the SA's counters and
// sequence number: what they see never goes back, and once the batches
// are done it is exact. The owner counts under the SA's lock and
// publishes once per run of packets (SA.Unlock); with -race this also
// checks that nothing it keeps per packet is read unlocked.
func TestCountersAndSeqWhileSealing(t *testing.T) {
	const batches, size = 200, 100
	out, _ := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, esn: true})
	q, _ := soft.New().NewQueue()
	pl := esp.NewPipeline(q)
	pool := packet.NewPool(benchBatch, 2048, 128)
	bufs := make([]*packet.Buf, benchBatch)
	pool.GetN(bufs)
	inner := ipPacket(false, size-28)
	b := esp.NewBatch(benchBatch)

	done := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		var lastP, lastB, lastS uint64
		for {
			p, by, s := out.Counters.Packets.Load(), out.Counters.Bytes.Load(), out.Seq()
			if p < lastP || by < lastB || s < lastS {
				readerErr <- fmt.Errorf("went back: packets %d->%d bytes %d->%d seq %d->%d", lastP, p, lastB, by, lastS, s)
				return
			}
			if s < p {
				readerErr <- fmt.Errorf("seq %d below packets counted %d", s, p)
				return
			}
			lastP, lastB, lastS = p, by, s
			select {
			case <-done:
				readerErr <- nil
				return
			default:
			}
		}
	}()
	for range batches {
		b.Reset(esp.Outbound, benchBatch)
		for i, p := range bufs {
			p.Write(128, inner)
			b.Bufs[i], b.SAs[i] = p, out
		}
		if err := pl.Run(b); err != nil {
			t.Fatal(err)
		}
		for i, r := range b.Reasons {
			if r != esp.ReasonNone {
				t.Fatalf("packet %d: %v", i, r)
			}
		}
	}
	close(done)
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	const n = batches * benchBatch
	if p, by, s := out.Counters.Packets.Load(), out.Counters.Bytes.Load(), out.Seq(); p != n || by != n*size || s != n {
		t.Fatalf("packets %d bytes %d seq %d, want %d %d %d", p, by, s, n, n*size, n)
	}
}
