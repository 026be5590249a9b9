package e2e_test

// The failover test bed (issue 18), lab.HATopology: a wan router with
// nftables, two gateway namespaces behind virtual addresses on a wan and a
// lan bridge, a lan router with a host behind it, and a peer with a host
// behind it. Here it runs what users have today, one gateway restarted by
// its supervisor after a crash, and measures it with the instruments the
// failover tests use: sequence-numbered UDP both ways (lab.SeqFlow), an
// iperf3 TCP stream, a capture of every ESP packet on the wan checked for
// repeated (SPI, IV) pairs (lab.CaptureESP, lab.CheckESP), and the capture
// replayed at both ends (lab.ReplayESP). The failover test proper is this
// one with a standby in gateway b.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// The SPIs of the HA test bed's static tunnel: gateway to peer and back.
const (
	spiGP = 0x3001
	spiPG = 0x4001
)

// haBed is an HA test bed: the topology, a site for each gateway and one
// for the peer, and the configurations of the static tunnel between the
// gateways and the peer.
type haBed struct {
	tb             *testbed
	topo           *lab.HATopology
	gwa, gwb, peer *site
	// gwCfg is the gateways' configuration (both run the same), pCfg
	// the peer's.
	gwCfg, pCfg *gwConfig
}

// newHABed builds the HA topology and the configurations, and starts
// nothing: a sluice in the peer and in the gateways is started by
// startPeer and startGW. The tunnel is static (aes128gcm16 in UDP, keys
// from crypto/rand): the gateways' local address is the wan virtual
// address, their remote the peer's networks, and the peer's remote the
// lan side.
func newHABed(t *testing.T) *haBed {
	t.Helper()
	lab.Require(t)
	requireTool(t, "nft", "sysctl", "ping")
	tb := &testbed{t: t, ctx: testContext(t, defaultSetup), lab: lab.NewForTest(t, nil)}
	var err error
	if tb.dir, err = tb.lab.Dir(); err != nil {
		t.Fatal(err)
	}
	topo, err := tb.lab.NewHATopology(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, ns *lab.Netns, wan netip.Addr) *site {
		s := &site{tb: tb, name: name, ns: ns, wan: wan,
			cfgPath: filepath.Join(tb.dir, "gateway-"+name+".toml"),
			sock:    filepath.Join(tb.dir, name+".sock"),
			logPath: filepath.Join(tb.dir, "gateway-"+name+".log")}
		t.Cleanup(func() {
			if t.Failed() && s.proc != nil {
				t.Logf("log of %s (%s):\n%s", s.name, s.logPath, lab.Tail(s.proc.Output(), 60))
			}
		})
		return s
	}
	gw, peer := topo.WANVIP.Addr(), topo.PeerWAN.Addr()
	b := &haBed{tb: tb, topo: topo, gwa: mk("a", topo.A.NS, gw), gwb: mk("b", topo.B.NS, gw), peer: mk("peer", topo.Peer, peer)}
	tb.sites = [2]*site{b.gwa, b.peer}
	sas := []saConfig{
		newSA(t, "gw-to-peer", spiGP, gw, peer, "udp", "aes128gcm16"),
		newSA(t, "peer-to-gw", spiPG, peer, gw, "udp", "aes128gcm16"),
	}
	b.gwCfg = &gwConfig{TUN: []netip.Prefix{netip.MustParsePrefix("10.255.0.1/32")}, UDP: netip.AddrPortFrom(gw, 4500), SAs: sas,
		Tunnels: []tunnelConfig{{Name: "to-peer", Local: gw, Peer: peer, Encap: "udp", Remote: []netip.Prefix{topo.RemoteNet},
			Out: "gw-to-peer", In: []string{"peer-to-gw"}}}}
	b.pCfg = &gwConfig{TUN: []netip.Prefix{netip.MustParsePrefix("10.2.0.1/24")}, UDP: netip.AddrPortFrom(peer, 4500), SAs: sas,
		Tunnels: []tunnelConfig{{Name: "to-site", Local: peer, Peer: gw, Encap: "udp", Remote: []netip.Prefix{topo.LocalNet},
			Out: "peer-to-gw", In: []string{"gw-to-peer"}}}}
	return b
}

// startPeer starts the peer's sluice on pCfg.
func (b *haBed) startPeer() { b.peer.start(b.pCfg) }

