package esp_test

import (
	"bytes"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

// fuzzOpenPairs are the SAs of FuzzOpen, keyed alike in every run so that
// the packets in testdata/fuzz/FuzzOpen, sealed with them, authenticate.
// Each has SPI 0x1001.
var fuzzOpenPairs = []pairOpts{
	{alg: cryptodev.AES128GCM16, keySeed: 1},
	{alg: cryptodev.AES256CBCSHA256, mode: esp.Transport, encap: esp.EncapUDP, keySeed: 2},
	{alg: cryptodev.ChaCha20Poly1305, outer6: true, esn: true, keySeed: 3},
	{alg: cryptodev.NullSHA256, mode: esp.Transport, outer6: true, encap: esp.EncapUDP, keySeed: 4},
}

// fuzzOpenSizes are the payload sizes of the inner packets FuzzOpen and
// its corpus seal: ipPacket(v6, n) for each.
var fuzzOpenSizes = []int{0, 1, 50, 300}

// FuzzOpen feeds arbitrary packets to inbound parsing and decapsulation:
// any input must end in a named drop reason or a valid packet, never a
// panic. And since the fuzzer holds no key, a packet accepted must carry
// one of the inner packets sealed for the corpus (its transport payload in
// transport mode, where the IP header is rebuilt from the outer one): an
// ICV check that lets anything else through fails here. The seed corpus
// holds valid packets of each SA shape and damaged ones; so does
// testdata/fuzz/FuzzOpen.
//
//	go test -run '^$' -fuzz '^FuzzOpen$' -fuzztime 60s ./esp/
func FuzzOpen(f *testing.F) {
	h := newHarness(f)
	type pair struct{ out, in *esp.SA }
	var pairs []pair
	for _, o := range fuzzOpenPairs {
		out, in := saPair(f, o)
		pairs = append(pairs, pair{out, in})
	}
	var inners [][]byte
	for _, n := range fuzzOpenSizes {
		inners = append(inners, ipPacket(false, n), ipPacket(true, n))
	}
	for i, p := range pairs {
		for _, n := range fuzzOpenSizes {
			ct, r := h.seal(p.out, ipPacket(pairs[i].out.Config().Dst.Is6(), n))
			if r != esp.ReasonNone {
				f.Fatal(r)
			}
			f.Add(ct)
			f.Add(ct[:len(ct)-1])
			f.Add(ct[:len(ct)/2])
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x45})
	f.Add([]byte{0x60, 0, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		h.t = t
		if len(pkt) > 2000 {
			return
		}
		// Each SA shares SPI 0x1001, so try the packet against every one.
		for _, p := range pairs {
			got, r := h.open(p.in, pkt)
			if r != esp.ReasonNone {
				if r >= esp.NumReasons {
					t.Fatalf("dropped with an unnamed reason %v", r)
				}
				continue
			}
			switch packet.IPVersion(got) {
			case 4:
				if !packet.IPv4(got).IsValid() {
					t.Fatalf("accepted an invalid IPv4 packet %x", got)
				}
			case 6:
				if !packet.IPv6(got).IsValid() {
					t.Fatalf("accepted an invalid IPv6 packet %x", got)
				}
			default:
				t.Fatalf("accepted a non-IP packet %x", got)
			}
			if !sealedInner(inners, got, p.in.Config().Mode == esp.Transport) {
				t.Fatalf("accepted %x, which no SA sealed", got)
			}
		}
	})
}

// sealedInner reports whether got is one of the inner packets, or, in
// transport mode, ends in the transport payload of one (the header is
// rebuilt from the outer one, which the fuzzer may have given options or
// extension headers).
func sealedInner(inners [][]byte, got []byte, transport bool) bool {
	for _, in := range inners {
		if !transport && bytes.Equal(got, in) ||
			transport && packet.IPVersion(got) == packet.IPVersion(in) && bytes.HasSuffix(got, l4(in)) {
			return true
		}
	}
	return false
}

// l4 is what follows the header of an inner packet (ipPacket's).
func l4(b []byte) []byte {
	if packet.IPVersion(b) == 4 {
		return b[20:]
	}
	return b[40:]
}

// FuzzTrailer seals an arbitrary ESP payload (trailer included, as an
// attacker holding the key could) and opens it, so the fuzzer reaches the
// padding, next-header and inner-packet checks behind the ICV.
//
//	go test -run XXX -fuzz FuzzTrailer -fuzztime 60s ./esp/
func FuzzTrailer(f *testing.F) {
	h := newHarness(f)
	out, in := saPair(f, pairOpts{alg: cryptodev.AES128GCM16, window: -1})
	outT, inT := saPair(f, pairOpts{alg: cryptodev.AES128GCM16, mode: esp.Transport, window: -1})
	f.Add(ipPacket(false, 10), false)
	f.Add(ipPacket(true, 10), true)
	f.Add([]byte{1, 2, 0x3b}, false)
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 2, 4}, false)
	f.Fuzz(func(t *testing.T, payload []byte, transport bool) {
		h.t = t
		if len(payload) < 2 || len(payload) > 2000 {
			return
		}
		o, i := out, in
		if transport {
			o, i = outT, inT
		}
		// Seal a valid 2-byte-payload packet, then replace its plaintext
		// with the fuzzer's before encryption.
		base := ipPacket(false, 0)
		p := h.buf(base)
		defer p.Release()
		var w esp.Work
		var op cryptodev.Op
		if r := o.PrepareOutbound(p, &w, &op); r != esp.ReasonNone {
			t.Fatal(r)
		}
		data := p.Bytes()
		hdrEnd := len(data) - len(op.Src) - len(op.Tag)
		pkt := append(bytes.Clone(data[:hdrEnd]), payload...)
		pkt = append(pkt, make([]byte, 16)...)
		ip := packet.IPv4(pkt) // outer header (tunnel) or the moved header (transport)
		ip.SetTotalLength(uint16(len(pkt)))
		ip.SetChecksum()
		q := h.pl.Queue()
		b := &cryptodev.Batch{Ops: []cryptodev.Op{{Key: o.Config().Key, Dir: cryptodev.Encrypt,
			Src: pkt[hdrEnd : len(pkt)-16], Dst: pkt[hdrEnd : len(pkt)-16], IV: pkt[hdrEnd-8 : hdrEnd],
			AAD: pkt[hdrEnd-16 : hdrEnd-8], Tag: pkt[len(pkt)-16:]}}}
		if err := cryptodev.Run(q, b); err != nil || b.Ops[0].Status != cryptodev.StatusOK {
			t.Fatal(err, b.Ops[0].Status)
		}
		got, r := h.open(i, pkt)
		if r == esp.ReasonNone && len(got) > 0 && packet.IPVersion(got) != 4 && packet.IPVersion(got) != 6 {
			t.Fatalf("accepted non-IP %x", got)
		}
	})
}
