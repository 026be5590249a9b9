package tun_test

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/pktio/tun"
)

// BenchmarkForward writes a batch of 1400-byte packets to a routed address
// and reads back what the kernel forwards out of the device again: the
// TUN path both ways, kernel included, per packet. Shapes: udp-flows (16
// flows, every packet alone), udp-flow and tcp-flow (one flow, coalesced
// on write where the kernel takes it and split on read).
//
//	go test -run '^$' -bench Forward -benchtime 2000x ./pktio/tun/
func BenchmarkForward(b *testing.B) {
	for _, shape := range []string{"udp-flows", "udp-flow", "tcp-flow"} {
		b.Run(shape, func(b *testing.B) { benchForward(b, shape) })
	}
}

func benchForward(b *testing.B, shape string) {
	linktest.RequireRoot(b)
	qs := openBench(b)
	q := qs[0]
	const n = 32
	src := netip.AddrPortFrom(peer4, 2000)
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.77.1.5"), 7)
	pkts := make([][]byte, n)
	for i := range pkts {
		switch shape {
		case "udp-flows":
			pkts[i] = linktest.IPUDP(netip.AddrPortFrom(peer4, uint16(2000+i)), dst, make([]byte, 1372))
		case "udp-flow":
			pkts[i] = linktest.IPUDP(src, dst, make([]byte, 1372))
		case "tcp-flow":
			pkts[i] = tcpPacket(src, dst, uint32(1+i*1360), 1, ack, nil, make([]byte, 1360))
		}
	}
	pool := packet.NewPool(n+q.BatchSize(), slot, headroom)
	out := make([]*packet.Buf, n)
	in := make([]*packet.Buf, q.BatchSize())
	pool.GetN(out)
	pool.GetN(in)
	round := func() {
		for i, b := range out {
			b.Reset(headroom)
			copy(b.Append(len(pkts[i])), pkts[i])
		}
		if _, err := q.Write(out); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			for _, b := range in {
				b.Reset(headroom)
			}
			k, err := q.Read(in)
			if err != nil {
				b.Fatalf("Read: %v", err)
			}
			for _, p := range in[:k] {
				if p.Len() > 1000 {
					got++
				}
			}
		}
	}
	round()
	before := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
	b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N*n), "cpu-ns/pkt")
}

// cpuTime is the process's user and system CPU time in nanoseconds (the
// kernel's forwarding runs in the writing thread's system time).
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// openBench is open for a benchmark: a device in a namespace of its own,
// forwarding from the device back into it.
func openBench(b *testing.B) []*tun.Queue {
	b.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ns.Close()
		orig.Close()
	})
	links, err := tun.Open("sluice%d", mtu, 1)
	if err != nil {
		b.Fatal(err)
	}
	q := links[0].(*tun.Queue)
	b.Cleanup(func() { q.Close() })
	linktest.WriteSysctl(b, "net/ipv4/ip_forward", "1")
	linktest.WriteSysctl(b, "net/ipv4/conf/all/send_redirects", "0")
	linktest.WriteSysctl(b, "net/ipv4/conf/"+q.Name()+"/send_redirects", "0")
	if err := netutil.Configure(q.Name(), []netip.Prefix{local4}, []netip.Prefix{remote4}); err != nil {
		b.Fatal(err)
	}
	return []*tun.Queue{q}
}
