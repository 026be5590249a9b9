package dataplane_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/sched"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/pipe"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/spd"
)

// site is one gateway of a back-to-back pair on in-memory links: the test
// writes plaintext into user and reads what comes out of it.
type site struct {
	dp    *dataplane.Dataplane
	store *sad.Store
	user  pktio.Link // the test's end of the plaintext link
	pool  *packet.Pool
	eng   cryptodev.Engine
}

type keys struct{ enc []byte }

func newKeys() keys {
	k := keys{enc: make([]byte, 20)}
	rand.Read(k.enc)
	return k
}

func mkSA(t *testing.T, eng cryptodev.Engine, k keys, spi uint32, src, dst netip.Addr, out bool) *sad.SA {
	t.Helper()
	return mkSAWith(t, eng, k, spi, src, dst, out, pairOptions{})
}

// mkSAWith is mkSA with the ESN and starting sequence number of o.
func mkSAWith(t *testing.T, eng cryptodev.Engine, k keys, spi uint32, src, dst netip.Addr, out bool, o pairOptions) *sad.SA {
	t.Helper()
	key, err := eng.NewKey(cryptodev.AES128GCM16, k.enc, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := esp.Config{SPI: spi, Mode: esp.Tunnel, Encap: esp.EncapUDP, Src: src, Dst: dst, Alg: cryptodev.AES128GCM16,
		Key: key, ReplayWindow: 1024, ESN: o.esn, Seq: o.seq}
	var rt *esp.SA
	if out {
		rt, err = esp.NewOutbound(cfg)
	} else {
		rt, err = esp.NewInbound(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &sad.SA{Name: fmt.Sprintf("spi-%#x", spi), SA: rt, Key: key, Engine: eng.Name()}
	rt.SetUser(s)
	return s
}

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

// pair builds two data planes joined by a pipe, A (10.1.0.0/24) and B
// (10.2.0.0/24), with one tunnel each way keyed alike.
func pair(t *testing.T, eng cryptodev.Engine) (a, b *site, ab, ba keys) {
	t.Helper()
	return pairWith(t, eng, pairOptions{})
}

// pairOptions vary a pair.
type pairOptions struct {
	// wire, if set, wraps the ends of the pipe between the data planes:
	// A's ESP goes out on wa, B's on wb.
	wire func(a, b pktio.Link) (wa, wb pktio.Link)
	// esn and seq are every SA's: extended sequence numbers, and the
	// number the SAs start from (the last one sent, the highest one
	// received).
	esn bool
	seq uint64
	// ts, if set, gives the traffic selectors of a site's SAs (0 is A,
	// 1 is B) in place of the default (its own subnet === the other's);
	// a nil result checks nothing, as a peer that spoofs would not.
	ts func(site int) *spd.SATS
}

// siteTS are the selectors of a tunnel between subnets local and remote.
func siteTS(local, remote string) *spd.SATS {
	return spd.NewSATS([]spd.Range{spd.RangeOf(netip.MustParsePrefix(local))},
		[]spd.Range{spd.RangeOf(netip.MustParsePrefix(remote))})
}

// pairWith is pair with options.
func pairWith(t *testing.T, eng cryptodev.Engine, o pairOptions) (a, b *site, ab, ba keys) {
	t.Helper()
	var netA, netB pktio.Link
	netA, netB = pipe.New(4096)
	if o.wire != nil {
		netA, netB = o.wire(netA, netB)
	}
	ab, ba = newKeys(), newKeys()
	mk := func(i int, local, peer netip.Addr, remote string, net pktio.Link, outKeys, inKeys keys, outSPI, inSPI uint32) *site {
		user, plain := pipe.New(4096)
		s := &site{user: user, pool: packet.NewPool(8192, 2048, 128), eng: eng}
		var dp *dataplane.Dataplane
		s.store = sad.NewStore(func(gen uint64, sas []*sad.SA) { dp.Retire(gen, sas) })
		var err error
		dp, err = dataplane.New(dataplane.Config{Engines: map[string]cryptodev.Engine{eng.Name(): eng},
			Default: eng.Name(), Plain: []dataplane.Link{plain}, Net: []dataplane.Link{net}, Store: s.store, Pool: s.pool})
		if err != nil {
			t.Fatal(err)
		}
		s.dp = dp
		ts := siteTS([2]string{"10.1.0.0/24", "10.2.0.0/24"}[i], remote)
		if o.ts != nil {
			ts = o.ts(i)
		}
		_, err = s.store.AddTunnel(sad.TunnelSpec{Name: "t", Local: local, Peer: peer, Encap: esp.EncapUDP,
			Remote: []netip.Prefix{netip.MustParsePrefix(remote)}, MTU: 1400, TS: ts,
			Out: mkSAWith(t, eng, outKeys, outSPI, local, peer, true, o), In: []*sad.SA{mkSAWith(t, eng, inKeys, inSPI, peer, local, false, o)}})
		if err != nil {
			t.Fatal(err)
		}
		dp.Start(context.Background())
		t.Cleanup(func() { dp.Close(); s.store.Close(); user.Close() })
		return s
	}
	a = mk(0, addrA, addrB, "10.2.0.0/24", netA, ab, ba, 0x1001, 0x2001)
	b = mk(1, addrB, addrA, "10.1.0.0/24", netB, ba, ab, 0x2001, 0x1001)
	return a, b, ab, ba
}

// udpPacket builds an IPv4 UDP packet carrying a sequence number.
func udpPacket(src, dst string, seq uint32, size int) []byte {
	b := make([]byte, 28+size)
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(len(b)), TTL: 64, Protocol: packet.ProtoUDP,
		Src: netip.MustParseAddr(src).As4(), Dst: netip.MustParseAddr(dst).As4()})
	packet.UDP(b[20:]).Encode(1000, 2000, uint16(8+size))
	binary.BigEndian.PutUint32(b[28:], seq)
	return b
}

// send writes packets into a site's plaintext side.
func (s *site) send(t *testing.T, pkts [][]byte) {
	t.Helper()
	bufs := make([]*packet.Buf, len(pkts))
	if s.pool.GetN(bufs) != len(bufs) {
		t.Fatal("pool empty")
	}
	for i, p := range pkts {
		bufs[i].Write(128, p)
	}
	for off := 0; off < len(bufs); {
		n, err := s.user.Write(bufs[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	s.pool.PutN(bufs)
}

// recv reads n packets from a site's plaintext side, or fails after a
// bounded wait.
func (s *site) recv(t *testing.T, n int) [][]byte {
	t.Helper()
	var out [][]byte
	bufs := make([]*packet.Buf, 128)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(out) < n {
			k := s.pool.GetN(bufs)
			m, err := s.user.Read(bufs[:k])
			for _, b := range bufs[:m] {
				out = append(out, bytes.Clone(b.Bytes()))
			}
			s.pool.PutN(bufs[:k])
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.user.Close() // unblocks the reader
		<-done
		t.Fatalf("received %d of %d packets", len(out), n)
	}
	return out
}

func checkInOrder(t *testing.T, got [][]byte, first uint32, want int) {
	t.Helper()
	if len(got) != want {
		t.Fatalf("got %d packets, want %d", len(got), want)
	}
	for i, p := range got {
		if seq := binary.BigEndian.Uint32(p[28:]); seq != first+uint32(i) {
			t.Fatalf("packet %d carries %d: out of order or lost", i, seq)
		}
		if !packet.IPv4(p).IsValid() {
			t.Fatalf("packet %d is not a valid IPv4 packet", i)
		}
	}
}

func engines(t *testing.T) []cryptodev.Engine {
	s, err := sched.New(sched.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return []cryptodev.Engine{soft.New(), s}
}

// TestBackToBack: two data planes on in-memory links carry traffic both ways,
// in order, on the soft and the sched engine.
func TestBackToBack(t *testing.T) {
	for _, eng := range engines(t) {
		{
			t.Run(eng.Name(), func(t *testing.T) {
				a, b, _, _ := pair(t, eng)
				const batches, per = 20, 100
				for i := range batches {
					var pkts [][]byte
					for j := range per {
						pkts = append(pkts, udpPacket("10.1.0.5", "10.2.0.7", uint32(i*per+j), 10+(i*per+j)%1300))
					}
					a.send(t, pkts)
					got := b.recv(t, per)
					checkInOrder(t, got, uint32(i*per), per)
					for j := range got {
						if !bytes.Equal(got[j], pkts[j]) {
							t.Fatalf("packet %d changed", i*per+j)
						}
					}
				}
				// And back.
				b.send(t, [][]byte{udpPacket("10.2.0.7", "10.1.0.5", 7, 100)})
				checkInOrder(t, a.recv(t, 1), 7, 1)
				st := a.dp.Stats()
				var sealed uint64
				for _, w := range st.Workers {
					sealed += w.Sealed
				}
				if sealed != batches*per {
					t.Fatalf("A sealed %d, want %d", sealed, batches*per)
				}
			})
		}
	}
}

// TestDropsCounted: packets with no route, and ESP with an unknown SPI, are
// dropped and counted, not forwarded.
func TestDropsCounted(t *testing.T) {
	a, b, _, _ := pair(t, soft.New())
	a.send(t, [][]byte{udpPacket("10.1.0.5", "10.9.0.1", 1, 10), {0x45, 0}})
	waitFor(t, func() bool {
		d := a.dp.Stats().Receivers[0].Drops
		return d["no_route"] == 1 && d["malformed"] == 1
	})
	// Traffic still flows.
	a.send(t, [][]byte{udpPacket("10.1.0.5", "10.2.0.7", 9, 10)})
	checkInOrder(t, b.recv(t, 1), 9, 1)
}

// TestInboundSelectors: a decrypted packet whose inner source is outside
// the peer's selectors (another tunnel's subnet, our own, anywhere), or
// whose destination is outside ours, is dropped and counted as
// policy_mismatch, not written to the TUN device (RFC 4301 section 5.2).
// A's SAs check nothing: it plays a peer that spoofs.
func TestInboundSelectors(t *testing.T) {
	a, b, _, _ := pairWith(t, soft.New(), pairOptions{ts: func(i int) *spd.SATS {
		if i == 0 {
			return nil
		}
		return siteTS("10.2.0.0/24", "10.1.0.0/24")
	}})
	a.send(t, [][]byte{
		udpPacket("10.3.0.5", "10.2.0.7", 1, 10),  // another connection's subnet
		udpPacket("10.2.0.77", "10.2.0.7", 2, 10), // B's own subnet
		udpPacket("8.8.8.8", "10.2.0.7", 3, 10),   // anywhere
		udpPacket("10.1.0.5", "10.2.0.7", 4, 10),  // inside
	})
	checkInOrder(t, b.recv(t, 1), 4, 1)
	waitFor(t, func() bool { return b.dp.Stats().Drops()["policy_mismatch"] == 3 })
	a.send(t, [][]byte{udpPacket("10.1.0.5", "10.2.0.8", 5, 10)})
	checkInOrder(t, b.recv(t, 1), 5, 1)
	if n := b.dp.Stats().Drops()["policy_mismatch"]; n != 3 {
		t.Fatalf("policy_mismatch %d, want 3", n)
	}
}

// TestInboundSelectorsStatic: a static tunnel's selectors (its routed
// remote prefixes, any address on our side) drop a spoofed source too,
// and the packets its routes give it are sealed without a check.
func TestInboundSelectorsStatic(t *testing.T) {
	static := spd.NewSATS(spd.AnyAddress, []spd.Range{spd.RangeOf(netip.MustParsePrefix("10.1.0.0/24"))})
	if !static.Routed() {
		t.Fatal("a static tunnel's selectors are not Routed")
	}
	a, b, _, _ := pairWith(t, soft.New(), pairOptions{ts: func(i int) *spd.SATS {
		if i == 0 {
			return nil
		}
		return static
	}})
	a.send(t, [][]byte{udpPacket("10.3.0.5", "10.2.0.7", 1, 10), udpPacket("10.1.0.5", "10.2.0.9", 2, 10)})
	checkInOrder(t, b.recv(t, 1), 2, 1)
	waitFor(t, func() bool { return b.dp.Stats().Drops()["policy_mismatch"] == 1 })
	b.send(t, [][]byte{udpPacket("10.9.9.9", "10.1.0.5", 3, 10)}) // any source on B's side
	checkInOrder(t, a.recv(t, 1), 3, 1)
}

// TestOutboundSelectors: a packet routed into a tunnel whose outbound SA's
// selectors do not hold it (the peer narrowed them: a smaller prefix, a
// protocol) is dropped and counted as ts_mismatch, not sealed for the
// peer to discard (RFC 7296 section 2.9).
func TestOutboundSelectors(t *testing.T) {
	// A routes 10.2.0.0/24 but negotiated 10.2.0.0/25 for any protocol
	// and 10.2.0.128/25 for ICMP only.
	aTS := spd.NewSATS([]spd.Range{spd.RangeOf(netip.MustParsePrefix("10.1.0.0/24"))},
		[]spd.Range{spd.RangeOf(netip.MustParsePrefix("10.2.0.0/25")),
			{Start: netip.MustParseAddr("10.2.0.128"), End: netip.MustParseAddr("10.2.0.255"), Proto: 1}})
	a, b, _, _ := pairWith(t, soft.New(), pairOptions{ts: func(i int) *spd.SATS {
		if i == 0 {
			return aTS
		}
		return siteTS("10.2.0.0/24", "10.1.0.0/24")
	}})
	a.send(t, [][]byte{
		udpPacket("10.1.0.5", "10.2.0.200", 1, 10), // UDP where only ICMP was agreed
		udpPacket("10.9.0.5", "10.2.0.7", 2, 10),   // a source outside our selectors
		udpPacket("10.1.0.5", "10.2.0.7", 3, 10),   // inside
	})
	checkInOrder(t, b.recv(t, 1), 3, 1)
	waitFor(t, func() bool { return a.dp.Stats().Drops()["ts_mismatch"] == 2 })
	var sealed uint64
	for _, w := range a.dp.Stats().Workers {
		sealed += w.Sealed
	}
	if sealed != 1 {
		t.Fatalf("A sealed %d packets, want 1", sealed)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRekeyWithoutLoss: under continuous traffic B adds the new inbound SA,
// A switches its outbound SA, and B removes the old inbound SA only after it
// drained: no packet is lost and the old keys are destroyed.
func TestRekeyWithoutLoss(t *testing.T) {
	for _, eng := range engines(t) {
		t.Run(eng.Name(), func(t *testing.T) {
			a, b, _, _ := pair(t, eng)
			newKeys := newKeys()
			const rounds, per = 30, 64
			seq := uint32(0)
			oldOut := a.store.Load().Tunnel("t").Out()
			for r := range rounds {
				var pkts [][]byte
				for range per {
					pkts = append(pkts, udpPacket("10.1.0.5", "10.2.0.7", seq, 200))
					seq++
				}
				a.send(t, pkts)
				switch r {
				case 10: // B learns the new SA first
					if err := b.store.AddInbound("t", mkSA(t, eng, newKeys, 0x3001, addrA, addrB, false)); err != nil {
						t.Fatal(err)
					}
				case 11: // then A switches, with packets of the old SA in flight
					if err := a.store.SwitchOutbound("t", mkSA(t, eng, newKeys, 0x3001, addrA, addrB, true)); err != nil {
						t.Fatal(err)
					}
				}
				checkInOrder(t, b.recv(t, per), uint32(r*per), per)
				if r == 20 { // long drained: B drops the old inbound SA
					if err := b.store.RemoveInbound(0x1001); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The old outbound key is destroyed once nothing can use it.
			waitFor(t, func() bool { return oldOut.Key.State() == nil })
			if got := b.store.Load().Tunnel("t").Inbound(); len(got) != 1 || got[0].SA.SPI() != 0x3001 {
				t.Fatalf("B's inbound SAs: %v, want only 0x3001", got)
			}
		})
	}
}

// TestNoGoroutineLeak: Close ends every goroutine the data plane started.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("run", func(t *testing.T) {
		a, b, _, _ := pair(t, soft.New())
		a.send(t, [][]byte{udpPacket("10.1.0.5", "10.2.0.7", 1, 10)})
		b.recv(t, 1)
	})
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

// TestNoAllocations: a batch of packets through two data planes, plaintext
// in at A to plaintext out at B, allocates nothing in steady state
// (DESIGN.md decision 10). AllocsPerRun counts every goroutine's
// allocations, the receive goroutines' and workers' included.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	a, b, _, _ := pair(t, soft.New())
	const n = 64
	in := make([]*packet.Buf, n)
	out := make([]*packet.Buf, 128)
	a.pool.GetN(in)
	b.pool.GetN(out)
	pkt := udpPacket("10.1.0.5", "10.2.0.7", 1, 1000)
	roundTrip := func() {
		for _, p := range in {
			p.Write(128, pkt)
		}
		for off := 0; off < n; {
			k, err := a.user.Write(in[off:])
			if err != nil {
				t.Fatal(err)
			}
			off += k
		}
		for got := 0; got < n; {
			k, err := b.user.Read(out)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	// Warm up: pools, rings, handoff items, and every slot of the pipes'
	// rings (4096 packets each), which grow on first use.
	for range 4096/n + 8 {
		roundTrip()
	}
	if allocs := testing.AllocsPerRun(100, roundTrip); allocs > 0.5 {
		t.Fatalf("%.1f allocations per batch of %d packets, want 0", allocs, n)
	}
}

// TestOversize: a plaintext packet larger than the tunnel MTU is fragmented
// before encryption when it may be (IPv4 without DF, RFC 4459) and answered
// with ICMP "fragmentation needed" carrying the MTU when it may not.
func TestOversize(t *testing.T) {
	a, b, _, _ := pair(t, soft.New())
	big := udpPacket("10.1.0.5", "10.2.0.7", 42, 1472) // 1500 bytes; tunnel MTU 1400
	a.send(t, [][]byte{big})
	frags := b.recv(t, 2)
	var payload []byte
	for i, f := range frags {
		ip := packet.IPv4(f)
		if int(ip.TotalLength()) > 1400 || ip.MoreFragments() != (i == 0) || int(ip.FragmentOffset())*8 != len(payload) {
			t.Fatalf("fragment %d: len %d MF %v offset %d", i, ip.TotalLength(), ip.MoreFragments(), ip.FragmentOffset())
		}
		if !ip.ChecksumValid() {
			t.Fatalf("fragment %d: bad header checksum", i)
		}
		payload = append(payload, ip.Payload()...)
	}
	if !bytes.Equal(payload, big[20:]) {
		t.Fatal("fragments do not reassemble to the original payload")
	}

	df := bytes.Clone(big)
	df[6] |= 0x40
	packet.IPv4(df).SetChecksum()
	a.send(t, [][]byte{df})
	reply := a.recv(t, 1)[0]
	ip := packet.IPv4(reply)
	icmp := ip.Payload()
	if ip.Protocol() != packet.ProtoICMP || icmp[0] != 3 || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != 1400 {
		t.Fatalf("not an ICMP fragmentation-needed with MTU 1400: %x", reply)
	}
	if ip.Dst() != netip.MustParseAddr("10.1.0.5") || !bytes.Equal(icmp[8:8+28], df[:28]) || packet.Checksum(icmp, 0) != 0xffff {
		t.Fatalf("ICMP error malformed: %x", reply)
	}
	// From the packet's destination, which the sender's kernel routes
	// into the tunnel: from one of the gateway's own addresses it would
	// be a martian there (issue 16, defect 3).
	if ip.Src() != netip.MustParseAddr("10.2.0.7") {
		t.Fatalf("ICMP error from %v, want the packet's destination 10.2.0.7", ip.Src())
	}
}

// TestRetireDuringSnapshot (issue 8, defect 8): an SA removed between a
// lane's load of the SAD and the publication of the generation it holds
// has its key destroyed at once (the lane still shows idle), so the lane
// must not go on with the snapshot it loaded. With the fix the packet is
// dropped as for an unknown SPI; without it, it is opened with a destroyed
// key (crypto_error here, a use-after-free with an engine in C).
func TestRetireDuringSnapshot(t *testing.T) {
	a, b, _, _ := pair(t, soft.New())
	in := b.store.Load().Inbound(0x1001)
	var fired atomic.Bool
	restore := dataplane.SetTestHookSnapshot(func(d *dataplane.Dataplane, lane string) {
		if d != b.dp || !strings.HasPrefix(lane, "udp/") || !fired.CompareAndSwap(false, true) {
			return
		}
		if err := b.store.RemoveInbound(0x1001); err != nil {
			t.Error(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !in.Key.Destroyed() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !in.Key.Destroyed() {
			t.Error("the removed SA's key was not destroyed in 10s")
		}
	})
	t.Cleanup(restore)
	a.send(t, [][]byte{udpPacket("10.1.0.5", "10.2.0.7", 1, 10)})
	waitFor(t, func() bool {
		st := b.dp.Stats()
		return sum(st, "unknown_spi")+sum(st, "crypto_error") > 0
	})
	if st := b.dp.Stats(); sum(st, "crypto_error") != 0 || sum(st, "unknown_spi") != 1 {
		t.Fatalf("drops at B: %v %v, want one unknown_spi and no crypto_error", st.Receivers, st.Workers)
	}
}

// sum adds up one drop reason over every lane.
func sum(st dataplane.Stats, reason string) uint64 {
	var n uint64
	for _, r := range st.Receivers {
		n += r.Drops[reason]
	}
	for _, w := range st.Workers {
		n += w.Drops[reason]
	}
	return n
}
