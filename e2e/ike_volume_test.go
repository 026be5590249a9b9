package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestIKEVolumeLimits: between two sluice gateways, a child with
// rekey_packets is rekeyed once its SAs carried that many packets (the
// gateway's ike.Controller reads the SAs' counters; nothing is added per
// packet), and one with life_packets is deleted at both ends.
func TestIKEVolumeLimits(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	t.Run("rekey_packets", func(t *testing.T) {
		cfgs := ikePairConfigs("aes128gcm16", true)
		c := &cfgs[0].Connections[0]
		c.ChildRekeyPackets, c.ChildLifePackets = 40, 1000000
		tb := startPair(t, wan4, cfgs)
		a, b := tb.sites[0], tb.sites[1]
		first := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
		waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
		mustPing(t, tb.ctx, "A->B past rekey_packets", a.ns, inner4[1].Addr(), 50, 10*time.Millisecond)
		a.waitChild(tb.ctx, "net-b", 10*time.Second, func(ch gateway.IKEChildInfo) bool { return ch.InSPI != first.InSPI })
		// B's child is the pair A has now: each SA carries 40 packets,
		// so the pings may have rekeyed the child more than once (CI
		// saw A move on again while this waited for B).
		b.waitChild(tb.ctx, "net-a", 10*time.Second, func(ch gateway.IKEChildInfo) bool {
			return ch.OutSPI == a.waitChild(tb.ctx, "net-b", 10*time.Second, nil).InSPI
		})
		if st := a.stats().IKE; st == nil || st.Stats["child_sa_rekeyed"] < 1 {
			t.Errorf("A's IKE counters: %v, want a Child SA rekey", st)
		}
		waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
	})
	t.Run("life_packets", func(t *testing.T) {
		cfgs := ikePairConfigs("aes128gcm16", true)
		c := &cfgs[0].Connections[0]
		c.ChildLifePackets = 30
		tb := startPair(t, wan4, cfgs)
		a, b := tb.sites[0], tb.sites[1]
		a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
		waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
		// Some of these are lost once the child goes: only the count
		// matters.
		pingAll(tb.ctx, a.ns, inner4[1].Addr(), 40, 10*time.Millisecond)
		err := lab.WaitFor(tb.ctx, "the child to be deleted at both gateways", 10*time.Second, 100*time.Millisecond, func() (bool, error) {
			na, nb := len(a.tunnels()), len(b.tunnels())
			return na == 0 && nb == 0, fmt.Errorf("A has %d tunnels, B %d", na, nb)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, conn := range a.ike().Connections {
			for _, ch := range conn.Children {
				if ch.State == "installed" {
					t.Errorf("A's child %s still installed: %+v", ch.Name, ch)
				}
			}
		}
	})
}
