package e2e_test

// The failover of an IKE-keyed tunnel opposite strongSwan (issue 18): the
// pair's owner negotiates with charon, dies, and its standby goes on with
// the same IKE SA, which charon keeps.

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// ikeSAIDRE finds charon's IKE SA in `swanctl --list-sas`: its unique id
// and both SPIs ("e2e: #1, ESTABLISHED, IKEv2, 1122334455667788_i* 99aabbccddeeff00_r").
var ikeSAIDRE = regexp.MustCompile(`e2e: #(\d+), ESTABLISHED, IKEv2, ([0-9a-f]{16})_i\*? ([0-9a-f]{16})_r`)

// TestHAStrongSwanFailover: a pair of sluice gateways with an IKE
// connection to charon on their virtual address. The owner negotiates,
// then is killed under traffic; the standby adopts the IKE SA and its
// Child SA; the dead member is started again, gets the IKE SA in its
// snapshot as the new standby, and adopts it at the next kill (three
// failovers). charon keeps its IKE SA (same unique id and SPIs), negotiates
// nothing new (no IKE_SA_INIT in its log after the first), counts no
// replayed or undecryptable ESP, and a Child SA rekey and an IKE SA
// rekey that charon starts afterwards are answered by the new owner. No
// (SPI, IV) pair on the wan is repeated.
func TestHAStrongSwanFailover(t *testing.T) {
	requireCharon(t)
	b := newHABed(t)
	ctx, topo := b.tb.ctx, b.topo
	vipAddr, peerAddr := topo.WANVIP.Addr(), topo.PeerWAN.Addr()

	// charon in the peer's namespace, for the remote network.
	ch := b.tb.lab.NewCharon(topo.Peer, b.tb.dir)
	lab.LogOnFailure(t, "strongSwan log", ch.Log(), 80)
	psk := randomHex(16)
	renderTemplate(t, "strongswan/strongswan.conf.tmpl", ch.Conf(), map[string]string{"Vici": ch.Vici(), "Log": ch.Log()})
	swconf := filepath.Join(b.tb.dir, "swanctl.conf")
	renderTemplate(t, "strongswan/swanctl.conf.tmpl", swconf, map[string]string{
		"Local": peerAddr.String(), "Remote": vipAddr.String(), "IKE": ssIKE, "Auth": "psk",
		"LocalTS": topo.RemoteNet.String(), "RemoteTS": topo.LocalNet.String(),
		"LocalID": ssIDs[0], "RemoteID": ssIDs[1], "ESP": "aes128gcm16", "PSK": psk,
		"ChildRekey": "0s", "ChildLife": "0s",
	})
	if err := ch.Start(ctx); err != nil {
		t.Fatalf("strongSwan: %v", err)
	}
	if err := ch.Load(ctx, swconf, 1); err != nil {
		t.Fatalf("strongSwan: %v", err)
	}

	// The pair: the static tunnel of the bed gives way to the connection.
	cc := connConfig{
		Name: "strongswan", Local: vipAddr, Remote: peerAddr, Proposals: ssIKE, Encap: true,
		LocalID: ssIDs[1], RemoteID: ssIDs[0], Auth: "psk", PSK: fmt.Sprintf("%x", psk),
		Child: "net", LocalTS: []netip.Prefix{topo.LocalNet}, RemoteTS: []netip.Prefix{topo.RemoteNet},
		ESP: "aes128gcm16", Start: "start",
	}
	gw := *b.gwCfg
	gw.SAs, gw.Tunnels, gw.Connections = nil, nil, []connConfig{cc}
	b.gwCfg = &gw
	ca, cert, key := haCreds(t, b)
	sections := map[*site]string{
		b.gwa: haSection(b, topo.A, topo.B, 200, ca, cert, key),
		b.gwb: haSection(b, topo.B, topo.A, 100, ca, cert, key),
	}
	requireHA(t, b, sections[b.gwa])
	b.startGW(b.gwa, sections[b.gwa])
	b.startGW(b.gwb, sections[b.gwb])
	waitHARoles(t, b, map[*site]string{b.gwa: "owner", b.gwb: "standby"})
	waitPing(t, ctx, topo.Host, topo.RemoteAddr)

	listSA := func() (id, spii, spir string) {
		t.Helper()
		out, err := ch.Swanctl(ctx, "--list-sas")
		if err != nil {
			t.Fatal(err)
		}
		m := ikeSAIDRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("charon lists no established IKE SA:\n%s", out)
		}
		return m[1], m[2], m[3]
	}
	inits := func() int {
		t.Helper()
		log, err := ch.LogTail(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(log, "IKE_SA_INIT request") + strings.Count(log, "IKE_SA_INIT response")
	}
	id0, spii0, spir0 := listSA()
	inits0 := inits()

	capFile := filepath.Join(b.tb.dir, "wan-esp-ike.pcap")
	capture, err := topo.CaptureWAN(capFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Stop() })
	const rate = 5000
	flows := startSeqFlows(t, topo, lab.SeqFlowOptions{Rate: rate, Size: 64})
	if err := flows.waitSent(ctx, "0.5 s of flow", [2]uint64{}, rate/2); err != nil {
		t.Fatal(err)
	}
	// Three failovers: a to b, then b (which adopted the IKE SA) back to
	// a restarted a, which got it in b's snapshot when it joined, then
	// to b again.
	owner, standby := b.gwa, b.gwb
	hagw := map[*site]*lab.HAGateway{b.gwa: topo.A, b.gwb: topo.B}
	for i := range 3 {
		owner.proc.Kill()
		if err := waitNeighbour(ctx, topo, hagw[standby]); err != nil {
			t.Fatal(err)
		}
		back := flows.received()
		err = lab.WaitFor(ctx, fmt.Sprintf("failover %d: traffic both ways through %s", i+1, standby.name), 30*time.Second, 2*time.Millisecond,
			func() (bool, error) {
				r := flows.received()
				return r[0] > back[0]+100 && r[1] > back[1]+100, fmt.Errorf("received %v, %v at the takeover", r, back)
			})
		if err != nil {
			t.Fatal(err)
		}
		logLines(t, standby, "took over", "group acquired", "adopted")
		// charon still has the very IKE SA: no new negotiation.
		if id, spii, spir := listSA(); id != id0 || spii != spii0 || spir != spir0 {
			t.Errorf("failover %d: charon's IKE SA is #%s %s_i %s_r, was #%s %s_i %s_r", i+1, id, spii, spir, id0, spii0, spir0)
		}
		if i == 2 {
			break
		}
		b.startGW(owner, sections[owner])
		waitHARoles(t, b, map[*site]string{standby: "owner", owner: "standby"})
		owner, standby = standby, owner
	}
	// charon asks the new owner for a Child SA rekey, then an IKE SA
	// rekey: both are answered on the adopted IKE SA.
	for _, args := range [][]string{{"--rekey", "--child", "net"}, {"--rekey", "--ike", "e2e"}} {
		if out, err := ch.Swanctl(ctx, args...); err != nil {
			t.Fatalf("swanctl %s after the failover: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	err = lab.WaitFor(ctx, "charon's rekeys answered", 20*time.Second, 50*time.Millisecond, func() (bool, error) {
		log, err := ch.LogTail(1 << 20)
		if err != nil {
			return false, err
		}
		return strings.Count(log, "rekeyed") >= 1 && strings.Contains(log, "IKE_SA e2e[") && strings.Count(log, "CREATE_CHILD_SA response") >= 2,
			fmt.Errorf("%s", lab.Tail(log, 8))
	})
	if err != nil {
		t.Error(err)
	}
	back := flows.received()
	err = lab.WaitFor(ctx, "traffic both ways after the rekeys", 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		r := flows.received()
		return r[0] > back[0]+100 && r[1] > back[1]+100, fmt.Errorf("received %v, %v before the rekeys", r, back)
	})
	if err != nil {
		t.Error(err)
	}
	if n := inits(); n != inits0 {
		t.Errorf("charon's log shows %d IKE_SA_INIT messages after the failover (%d before): a new negotiation", n, inits0)
	}
	if log, err := ch.LogTail(1 << 20); err == nil {
		for _, bad := range []string{"replay", "verification failed", "giving up", "INITIAL_CONTACT"} {
			if strings.Contains(log, bad) {
				t.Errorf("charon's log has %q:\n%s", bad, lab.Tail(log, 40))
			}
		}
	}

	flows.up.StopSending(0)
	flows.down.StopSending(0)
	if _, err := capture.Stop(); err != nil {
		t.Fatal(err)
	}
	pkts, err := lab.ReadESP(capFile)
	if err != nil {
		t.Fatal(err)
	}
	rep := lab.CheckESP(pkts)
	if rep.DupIV() != 0 || rep.DupSeq() != 0 {
		t.Errorf("%d ESP packets repeat an (SPI, IV) pair and %d an (SPI, sequence number) pair: %v", rep.DupIV(), rep.DupSeq(), rep)
	}
	for _, f := range []struct {
		name string
		flow *lab.SeqFlow
	}{{"host -> remote", flows.up}, {"remote -> host", flows.down}} {
		r, err := f.flow.Stop(0)
		if err != nil {
			t.Error(err)
		}
		if r.Duplicates != 0 {
			t.Errorf("%s: %d datagrams arrived twice", f.name, r.Duplicates)
		}
		measuref(t, "IKE failover opposite strongSwan, %s: %v", f.name, r)
	}
	measuref(t, "IKE failover opposite strongSwan: %d ESP packets on the wan, %d (SPI, IV) pairs repeated; charon's IKE SA #%s kept", rep.Packets, rep.DupIV(), id0)
}