// startGW starts a gateway's sluice on a copy of gwCfg (its own state
// directory) with extra appended to the file (an [ha] section, say), and
// waits until its TUN device exists and its control socket answers.
func (b *haBed) startGW(s *site, extra string) {
	b.tb.t.Helper()
	cfg := *b.gwCfg
	cfg.StateDir = filepath.Join(b.tb.dir, "state-"+s.name)
	s.writeConfigText(cfg.render() + extra)
	s.run()
}

// seqFlows are two lab.SeqFlows between the lan host and the remote host,
// one each way, through the tunnel.
type seqFlows struct {
	up, down *lab.SeqFlow // host -> remote, remote -> host
}

// startSeqFlows opens the sockets (closed by t's cleanup) and starts both
// flows with o.
func startSeqFlows(t *testing.T, topo *lab.HATopology, o lab.SeqFlowOptions) *seqFlows {
	t.Helper()
	open := func(ns *lab.Netns, a netip.Addr, port uint16) lab.Conn {
		t.Helper()
		c, err := ns.ListenUDP(netip.AddrPortFrom(a, port))
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadBuffer(8 << 20)
		t.Cleanup(func() { c.Close() })
		return c
	}
	hostTx, hostRx := open(topo.Host, topo.HostAddr, 7001), open(topo.Host, topo.HostAddr, 7002)
	remTx, remRx := open(topo.Remote, topo.RemoteAddr, 7002), open(topo.Remote, topo.RemoteAddr, 7001)
	return &seqFlows{
		up:   lab.StartSeqFlow(hostTx, netip.AddrPortFrom(topo.RemoteAddr, 7001), remRx, o),
		down: lab.StartSeqFlow(remTx, netip.AddrPortFrom(topo.HostAddr, 7002), hostRx, o),
	}
}

// waitSent waits until each flow has sent n more datagrams than from.
func (f *seqFlows) waitSent(ctx context.Context, what string, from [2]uint64, n uint64) error {
	return lab.WaitFor(ctx, what, 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		return f.up.Sent() >= from[0]+n && f.down.Sent() >= from[1]+n, nil
	})
}

func (f *seqFlows) sent() [2]uint64     { return [2]uint64{f.up.Sent(), f.down.Sent()} }
func (f *seqFlows) received() [2]uint64 { return [2]uint64{f.up.Received(), f.down.Received()} }

// tcpStall is what an iperf3 TCP run with short intervals showed.
type tcpStall struct {
	Mbps     float64       // received
	Stall    time.Duration // the longest run of intervals that carried nothing
	Interval time.Duration
	Retrans  int
}

// iperfStall runs an iperf3 TCP stream from client to an iperf3 server
// in server (at addr) for secs seconds at rate (iperf3 -b), reporting
// every interval, and returns the throughput and the longest stall.
func iperfStall(ctx context.Context, l *lab.Lab, server *lab.Netns, addr netip.Addr, client *lab.Netns, secs int, rate string, interval time.Duration) (tcpStall, error) {
	const port = "5211"
	srv, err := l.Start(server, "iperf3 server", []string{"iperf3", "-s", "-1", "-p", port, "-B", addr.String()}, nil)
	if err != nil {
		return tcpStall{}, err
	}
	err = lab.WaitFor(ctx, "iperf3 to listen", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		if done, err := srv.Exited(); done {
			return false, fmt.Errorf("%w: iperf3 server exited: %v: %s", lab.ErrStop, err, srv.Output())
		}
		out, err := server.Exec(ctx, "ss", "-Hltn", "sport = :"+port)
		return err == nil && strings.Contains(string(out), ":"+port), err
	})
	if err != nil {
		return tcpStall{}, err
	}
	args := []string{"-c", addr.String(), "-p", port, "-t", strconv.Itoa(secs), "-b", rate, "-J",
		"-i", fmt.Sprintf("%.3f", interval.Seconds()), "--connect-timeout", "5000"}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	out, cerr := client.Command(cctx, "iperf3", args...).Output()
	var j struct {
		Error     string `json:"error"`
		Intervals []struct {
			Sum struct {
				Start, End float64
				Bytes      uint64
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			SumSent struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &j); err != nil || j.Error != "" || cerr != nil {
		return tcpStall{}, fmt.Errorf("iperf3 %s: %v, %v, %s: %s", strings.Join(args, " "), cerr, err, j.Error, lab.Tail(string(out), 5))
	}
	r := tcpStall{Mbps: j.End.SumReceived.BitsPerSecond / 1e6, Interval: interval, Retrans: j.End.SumSent.Retransmits}
	var run time.Duration
	for _, iv := range j.Intervals {
		if iv.Sum.Bytes == 0 {
			run += time.Duration((iv.Sum.End - iv.Sum.Start) * float64(time.Second))
			r.Stall = max(r.Stall, run)
		} else {
			run = 0
		}
	}
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
	}
	return r, nil
}

