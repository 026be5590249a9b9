package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestIKESluicePairMLKEM: two sluice gateways whose connection's
// proposals are strongSwan 6's "x25519-ke1_mlkem768" (RFC 9370 over
// IKE_INTERMEDIATE, RFC 9242) key their tunnel from the configuration
// file to the data plane: ping both ways through it, the IKE SA named
// with its additional key exchange, one IKE_INTERMEDIATE each way in the
// counters.
func TestIKESluicePairMLKEM(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	const props = "aes256gcm16-prfsha384-x25519-ke1_mlkem768"
	cfgs := ikePairConfigs("aes256gcm16", false)
	for _, c := range cfgs {
		c.Connections[0].Proposals = props
	}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	ca := a.waitChild(ctx, "net-b", 20*time.Second, nil)
	cb := b.waitChild(ctx, "net-a", 20*time.Second, nil)
	if ca.Suite != "aes256gcm16" || ca.InSPI != cb.OutSPI || ca.OutSPI != cb.InSPI {
		t.Fatalf("children disagree: A %+v, B %+v", ca, cb)
	}
	aIn, bIn := inner4[0].Addr(), inner4[1].Addr()
	waitPing(t, ctx, a.ns, bIn)
	mustPing(t, ctx, "ML-KEM IKE pair A->B", a.ns, bIn, 20, 10*time.Millisecond)
	mustPing(t, ctx, "ML-KEM IKE pair B->A", b.ns, aIn, 20, 10*time.Millisecond)
	for _, s := range []*site{a, b} {
		conns := s.ike().Connections
		if len(conns) != 1 || conns[0].IKESuite != props {
			t.Errorf("connections: %+v, want the IKE suite %s", conns, props)
		}
	}
	if n := a.stats().IKE.Stats["ike_intermediate_initiated"]; n != 1 {
		t.Errorf("A initiated %d IKE_INTERMEDIATE exchanges, want 1", n)
	}
	if n := b.stats().IKE.Stats["ike_intermediate_answered"]; n != 1 {
		t.Errorf("B answered %d IKE_INTERMEDIATE exchanges, want 1", n)
	}
	if out, err := a.cli("ike", "list"); err != nil || !strings.Contains(out, "ke1_mlkem768") {
		t.Errorf("sluice ike list: %v\n%s", err, out)
	}
}
