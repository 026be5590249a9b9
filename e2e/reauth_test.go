package e2e_test

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestIKEReauthUnderTraffic: gateway A reauthenticates its IKE SA with
// B every 2 s (reauth_time, RFC 7296 section 2.8.3), make-before-break:
// a new IKE SA with IKE_SA_INIT and IKE_AUTH, then the old one deleted,
// while both sides ping each other every 10 ms. The child stays
// installed throughout (no down), its SPIs change, and the pings lost
// across the reauthentications are counted.
func TestIKEReauthUnderTraffic(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes256gcm16-esn", true)
	cfgs[0].Connections[0].ReauthTime = "2s"
	tb := newTestbed(t, wan4)
	a, b := tb.sites[0], tb.sites[1]
	captureNS(t, tb.lab, []*lab.Netns{a.ns, b.ns}, a.logPath, b.logPath)
	for i, s := range tb.sites {
		s.start(cfgs[i])
	}
	first := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
	const n, interval = 500, 10 * time.Millisecond // 5 s: two reauthentications
	done := make(chan pingRun, 1)
	go func() {
		r, lost, err := pingAll(tb.ctx, b.ns, inner4[0].Addr(), n, interval)
		done <- pingRun{r, lost, err}
	}()
	ab, lostAB, err := pingAll(tb.ctx, a.ns, inner4[1].Addr(), n, interval)
	if err != nil {
		t.Fatal(err)
	}
	ba := <-done
	if ba.err != nil {
		t.Fatal(ba.err)
	}
	measuref(t, "IKE reauthentications A->B: %v, lost icmp_seq %v", ab, lostAB)
	measuref(t, "IKE reauthentications B->A: %v, lost icmp_seq %v", ba.r, ba.lost)
	// A reply lost in the moment between the responder's switch to the
	// new Child SA and the initiator's install of it may happen; more is
	// a break.
	if len(lostAB) > 2 || len(ba.lost) > 2 {
		t.Errorf("pings lost across the reauthentications: A->B %v, B->A %v", lostAB, ba.lost)
	}
	for _, s := range tb.sites {
		st := s.stats().IKE
		if st == nil || st.Stats["ike_sa_established"] < 3 || st.Stats["deleted"] < 2 || st.Stats["child_sa_expired"] > 0 {
			t.Errorf("gateway %s: want at least 3 IKE SAs established and 2 deleted: %v", s.name, st)
		}
	}
	if now := a.waitChild(tb.ctx, "net-b", time.Second, nil); now.InSPI == first.InSPI {
		t.Errorf("the child still has its first SPI %#x", first.InSPI)
	}
}
