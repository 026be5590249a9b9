package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestIKEReloadRotatesPSK: both gateways reload a new pre-shared key under
// traffic (the fleet's Secret rotation). The IKE and Child SAs carry on, no
// ping is lost, and the next IKE SA, made once A's connection is torn down
// and initiated again, authenticates with the new key.
func TestIKEReloadRotatesPSK(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes128gcm16", true)
	tb := startPair(t, wan4, cfgs)
	a := tb.sites[0]
	ca := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
	ikeA := a.ike().Connections[0].IKESPIi
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())

	const interval = 10 * time.Millisecond
	p, err := startPinger(tb.ctx, a.ns, inner4[1].Addr(), interval, 0)
	if err != nil {
		t.Fatal(err)
	}
	psk := randomHex(32)
	for _, i := range []int{1, 0} {
		cfgs[i].Connections[0].PSK = psk
		tb.sites[i].writeConfig(cfgs[i])
		out, err := tb.sites[i].cli("reload")
		if err != nil {
			p.stop()
			t.Fatalf("gateway %s: %v", tb.sites[i].name, err)
		}
		if !strings.Contains(out, "IKE pre-shared key rotated") {
			t.Errorf("gateway %s: the reload did not report the rotation:\n%s", tb.sites[i].name, out)
		}
	}
	// A second of traffic after the rotation, judged by stop.
	replies := func() int { return len(pingReplyRE.FindAllString(p.out.String(), -1)) }
	n0 := replies()
	if err := lab.WaitFor(tb.ctx, "traffic after the rotation", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		return replies() >= n0+2*int(pingTail/interval), nil
	}); err != nil {
		p.stop()
		t.Fatal(err)
	}
	r, lost, err := p.stop()
	if err != nil {
		t.Fatal(err)
	}
	measuref(t, "PSK rotated on both gateways under ping every %v: %d/%d answered", interval, r.Received, r.Sent)
	if len(lost) > 0 {
		t.Errorf("pings lost across the PSK rotation: %v", lost)
	}
	na := a.waitChild(tb.ctx, "net-b", time.Second, nil)
	if na.InSPI != ca.InSPI || na.OutSPI != ca.OutSPI || a.ike().Connections[0].IKESPIi != ikeA {
		t.Errorf("the rotation replaced the SAs: child %x/%x -> %x/%x, IKE %s -> %s", ca.InSPI, ca.OutSPI, na.InSPI, na.OutSPI, ikeA, a.ike().Connections[0].IKESPIi)
	}

	// A fresh IKE SA: it authenticates with the new key.
	if _, err := a.cli("ike", "terminate", "to-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli("ike", "initiate", "to-b"); err != nil {
		t.Fatalf("initiating with the rotated key: %v", err)
	}
	a.waitChild(tb.ctx, "net-b", 20*time.Second, func(c gateway.IKEChildInfo) bool { return c.InSPI != ca.InSPI })
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
}
