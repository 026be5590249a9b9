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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/internal/lab"
)

// gatewaySA is one SA of `sluice sa list`.
type gatewaySA = gateway.SAInfo

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
func newHABed(t *testing.T) *haBed { return newHABedWithin(t, defaultSetup) }

// newHABedWithin is newHABed for a test that needs more than
// defaultSetup for everything it does: its context ends after budget.
func newHABedWithin(t *testing.T, budget time.Duration) *haBed {
	t.Helper()
	lab.Require(t)
	requireTool(t, "nft", "sysctl", "ping")
	tb := &testbed{t: t, ctx: testContext(t, budget), lab: lab.NewForTest(t, nil)}
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

// haRun is what runDisruption measured.
type haRun struct {
	Up, Down lab.SeqResult // host -> remote, remote -> host
	ESP      lab.ESPReport
	Capture  lab.ESPCaptureStats
	TCP      tcpStall
	// Outage is how long disrupt took (from its start to its return).
	Outage time.Duration
	// RefusedLegit is how many of the peer's packets the gateway that
	// carries the tunnel afterwards refused as replays before the
	// capture was replayed: legitimate packets lost to the replay
	// bound it started from.
	RefusedLegit uint64
	// Replayed counts the packets replayed to the gateway and to the
	// peer; Refused how many of them each refused as replays.
	Replayed, Refused [2]int
}

// runDisruption runs the instruments of the failover tests across a
// disruption: it captures the ESP on the wan, starts sequence-numbered
// UDP at rate (20,000 if 0) both ways and an iperf3 TCP stream (50
// Mbit/s, 4 s), lets them run 0.7 s, calls disrupt (which crashes, kills,
// hands over... and returns the site that carries the tunnel afterwards),
// waits for traffic both ways and lets it run 1.3 s more. Then it stops
// the senders, checks the capture (no repeated (SPI, IV) or (SPI, seq)
// pair), replays it all, each packet to where it went (the gateway's
// packets to the peer, the peer's to whichever gateway holds the virtual
// address now), and checks that every replayed packet is refused as a
// replay and that none reaches a receiver. label starts the measure:
// lines. from is the site that carries the tunnel before.
func runDisruption(t *testing.T, b *haBed, label string, rate int, from *site, disrupt func() *site) haRun {
	t.Helper()
	tb, topo, ctx := b.tb, b.topo, b.tb.ctx
	if rate <= 0 {
		rate = 20000
	}
	var res haRun
	capFile := filepath.Join(tb.dir, "wan-esp-"+strings.ReplaceAll(label, " ", "-")+".pcap")
	capture, err := topo.CaptureWAN(capFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Stop() })
	// Where packets are lost: the daemons' drops and the kernels'.
	kernelNS := []*lab.Netns{topo.Host, topo.A.NS, topo.B.NS, topo.Peer, topo.Remote}
	kBefore := make([]kernelCounters, len(kernelNS))
	for i, ns := range kernelNS {
		kBefore[i] = readKernelCounters(ctx, ns)
	}
	peerDrops := drops(b.peer.stats())

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

	// 0.7 s of traffic, the disruption, traffic both ways again, 1.3 s
	// more.
	if err := flows.waitSent(ctx, "0.7 s of flow", [2]uint64{}, uint64(rate)*7/10); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	to := disrupt()
	res.Outage = time.Since(start)
	back := flows.received()
	err = lab.WaitFor(ctx, "traffic both ways after the disruption", 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		r := flows.received()
		return r[0] > back[0]+100 && r[1] > back[1]+100, fmt.Errorf("received %v, %v when disrupt returned", r, back)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := flows.waitSent(ctx, "1.3 s more of flow", flows.sent(), uint64(rate)*13/10); err != nil {
		t.Fatal(err)
	}
	flows.up.StopSending(0)
	flows.down.StopSending(0)
	it := <-tcp
	if it.err != nil {
		t.Errorf("%s: TCP stream: %v", label, it.err)
	} else {
		res.TCP = it.r
		measuref(t, "%s: iperf3 TCP -b 50M across it: %.1f Mbit/s, longest stall %v (%v intervals), %d retransmits",
			label, it.r.Mbps, it.r.Stall, it.r.Interval, it.r.Retrans)
	}
	if res.Capture, err = capture.Stop(); err != nil {
		t.Fatal(err)
	}
	toIn, peerIn := mustSA(t, to.sas(), spiPG, "in"), mustSA(t, b.peer.sas(), spiGP, "in")
	res.RefusedLegit = replays(toIn)
	measuref(t, "%s: gateway %s refused %d of the peer's packets as replays after it", label, to.name, res.RefusedLegit)
	t.Logf("%s: drops: gateway %s %v; the peer %v", label, to.name, drops(to.stats()), dropsSince(drops(b.peer.stats()), peerDrops))
	for i, ns := range kernelNS {
		t.Logf("%s: kernel counters in %s: %v", label, ns, readKernelCounters(ctx, ns).since(kBefore[i]))
	}

	// The ESP on the wan.
	pkts, err := lab.ReadESP(capFile)
	if err != nil {
		t.Fatal(err)
	}
	res.ESP = lab.CheckESP(pkts)
	t.Logf("%s: capture on the wan (%+v): %v", label, res.Capture, res.ESP)
	if res.Capture.Dropped > 0 {
		t.Errorf("%s: the capture lost %d packets: the check below is not complete", label, res.Capture.Dropped)
	}
	if res.ESP.SPI(spiGP).Packets == 0 || res.ESP.SPI(spiPG).Packets == 0 {
		t.Errorf("%s: captured %d ESP packets of 0x%x and %d of 0x%x, want both", label, res.ESP.SPI(spiGP).Packets, spiGP, res.ESP.SPI(spiPG).Packets, spiPG)
	}
	if res.ESP.DupIV() != 0 || res.ESP.DupSeq() != 0 {
		t.Errorf("%s: %d ESP packets repeat an (SPI, IV) pair and %d an (SPI, sequence number) pair: %v", label, res.ESP.DupIV(), res.ESP.DupSeq(), res.ESP)
	}
	measuref(t, "%s: %d ESP packets on the wan (%d before it), %d (SPI, IV) pairs repeated", label, res.ESP.Packets,
		countBefore(pkts, start), res.ESP.DupIV())

	// The replay: every packet, to where it went, from the wan router;
	// the receivers still listen.
	var toGW, toPeer []lab.ESPPacket
	for _, p := range pkts {
		if p.Dst.Addr() == topo.WANVIP.Addr() {
			toGW = append(toGW, p)
		} else {
			toPeer = append(toPeer, p)
		}
	}
	res.Replayed = [2]int{len(toGW), len(toPeer)}
	for _, r := range []struct {
		name string
		pkts []lab.ESPPacket
	}{{"the gateway", toGW}, {"the peer", toPeer}} {
		if n, err := topo.Replay(r.pkts); err != nil {
			t.Fatalf("%s: replay to %s: %v (%d sent)", label, r.name, err, n)
		}
	}
	refused := func(s *site, spi uint32, base *gatewaySA, n int) int {
		t.Helper()
		var now *gatewaySA
		err := lab.WaitFor(ctx, fmt.Sprintf("%s to refuse %d replayed packets", s.name, n), 20*time.Second, 50*time.Millisecond, func() (bool, error) {
			now = mustSA(t, s.sas(), spi, "in")
			d := replays(now) - replays(base)
			return d >= uint64(n), fmt.Errorf("%d refused as replays", d)
		})
		if err != nil {
			t.Errorf("%s: %v", label, err)
		}
		if now.Packets != base.Packets {
			t.Errorf("%s: %s accepted %d of the replayed packets", label, s.name, now.Packets-base.Packets)
		}
		d := int(replays(now) - replays(base))
		measuref(t, "%s: %d captured packets replayed to %s, %d refused as replays", label, n, s.name, d)
		return d
	}
	res.Refused = [2]int{refused(to, spiPG, toIn, len(toGW)), refused(b.peer, spiGP, peerIn, len(toPeer))}

	// The receivers' view.
	for _, f := range []struct {
		name string
		flow *lab.SeqFlow
		r    *lab.SeqResult
	}{{"host -> remote", flows.up, &res.Up}, {"remote -> host", flows.down, &res.Down}} {
		r, err := f.flow.Stop(0)
		if err != nil {
			t.Error(err)
		}
		*f.r = r
		measuref(t, "%s, %s: %v", label, f.name, r)
		if r.Duplicates != 0 {
			t.Errorf("%s, %s: %d datagrams arrived twice (a replay accepted?)", label, f.name, r.Duplicates)
		}
	}
	return res
}

// TestHATopologyTools is the baseline of the failover tests, what users
// have today (runDisruption): gateway a crashes (SIGKILL) and is started
// again at once from the same configuration and state directory, as a
// supervisor would.
func TestHATopologyTools(t *testing.T) {
	requireTool(t, "iperf3", "ss")
	b := newHABed(t)
	ctx, topo := b.tb.ctx, b.topo
	if err := topo.AddVIPs(ctx, topo.A); err != nil {
		t.Fatal(err)
	}
	b.startPeer()
	b.startGW(b.gwa, "")
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)
	r := runDisruption(t, b, "supervisor restart", 0, b.gwa, func() *site {
		b.gwa.proc.Kill()
		b.gwa.run()
		return b.gwa
	})
	measuref(t, "supervisor restart: gateway a up (TUN and control socket) %v after SIGKILL", r.Outage.Round(time.Millisecond))
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

// haCreds makes the pair's sync-channel CA, certificates and keys in the
// bed's directory (lab.WriteHACreds).
func haCreds(t *testing.T, b *haBed) (ca string, cert, key map[string]string) {
	t.Helper()
	c, err := lab.WriteHACreds(filepath.Join(b.tb.dir, "ha"))
	if err != nil {
		t.Fatal(err)
	}
	return c.CA, c.Cert, c.Key
}

// haSection renders member me's [ha] section (lab.HATopology.HASection).
func haSection(b *haBed, me, other *lab.HAGateway, pref int, ca string, cert, key map[string]string) string {
	return b.topo.HASection(me, other, pref, lab.HACreds{CA: ca, Cert: cert, Key: key})
}

// requireHA skips the test while this build's configuration has no [ha]
// section (the HA feature of issue 18 has not landed): `sluice check`
// refuses the file for it.
func requireHA(t *testing.T, b *haBed, section string) {
	t.Helper()
	path := filepath.Join(b.tb.dir, "ha-check.toml")
	cfg := *b.gwCfg
	cfg.StateDir = filepath.Join(b.tb.dir, "state-check")
	if err := os.WriteFile(path, []byte(cfg.render()+section), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(b.tb.ctx, sluiceBin, "check", "-c", path).CombinedOutput()
	if err != nil && strings.Contains(string(out), "ha: unknown key") {
		t.Skipf("this sluice has no [ha] section yet: %s", lab.Tail(strings.TrimSpace(string(out)), 1))
	}
	if err != nil {
		t.Fatalf("sluice check of an [ha] configuration: %v: %s", err, out)
	}
}

// TestHAFailover is the unplanned failover of issue 18, measured with
// the instruments of TestHATopologyTools (runDisruption) so that the two
// compare: gateways a (preferred) and b run the same tunnel with [ha];
// a owns it; a is killed (SIGKILL) in the middle of the traffic and b
// takes the virtual addresses and the tunnel. It skips until this
// build's configuration knows [ha].
//
// Not yet run against the feature: written before it landed, from
// ha-spec.md. The wait for a standby in sync (below) asks the gateways'
// `sluice ha status`; adjust it to that command's output when it lands.
func TestHAFailover(t *testing.T) {
	requireTool(t, "iperf3", "ss")
	b := newHABed(t)
	ctx, topo := b.tb.ctx, b.topo
	ca, cert, key := haCreds(t, b)
	haA := haSection(b, topo.A, topo.B, 200, ca, cert, key)
	haB := haSection(b, topo.B, topo.A, 100, ca, cert, key)
	// b's hook writes down what it was told, as a BGP or cloud-route
	// script would act on it.
	hookOut := filepath.Join(b.tb.dir, "hook-b.out")
	hook := filepath.Join(b.tb.dir, "hook-b")
	script := fmt.Sprintf("#!/bin/sh\necho \"$1 $2 $SLUICE_HA_EVENT $SLUICE_HA_MEMBER\" >> %s\n", hookOut)
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	haB = strings.Replace(haB, "misses = 3\n", fmt.Sprintf("misses = 3\nhook = %q\n", hook), 1)
	requireHA(t, b, haA)
	b.startPeer()
	b.startGW(b.gwa, haA)
	b.startGW(b.gwb, haB)
	if err := topo.WaitVIP(ctx, topo.A, upWait); err != nil {
		t.Fatal(err)
	}
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)
	// The standby has the state before the owner dies.
	waitHARoles(t, b, map[*site]string{b.gwa: "owner", b.gwb: "standby"})
	r := runDisruption(t, b, "failover", 0, b.gwa, func() *site {
		b.gwa.proc.Kill()
		// The killed process leaves the address on a's interface (as a
		// crashed daemon does on its box); what moves the traffic is b's
		// announcement, which the wan router follows.
		if err := waitNeighbour(ctx, topo, topo.B); err != nil {
			t.Fatal(err)
		}
		return b.gwb
	})
	measuref(t, "failover: gateway b holds the virtual address %v after the SIGKILL of a", r.Outage.Round(time.Millisecond))
	logLines(t, b.gwb, "took over", "group acquired")
	err := lab.WaitFor(ctx, "b's hook told of the takeover", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		out, err := os.ReadFile(hookOut)
		return strings.Contains(string(out), "acquire site acquire b"), fmt.Errorf("%q, %v", out, err)
	})
	if err != nil {
		t.Error(err)
	}
	// The router follows the address to b's MAC (gratuitous ARP).
	mac, err := topo.B.NS.LinkMAC(lab.HAWANIf)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := topo.WAN.Neighbour(topo.WANVIP.Addr()); err != nil || got.String() != mac.String() {
		t.Errorf("the wan router's neighbour entry for %s: %v, %v; want b's MAC %v", topo.WANVIP.Addr(), got, err, mac)
	}
}

