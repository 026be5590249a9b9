package xdp_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/internal/lab"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/pktio/xdp"
)

// BenchmarkReceive compares the CPU a received ESP-in-UDP packet costs
// through the XDP Link (native and generic attachment) and through a
// udp.Conn (recvmmsg, 4 MiB buffer as the gateway opens it), on one veth,
// in one run. A udp.Conn in the peer namespace, in a process of its own
// (TestHelperSender), sends 1400-byte ESP
// packets with sendmmsg: "paced" at 50 kpps (batches of 50 each
// millisecond, a load every receiver keeps up with), "flood" as fast as
// it can (batches of 64). It reports the receiving process's CPU (user and
// system) per packet received (on veth the kernel's receive path, XDP
// program included, runs mostly in the sender's context, as on a real NIC
// it runs in softirq), the rate
// received and the loss.
func BenchmarkReceive(b *testing.B) {
	for _, load := range []string{"paced", "flood"} {
		for _, kind := range []string{"socket", "xdp", "xdp-generic"} {
			b.Run(load+"/"+kind, func(b *testing.B) { benchReceive(b, kind, load == "flood", 1400) })
		}
	}
}

func benchReceive(b *testing.B, kind string, flood bool, size int) {
	lab.Require(b)
	l := lab.NewForTest(b, nil)
	ctx := b.Context()
	gw, err := l.NewNetns(ctx, "gw")
	if err != nil {
		b.Fatal(err)
	}
	peer, err := l.NewNetns(ctx, "peer")
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Veth(gw, ifname, peer, ifname); err != nil {
		b.Fatal(err)
	}
	if err := gw.AddAddr(ifname, netip.MustParsePrefix("192.0.2.1/24")); err != nil {
		b.Fatal(err)
	}
	if err := peer.AddAddr(ifname, netip.MustParsePrefix("192.0.2.2/24")); err != nil {
		b.Fatal(err)
	}
	var rx, sock pktio.Link
	err = gw.Do(func() error {
		var err error
		if sock, err = udp.Open(netip.AddrPortFrom(gw4, port), udp.Options{SocketBuffer: 4 << 20}); err != nil { // as the gateway opens it
			return err
		}
		rx = sock
		if kind == "xdp-generic" {
			defer xdp.SetGenericOnly()()
		}
		if kind != "socket" {
			ls, err := xdp.Open(ifname, xdp.Options{Local: netip.AddrPortFrom(gw4, port), Queues: 1})
			if err != nil {
				return err
			}
			rx = ls[0]
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rx.Close(); sock.Close() })
	if kind != "socket" {
		b.Logf("mode %s", xdp.Mode(rx))
	}

	const batch = 64
	in := make([]*packet.Buf, batch)
	packet.NewPool(batch, 2048, headroom).GetN(in)

	// Resolve the peer's ARP first: packets queued on an unresolved
	// neighbour may be dropped.
	wctx, cancel := context.WithTimeout(ctx, linktest.Timeout)
	defer cancel()
	if _, err := peer.Exec(wctx, "ping", "-c", "1", "-W", "5", gw4.String()); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	var firstRx, lastRx, reads atomic.Int64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for got.Load() < int64(b.N) {
			for _, buf := range in {
				buf.Reset(headroom)
			}
			n, err := rx.Read(in)
			if err != nil {
				break
			}
			reads.Add(1)
			if got.Add(int64(n)) == int64(n) {
				firstRx.Store(time.Now().UnixNano())
			}
			lastRx.Store(time.Now().UnixNano())
		}
	}()
	cpu0 := processCPU()
	b.ResetTimer()
	cmd := peer.Command(ctx, os.Args[0], "-test.run=^TestHelperSender$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("XDP_BENCH_SENDER=%d,%v", b.N, flood))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("sender: %v: %s", err, out)
	}
	// Wait for the rest; on this shared box a ring may overflow, so stop
	// when nothing more arrives for 200 ms, and count the loss.
	for last, still := int64(-1), 0; got.Load() < int64(b.N) && still < 4; {
		time.Sleep(50 * time.Millisecond)
		if g := got.Load(); g == last {
			still++
		} else {
			last, still = g, 0
		}
	}
	rx.Close()
	<-readerDone
	b.StopTimer()
	cpu := processCPU() - cpu0
	n := float64(got.Load())
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/pkt")
	b.ReportMetric(n/time.Duration(lastRx.Load()-firstRx.Load()).Seconds()/1e3, "kpps")
	b.ReportMetric(1-n/float64(b.N), "loss")
	b.ReportMetric(n/float64(reads.Load()), "pkts/read")
}

func processCPU() time.Duration { return rusage(unix.RUSAGE_SELF) }