// TestHATopologyTools is the baseline of the failover tests: gateway a
// crashes (SIGKILL) in the middle of two-way sequence-numbered UDP at
// 20,000 datagrams a second each way and an iperf3 TCP stream, and is
// started again at once from the same configuration and state
// directory, as a supervisor would. It measures, from the receivers, the
// outage and the loss; it checks that every ESP packet on the wan (the
// wan router's link to the peer) has an (SPI, IV) pair and an (SPI,
// sequence number) pair of its own; and it replays the whole capture at
// both ends, where every packet must be refused as a replay and none may
// reach a receiver a second time.
func TestHATopologyTools(t *testing.T) {
	requireTool(t, "iperf3", "ss")
	b := newHABed(t)
	tb, topo, ctx := b.tb, b.topo, b.tb.ctx
	if err := topo.AddVIPs(ctx, topo.A); err != nil {
		t.Fatal(err)
	}
	b.startPeer()
	b.startGW(b.gwa, "")
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)

	capFile := filepath.Join(tb.dir, "wan-esp.pcap")
	capture, err := topo.CaptureWAN(capFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Stop() })

	// Where packets are lost: the daemons' drops and the kernels'.
	kernelNS := []*lab.Netns{topo.Host, topo.A.NS, topo.Peer, topo.Remote}
	kBefore := make([]kernelCounters, len(kernelNS))
	for i, ns := range kernelNS {
		kBefore[i] = readKernelCounters(ctx, ns)
	}
	peerDrops := drops(b.peer.stats())

	const rate = 20000
	flows := startSeqFlows(t, topo, lab.SeqFlowOptions{Rate: rate, Size: 64})
	type iperfEnd struct {
		r   tcpStall
		err error
	}
	tcp := make(chan iperfEnd, 1)
	go func() {
		r, err := iperfStall(ctx, tb.lab, topo.Remote, topo.RemoteAddr, topo.Host, 4, "50M", 100*time.Millisecond)
		tcp <- iperfEnd{r, err}
	}()

	// 0.7 s of traffic, then the crash and the restart.
	if err := flows.waitSent(ctx, "0.7 s of flow", [2]uint64{}, rate*7/10); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b.gwa.proc.Kill()
	b.gwa.run()
	up := time.Since(killed)
	measuref(t, "supervisor restart: gateway a up (TUN and control socket) %v after SIGKILL", up.Round(time.Millisecond))
	// Both ways must come back, then 1.3 s more.
	restarted := flows.received()
	err = lab.WaitFor(ctx, "traffic both ways after the restart", 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		r := flows.received()
		return r[0] > restarted[0]+100 && r[1] > restarted[1]+100, fmt.Errorf("received %v, %v at the restart", r, restarted)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := flows.waitSent(ctx, "1.3 s more of flow", flows.sent(), rate*13/10); err != nil {
		t.Fatal(err)
	}
	flows.up.StopSending(0)
	flows.down.StopSending(0)
	it := <-tcp
	if it.err != nil {
		t.Errorf("TCP stream: %v", it.err)
	} else {
		measuref(t, "supervisor restart: iperf3 TCP -b 50M through it: %.1f Mbit/s, longest stall %v (%v intervals), %d retransmits",
			it.r.Mbps, it.r.Stall, it.r.Interval, it.r.Retrans)
	}
	st, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// The restarted gateway's inbound SA starts at the bound it had
	// reserved: the peer's packets below it, sent after the crash, are
	// refused although legitimate (at most one reservation step).
	gwIn, peerIn := mustSA(t, b.gwa.sas(), spiPG, "in"), mustSA(t, b.peer.sas(), spiGP, "in")
	measuref(t, "supervisor restart: the restarted gateway refused %d of the peer's packets as replays", gwIn.Drops["replay"])
	t.Logf("drops: gateway a since its restart %v; the peer %v", drops(b.gwa.stats()), dropsSince(drops(b.peer.stats()), peerDrops))
	for i, ns := range kernelNS {
		t.Logf("kernel counters in %s: %v", ns, readKernelCounters(ctx, ns).since(kBefore[i]))
	}

	// The ESP on the wan.
	pkts, err := lab.ReadESP(capFile)
	if err != nil {
		t.Fatal(err)
	}
	rep := lab.CheckESP(pkts)
	t.Logf("capture on the wan (%+v): %v", st, rep)
	if st.Dropped > 0 {
		t.Errorf("the capture lost %d packets: the check below is not complete", st.Dropped)
	}
	if rep.SPI(spiGP).Packets == 0 || rep.SPI(spiPG).Packets == 0 {
		t.Errorf("captured %d ESP packets of 0x%x and %d of 0x%x, want both", rep.SPI(spiGP).Packets, spiGP, rep.SPI(spiPG).Packets, spiPG)
	}
	if rep.DupIV() != 0 || rep.DupSeq() != 0 {
		t.Errorf("%d ESP packets repeat an (SPI, IV) pair and %d an (SPI, sequence number) pair: %v", rep.DupIV(), rep.DupSeq(), rep)
	}
	measuref(t, "supervisor restart: %d ESP packets on the wan (%d before the crash), %d (SPI, IV) pairs repeated", rep.Packets,
		countBefore(pkts, killed), rep.DupIV())

	// The replay: every packet, at the end it was sent to, from the wan
	// router; the receivers still listen.
	var toGW, toPeer []lab.ESPPacket
	for _, p := range pkts {
		if p.Dst.Addr() == topo.WANVIP.Addr() {
			toGW = append(toGW, p)
		} else {
			toPeer = append(toPeer, p)
		}
	}
	for _, r := range []struct {
		name string
		pkts []lab.ESPPacket
	}{{"gateway a", toGW}, {"peer", toPeer}} {
		if n, err := topo.Replay(r.pkts); err != nil {
			t.Fatalf("replay to %s: %v (%d sent)", r.name, err, n)
		}
	}
	refused := func(s *site, spi uint32, base uint64, n int) {
		t.Helper()
		var in *struct{ packets, replays uint64 }
		err := lab.WaitFor(ctx, fmt.Sprintf("%s to refuse %d replayed packets", s.name, n), 20*time.Second, 50*time.Millisecond, func() (bool, error) {
			sa := mustSA(t, s.sas(), spi, "in")
			in = &struct{ packets, replays uint64 }{sa.Packets, sa.Drops["replay"]}
			return sa.Drops["replay"]-base >= uint64(n), fmt.Errorf("%d refused as replays", sa.Drops["replay"]-base)
		})
		if err != nil {
			t.Error(err)
		}
		if in != nil {
			measuref(t, "supervisor restart: %d captured packets replayed to %s, %d refused as replays", n, s.name, in.replays-base)
		}
	}
	refused(b.gwa, spiPG, gwIn.Drops["replay"], len(toGW))
	refused(b.peer, spiGP, peerIn.Drops["replay"], len(toPeer))
	if got := mustSA(t, b.gwa.sas(), spiPG, "in").Packets; got != gwIn.Packets {
		t.Errorf("gateway a accepted %d of the replayed packets", got-gwIn.Packets)
	}
	if got := mustSA(t, b.peer.sas(), spiGP, "in").Packets; got != peerIn.Packets {
		t.Errorf("the peer accepted %d of the replayed packets", got-peerIn.Packets)
	}

	// The receivers' view.
	for _, f := range []struct {
		name string
		flow *lab.SeqFlow
	}{{"host -> remote", flows.up}, {"remote -> host", flows.down}} {
		r, err := f.flow.Stop(0)
		if err != nil {
			t.Error(err)
		}
		measuref(t, "supervisor restart, %s: %v", f.name, r)
		if r.Duplicates != 0 {
			t.Errorf("%s: %d datagrams arrived twice (a replay accepted?)", f.name, r.Duplicates)
		}
		if r.Received == 0 || r.GapLast+1 >= r.Sent && r.GapLost > 0 {
			t.Errorf("%s: the flow did not come back after the restart: %v", f.name, r)
		}
	}
}

// countBefore counts the packets captured before t.
func countBefore(pkts []lab.ESPPacket, t time.Time) int {
	n := 0
	for _, p := range pkts {
		if p.Time.Before(t) {
			n++
		}
	}
	return n
}
