package e2e_test

// sluice gateways keyed by IKEv2 ([[connection]] sections) rather than by
// [[sa]] tables: two sluice gateways negotiate their tunnel, with ESN.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// connConfig is one [[connection]] with its one child and its secrets.
type connConfig struct {
	Name          string
	Local, Remote netip.Addr // an invalid Remote is %any
	Proposals     string     // "" is the default
	Encap         bool
	DPDDelay      string
	RekeyTime     string // of the IKE SA
	OverTime      string // of the IKE SA: past RekeyTime while its rekey has not completed
	ReauthTime    string // reauth_time (e2e/reauth_test.go)
	Auth          string // "psk" (default) or "pubkey", both sides
	LocalID       string
	RemoteID      string
	PSK           string // hex
	Certs         []string
	CACerts       []string
	KeyFile       string
	// EAP, if set, is [connection.remote] auth (eap-mschapv2, eap-tls:
	// sluice the EAP server; Auth is then our side's), EAPPasswords the
	// type = "eap" secrets by identity.
	EAP          string
	EAPPasswords map[string]string
	EAPID        string // [connection.remote] eap_id; "" leaves the default (%any)

	Child             string
	LocalTS, RemoteTS []netip.Prefix
	ESP               string
	Start             string
	ChildRekeyTime    string
	ChildLifeTime     string
	// ChildRekeyPackets and ChildLifePackets are the child's
	// rekey_packets and life_packets (0: left out).
	ChildRekeyPackets, ChildLifePackets int64
	More                                []connChild // further children
	MOBIKE                              *bool       // mobike; nil leaves the default (on)
}

// connChild is a further [[connection.children]] table.
type connChild struct {
	Name              string
	LocalTS, RemoteTS []netip.Prefix
	Start             string
}

// file is the connection's [[connection]] table and its [[secret]]s.
func (c *connConfig) file() (config.FileConnection, []config.FileSecret) {
	auth := cmp.Or(c.Auth, config.AuthPSK)
	fc := config.FileConnection{
		Name: c.Name, LocalAddrs: []string{c.Local.String()}, RemoteAddrs: []string{"%any"},
		Proposals: c.Proposals, Encap: c.Encap, MOBIKE: c.MOBIKE, DPDDelay: c.DPDDelay, RekeyTime: c.RekeyTime, OverTime: c.OverTime, ReauthTime: c.ReauthTime,
		Local:  config.FileAuth{Auth: auth, ID: c.LocalID, Certs: c.Certs},
		Remote: config.FileAuth{Auth: auth, ID: c.RemoteID, CACerts: c.CACerts},
		Children: []config.FileChild{{Name: c.Child, LocalTS: strs(c.LocalTS), RemoteTS: strs(c.RemoteTS),
			ESPProposals: c.ESP, StartAction: c.Start, RekeyTime: c.ChildRekeyTime, LifeTime: c.ChildLifeTime,
			RekeyPackets: c.ChildRekeyPackets, LifePackets: c.ChildLifePackets}},
	}
	if c.Remote.IsValid() {
		fc.RemoteAddrs = []string{c.Remote.String()}
	}
	for _, m := range c.More {
		fc.Children = append(fc.Children, config.FileChild{Name: m.Name, LocalTS: strs(m.LocalTS), RemoteTS: strs(m.RemoteTS),
			StartAction: m.Start, ESPProposals: c.ESP})
	}
	var secrets []config.FileSecret
	if c.PSK != "" {
		secrets = append(secrets, config.FileSecret{Type: config.SecretIKE, IDs: []string{c.LocalID, c.RemoteID}, Secret: "0x" + c.PSK})
	}
	if c.KeyFile != "" {
		secrets = append(secrets, config.FileSecret{Type: config.SecretPrivate, File: c.KeyFile})
	}
	if c.EAP != "" {
		fc.Remote.Auth, fc.Remote.EAPID = c.EAP, c.EAPID
		for _, id := range slices.Sorted(maps.Keys(c.EAPPasswords)) {
			secrets = append(secrets, config.FileSecret{Type: config.SecretEAP, ID: id, Secret: c.EAPPasswords[id]})
		}
	}
	return fc, secrets
}

// ike is `sluice ike list --json`.
func (s *site) ike() gateway.IKEInfo {
	s.tb.t.Helper()
	var info gateway.IKEInfo
	s.cliJSON(&info, "ike", "list")
	return info
}