func rusage(who int) time.Duration {
	var ru unix.Rusage
	unix.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHelperSender is the sender of BenchmarkReceive, run in the peer
// namespace as a process of its own, so that the benchmark's process CPU
// is the receiver's: XDP_BENCH_SENDER=N,FLOOD sends N packets.
func TestHelperSender(t *testing.T) {
	arg := os.Getenv("XDP_BENCH_SENDER")
	if arg == "" {
		t.Skip("only run by BenchmarkReceive")
	}
	var n int
	var flood bool
	if _, err := fmt.Sscanf(strings.ReplaceAll(arg, ",", " "), "%d %t", &n, &flood); err != nil {
		t.Fatal(err)
	}
	tx, err := udp.Open(netip.AddrPortFrom(peer4, 0), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const batch, perMilli = 64, 50
	from := netip.AddrPortFrom(peer4, tx.(*udp.Conn).LocalAddr().Port())
	to := netip.AddrPortFrom(gw4, port)
	out := make([]*packet.Buf, batch)
	packet.NewPool(batch, 2048, headroom).GetN(out)
	for i, buf := range out {
		espOut(buf, from, to, 0x7000, uint32(i+1), 1400-8)
	}
	next := time.Now()
	for sent := 0; sent < n; {
		k := min(batch, n-sent)
		if !flood {
			next = next.Add(time.Millisecond)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			k = min(perMilli, n-sent)
		}
		if _, err := tx.Write(out[:k]); err != nil {
			t.Fatal(err)
		}
		sent += k
	}
}

// BenchmarkSend compares the CPU a sent ESP-in-UDP packet of 1400 bytes
// costs through the XDP Link and through a udp.Conn (sendmmsg, with and
// without GSO), on one veth, in one run: batches of 64 as fast as they
// go, to an address the peer namespace does not have (a permanent
// neighbour entry points it at the peer), so that the peer drops them
// early and the same way for every link. It reports the process's CPU
// (user and system, the veth's delivery to the peer included) per packet.
func BenchmarkSend(b *testing.B) {
	for _, kind := range []string{"socket", "socket-gso", "xdp"} {
		b.Run(kind, func(b *testing.B) { benchSend(b, kind) })
	}
}

func benchSend(b *testing.B, kind string) {
	lab.Require(b)
	l := lab.NewForTest(b, nil)
	ctx := b.Context()
	gw, err := l.NewNetns(ctx, "gw")
	if err != nil {
		b.Fatal(err)
	}
	peer, err := l.NewNetns(ctx, "peer")
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Veth(gw, ifname, peer, ifname); err != nil {
		b.Fatal(err)
	}
	if err := gw.AddAddr(ifname, netip.MustParsePrefix("192.0.2.1/24")); err != nil {
		b.Fatal(err)
	}
	sink := netip.MustParseAddr("192.0.2.77")
	var tx pktio.Link
	err = gw.Do(func() error {
		pl, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		var peerMAC net.HardwareAddr
		if err := peer.Do(func() error {
			p, err := netlink.LinkByName(ifname)
			peerMAC = p.Attrs().HardwareAddr
			return err
		}); err != nil {
			return err
		}
		if err := netlink.NeighAdd(&netlink.Neigh{
			LinkIndex: pl.Attrs().Index, IP: sink.AsSlice(), HardwareAddr: peerMAC, State: netlink.NUD_PERMANENT,
		}); err != nil {
			return err
		}
		switch kind {
		case "xdp":
			ls, err := xdp.Open(ifname, xdp.Options{Local: netip.AddrPortFrom(gw4, port), Queues: 1})
			if err != nil {
				return err
			}
			tx = ls[0]
		default:
			tx, err = udp.Open(netip.AddrPortFrom(gw4, port), udp.Options{GSO: kind == "socket-gso", SocketBuffer: 4 << 20})
			return err
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tx.Close() })
	const batch = 64
	from, to := netip.AddrPortFrom(gw4, port), netip.AddrPortFrom(sink, port)
	out := make([]*packet.Buf, batch)
	packet.NewPool(batch, 2048, headroom).GetN(out)
	espOut(out[0], from, to, 0x7100, 1, 1400-8)
	tmpl := bytes.Clone(out[0].Bytes())
	fill := func() {
		for _, buf := range out {
			buf.Reset(headroom)
			copy(buf.Append(len(tmpl)), tmpl)
		}
	}
	// The first packets resolve the next hop (they take the fallback,
	// here none: counted and dropped).
	if x, ok := tx.(*xdp.Link); ok {
		linktest.WaitFor(b, "the next hop", func() bool {
			fill()
			x.Write(out[:1])
			return x.Stats().TxPackets.Load() > 0
		})
		b.Logf("mode %s", xdp.Mode(tx))
	}
	before := tx.Stats().Snapshot()
	cpu0 := processCPU()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		fill() // the socket Link strips the headers in place
		if _, err := tx.Write(out[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	after := tx.Stats().Snapshot()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/pkt")
	b.ReportMetric(float64(after.TxPackets-before.TxPackets)/float64(b.N), "sent/pkt")
}
