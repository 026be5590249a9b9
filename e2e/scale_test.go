package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// manyTunnels is how many tunnels TestManyTunnels runs at once.
const manyTunnels = 200

// TestManyTunnels runs 200 tunnels at once between two gateways, each with
// its own SAs and its own inner prefixes (10.100.N.0/24 at A, 10.200.N.0/24
// at B), and sends a UDP probe through every one of them, from an address
// in the tunnel's prefix at A to one at B and back. Every probe must come
// back, through the tunnel's own SAs, and both gateways must list 200
// tunnels and 400 SAs.
func TestManyTunnels(t *testing.T) {
	tb := newTestbed(t, wan4)
	a, b := tb.sites[0], tb.sites[1]
	aNet := func(n int) netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(n), 1}), 24) }
	bNet := func(n int) netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(n), 1}), 24) }
	spiAB := func(n int) uint32 { return 0x10000 + uint32(n) }
	spiBA := func(n int) uint32 { return 0x20000 + uint32(n) }

	var cfg [2]*gwConfig
	for i := range cfg {
		cfg[i] = &gwConfig{LogLevel: "warn", UDP: netip.AddrPortFrom(wan4[i].Addr(), 4500)}
	}
	wa, wb := wan4[0].Addr(), wan4[1].Addr()
	for n := range manyTunnels {
		cfg[0].TUN = append(cfg[0].TUN, aNet(n))
		cfg[1].TUN = append(cfg[1].TUN, bNet(n))
		ab, ba := fmt.Sprintf("a-to-b-%d", n), fmt.Sprintf("b-to-a-%d", n)
		sas := []saConfig{newSA(t, ab, spiAB(n), wa, wb, "udp", "aes128gcm16"), newSA(t, ba, spiBA(n), wb, wa, "udp", "aes128gcm16")}
		cfg[0].Tunnels = append(cfg[0].Tunnels, tunnelConfig{Name: fmt.Sprintf("to-b-%d", n), Local: wa, Peer: wb, Encap: "udp",
			Remote: []netip.Prefix{bNet(n).Masked()}, Out: ab, In: []string{ba}})
		cfg[1].Tunnels = append(cfg[1].Tunnels, tunnelConfig{Name: fmt.Sprintf("to-a-%d", n), Local: wb, Peer: wa, Encap: "udp",
			Remote: []netip.Prefix{aNet(n).Masked()}, Out: ba, In: []string{ab}})
		cfg[0].SAs = append(cfg[0].SAs, sas...)
		cfg[1].SAs = append(cfg[1].SAs, sas...)
	}
	start := time.Now()
	a.start(cfg[0])
	b.start(cfg[1])
	measuref(t, "%d tunnels: both gateways up in %v", manyTunnels, time.Since(start).Round(time.Millisecond))

	for _, s := range tb.sites {
		if ts := s.tunnels(); len(ts) != manyTunnels {
			t.Fatalf("gateway %s: sluice tunnel list --json lists %d tunnels, want %d", s.name, len(ts), manyTunnels)
		}
		if sas := s.sas(); len(sas) != 2*manyTunnels {
			t.Fatalf("gateway %s: sluice sa list --json lists %d SAs, want %d", s.name, len(sas), 2*manyTunnels)
		}
	}

	// One socket per tunnel on each side, on the tunnel's own addresses;
	// B's echo every datagram back.
	const port = 7000
	echoCtx, stopEcho := context.WithCancel(tb.ctx)
	var echoes sync.WaitGroup
	t.Cleanup(func() { stopEcho(); echoes.Wait() })
	probes := make([]*net.UDPConn, manyTunnels)
	for n := range manyTunnels {
		c, err := a.ns.ListenUDP(netip.AddrPortFrom(aNet(n).Addr(), port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		probes[n] = c
		e, err := b.ns.ListenUDP(netip.AddrPortFrom(bNet(n).Addr(), port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		echoes.Add(1)
		go func() { defer echoes.Done(); lab.Echo(echoCtx, e) }()
	}

	// The first tunnel is up once a probe gets through; then one probe
	// through each, one after another.
	err := lab.WaitFor(tb.ctx, "a probe through tunnel 0", firstPacket, 0, func() (bool, error) {
		l, err := lab.Ping(tb.ctx, probes[0], netip.AddrPortFrom(bNet(0).Addr(), port), lab.PingOptions{Count: 1, Timeout: 200 * time.Millisecond})
		return err == nil && l.Received == 1, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var lost []int
	var rtts []time.Duration
	start = time.Now()
	for n := range manyTunnels {
		l, err := lab.Ping(tb.ctx, probes[n], netip.AddrPortFrom(bNet(n).Addr(), port), lab.PingOptions{Count: 1, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Received != 1 {
			lost = append(lost, n)
			continue
		}
		rtts = append(rtts, l.RTTs[0])
	}
	elapsed := time.Since(start)
	if len(lost) > 0 {
		t.Errorf("no answer through %d of %d tunnels: %v", len(lost), manyTunnels, lost)
	}
	slices.Sort(rtts)
	if len(rtts) > 0 {
		measuref(t, "%d tunnels: one UDP probe through each and back in %v; rtt p50 %v p99 %v max %v",
			manyTunnels, elapsed.Round(time.Millisecond), lab.Percentile(rtts, 0.5), lab.Percentile(rtts, 0.99), rtts[len(rtts)-1])
	}

	// Each probe went through its own tunnel's SAs: every inbound SA at
	// B (A -> B) and at A (B -> A) opened at least one packet.
	for _, check := range []struct {
		s   *site
		spi func(int) uint32
	}{{b, spiAB}, {a, spiBA}} {
		sas := check.s.sas()
		var idle []int
		for n := range manyTunnels {
			if sa := findSA(sas, check.spi(n), "in"); sa == nil || sa.Packets == 0 {
				idle = append(idle, n)
			}
		}
		if len(idle) > 0 {
			t.Errorf("gateway %s: the inbound SAs of %d tunnels opened no packet: %v", check.s.name, len(idle), idle)
		}
	}
	for _, s := range tb.sites {
		t.Logf("gateway %s drops: %v", s.name, drops(s.stats()))
	}
}