// waitHARoles waits until each site's `sluice ha status --json` shows it in
// the given role for the group, in sync with the other member.
func waitHARoles(t *testing.T, b *haBed, want map[*site]string) {
	t.Helper()
	for s, role := range want {
		err := lab.WaitFor(b.tb.ctx, "sluice ha status of "+s.name, upWait, 20*time.Millisecond, func() (bool, error) {
			out, err := s.cli("ha", "status", "--json")
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, lab.Tail(out, 3))
			}
			var st ha.Status
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				return false, err
			}
			for _, g := range st.Groups {
				if g.Role == role && g.InSync {
					return true, nil
				}
			}
			return false, fmt.Errorf("groups %+v", st.Groups)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitNeighbour waits until the wan router's neighbour entry for the wan
// virtual address is g's MAC.
func waitNeighbour(ctx context.Context, topo *lab.HATopology, g *lab.HAGateway) error {
	mac, err := g.NS.LinkMAC(lab.HAWANIf)
	if err != nil {
		return err
	}
	return lab.WaitFor(ctx, "the wan router's neighbour entry at "+g.Name, 10*time.Second, 2*time.Millisecond, func() (bool, error) {
		got, _, err := topo.WAN.Neighbour(topo.WANVIP.Addr())
		return err == nil && got.String() == mac.String(), fmt.Errorf("%v, %v", got, err)
	})
}

// logLines logs the lines of s's log that hold any of subs.
func logLines(t *testing.T, s *site, subs ...string) {
	t.Helper()
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Log(err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				t.Logf("%s: %s", s.name, line)
				break
			}
		}
	}
}

// replays is what an inbound SA refused as replays: the ordinary ones and
// those at or below a takeover's bound (esp.ReasonTakeover).
func replays(sa *gatewaySA) uint64 { return sa.Drops["replay"] + sa.Drops["replay_takeover"] }
