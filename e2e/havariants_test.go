package e2e_test

// Variants of the failover tests of issue 18, on the pair of
// hafailover_test.go (newHAPairBed: a owns the group "site", b is its
// standby, a sluice peer on a static tunnel): a planned handover and a
// rolling restart (TestHAHandover), the sync link cut and a member cut
// off everything (TestHASplitBrain), and both members lost
// (TestHABothLost). Each checks correctness (who owns, no nonce or
// sequence number repeated on the wan, nothing accepted twice) and logs
// its numbers with measuref; none asserts a time.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/internal/lab"
)

// haGroupOf returns s's view of the test bed's group "site".
func haGroupOf(s *site) (ha.GroupStatus, ha.Status, error) {
	out, err := s.cli("ha", "status", "--json")
	if err != nil {
		return ha.GroupStatus{}, ha.Status{}, fmt.Errorf("%v: %s", err, lab.Tail(out, 3))
	}
	var st ha.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return ha.GroupStatus{}, st, err
	}
	for _, g := range st.Groups {
		if g.Name == "site" {
			return g, st, nil
		}
	}
	return ha.GroupStatus{}, st, fmt.Errorf("no group site in %+v", st.Groups)
}

// waitHAGroup waits until s's `sluice ha status --json` shows the group
// "site" as ok wants it, and returns that view. Unlike waitHARoles it
// does not ask for a member in sync: an owner whose standby is gone, or
// cut off, is not.
func waitHAGroup(t *testing.T, b *haBed, s *site, what string, ok func(ha.GroupStatus) bool) (ha.GroupStatus, ha.Status) {
	t.Helper()
	var g ha.GroupStatus
	var st ha.Status
	err := lab.WaitFor(b.tb.ctx, "gateway "+s.name+" "+what, upWait, 10*time.Millisecond, func() (bool, error) {
		var err error
		if g, st, err = haGroupOf(s); err != nil {
			return false, err
		}
		return ok(g), fmt.Errorf("group %+v", g)
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

func isOwner(g ha.GroupStatus) bool { return g.Role == "owner" }

// startSeqFlowsOn is startSeqFlows on other ports (the host's port and
// port+1), for a test that runs flows more than once: startSeqFlows's
// sockets stay bound until the test ends.
func startSeqFlowsOn(t *testing.T, topo *lab.HATopology, o lab.SeqFlowOptions, port uint16) *seqFlows {
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
	hostTx, hostRx := open(topo.Host, topo.HostAddr, port), open(topo.Host, topo.HostAddr, port+1)
	remTx, remRx := open(topo.Remote, topo.RemoteAddr, port+1), open(topo.Remote, topo.RemoteAddr, port)
	return &seqFlows{
		up:   lab.StartSeqFlow(hostTx, netip.AddrPortFrom(topo.RemoteAddr, port), remRx, o),
		down: lab.StartSeqFlow(remTx, netip.AddrPortFrom(topo.HostAddr, port+1), hostRx, o),
	}
}

// startGatewayFlow starts a sequence-numbered flow that gateway g sends
// itself, from its own lan address to the remote host: routed into its
// TUN device, it is sealed by g whenever g carries the tunnel, whatever
// the lan router's neighbour cache says. It shows which member seals.
func startGatewayFlow(t *testing.T, topo *lab.HATopology, g *lab.HAGateway, port uint16, rate int) *lab.SeqFlow {
	t.Helper()
	src, err := g.NS.ListenUDP(netip.AddrPortFrom(g.LAN.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	sink, err := topo.Remote.ListenUDP(netip.AddrPortFrom(topo.RemoteAddr, port))
	if err != nil {
		t.Fatal(err)
	}
	sink.SetReadBuffer(4 << 20)
	t.Cleanup(func() { sink.Close() })
	return lab.StartSeqFlow(src, netip.AddrPortFrom(topo.RemoteAddr, port), sink, lab.SeqFlowOptions{Rate: rate, Size: 64})
}

// lostIn sums the datagrams lost in the runs of gaps (SeqResult.Gaps)
// that start in [from, from+d), and returns the longest of them.
func lostIn(gaps []lab.SeqGap, from, d time.Duration) (lost uint64, longest time.Duration) {
	for _, g := range gaps {
		if g.Start >= from && g.Start < from+d {
			lost += g.Lost
			longest = max(longest, g.Length)
		}
	}
	return lost, longest
}

// saDrops adds up the drops of s's SAs by direction and reason:
// "in ha_fenced".
func saDrops(s *site) map[string]uint64 {
	m := map[string]uint64{}
	for _, sa := range s.sas() {
		for r, n := range sa.Drops {
			m[sa.Direction+" "+r] += n
		}
	}
	return m
}

// saIDs names the SAs of a `sluice sa list`, sorted: "in 0x00004001".
func saIDs(sas []gatewaySA) []string {
	var ids []string
	for _, sa := range sas {
		ids = append(ids, fmt.Sprintf("%s 0x%08x", sa.Direction, sa.SPI))
	}
	slices.Sort(ids)
	return ids
}

// checkReplay replays pkts, captured ESP, from the wan router, each to
// where it went (the peer's to whichever gateway holds the virtual
// address, owner; the gateways' to the peer), and waits until each
// receiver has refused or accepted them all. A packet is accepted only if
// it never reached the receiver before (lost on the way, or in the
// kernel's queues) and is still inside its window, as RFC 4303 has it;
// the flows' duplicate counts tell whether anything was accepted twice.
// It logs what happened and returns how many each accepted.
func checkReplay(t *testing.T, b *haBed, label string, owner *site, pkts []lab.ESPPacket) (accGW, accPeer uint64) {
	t.Helper()
	ctx, topo := b.tb.ctx, b.topo
	var toGW, toPeer []lab.ESPPacket
	for _, p := range pkts {
		if p.Dst.Addr() == topo.WANVIP.Addr() {
			toGW = append(toGW, p)
		} else {
			toPeer = append(toPeer, p)
		}
	}
	type target struct {
		s    *site
		spi  uint32
		pkts []lab.ESPPacket
		base *gatewaySA
	}
	ts := []*target{{s: owner, spi: spiPG, pkts: toGW}, {s: b.peer, spi: spiGP, pkts: toPeer}}
	for _, x := range ts {
		x.base = mustSA(t, x.s.sas(), x.spi, "in")
	}
	for _, x := range ts {
		if n, err := topo.Replay(x.pkts); err != nil {
			t.Fatalf("%s: replay to %s: %v (%d sent)", label, x.s.name, err, n)
		}
	}
	var acc [2]uint64
	for i, x := range ts {
		var now *gatewaySA
		err := lab.WaitFor(ctx, fmt.Sprintf("%s to refuse %d replayed packets", x.s.name, len(x.pkts)), 20*time.Second, 50*time.Millisecond, func() (bool, error) {
			now = mustSA(t, x.s.sas(), x.spi, "in")
			d, a := replays(now)-replays(x.base), now.Packets-x.base.Packets
			return d+a >= uint64(len(x.pkts)), fmt.Errorf("%d refused as replays, %d accepted", d, a)
		})
		if err != nil {
			t.Errorf("%s: %v", label, err)
		}
		acc[i] = now.Packets - x.base.Packets
		measuref(t, "%s: %d captured packets replayed to %s: %d refused as replays, %d never delivered before and accepted now",
			label, len(x.pkts), x.s.name, replays(now)-replays(x.base), acc[i])
	}
	return acc[0], acc[1]
}

// checkCapture reads a capture of the wan, checks that no (SPI, IV) pair
// repeats (and, with seqToo, no (SPI, sequence number) pair), and
// returns its packets.
func checkCapture(t *testing.T, label string, capture *lab.ESPCapture, file string, seqToo bool) ([]lab.ESPPacket, lab.ESPReport) {
	t.Helper()
	st, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := lab.ReadESP(file)
	if err != nil {
		t.Fatal(err)
	}
	rep := lab.CheckESP(pkts)
	t.Logf("%s: capture (%+v): %v", label, st, rep)
	if st.Dropped > 0 {
		t.Errorf("%s: the capture lost %d packets: the check is not complete", label, st.Dropped)
	}
	if rep.SPI(spiGP).Packets == 0 || rep.SPI(spiPG).Packets == 0 {
		t.Errorf("%s: captured %d ESP packets of 0x%x and %d of 0x%x, want both", label, rep.SPI(spiGP).Packets, spiGP, rep.SPI(spiPG).Packets, spiPG)
	}
	if rep.DupIV() != 0 {
		t.Errorf("%s: %d ESP packets repeat an (SPI, IV) pair: %v", label, rep.DupIV(), rep)
	}
	if seqToo && rep.DupSeq() != 0 {
		t.Errorf("%s: %d ESP packets repeat an (SPI, sequence number) pair: %v", label, rep.DupSeq(), rep)
	}
	measuref(t, "%s: %d ESP packets on the wan, %d (SPI, IV) pairs repeated, %d (SPI, seq) pairs repeated",
		label, rep.Packets, rep.DupIV(), rep.DupSeq())
	return pkts, rep
}

// between returns the packets captured in [from, to).
func between(pkts []lab.ESPPacket, from, to time.Time) []lab.ESPPacket {
	var out []lab.ESPPacket
	for _, p := range pkts {
		if !p.Time.Before(from) && p.Time.Before(to) {
			out = append(out, p)
		}
	}
	return out
}

// stopFlows stops both flows (after a replay, so that what it delivers
// counts) and fails the test for a datagram that arrived twice.
func stopFlows(t *testing.T, label string, flows *seqFlows) [2]lab.SeqResult {
	t.Helper()
	var res [2]lab.SeqResult
	for i, f := range []struct {
		name string
		flow *lab.SeqFlow
	}{{"host -> remote", flows.up}, {"remote -> host", flows.down}} {
		r, err := f.flow.Stop(0)
		if err != nil {
			t.Error(err)
		}
		res[i] = r
		measuref(t, "%s, %s: %v", label, f.name, r)
		if r.Duplicates != 0 {
			t.Errorf("%s, %s: %d datagrams arrived twice (a replay accepted?)", label, f.name, r.Duplicates)
		}
	}
	return res
}

// waitBothWays waits until both flows have received n more datagrams than
// they had at from.
func waitBothWays(t *testing.T, b *haBed, what string, flows *seqFlows, from [2]uint64, n uint64) {
	t.Helper()
	err := lab.WaitFor(b.tb.ctx, what, 30*time.Second, 2*time.Millisecond, func() (bool, error) {
		r := flows.received()
		return r[0] >= from[0]+n && r[1] >= from[1]+n, fmt.Errorf("received %v, %v before", r, from)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logHas fails the test unless s's log (of its current run) holds sub.
func logHas(t *testing.T, s *site, sub string) {
	t.Helper()
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), sub) {
		t.Errorf("gateway %s's log (%s) has no %q:\n%s", s.name, s.logPath, sub, lab.Tail(string(data), 30))
	}
}

// TestHAHandover is the planned handover of issue 18 and a rolling
// restart, under sequence-numbered UDP both ways: `sluice ha handover` on
// the owner a hands the group to b; then b gets SIGTERM, hands the group
// back to a before it exits (cli/run.go), and starts again as a's
// standby. It runs twice: at 20,000 datagrams a second each way (the
// issue's rate), then at 2,000, where the loss means something: at 20,000
// this 2-core machine drops datagrams on its own (the TUN queues, see
// ha_test.go, and the owner's inbound SA, whose replay reservations the
// standby does not acknowledge in time: seq_reserve_failed), so the loss
// in the second around each handover is logged next to the loss of a
// quiet second of the same flows, with the SAs' drops in each.
//
// It checks: each handover moves ownership (ha status, the wan router's
// neighbour entry) and is a handover, not a takeover after a death
// (counters, logs); no (SPI, IV) or (SPI, sequence number) pair repeats
// on the wan; every packet captured around the handovers is refused when
// replayed (or, never delivered before, accepted once); no datagram
// arrives twice; the SAs of the peer (and the gateways) are the ones
// configured, before and after: nothing was negotiated again.
func TestHAHandover(t *testing.T) {
	p := newHAPairBed(t)
	b := p.b
	peerSAs, gwSAs := saIDs(b.peer.sas()), saIDs(b.gwa.sas())
	for i, rate := range []int{20000, 2000} {
		handoverRound(t, p, rate, uint16(7101+10*i))
	}
	if got := saIDs(b.peer.sas()); !slices.Equal(got, peerSAs) {
		t.Errorf("the peer's SAs were %v, now %v: want them unchanged", peerSAs, got)
	}
	for _, s := range []*site{b.gwa, b.gwb} {
		if got := saIDs(s.sas()); !slices.Equal(got, gwSAs) {
			t.Errorf("gateway %s's SAs: %v, want %v", s.name, got, gwSAs)
		}
	}
}

// handoverRound is one round of TestHAHandover at rate, with flows on
// port and port+1; a owns the group at its start and at its end.
func handoverRound(t *testing.T, p *haPair, rate int, port uint16) {
	b := p.b
	ctx, topo := b.tb.ctx, b.topo
	label := fmt.Sprintf("handover at %d pps", rate)
	capFile := filepath.Join(b.tb.dir, fmt.Sprintf("wan-esp-handover-%d.pcap", rate))
	capture, err := topo.CaptureWAN(capFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Stop() })
	aBefore, _ := waitHAGroup(t, b, b.gwa, "to own the group", isOwner)
	aDrops, peerDrops := drops(b.gwa.stats()), drops(b.peer.stats())
	flows := startSeqFlowsOn(t, topo, lab.SeqFlowOptions{Rate: rate, Size: 64, GapsOver: time.Nanosecond, Expect: rate * 15}, port)
	// The loss windows: a second each, from 100 ms before a handover; and
	// a quiet one before the first.
	const window = time.Second
	type mark struct {
		name string
		at   time.Duration // in the flows' time
		wall time.Time
		took time.Duration
	}
	var marks []mark
	// The SAs' drops of the gateways that run, at each mark and after
	// its window: where the datagrams lost went.
	var atMark map[*site]map[string]uint64
	markNow := func(name string) mark {
		atMark = map[*site]map[string]uint64{}
		for _, s := range []*site{b.gwa, b.gwb} {
			if done, _ := s.proc.Exited(); !done {
				atMark[s] = saDrops(s)
			}
		}
		return mark{name: name, at: flows.up.Since(), wall: time.Now()}
	}
	afterWindow := func(what string) {
		t.Helper()
		if err := flows.waitSent(ctx, what, flows.sent(), uint64(rate)*uint64(window+100*time.Millisecond)/uint64(time.Second)); err != nil {
			t.Fatal(err)
		}
		line := ""
		for _, s := range []*site{b.gwa, b.gwb} {
			if before, ok := atMark[s]; ok {
				if done, _ := s.proc.Exited(); !done {
					line += fmt.Sprintf(" gateway %s %v;", s.name, dropsSince(saDrops(s), before))
				}
			}
		}
		t.Logf("%s: %s: the SAs' drops:%s", label, what, line)
	}
	if err := flows.waitSent(ctx, "0.2 s of flow", [2]uint64{}, uint64(rate)/5); err != nil {
		t.Fatal(err)
	}
	quiet := markNow("a quiet second")
	quiet.at += 100 * time.Millisecond // the windows start 100 ms before their mark
	afterWindow("a quiet second")

	// 1. `sluice ha handover` on a: b takes the group with a's exact
	// state.
	m := markNow("sluice ha handover a -> b")
	if out, err := b.gwa.cli("ha", "handover"); err != nil {
		t.Fatalf("%s: %v: %s", label, err, out)
	}
	m.took = time.Since(m.wall)
	marks = append(marks, m)
	waitHARoles(t, b, map[*site]string{b.gwb: "owner", b.gwa: "standby"})
	if err := waitNeighbour(ctx, topo, topo.B); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, label+": traffic both ways through b", flows, flows.received(), 100)
	logLines(t, b.gwb, "group acquired")
	afterWindow("a second through b")

	// 2. SIGTERM to b: its standby a is in sync, so b hands the group
	// back before it exits (status 0).
	m = markNow("SIGTERM b: b -> a")
	b.gwb.stop()
	m.took = time.Since(m.wall)
	marks = append(marks, m)
	logHas(t, b.gwb, "groups handed over to the standby")
	waitHAGroup(t, b, b.gwa, "to own the group after b's SIGTERM", isOwner)
	if err := waitNeighbour(ctx, topo, topo.A); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, label+": traffic both ways through a", flows, flows.received(), 100)
	afterWindow("a second through a")

	// 3. b starts again, as a's standby: the rolling restart is done.
	m = markNow("b restarted as standby")
	b.startGW(b.gwb, p.sections[b.gwb])
	waitHARoles(t, b, map[*site]string{b.gwa: "owner", b.gwb: "standby"})
	m.took = time.Since(m.wall)
	marks = append(marks, m)
	afterWindow("a second after b's restart")

	flows.up.StopSending(0)
	flows.down.StopSending(0)
	aAfter, st := waitHAGroup(t, b, b.gwa, "to own the group", isOwner)
	if st.Counters.Takeovers != 0 {
		t.Errorf("%s: gateway a counts %d takeovers: want every change of owner to be a handover (%+v)", label, st.Counters.Takeovers, st.Counters)
	}
	if aAfter.Epoch != aBefore.Epoch+2 {
		t.Errorf("%s: the group's epoch went from %d to %d: want two changes of owner", label, aBefore.Epoch, aAfter.Epoch)
	}
	// Where the datagrams lost went: a drops what reaches it after it
	// released the group (ha_fenced), until the routers follow b's
	// announcement.
	t.Logf("%s: drops: gateway a %v; gateway b (since its restart) %v; the peer %v", label,
		dropsSince(drops(b.gwa.stats()), aDrops), drops(b.gwb.stats()), dropsSince(drops(b.peer.stats()), peerDrops))
	pkts, _ := checkCapture(t, label, capture, capFile, true)

	// The packets around the handovers, replayed: at 20,000 a second,
	// all of them would take longer to replay than the round lasts.
	var around []lab.ESPPacket
	for _, m := range marks[:2] {
		around = append(around, between(pkts, m.wall.Add(-200*time.Millisecond), m.wall.Add(m.took+300*time.Millisecond))...)
	}
	checkReplay(t, b, label, b.gwa, around)
	res := stopFlows(t, label, flows)

	for i, name := range []string{"host -> remote", "remote -> host"} {
		qLost, qGap := lostIn(res[i].Gaps, quiet.at-100*time.Millisecond, window)
		line := fmt.Sprintf("%s, %s: datagrams lost in %v windows: %s %d (longest run %v)", label, name, window, quiet.name, qLost, qGap.Round(time.Microsecond))
		for _, m := range marks {
			l, g := lostIn(res[i].Gaps, m.at-100*time.Millisecond, window)
			line += fmt.Sprintf("; %s (took %v) %d (longest run %v)", m.name, m.took.Round(time.Millisecond), l, g.Round(time.Microsecond))
		}
		measuref(t, "%s", line)
	}
}

// TestHASplitBrain cuts the pair in two under traffic.
//
// First the sync link (CutSync): both members still reach the witness,
// so b takes the group over after its misses while a, which reached the
// witness, stays its owner unfenced; both hold the virtual address and
// both seal (a keeps sealing a flow it sends itself, startGatewayFlow).
// Captures on the wan router's bridge ports tell the senders apart: each
// sealed packets of the tunnel's SA while split, and no (SPI, IV) pair
// repeats over both (fresh IV epochs). HealSync: the higher epoch (b)
// wins, a releases and becomes b's standby, and traffic flows through b.
//
// Then, after a handover back to a, a is cut off everything (Isolate):
// it reaches neither b nor the witness, so it fences (ha status says so)
// and stops sealing (its SA's packet count stops while its ha_fenced
// drops rise), and b takes over. Rejoin: a becomes b's standby.
func TestHASplitBrain(t *testing.T) {
	p := newHAPairBed(t)
	b := p.b
	ctx, topo := b.tb.ctx, b.topo
	const rate = 5000
	files := map[string]string{}
	caps := map[string]*lab.ESPCapture{}
	for _, c := range []struct{ name, ifname string }{{"wan", lab.HAPeerPort}, {"a", topo.A.Port}, {"b", topo.B.Port}} {
		files[c.name] = filepath.Join(b.tb.dir, "split-"+c.name+".pcap")
		capture, err := lab.CaptureESP(topo.WAN, c.ifname, files[c.name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { capture.Stop() })
		caps[c.name] = capture
	}
	flows := startSeqFlows(t, topo, lab.SeqFlowOptions{Rate: rate, Size: 64})
	own := startGatewayFlow(t, topo, topo.A, 7005, 1000)
	if err := flows.waitSent(ctx, "0.3 s of flow", [2]uint64{}, rate*3/10); err != nil {
		t.Fatal(err)
	}
	outPackets := func(s *site) *gatewaySA { return mustSA(t, s.sas(), spiGP, "out") }
	waitSealing := func(s *site, what string, n uint64) {
		t.Helper()
		base := outPackets(s).Packets
		err := lab.WaitFor(ctx, "gateway "+s.name+" to seal "+what, 10*time.Second, 10*time.Millisecond, func() (bool, error) {
			now := outPackets(s).Packets
			return now >= base+n, fmt.Errorf("%d sealed since %d", now-base, base)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Split brain.
	cut := time.Now()
	if err := topo.CutSync(ctx); err != nil {
		t.Fatal(err)
	}
	gb, _ := waitHAGroup(t, b, b.gwb, "to take the group over with the sync link cut", isOwner)
	measuref(t, "split brain: b took the group (epoch %d) %v after the cut, gap %v", gb.Epoch, time.Since(cut).Round(time.Millisecond), gb.LastGap.Round(time.Millisecond))
	waitSealing(b.gwb, "while split", 200)
	waitSealing(b.gwa, "while split", 200)
	// Twice the detection time and more: a, which reaches the witness,
	// is still the owner, not fenced.
	if err := flows.waitSent(ctx, "a second split", flows.sent(), rate); err != nil {
		t.Fatal(err)
	}
	ga, sta := waitHAGroup(t, b, b.gwa, "to own the group while split", isOwner)
	if ga.Fenced || sta.Counters.Fences != 0 {
		t.Errorf("split brain: a is fenced (%v, %d fences) though it reaches the witness", ga.Fenced, sta.Counters.Fences)
	}
	holders, err := topo.VIPHolders()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("split brain: %d gateways hold %v; a at epoch %d, b at %d", len(holders), topo.WANVIP.Addr(), ga.Epoch, gb.Epoch)
	if len(holders) != 2 {
		t.Errorf("split brain: %d gateways hold the virtual address, want both", len(holders))
	}
	heal := time.Now()
	if err := topo.HealSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitHARoles(t, b, map[*site]string{b.gwb: "owner", b.gwa: "standby"})
	measuref(t, "split brain healed: a released, b owns, %v after the heal", time.Since(heal).Round(time.Millisecond))
	if err := topo.WaitVIP(ctx, topo.B, upWait); err != nil {
		t.Fatal(err)
	}
	if err := waitNeighbour(ctx, topo, topo.B); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, "traffic both ways through b after the heal", flows, flows.received(), 200)
	waitSealing(b.gwb, "after the heal", 200)
	logLines(t, b.gwa, "group released", "took over", "group acquired")

	// Isolation: a owns the group again (by handover), then is cut off.
	if out, err := b.gwb.cli("ha", "handover"); err != nil {
		t.Fatalf("handover b -> a: %v: %s", err, out)
	}
	waitHARoles(t, b, map[*site]string{b.gwa: "owner", b.gwb: "standby"})
	if err := waitNeighbour(ctx, topo, topo.A); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, "traffic both ways through a", flows, flows.received(), 200)
	isolated := time.Now()
	if err := topo.Isolate(ctx, topo.A); err != nil {
		t.Fatal(err)
	}
	ga, _ = waitHAGroup(t, b, b.gwa, "to fence itself, cut off", func(g ha.GroupStatus) bool { return g.Fenced })
	measuref(t, "isolation: a fenced %v after it was cut off (role %s)", time.Since(isolated).Round(time.Millisecond), ga.Role)
	waitHAGroup(t, b, b.gwb, "to take the group over from the isolated a", isOwner)
	if err := waitNeighbour(ctx, topo, topo.B); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, "traffic both ways through b while a is cut off", flows, flows.received(), 200)
	// a stops sealing: what it sends itself is dropped as ha_fenced, and
	// its SA's packet count stands still meanwhile.
	fencedDrops := func() uint64 { return outPackets(b.gwa).Drops["ha_fenced"] }
	waitFenced := func(from, n uint64) {
		t.Helper()
		err := lab.WaitFor(ctx, "a to drop its own flow as fenced", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
			d := fencedDrops()
			return d >= from+n, fmt.Errorf("%d ha_fenced drops", d)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFenced(0, 1)
	before := outPackets(b.gwa)
	waitFenced(before.Drops["ha_fenced"], 300)
	after := outPackets(b.gwa)
	measuref(t, "isolation: a fenced: %d packets sealed and %d dropped as ha_fenced while its own flow went on",
		after.Packets-before.Packets, after.Drops["ha_fenced"]-before.Drops["ha_fenced"])
	if after.Packets != before.Packets {
		t.Errorf("isolation: the fenced a sealed %d packets", after.Packets-before.Packets)
	}
	rejoin := time.Now()
	if err := topo.Rejoin(ctx, topo.A); err != nil {
		t.Fatal(err)
	}
	waitHARoles(t, b, map[*site]string{b.gwb: "owner", b.gwa: "standby"})
	measuref(t, "isolation: a rejoined as b's standby %v after", time.Since(rejoin).Round(time.Millisecond))
	if ga, _ := waitHAGroup(t, b, b.gwa, "to be standby", func(g ha.GroupStatus) bool { return g.Role == "standby" }); ga.Fenced {
		t.Errorf("after rejoining, a's group is still fenced: %+v", ga)
	}
	waitBothWays(t, b, "traffic both ways through b after a rejoined", flows, flows.received(), 200)
	logLines(t, b.gwa, "fence", "group released")

	flows.up.StopSending(0)
	flows.down.StopSending(0)
	own.StopSending(0)
	pkts, _ := checkCapture(t, "split brain, the peer's link", caps["wan"], files["wan"], false)
	// The bridge ports: what each gateway sent (its packets leave by its
	// port only; frames to it may be flooded to both).
	var sent []lab.ESPPacket
	for _, name := range []string{"a", "b"} {
		st, err := caps[name].Stop()
		if err != nil {
			t.Fatal(err)
		}
		ps, err := lab.ReadESP(files[name])
		if err != nil {
			t.Fatal(err)
		}
		if st.Dropped > 0 {
			t.Errorf("the capture at %s's port lost %d packets", name, st.Dropped)
		}
		var mine []lab.ESPPacket
		for _, p := range ps {
			if p.Src.Addr() == topo.WANVIP.Addr() {
				mine = append(mine, p)
			}
		}
		split := 0
		for _, p := range between(mine, cut, heal) {
			if p.SPI == spiGP {
				split++
			}
		}
		measuref(t, "split brain: gateway %s sent %d ESP packets, %d of SPI 0x%x while split", name, len(mine), split, spiGP)
		if split == 0 {
			t.Errorf("split brain: gateway %s sent nothing on 0x%x while split: the check below does not test two senders", name, spiGP)
		}
		sent = append(sent, mine...)
	}
	rep := lab.CheckESP(sent)
	t.Logf("split brain: both gateways' ESP: %v", rep)
	if rep.DupIV() != 0 {
		t.Errorf("split brain: %d ESP packets of the two gateways repeat an (SPI, IV) pair: %v", rep.DupIV(), rep)
	}
	measuref(t, "split brain: %d ESP packets sent by the two gateways, %d (SPI, IV) pairs repeated, %d (SPI, seq) pairs repeated (a's below b's bound: the peer refuses them)",
		rep.Packets, rep.DupIV(), rep.DupSeq())
	checkReplay(t, b, "split brain", b.gwb, pkts)
	stopFlows(t, "split brain", flows)
	r, err := own.Stop(0)
	if err != nil {
		t.Error(err)
	}
	measuref(t, "split brain: a's own flow: %v", r)
}

// TestHABothLost kills both members (SIGKILL) under traffic and starts
// only b again: it hears no peer, acquires the group alone after
// misses*interval and carries the traffic again. The tunnel is static:
// b's SAs resume above the bounds in its own state directory, under a
// fresh IV epoch. Over the whole capture no (SPI, IV) pair repeats, and
// traffic flows both ways again; a replay of the whole capture is
// refused.
//
// b was the standby: it holds no bound of its own use, but it recorded
// every bound it acknowledged as a's standby in its own state directory
// (gateway haHandler.Record), so alone it sends above every number a
// used and the peer refuses none of its packets (before that record, it
// started at 0 again and used 2,581 of a's numbers).
func TestHABothLost(t *testing.T) {
	p := newHAPairBed(t)
	b := p.b
	ctx, topo := b.tb.ctx, b.topo
	const rate = 5000
	capFile := filepath.Join(b.tb.dir, "wan-esp-both-lost.pcap")
	capture, err := topo.CaptureWAN(capFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Stop() })
	flows := startSeqFlows(t, topo, lab.SeqFlowOptions{Rate: rate, Size: 64, GapsOver: 5 * time.Millisecond})
	if err := flows.waitSent(ctx, "0.5 s of flow", [2]uint64{}, rate/2); err != nil {
		t.Fatal(err)
	}
	peerIn := mustSA(t, b.peer.sas(), spiGP, "in")
	killed := time.Now()
	var wg sync.WaitGroup
	for _, s := range []*site{b.gwa, b.gwb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.proc.Kill()
		}()
	}
	wg.Wait()
	back := flows.received()
	b.startGW(b.gwb, p.sections[b.gwb])
	g, st := waitHAGroup(t, b, b.gwb, "to acquire the group alone", isOwner)
	if err := waitNeighbour(ctx, topo, topo.B); err != nil {
		t.Fatal(err)
	}
	waitBothWays(t, b, "traffic both ways through b, alone", flows, back, 100)
	measuref(t, "both lost: b restarted and carries the traffic %v after both were killed (epoch %d, takeovers %d)",
		time.Since(killed).Round(time.Millisecond), g.Epoch, st.Counters.Takeovers)
	logLines(t, b.gwb, "group acquired", "acquir", "alone")
	if err := flows.waitSent(ctx, "a second more", flows.sent(), rate); err != nil {
		t.Fatal(err)
	}
	flows.up.StopSending(0)
	flows.down.StopSending(0)
	pkts, rep := checkCapture(t, "both lost", capture, capFile, false)
	in := mustSA(t, b.peer.sas(), spiGP, "in")
	refused := replays(in) - replays(peerIn)
	measuref(t, "both lost: the peer refused %d of b's packets as replays after b started alone; b's SA 0x%x used %d of a's sequence numbers again",
		refused, spiGP, rep.SPI(spiGP).DupSeq)
	checkReplay(t, b, "both lost", b.gwb, pkts)
	stopFlows(t, "both lost", flows)
	// b recorded, as a's standby, every bound it acknowledged in its own
	// state directory (haHandler.Record): started alone it sends above
	// what a used.
	if rep.SPI(spiGP).DupSeq > 0 || refused > 0 {
		t.Errorf("b, started alone after both members were lost, used %d of a's sequence numbers again under the same key, "+
			"and the peer refused %d of its packets as replays", rep.SPI(spiGP).DupSeq, refused)
	}
}
