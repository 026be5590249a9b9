package e2e_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestTunnelTraffic runs two gateways back to back and sends real traffic
// through the tunnel between them: ping (IPv4 and IPv6 inside, no loss),
// iperf3 TCP and UDP, for each combination of ESP in UDP and raw ESP,
// IPv4 and IPv6 outside, route-based and policy-based. Policy-based
// gateways also have a discard rule whose traffic must not arrive.
func TestTunnelTraffic(t *testing.T) {
	for _, encap := range []string{"udp", "none"} {
		for _, fam := range []string{"ipv4", "ipv6"} {
			for _, mode := range []string{"route", "policy"} {
				name := fmt.Sprintf("encap=%s/outer=%s/%s", encap, fam, mode)
				t.Run(name, func(t *testing.T) {
					requireTool(t, "ping", "iperf3", "ss")
					wan := wan4
					if fam == "ipv6" {
						wan = wan6
					}
					cfgs := pairConfigs(t, pairOptions{wan: wan, encap: encap, policy: mode == "policy"})
					tb := startPair(t, wan, cfgs)
					trafficChecks(t, tb, name, mode == "policy")
				})
			}
		}
	}
}

// trafficChecks is the traffic of TestTunnelTraffic on a running pair.
func trafficChecks(t *testing.T, tb *testbed, name string, policy bool) {
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	b4, b6 := inner4[1].Addr(), inner6[1].Addr()

	// Where packets were lost on the way, when they were: the gateways'
	// counters and the kernel's.
	losses := func(what string, run func() bool) {
		kb := [2]kernelCounters{readKernelCounters(ctx, a.ns), readKernelCounters(ctx, b.ns)}
		db := [2]map[string]uint64{drops(a.stats()), drops(b.stats())}
		if run() {
			return
		}
		for i, s := range tb.sites {
			t.Logf("%s: losses at gateway %s: kernel %v, sluice %v", what, s.name,
				readKernelCounters(ctx, s.ns).since(kb[i]), dropsSince(drops(s.stats()), db[i]))
		}
		if load, err := os.ReadFile("/proc/loadavg"); err == nil {
			t.Logf("%s: load average %s", what, strings.TrimSpace(string(load)))
		}
	}
	pings := func(what string, ns *lab.Netns, dst netip.Addr, count int) {
		losses(what, func() bool {
			r := mustPing(t, ctx, what, ns, dst, count, 10*time.Millisecond)
			return r.Received == r.Sent
		})
	}
	iperf := func(what string, o iperfOptions) {
		losses(what, func() bool {
			r := mustIperf(t, tb, what, b.ns, b4, a.ns, o)
			return r.Lost == 0 && r.Retransmits == 0
		})
	}

	waitPing(t, ctx, a.ns, b4)
	waitPing(t, ctx, a.ns, b6)
	pings(name+" A->B IPv4", a.ns, b4, 200)
	pings(name+" A->B IPv6", a.ns, b6, 100)
	pings(name+" B->A IPv4", b.ns, inner4[0].Addr(), 100)
	iperf(name+" A->B", iperfOptions{Seconds: 3})
	iperf(name+" A->B", iperfOptions{Seconds: 3, UDP: true, Rate: "50M", Len: 1200})

	if policy {
		discardChecks(t, tb)
	}

	// Nothing sealed by one side failed to open at the other.
	for _, s := range tb.sites {
		st := s.stats()
		d := drops(st)
		t.Logf("gateway %s drops: %v", s.name, d)
		for _, bad := range []string{"sa:auth_failed", "sa:replay", "auth_failed", "replay", "unknown_spi"} {
			if d[bad] > 0 {
				t.Errorf("gateway %s: %d drops for %s", s.name, d[bad], bad)
			}
		}
	}
}

// discardChecks sends UDP from A to B's discard port, which A's first
// policy discards, then a datagram to another port, which A protects; the
// second must arrive, the first never, and A must count the discards.
func discardChecks(t *testing.T, tb *testbed) {
	a, b := tb.sites[0], tb.sites[1]
	const n = 20
	sink, err := b.ns.ListenUDP(netip.AddrPortFrom(inner4[1].Addr(), discardPort))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	marker, err := b.ns.ListenUDP(netip.AddrPortFrom(inner4[1].Addr(), discardPort+1))
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	src, err := a.ns.ListenUDP(netip.AddrPortFrom(inner4[0].Addr(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	before := drops(a.stats())["policy_discard"]
	for i := range n {
		if _, err := src.WriteToUDPAddrPort(fmt.Appendf(nil, "discard me %d", i), netip.AddrPortFrom(inner4[1].Addr(), discardPort)); err != nil {
			t.Fatal(err)
		}
	}
	// The protected datagram, sent after them, arrives.
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		marker.SetReadDeadline(time.Now().Add(firstPacket))
		_, _, err := marker.ReadFromUDPAddrPort(buf)
		got <- err
	}()
	err = lab.WaitFor(tb.ctx, "the protected datagram after the discarded ones", firstPacket, 50*time.Millisecond, func() (bool, error) {
		select {
		case err := <-got:
			if err != nil {
				return false, fmt.Errorf("%w: %v", lab.ErrStop, err)
			}
			return true, nil
		default:
		}
		_, err := src.WriteToUDPAddrPort([]byte("protected"), netip.AddrPortFrom(inner4[1].Addr(), discardPort+1))
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A counts every discarded datagram...
	err = lab.WaitFor(tb.ctx, "A to count the discarded datagrams", 5*time.Second, 20*time.Millisecond, func() (bool, error) {
		d := drops(a.stats())["policy_discard"] - before
		return d >= n, fmt.Errorf("policy_discard drops %d, want %d", d, n)
	})
	if err != nil {
		t.Error(err)
	}
	// ...and none arrived: a discarded datagram would have been there
	// before the protected one sent after it.
	sink.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 2048)
	if k, from, err := sink.ReadFromUDPAddrPort(buf); err == nil {
		t.Errorf("a datagram to the discard port arrived at B from %v: %q", from, buf[:k])
	}
	t.Logf("discard policy: %d datagrams to port %d dropped at A, none arrived", n, discardPort)
}
