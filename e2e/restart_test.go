package e2e_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestRestartFromConfig stops gateway B with SIGTERM (it must exit with
// status 0 and remove its control socket and TUN device), starts it again
// from the same configuration, and checks that the tunnel carries traffic
// again:
//   - A -> B at once, every datagram: B shut down cleanly, so its inbound
//     SA recorded the highest number it accepted (state_dir) in place of
//     the bound it had reserved, and starts there: none of A's new packets
//     is refused. (After a crash it starts at the reserved bound and A's
//     packets up to it are refused, at most one reservation step; the
//     gateway tests hold that.)
//   - B -> A at once: B's outbound SA goes on from the last number it sent,
//     and A's replay window refuses none of them.
//
// It also captures the ESP that B sends, before and after the restart,
// and checks (subtest no-nonce-reuse) that no packet reuses an (SPI, IV)
// pair under the same AES-GCM key.
func TestRestartFromConfig(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	for _, c := range cfgs {
		c.Link = "socket" // the capture below reads wan0 with a packet socket, which AF_XDP's packets pass by
	}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	aIn, bIn := inner4[0].Addr(), inner4[1].Addr()

	capture, err := captureESP(a.ns, wanIf, wan4[1].Addr(), spiBA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capture.close)

	waitPing(t, ctx, a.ns, bIn)
	mustPing(t, ctx, "before restart A->B", a.ns, bIn, 50, 5*time.Millisecond)
	aOut := mustSA(t, a.sas(), spiAB, "out").Packets
	bOut := mustSA(t, b.sas(), spiBA, "out").Packets
	t.Logf("before the restart: A sealed %d packets with 0x%x, B sealed %d with 0x%x", aOut, spiAB, bOut, spiBA)
	before := capture.take()

	// Stop: exit status 0, the control socket and the TUN device gone.
	start := time.Now()
	b.stop()
	measuref(t, "gateway B exited with status 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(b.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket %s after exit: %v, want it removed", b.sock, err)
	}
	err = lab.WaitFor(ctx, "B's TUN device to go", 5*time.Second, 20*time.Millisecond, func() (bool, error) {
		has, err := b.ns.HasLink(tunName)
		return !has, err
	})
	if err != nil {
		t.Error(err)
	}

	// Start again from the same file.
	start = time.Now()
	b.run()
	measuref(t, "gateway B up again %v after start", time.Since(start).Round(time.Millisecond))

	// A -> B: one-way, every datagram arrives.
	aTx, err := a.ns.ListenUDP(netip.AddrPortFrom(aIn, 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer aTx.Close()
	bRx, err := b.ns.ListenUDP(netip.AddrPortFrom(bIn, 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer bRx.Close()
	r, err := lab.Flood(ctx, aTx, netip.AddrPortFrom(bIn, 6001), bRx, lab.FloodOptions{Size: 200, Duration: 500 * time.Millisecond, Window: 16, Stall: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	measuref(t, "after restart A -> B: %d sent, %d received, %.0f pps", r.Sent, r.Received, r.PPS())
	if got := mustSA(t, a.sas(), spiAB, "out").Packets; got < aOut+r.Sent {
		t.Errorf("A's outbound SA counted %d packets, want its count before the restart (%d) and the stream (%d) at least", got, aOut, r.Sent)
	}
	// A clean restart costs nothing: B's inbound SA starts at the highest
	// number it accepted before.
	bInSA := mustSA(t, b.sas(), spiAB, "in")
	replays := bInSA.Drops["replay"]
	if r.Sent == 0 || r.Lost != 0 || replays != 0 || bInSA.Packets < r.Received {
		t.Errorf("after restart A -> B: %d of %d datagrams lost, B's inbound SA %d packets, drops %v; want none lost",
			r.Lost, r.Sent, bInSA.Packets, bInSA.Drops)
	}
	measuref(t, "B's clean restart cost %d of A's packets", replays)

	// B -> A: B goes on from the last number it sent; nothing is refused.
	aReplay := mustSA(t, a.sas(), spiBA, "in").Drops["replay"]
	bTx, err := b.ns.ListenUDP(netip.AddrPortFrom(bIn, 6002))
	if err != nil {
		t.Fatal(err)
	}
	defer bTx.Close()
	aRx, err := a.ns.ListenUDP(netip.AddrPortFrom(aIn, 6002))
	if err != nil {
		t.Fatal(err)
	}
	defer aRx.Close()
	n := int(bOut) + 20
	received := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		got := 0
		for {
			aRx.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := aRx.ReadFromUDPAddrPort(buf); err != nil {
				received <- got
				return
			}
			got++
		}
	}()
	for i := range n {
		if _, err := bTx.WriteToUDPAddrPort(fmt.Appendf(nil, "after restart %d", i), netip.AddrPortFrom(aIn, 6002)); err != nil {
			t.Fatal(err)
		}
		if i%16 == 15 {
			time.Sleep(time.Millisecond) // pace: no queue on the way overflows
		}
	}
	got := <-received
	replays = mustSA(t, a.sas(), spiBA, "in").Drops["replay"] - aReplay
	t.Logf("after restart B -> A: %d datagrams sent, %d arrived, %d dropped at A as replays (A had seen up to %d)",
		n, got, replays, bOut)
	if got < 20 || replays != 0 {
		t.Errorf("after restart B -> A: %d of %d datagrams arrived, %d refused as replays; want none refused", got, n, replays)
	}
	mustPing(t, ctx, "after restart A->B", a.ns, bIn, 50, 5*time.Millisecond)
	mustPing(t, ctx, "after restart B->A", b.ns, aIn, 50, 5*time.Millisecond)

	after := capture.take()
	reused := 0
	var example string
	for iv, ct := range after {
		if old, ok := before[iv]; ok {
			reused++
			if example == "" {
				example = fmt.Sprintf("IV %s: ciphertext %s... before, %s... after", iv, old, ct)
			}
		}
	}
	t.Logf("ESP from B with SPI 0x%x: %d packets captured before the restart, %d after; %d reuse an IV of before under the same key",
		spiBA, len(before), len(after), reused)
	t.Run("no-nonce-reuse", func(t *testing.T) {
		if reused > 0 {
			t.Errorf("after a restart from its configuration, gateway B sent %d ESP packets with SPI 0x%x whose AES-GCM IV "+
				"it had already used under the same key before the restart (%s): nonce reuse, against DESIGN.md decision 7",
				reused, spiBA, example)
		}
	})
}

// TestNoNonceReuseAcrossCrashes: gateway B is killed with SIGKILL while it
// sends and started again from the same file, three times: with its state
// directory intact, after the directory was deleted, and after it was
// deleted again. Every ESP packet B sends under its outbound SA is
// captured on the wire; no AES-GCM IV may appear twice under the key, in
// one run or across them (RFC 4106 section 3.1: the IV must not repeat for
// a key). The IV does not derive from the sequence number, so losing the
// state directory costs replay protection and sequence continuity, never
// a nonce.
func TestNoNonceReuseAcrossCrashes(t *testing.T) {
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	for _, c := range cfgs {
		c.Link = "socket" // the capture below reads wan0 with a packet socket, which AF_XDP's packets pass by
	}
	tb := startPair(t, wan4, cfgs)
	b := tb.sites[1]
	ctx := tb.ctx
	capture, err := captureESP(tb.sites[0].ns, wanIf, wan4[1].Addr(), spiBA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capture.close)
	dst := netip.AddrPortFrom(inner4[0].Addr(), 9)

	// send has B send n datagrams to A through the tunnel, paced, until
	// stop is closed or n are sent (n < 0: no limit).
	send := func(n int, stop <-chan struct{}) {
		c, err := b.ns.ListenUDP(netip.AddrPortFrom(inner4[1].Addr(), 0))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for i := 0; n < 0 || i < n; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.WriteToUDPAddrPort(fmt.Appendf(nil, "datagram %d", i), dst) // fails while B is down
			if i%8 == 7 {
				time.Sleep(time.Millisecond) // pace: few are lost on the way
			}
		}
	}
	// captured waits until the capture holds at least n packets. A loaded
	// machine loses some of what the test sends before it reaches B (the
	// TUN queue), so the waits ask for half of it: what matters is that
	// every packet that does go out is checked.
	captured := func(n int) {
		t.Helper()
		err := lab.WaitFor(ctx, fmt.Sprintf("%d ESP packets from B on the wire", n), 10*time.Second, 10*time.Millisecond, func() (bool, error) {
			got := capture.count()
			return got >= n, fmt.Errorf("%d captured", got)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	all := map[string]int{} // IV -> run that sent it
	reused, total := 0, 0
	collect := func(run int) {
		t.Helper()
		ivs, repeats := capture.takeRepeats()
		reused += repeats
		for iv := range ivs {
			if prev, ok := all[iv]; ok {
				reused++
				t.Errorf("run %d reused an IV of run %d under the same key: %s", run, prev, iv)
			}
			all[iv] = run
		}
		total += len(ivs) + repeats
		if repeats > 0 {
			t.Errorf("run %d: %d packets repeated an IV of the same run", run, repeats)
		}
		t.Logf("run %d: %d ESP packets captured", run, len(ivs)+repeats)
	}

	const n = 2000
	send(n, nil)
	captured(n / 2)
	for run, loseState := range []bool{false, true, true} {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); send(-1, stop) }()
		captured(capture.count() + 100) // B is sending when it dies
		b.proc.Kill()
		close(stop)
		<-done
		collect(run)
		if loseState {
			if err := os.RemoveAll(cfgs[1].StateDir); err != nil {
				t.Fatal(err)
			}
		}
		b.run()
		send(n, nil)
		captured(n / 2)
	}
	collect(3)
	if total < 2*n {
		t.Errorf("captured %d packets, want at least %d", total, 2*n)
	}
	measuref(t, "no-nonce-reuse: %d ESP packets from B under one key, over 3 SIGKILLs (state kept once, deleted twice): %d IVs repeated", total, reused)
}