// waitChild waits until the site's child is installed and returns it.
func (s *site) waitChild(ctx context.Context, child string, d time.Duration, ok func(gateway.IKEChildInfo) bool) gateway.IKEChildInfo {
	s.tb.t.Helper()
	var got gateway.IKEChildInfo
	err := lab.WaitFor(ctx, "IKE child "+child+" at gateway "+s.name, d, 100*time.Millisecond, func() (bool, error) {
		for _, c := range s.ike().Connections {
			for _, ch := range c.Children {
				if ch.Name == child && ch.State == "installed" && (ok == nil || ok(ch)) {
					got = ch
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("not installed")
	})
	if err != nil {
		s.tb.t.Fatal(err)
	}
	return got
}

// ikePairConfigs are two mirror-image gateways with one IKE connection:
// A initiates at start, B waits.
func ikePairConfigs(esp string, encap bool) [2]*gwConfig {
	psk := randomHex(32)
	ids := [2]string{"a.e2e.sluice", "b.e2e.sluice"}
	names := [2]string{"a", "b"}
	var out [2]*gwConfig
	for i := range 2 {
		j := 1 - i
		start := "none"
		if i == 0 {
			start = "start"
		}
		out[i] = &gwConfig{
			TUN: []netip.Prefix{inner4[i]},
			UDP: netip.AddrPortFrom(wan4[i].Addr(), 4500),
			Connections: []connConfig{{
				Name: "to-" + names[j], Local: wan4[i].Addr(), Remote: wan4[j].Addr(), Encap: encap,
				LocalID: ids[i], RemoteID: ids[j], PSK: psk,
				Child: "net-" + names[j], LocalTS: []netip.Prefix{inner4[i].Masked()}, RemoteTS: []netip.Prefix{inner4[j].Masked()},
				ESP: esp, Start: start,
			}},
		}
		if !encap {
			out[i].RawESP = wan4[i].Addr()
		}
	}
	return out
}

// TestIKESluicePair: two sluice gateways key their tunnel with IKEv2
// (PSK), with extended sequence numbers, ESP as IP protocol 50 (no NAT,
// no forced encapsulation); ping and TCP both ways; the CLI's view.
func TestIKESluicePair(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping", "iperf3")
	tb := startPair(t, wan4, ikePairConfigs("aes128gcm16-esn", false))
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	ca := a.waitChild(ctx, "net-b", 20*time.Second, nil)
	cb := b.waitChild(ctx, "net-a", 20*time.Second, nil)
	if !ca.ESN || !cb.ESN || ca.Suite != "aes128gcm16" || ca.Encap || ca.InSPI != cb.OutSPI || ca.OutSPI != cb.InSPI {
		t.Fatalf("children disagree or are not what was asked: A %+v, B %+v", ca, cb)
	}
	aIn, bIn := inner4[0].Addr(), inner4[1].Addr()
	waitPing(t, ctx, a.ns, bIn)
	mustPing(t, ctx, "IKE pair A->B", a.ns, bIn, 20, 10*time.Millisecond)
	mustPing(t, ctx, "IKE pair B->A", b.ns, aIn, 20, 10*time.Millisecond)
	mustIperf(t, tb, "IKE pair (ESN) A->B", b.ns, bIn, a.ns, iperfOptions{Seconds: 2})
	mustIperf(t, tb, "IKE pair (ESN) B->A", a.ns, aIn, b.ns, iperfOptions{Seconds: 2})

	// The tunnel is the child's, with the negotiated SAs in the SAD.
	ts := a.tunnels()
	if len(ts) != 1 || ts[0].Name != "net-b" || ts[0].Peer != wan4[1].Addr().String() || ts[0].Encap != "none" {
		t.Errorf("tunnels at A: %+v", ts)
	}
	sas := a.sas()
	out := mustSA(t, sas, ca.OutSPI, "out")
	if !out.ESN || out.Packets == 0 {
		t.Errorf("A's outbound SA %+v", out)
	}
	st := a.stats()
	if st.IKE == nil || st.IKE.Stats["ike_sa_established"] != 1 || st.IKE.Stats["child_sa_established"] != 1 {
		t.Errorf("A's IKE counters: %+v", st.IKE)
	}
	if out, err := a.cli("ike", "list"); err != nil || !strings.Contains(out, "installed") || !strings.Contains(out, "b.e2e.sluice") {
		t.Errorf("sluice ike list: %v\n%s", err, out)
	}
	// ike list has the negotiated IKE suite, both identities and the
	// child's bytes each way, from its SAs' counters.
	conns := a.ike().Connections
	if len(conns) != 1 || len(conns[0].Children) != 1 {
		t.Fatalf("A's connections: %+v", conns)
	}
	c, ch := conns[0], conns[0].Children[0]
	if c.LocalID != "a.e2e.sluice" || c.RemoteID != "b.e2e.sluice" || c.IKESuite == "" {
		t.Errorf("A's IKE SA: suite %q, local id %q, remote id %q", c.IKESuite, c.LocalID, c.RemoteID)
	}
	if _, err := ike.ParseProposals(ike.ProtoIKE, c.IKESuite); err != nil {
		t.Errorf("the IKE suite %q is not a proposal: %v", c.IKESuite, err)
	}
	if ch.BytesOut < out.Bytes || ch.PacketsOut < out.Packets || ch.BytesIn == 0 || ch.PacketsIn == 0 {
		t.Errorf("child's counters %d/%d bytes, %d/%d packets in/out; its outbound SA had %d bytes, %d packets",
			ch.BytesIn, ch.BytesOut, ch.PacketsIn, ch.PacketsOut, out.Bytes, out.Packets)
	}

	// terminate: B learns of it, both tunnels go; initiate brings it back.
	if _, err := a.cli("ike", "terminate", "to-b"); err != nil {
		t.Fatal(err)
	}
	err := lab.WaitFor(ctx, "B to remove its tunnel", 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		return len(b.tunnels()) == 0, fmt.Errorf("B still has %d tunnels", len(b.tunnels()))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli("ike", "initiate", "to-b"); err != nil {
		t.Fatal(err)
	}
	c2 := a.waitChild(ctx, "net-b", 10*time.Second, nil)
	if c2.InSPI == ca.InSPI {
		t.Errorf("the child came back with its old SPI %#x", c2.InSPI)
	}
	waitPing(t, ctx, b.ns, aIn)

	// A gateway that stops deletes its IKE SAs: B's tunnel goes with them.
	a.stop()
	err = lab.WaitFor(ctx, "B to remove its tunnel after A stopped", 5*time.Second, 100*time.Millisecond, func() (bool, error) {
		return len(b.tunnels()) == 0, fmt.Errorf("B still has %d tunnels", len(b.tunnels()))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIKERekeyUnderTraffic: between two sluice gateways, A rekeys the
// Child SA every one to two seconds and the IKE SA every three, B answers;
// pings both ways lose nothing.
func TestIKERekeyUnderTraffic(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes256gcm16-esn", true)
	c := &cfgs[0].Connections[0]
	// The IKE SA rekeys within its first 3 s and may live 2 s past that
	// (over_time): 10% of 3 s left 0.3 s for a rekey on a loaded machine,
	// which once froze for 0.67 s and let it expire.
	c.ChildRekeyTime, c.ChildLifeTime, c.RekeyTime, c.OverTime = "2s", "3s", "3s", "2s"
	tb := newTestbed(t, wan4)
	a, b := tb.sites[0], tb.sites[1]
	captureNS(t, tb.lab, []*lab.Netns{a.ns, b.ns}, a.logPath, b.logPath)
	for i, s := range tb.sites {
		s.start(cfgs[i])
	}
	first := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
	const n, interval = 500, 10 * time.Millisecond
	// A reply up to a second late counts (pingAll): late is not lost.
	done := make(chan pingRun, 1)
	go func() {
		r, lost, err := pingAll(tb.ctx, b.ns, inner4[0].Addr(), n, interval)
		done <- pingRun{r, lost, err}
	}()
	ab, lost, err := pingAll(tb.ctx, a.ns, inner4[1].Addr(), n, interval)
	if err != nil {
		t.Fatal(err)
	}
	measuref(t, "IKE rekeys A->B: %v", ab)
	if len(lost) > 0 {
		t.Errorf("A->B: %d of %d pings answered across the rekeys (lost icmp_seq %v)", ab.Received, n, lost)
	}
	ba := <-done
	if ba.err != nil {
		t.Fatal(ba.err)
	}
	measuref(t, "IKE rekeys B->A: %v", ba.r)
	if len(ba.lost) > 0 {
		t.Errorf("B->A: %d of %d pings answered across the rekeys (lost icmp_seq %v)", ba.r.Received, n, ba.lost)
	}
	for _, s := range tb.sites {
		st := s.stats().IKE
		if st == nil || st.Stats["child_sa_rekeyed"] < 2 || st.Stats["ike_sa_rekeyed"] < 1 || st.Stats["child_sa_expired"] > 0 {
			t.Errorf("gateway %s: want at least 2 Child SA and 1 IKE SA rekeys, none expired: %v", s.name, st)
		}
		// The child's tunnel counts every ping and answer in each
		// direction, across the rekeys: the retired SAs' packets too.
		ts := s.stats().Tunnels
		if len(ts) != 2 || ts[0].Direction != "in" || ts[1].Direction != "out" || ts[0].Tunnel != ts[1].Tunnel {
			t.Errorf("gateway %s: tunnel counters %+v, want one tunnel in and out", s.name, ts)
			continue
		}
		for _, d := range ts {
			if d.Packets < 2*n {
				t.Errorf("gateway %s: tunnel %s %s counted %d packets, want at least %d across the rekeys", s.name, d.Tunnel, d.Direction, d.Packets, 2*n)
			}
		}
	}
	if now := a.waitChild(tb.ctx, "net-b", time.Second, nil); now.InSPI == first.InSPI {
		t.Errorf("the child still has its first SPI %#x", first.InSPI)
	}
}

// TestIKETrapAndReload: A's child has start_action = "trap": its tunnel
// exists without SAs, the first packet into it is dropped (no_sa) and
// starts the negotiation, and ping then goes through. A reload that takes
// the connection out deletes it (B removes its tunnel too); one that puts
// it back installs the trap again.
func TestIKETrapAndReload(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes128gcm16", true)
	cfgs[0].Connections[0].Start = "trap"
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ts := a.tunnels()
	if len(ts) != 1 || ts[0].Name != "net-b" || ts[0].Out != "" {
		t.Fatalf("A's trap tunnel: %+v, want net-b without SAs", ts)
	}
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
	a.waitChild(tb.ctx, "net-b", 5*time.Second, nil)
	if d := drops(a.stats()); d["no_sa"] == 0 {
		t.Errorf("A counted no packet dropped while the trap negotiated: %v", d)
	}
	mustPing(t, tb.ctx, "trap A->B", a.ns, inner4[1].Addr(), 10, 10*time.Millisecond)

	// Out of the file: deleted, here and at B.
	conns := cfgs[0].Connections
	cfgs[0].Connections = nil
	cfgs[0].SAs = []saConfig{newSA(t, "x-out", 0x7001, wan4[0].Addr(), wan4[1].Addr(), "udp", "aes128gcm16"),
		newSA(t, "x-in", 0x7002, wan4[1].Addr(), wan4[0].Addr(), "udp", "aes128gcm16")}
	cfgs[0].Tunnels = []tunnelConfig{{Name: "static", Local: wan4[0].Addr(), Peer: wan4[1].Addr(), Encap: "udp",
		Remote: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24")}, Out: "x-out", In: []string{"x-in"}}}
	a.writeConfig(cfgs[0])
	a.mustReload()
	if ts := a.tunnels(); len(ts) != 1 || ts[0].Name != "static" {
		t.Errorf("A after the connection left the file: %+v, want the static tunnel only", ts)
	}
	err := lab.WaitFor(tb.ctx, "B to remove its tunnel", 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		return len(b.tunnels()) == 0, fmt.Errorf("B still has %d tunnels", len(b.tunnels()))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Back in the file: the trap again, beside the static tunnel.
	cfgs[0].Connections = conns
	a.writeConfig(cfgs[0])
	a.mustReload()
	if ts := a.tunnels(); len(ts) != 2 {
		t.Errorf("A after the connection came back: %+v, want the static and the trap tunnel", ts)
	}
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
}

// TestIKETwoChildren: a connection with two children: the second comes on
// the same IKE SA (CREATE_CHILD_SA), each child is a tunnel of its own
// with its own routes, and ping goes through both.
func TestIKETwoChildren(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	more := [2]netip.Prefix{netip.MustParsePrefix("10.11.0.1/24"), netip.MustParsePrefix("10.12.0.1/24")}
	cfgs := ikePairConfigs("aes128gcm16", true)
	for i := range 2 {
		cfgs[i].TUN = append(cfgs[i].TUN, more[i])
		c := &cfgs[i].Connections[0]
		c.More = []connChild{{Name: c.Child + "-2", LocalTS: []netip.Prefix{more[i].Masked()}, RemoteTS: []netip.Prefix{more[1-i].Masked()}, Start: c.Start}}
	}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	c1 := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
	c2 := a.waitChild(tb.ctx, "net-b-2", 20*time.Second, nil)
	b.waitChild(tb.ctx, "net-a-2", 5*time.Second, nil)
	if c1.InSPI == c2.InSPI {
		t.Errorf("two children with one SPI: %+v %+v", c1, c2)
	}
	var spis []string
	for _, c := range a.ike().Connections {
		spis = append(spis, c.IKESPIi)
	}
	if len(spis) != 1 {
		t.Errorf("IKE SAs: %v, want one connection", spis)
	}
	if ts := a.tunnels(); len(ts) != 2 {
		t.Errorf("A's tunnels %+v, want one per child", ts)
	}
	waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
	waitPing(t, tb.ctx, a.ns, more[1].Addr(), "-I", more[0].Addr().String())
	if st := a.stats().IKE; st == nil || st.Stats["ike_sa_established"] != 1 {
		t.Errorf("want one IKE SA for both children: %v", st)
	}
}

// TestIKEReloadAddsConnection: a reload that adds a connection starts it
// on the running endpoint and leaves the other connection's IKE and
// Child SAs as they were (the same SPIs), at both gateways.
func TestIKEReloadAddsConnection(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	more := [2]netip.Prefix{netip.MustParsePrefix("10.11.0.1/24"), netip.MustParsePrefix("10.12.0.1/24")}
	cfgs := ikePairConfigs("aes128gcm16", true)
	for i := range 2 {
		cfgs[i].TUN = append(cfgs[i].TUN, more[i])
	}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ca := a.waitChild(tb.ctx, "net-b", 20*time.Second, nil)
	cb := b.waitChild(tb.ctx, "net-a", 5*time.Second, nil)
	ikeSPI := func(s *site, conn string) string {
		for _, c := range s.ike().Connections {
			if c.Name == conn {
				return c.IKESPIi
			}
		}
		return ""
	}
	ikeA, ikeB := ikeSPI(a, "to-b"), ikeSPI(b, "to-a")

	// A second connection between the same gateways, with identities and
	// selectors of its own: B (the responder) learns it first.
	names := [2]string{"a", "b"}
	for _, i := range []int{1, 0} {
		j := 1 - i
		c := cfgs[i].Connections[0]
		c.Name, c.Child = c.Name+"2", c.Child+"2"
		c.LocalID, c.RemoteID = names[i]+"2.e2e.sluice", names[j]+"2.e2e.sluice"
		c.LocalTS, c.RemoteTS = []netip.Prefix{more[i].Masked()}, []netip.Prefix{more[j].Masked()}
		cfgs[i].Connections = append(cfgs[i].Connections, c)
		tb.sites[i].writeConfig(cfgs[i])
		tb.sites[i].mustReload()
	}
	a.waitChild(tb.ctx, "net-b2", 20*time.Second, nil)
	b.waitChild(tb.ctx, "net-a2", 5*time.Second, nil)
	// The reload routed the new remote selectors into the TUN device.
	waitPing(t, tb.ctx, a.ns, more[1].Addr(), "-I", more[0].Addr().String())

	na := a.waitChild(tb.ctx, "net-b", time.Second, nil)
	nb := b.waitChild(tb.ctx, "net-a", time.Second, nil)
	if na.InSPI != ca.InSPI || na.OutSPI != ca.OutSPI || nb.InSPI != cb.InSPI || nb.OutSPI != cb.OutSPI {
		t.Errorf("the unchanged connection's Child SAs changed: A %x/%x -> %x/%x, B %x/%x -> %x/%x",
			ca.InSPI, ca.OutSPI, na.InSPI, na.OutSPI, cb.InSPI, cb.OutSPI, nb.InSPI, nb.OutSPI)
	}
	if a2, b2 := ikeSPI(a, "to-b"), ikeSPI(b, "to-a"); a2 != ikeA || b2 != ikeB || ikeA == "" {
		t.Errorf("the unchanged connection's IKE SA changed: A %s -> %s, B %s -> %s", ikeA, a2, ikeB, b2)
	}
	mustPing(t, tb.ctx, "unchanged connection after the reload", a.ns, inner4[1].Addr(), 10, 10*time.Millisecond)
}
