package lab_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// loopUDP opens a UDP socket on 127.0.0.1 with room for a burst.
func loopUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadBuffer(4 << 20)
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// TestSeqFlowMeasures runs a flow through a relay that drops sequence
// numbers 1000 to 1499 and 2000 to 2009, sends 2500 twice and holds 2600
// back until 2601 has passed: the result names the longest run of losses
// exactly, and counts the duplicate and the reordered datagram.
func TestSeqFlowMeasures(t *testing.T) {
	ctx := testContext(t)
	src, relay, out, sink := loopUDP(t), loopUDP(t), loopUDP(t), loopUDP(t)
	go func() {
		buf := make([]byte, 2048)
		var held []byte
		for {
			n, _, err := relay.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			seq := binary.BigEndian.Uint64(buf[8:])
			switch {
			case seq >= 1000 && seq < 1500, seq >= 2000 && seq < 2010:
				continue
			case seq == 2500:
				out.WriteToUDPAddrPort(buf[:n], addrOf(sink))
			case seq == 2600:
				held = append([]byte(nil), buf[:n]...)
				continue
			}
			out.WriteToUDPAddrPort(buf[:n], addrOf(sink))
			if seq == 2601 && held != nil {
				out.WriteToUDPAddrPort(held, addrOf(sink))
			}
		}
	}()
	// Every run of losses is listed (GapsOver of a nanosecond): how long
	// a run lasts depends on the sender's pace, which a loaded machine
	// stalls and then catches up in a burst (500 numbers, 25 ms at
	// 20,000 per second, took 18 ms once in CI), so no assertion here
	// depends on it.
	f := lab.StartSeqFlow(src, addrOf(relay), sink, lab.SeqFlowOptions{GapsOver: time.Nanosecond})
	err := lab.WaitFor(ctx, "3000 datagrams sent", 20*time.Second, 0, func() (bool, error) { return f.Sent() >= 3000, nil })
	r, serr := f.Stop(0)
	if err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	t.Logf("%v", r)
	// The loopback may lose datagrams of its own on a loaded machine; the
	// relay's 510 are lost for sure.
	if r.Lost < 510 || r.Lost != r.Sent-r.Received {
		t.Errorf("lost %d of %d (received %d), want at least 510 and sent-received", r.Lost, r.Sent, r.Received)
	}
	if r.Runs < 2 || len(r.Gaps) != int(r.Runs) {
		t.Errorf("%d runs of losses and %d gaps listed, want at least the relay's 2, every one listed", r.Runs, len(r.Gaps))
	}
	var relay500, relay10 bool
	var longest struct {
		d    time.Duration
		lost uint64
	}
	for _, g := range r.Gaps {
		relay500 = relay500 || g.Lost == 500
		relay10 = relay10 || g.Lost == 10
		if g.Length <= 0 {
			t.Errorf("gap %+v: not longer than 0", g)
		}
		if g.Length > longest.d {
			longest.d, longest.lost = g.Length, g.Lost
		}
	}
	if !relay500 || !relay10 {
		t.Errorf("gaps %+v: want the relay's runs of 500 and 10", r.Gaps)
	}
	// The longest gap is named exactly: its numbers, how many, how long.
	if r.GapLast-r.GapFirst+1 != r.GapLost || r.Gap != longest.d || r.GapLost != longest.lost {
		t.Errorf("longest gap: seq %d..%d (%d lost) over %v; want the longest listed, %d lost over %v", r.GapFirst, r.GapLast, r.GapLost, r.Gap, longest.lost, longest.d)
	}
	if r.GapLost == 500 && r.GapFirst != 1000 || r.GapLost == 10 && r.GapFirst != 2000 {
		t.Errorf("longest gap: seq %d..%d, want the relay's numbers", r.GapFirst, r.GapLast)
	}
	if r.Duplicates != 1 || r.Reordered != 1 {
		t.Errorf("%d duplicates and %d reordered, want 1 and 1", r.Duplicates, r.Reordered)
	}
	if r.Rate != 20000 || r.Size != 64 || r.LatencyMax <= 0 || r.Silence <= 0 {
		t.Errorf("result %+v: want the defaults and measured latency and silence", r)
	}
}

// TestSeqFlowBothWays: two flows, one each way between two sockets'
// pairs, run side by side and each sees only its own datagrams.
func TestSeqFlowBothWays(t *testing.T) {
	ctx := testContext(t)
	aTx, aRx, bTx, bRx := loopUDP(t), loopUDP(t), loopUDP(t), loopUDP(t)
	o := lab.SeqFlowOptions{Rate: 5000, Size: 100}
	ab := lab.StartSeqFlow(aTx, addrOf(bRx), bRx, o)
	ba := lab.StartSeqFlow(bTx, addrOf(aRx), aRx, o)
	err := lab.WaitFor(ctx, "500 datagrams each way", 20*time.Second, 0, func() (bool, error) {
		return ab.Received() >= 500 && ba.Received() >= 500, nil
	})
	r1, err1 := ab.Stop(0)
	r2, err2 := ba.Stop(0)
	if err != nil || err1 != nil || err2 != nil {
		t.Fatal(err, err1, err2)
	}
	t.Logf("a->b: %v", r1)
	t.Logf("b->a: %v", r2)
	for _, r := range []lab.SeqResult{r1, r2} {
		if r.Received == 0 || r.Duplicates != 0 || r.Foreign != 0 || r.Size != 100 {
			t.Errorf("%+v: want datagrams received, no duplicates, none foreign", r)
		}
	}
}
