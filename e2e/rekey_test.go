package e2e_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// The SPIs of the SAs a rekey brings in.
const (
	spiAB2 = 0x1002
	spiBA2 = 0x2002
)

// TestRekeyUnderTraffic rekeys both directions of a tunnel by reloading
// new configurations while sequence-numbered UDP streams run through it
// both ways, in the order that loses nothing (RFC 4301 section 4.5, as IKE
// does it):
//
//  1. B accepts the new A->B SA next to the old one (in = [old, new]);
//  2. A accepts the new B->A SA and sends with the new A->B SA;
//  3. B sends with the new B->A SA and drops the old A->B SA from `in`;
//  4. A drops the old B->A SA from `in`.
//
// No datagram may be lost either way, the new SPIs' counters must grow,
// and the old inbound SAs must be gone after the drain time.
func TestRekeyUnderTraffic(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx

	wa, wb := wan4[0].Addr(), wan4[1].Addr()
	ab2 := newSA(t, "a-to-b-2", spiAB2, wa, wb, "udp", "aes128gcm16")
	ba2 := newSA(t, "b-to-a-2", spiBA2, wb, wa, "udp", "aes128gcm16")
	for _, c := range cfgs {
		c.SAs = append(c.SAs, ab2, ba2)
	}

	// The streams: A -> B and B -> A, from and to the TUN addresses.
	open := func(s *site, addr netip.Addr, port uint16) lab.Conn {
		c, err := s.ns.ListenUDP(netip.AddrPortFrom(addr, port))
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadBuffer(4 << 20)
		t.Cleanup(func() { c.Close() })
		return c
	}
	aTx, bRx := open(a, inner4[0].Addr(), 6001), open(b, inner4[1].Addr(), 6001)
	bTx, aRx := open(b, inner4[1].Addr(), 6002), open(a, inner4[0].Addr(), 6002)
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	const floodFor = 4 * time.Second * slowdown
	// Stall only paces the sender; a datagram lost for good is counted
	// whatever it is.
	fo := lab.FloodOptions{Size: 1000, Duration: floodFor, Window: 32, Stall: 2 * time.Second, Drain: 2 * time.Second}
	type result struct {
		r   lab.FloodResult
		err error
	}
	abDone, baDone := make(chan result, 1), make(chan result, 1)
	floodStart := time.Now()
	go func() {
		r, err := lab.Flood(ctx, aTx, netip.AddrPortFrom(inner4[1].Addr(), 6001), bRx, fo)
		abDone <- result{r, err}
	}()
	go func() {
		r, err := lab.Flood(ctx, bTx, netip.AddrPortFrom(inner4[0].Addr(), 6002), aRx, fo)
		baDone <- result{r, err}
	}()

	// waitGrowth waits until the SA (spi, dir) at s has counted more
	// packets than it had at the call, and returns its count.
	waitGrowth := func(s *site, spi uint32, dir, what string) uint64 {
		t.Helper()
		var first, last uint64
		firstRead := true
		err := lab.WaitFor(ctx, what, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
			sa := findSA(s.sas(), spi, dir)
			if sa == nil {
				return false, fmt.Errorf("gateway %s has no %s SA with SPI 0x%x", s.name, dir, spi)
			}
			if firstRead {
				first, firstRead = sa.Packets, false
				return false, nil
			}
			last = sa.Packets
			return last > first, fmt.Errorf("packets %d", last)
		})
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	waitGrowth(b, spiAB, "in", "traffic A -> B on the first SA")
	waitGrowth(a, spiBA, "in", "traffic B -> A on the first SA")

	step := func(n int, s *site, cfg *gwConfig, tunnel string, out string, in ...string) {
		t.Helper()
		cfg.Tunnels[0].Out, cfg.Tunnels[0].In = out, in
		s.writeConfig(cfg)
		start := time.Now()
		s.mustReload()
		t.Logf("rekey step %d at %v: gateway %s reloaded in %v: out %s, in %v", n, time.Since(floodStart).Round(time.Millisecond),
			s.name, time.Since(start).Round(time.Microsecond), out, in)
		ts := s.tunnels()
		if len(ts) != 1 || ts[0].Out != out {
			t.Fatalf("gateway %s after reload: tunnels %+v, want %s sending with %s", s.name, ts, tunnel, out)
		}
	}
	step(1, b, cfgs[1], "to-a", "b-to-a", "a-to-b", "a-to-b-2")
	step(2, a, cfgs[0], "to-b", "a-to-b-2", "b-to-a", "b-to-a-2")
	waitGrowth(b, spiAB2, "in", "traffic A -> B on the new SA")
	step(3, b, cfgs[1], "to-a", "b-to-a-2", "a-to-b-2")
	waitGrowth(a, spiBA2, "in", "traffic B -> A on the new SA")
	step(4, a, cfgs[0], "to-b", "a-to-b-2", "b-to-a-2")
	if el := time.Since(floodStart); el > floodFor-time.Second {
		t.Fatalf("the rekey took %v, too close to the end of the %v streams to show anything", el, floodFor)
	}

	// The old inbound SAs go after the drain time.
	for _, c := range []struct {
		s   *site
		spi uint32
	}{{b, spiAB}, {a, spiBA}} {
		err := lab.WaitFor(ctx, fmt.Sprintf("gateway %s to remove the old inbound SA 0x%x", c.s.name, c.spi), gateway.DrainTime+5*time.Second, 50*time.Millisecond, func() (bool, error) {
			return findSA(c.s.sas(), c.spi, "in") == nil, nil
		})
		if err != nil {
			t.Error(err)
		}
	}

	rab, rba := <-abDone, <-baDone
	for _, d := range []struct {
		name string
		res  result
	}{{"A -> B", rab}, {"B -> A", rba}} {
		r := d.res.r
		measuref(t, "rekey under traffic %s: %d sent, %d received, %d lost, %d reordered, %.0f pps, %.1f Mbit/s",
			d.name, r.Sent, r.Received, r.Lost, r.Reordered, r.PPS(), r.Mbps())
		if d.res.err != nil {
			t.Errorf("%s stream: %v", d.name, d.res.err)
		}
		if r.Lost != 0 || r.Received != r.Sent {
			t.Errorf("%s: %d of %d datagrams lost across the rekey, want none", d.name, r.Lost, r.Sent)
		}
	}

	// The new SAs carried the rest: their counters at the sender and the
	// receiver agree, and nothing was dropped at the SAs.
	for _, c := range []struct {
		from, to *site
		spi      uint32
	}{{a, b, spiAB2}, {b, a, spiBA2}} {
		out, in := findSA(c.from.sas(), c.spi, "out"), findSA(c.to.sas(), c.spi, "in")
		if out == nil || in == nil {
			t.Errorf("SA 0x%x: missing (out at %s: %v, in at %s: %v)", c.spi, c.from.name, out != nil, c.to.name, in != nil)
			continue
		}
		t.Logf("new SA 0x%x: %d sealed at %s, %d opened at %s, drops %v", c.spi, out.Packets, c.from.name, in.Packets, c.to.name, in.Drops)
		if out.Packets == 0 || in.Packets == 0 {
			t.Errorf("new SA 0x%x carried nothing", c.spi)
		}
	}
	for _, s := range tb.sites {
		t.Logf("gateway %s drops: %v", s.name, drops(s.stats()))
	}
}
