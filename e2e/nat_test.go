package e2e_test

// A NAT between sluice and its peer whose UDP mappings live as long as
// keep_alive, or Linux's default (issue 28, defect 5):
//
//	"gw": sluice 192.0.2.2 --- "nat": 192.0.2.254 | 198.51.100.1 --- peer 198.51.100.2
//	      (site 10.2.0.0/24)        nftables masquerade             (site 10.1.0.0/24)
//
// The peer is charon (kernel-libipsec; e2e/strongswan_test.go's bed) or
// another sluice. The NAT's UDP conntrack timeouts are its namespace's
// own; its table (/proc/net/nf_conntrack) shows which mapping sluice's
// flow has. TestNATIdle: 90 s of silence, and the mapping is the one it
// was, both ways. TestNATMappingLost: sluice is stopped (SIGSTOP) until
// the NAT forgets its mapping, the peer's ESP to the old port takes that
// port, and sluice resumes: its next datagram leaves through a new
// mapping with another port; the peer must follow it there (RFC 7296
// section 2.23: sluice's liveness check tells it; with MOBIKE,
// UPDATE_SA_ADDRESSES does).
//
// Each takes a minute or two, mostly waiting for time to pass: the
// subtests run in parallel.

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

const (
	natIdle   = 90 * time.Second // TestNATIdle's silence
	natBudget = 5 * time.Minute  // everything one NAT test does, at most
)

// natBed is sluice ("gw") behind the NAT, and its peer outside.
type natBed struct {
	t      *testing.T
	ctx    context.Context
	gw     *site
	nat    *lab.Netns
	peerNS *lab.Netns
	ch     *lab.Charon // the peer, when it is charon
	ps     *site       // the peer, when it is sluice
	// gwIn and peerIn are the inner addresses; gwOut and peerOut the
	// flow the NAT maps (ESP in UDP and IKE after NAT detection).
	gwIn, peerIn   netip.Addr
	gwOut, peerOut netip.AddrPort
}

// newNATBed builds the bed with a peer "strongswan" or "sluice" and a NAT
// whose UDP mappings live mapping seconds; sluice initiates. mobike is
// the sluice peers' mobike (charon's is off).
func newNATBed(t *testing.T, peer string, mapping int, mobike bool) *natBed {
	t.Helper()
	ctx := testContext(t, natBudget)
	b := &natBed{t: t, ctx: ctx, gwIn: ssInner[1].Addr(), peerIn: ssInner[0].Addr(),
		gwOut: netip.AddrPortFrom(ssWAN[1].Addr(), 4500), peerOut: netip.AddrPortFrom(natOut[0].Addr(), 4500)}
	if peer == "strongswan" {
		requireCharon(t)
		requireTool(t, "nft", "sysctl")
		sb := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true, nat: true, natUDPTimeout: mapping})
		sb.gw.tb.ctx = ctx // the bed's own context ends after defaultSetup: this test waits longer
		b.gw, b.nat, b.peerNS, b.ch = sb.gw, sb.natNS, sb.ssNS, sb.ch
		return b
	}
	lab.Require(t)
	requireTool(t, "nft", "sysctl", "ping")
	tb := &testbed{t: t, ctx: ctx, lab: lab.NewForTest(t, nil)}
	var err error
	if tb.dir, err = tb.lab.Dir(); err != nil {
		t.Fatal(err)
	}
	var nss [3]*lab.Netns
	for i, name := range []string{"gw", "nat", "peer"} {
		if nss[i], err = tb.lab.NewNetns(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	gwNS, natNS, peerNS := nss[0], nss[1], nss[2]
	if err := tb.lab.Veth(peerNS, wanIf, natNS, "out0"); err != nil {
		t.Fatal(err)
	}
	if err := tb.lab.Veth(natNS, "in0", gwNS, wanIf); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		ns *lab.Netns
		If string
		p  netip.Prefix
	}{{peerNS, wanIf, natOut[0]}, {natNS, "out0", natOut[1]}, {natNS, "in0", natIn}, {gwNS, wanIf, ssWAN[1]}} {
		if err := a.ns.AddAddr(a.If, a.p); err != nil {
			t.Fatal(err)
		}
	}
	if err := gwNS.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), wanIf, natIn.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := natNS.Masquerade(ctx, "out0", mapping); err != nil {
		t.Fatal(err)
	}
	psk := randomHex(32)
	ids := [2]string{"gw.e2e.sluice", "peer.e2e.sluice"}
	mk := func(name string, ns *lab.Netns, wan netip.Addr) *site {
		s := &site{tb: tb, name: name, ns: ns, wan: wan, cfgPath: filepath.Join(tb.dir, "gateway-"+name+".toml"),
			sock: filepath.Join(tb.dir, name+".sock"), logPath: filepath.Join(tb.dir, "gateway-"+name+".log")}
		lab.LogOnFailure(t, "sluice "+name+" log", s.logPath, 60)
		return s
	}
	b.gw, b.ps = mk("gw", gwNS, ssWAN[1].Addr()), mk("peer", peerNS, natOut[0].Addr())
	tb.sites = [2]*site{b.gw, b.ps}
	b.nat, b.peerNS = natNS, peerNS
	conn := func(i int, local, remote netip.Addr, start string) connConfig {
		inner := [2]netip.Prefix{ssInner[1], ssInner[0]}
		return connConfig{Name: "nat", Local: local, Remote: remote, LocalID: ids[i], RemoteID: ids[1-i], PSK: psk,
			Child: "net", LocalTS: []netip.Prefix{inner[i].Masked()}, RemoteTS: []netip.Prefix{inner[1-i].Masked()},
			ESP: "aes128gcm16", Start: start, MOBIKE: &mobike}
	}
	captureNS(t, tb.lab, []*lab.Netns{gwNS, natNS, peerNS}, b.gw.logPath, b.ps.logPath)
	b.ps.start(&gwConfig{TUN: []netip.Prefix{ssInner[0]}, UDP: b.peerOut,
		Connections: []connConfig{conn(1, natOut[0].Addr(), netip.Addr{}, "none")}})
	b.gw.start(&gwConfig{TUN: []netip.Prefix{ssInner[1]}, UDP: b.gwOut,
		Connections: []connConfig{conn(0, ssWAN[1].Addr(), natOut[0].Addr(), "start")}})
	return b
}

// establish waits for the tunnel and pings through it both ways; it
// returns the NAT's mapping of sluice's flow.
func (b *natBed) establish() netip.AddrPort {
	t := b.t
	t.Helper()
	ch := b.gw.waitChild(b.ctx, "net", 30*time.Second, nil)
	if !ch.Encap {
		t.Fatalf("behind a NAT the child must use ESP in UDP: %+v", ch)
	}
	waitPing(t, b.ctx, b.gw.ns, b.peerIn)
	waitPing(t, b.ctx, b.peerNS, b.gwIn)
	m, ok := b.mapping()
	if !ok {
		t.Fatalf("the NAT holds no mapping of %v -> %v", b.gwOut, b.peerOut)
	}
	if r := b.peerRemote(); r != m {
		t.Fatalf("the peer sends to %v, the NAT's mapping is %v", r, m)
	}
	return m
}

// mapping is the NAT's mapping of sluice's flow, if it holds one.
func (b *natBed) mapping() (netip.AddrPort, bool) {
	b.t.Helper()
	m, ok, err := b.nat.Mapping(b.ctx, b.gwOut, b.peerOut)
	if err != nil {
		b.t.Fatal(err)
	}
	return m, ok
}

// charonRemote finds the remote host of swanctl --list-sas.
var charonRemote = regexp.MustCompile(`remote\s+'[^']*'\s+@\s+([0-9.]+)\[(\d+)\]`)

// peerRemote is where the peer's IKE SA sends to now.
func (b *natBed) peerRemote() netip.AddrPort {
	t := b.t
	t.Helper()
	if b.ps != nil {
		for _, c := range b.ps.ike().Connections {
			if c.IKERemote != "" {
				ap, err := netip.ParseAddrPort(c.IKERemote)
				if err != nil {
					t.Fatal(err)
				}
				return ap
			}
		}
		return netip.AddrPort{}
	}
	out, err := b.ch.Swanctl(b.ctx, "--list-sas")
	if err != nil {
		t.Fatal(err)
	}
	m := charonRemote.FindStringSubmatch(out)
	if m == nil {
		return netip.AddrPort{}
	}
	port, _ := strconv.ParseUint(m[2], 10, 16)
	return netip.AddrPortFrom(netip.MustParseAddr(m[1]), uint16(port))
}

// TestNATIdle: sluice behind a NAT whose UDP mappings live keep_alive
// (20 s, the default) or 30 s (Linux's nf_conntrack_udp_timeout), 90 s
// of silence: the NAT still has the mapping it had (the same port, and
// the flow has seen answers: one made again for a keepalive has not),
// and pings go through both ways, the peer's first (they need the
// mapping). Before, a
// keepalive could come KeepAlive after the last datagram, and the mapping
// expired (10 of 10 pings lost each way).
func TestNATIdle(t *testing.T) {
	t.Parallel() // with the other long NAT tests, after the package's serial ones
	for _, tc := range []struct {
		name, peer string
		mapping    int
	}{
		{"strongswan/20s", "strongswan", 20},
		{"strongswan/30s", "strongswan", 30},
		{"sluice/20s", "sluice", 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newNATBed(t, tc.peer, tc.mapping, false)
			before := b.establish()
			st0 := b.gw.stats().IKE.Stats
			// The subject of the test is time passing: it waits for it.
			time.Sleep(natIdle)
			st := b.gw.stats().IKE.Stats
			after, held := b.mapping()
			// A mapping the NAT forgot and made again for a keepalive
			// may get the same port, but it has seen no answer:
			// keepalives get none.
			replied := false
			flows, err := b.nat.UDPFlows(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range flows {
				replied = replied || (f.Src == b.gwOut && f.Dst == b.peerOut && f.Replied)
			}
			in, err := ping(b.ctx, b.peerNS, b.gwIn, 10, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ping(b.ctx, b.gw.ns, b.peerIn, 10, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			kas := st["keep_alives"] - st0["keep_alives"]
			measuref(t, "%s peer, NAT mapping %ds, %v idle: %d NAT-keepalives, %d mapping checks; mapping %v then %v (held %v, answers seen %v); peer->sluice %d/%d, sluice->peer %d/%d",
				tc.peer, tc.mapping, natIdle, kas, st["nat_mapping_checks"]-st0["nat_mapping_checks"], before, after, held, replied,
				in.Received, in.Sent, out.Received, out.Sent)
			if !held || after != before || !replied {
				t.Errorf("after %v idle the NAT maps sluice's flow to %v (held %v, answers seen %v), before to %v: the mapping expired", natIdle, after, held, replied, before)
			}
			if want := uint64(natIdle/(18*time.Second)) - 1; kas < want {
				t.Errorf("%d NAT-keepalives in %v, want at least %d", kas, natIdle, want)
			}
			if in.Received != in.Sent || out.Received != out.Sent {
				t.Errorf("after %v idle: peer->sluice %d/%d, sluice->peer %d/%d pings answered", natIdle, in.Received, in.Sent, out.Received, out.Sent)
			}
		})
	}
}

// TestNATMappingLost: sluice is stopped until the NAT forgets its
// mapping; the peer's pings meanwhile go to the old port, which the NAT
// now gives them (so it cannot give it to sluice again); sluice resumes,
// and its next datagram leaves through a new mapping with another port.
// Its late look finds more than keep_alive passed and sends a liveness
// check there; the peer (charon, or sluice without MOBIKE) moves the IKE
// SA and its Child SA to the new port on that authenticated message, or
// (sluice with MOBIKE) on sluice's UPDATE_SA_ADDRESSES, and pings go
// through both ways. Before, sluice sent a bare keepalive there, which
// moves nothing, and the tunnel stayed dead.
func TestNATMappingLost(t *testing.T) {
	t.Parallel() // with the other long NAT tests, after the package's serial ones
	for _, tc := range []struct {
		name, peer string
		mobike     bool
	}{
		{"strongswan", "strongswan", false},
		{"sluice", "sluice", false},
		{"sluice-mobike", "sluice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const mapping = 20
			b := newNATBed(t, tc.peer, mapping, tc.mobike)
			old := b.establish()
			pid := b.gw.proc.Pid()
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped := true
			resume := func() {
				if stopped {
					stopped = false
					if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
						t.Error(err)
					}
				}
			}
			t.Cleanup(resume)
			start := time.Now()
			err := lab.WaitFor(b.ctx, "the NAT to forget sluice's mapping", (mapping+20)*time.Second, 500*time.Millisecond, func() (bool, error) {
				_, ok := b.mapping()
				return !ok, fmt.Errorf("still mapped")
			})
			if err != nil {
				t.Fatal(err)
			}
			forgot := time.Since(start)
			// The peer's ESP to the old mapping: the NAT tracks it as a
			// flow of its own, on the old port.
			if _, err := ping(b.ctx, b.peerNS, b.gwIn, 3, 100*time.Millisecond, "-W", "0.3"); err != nil {
				t.Fatal(err)
			}
			flows, err := b.nat.UDPFlows(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			taken := false
			for _, f := range flows {
				taken = taken || (f.Src == b.peerOut && f.Dst == old)
			}
			if !taken {
				t.Fatalf("the peer's ESP to %v left no flow at the NAT: %+v", old, flows)
			}
			resume()
			// sluice's first datagram after it resumed makes the new
			// mapping; the peer must follow it there while it lasts.
			var now netip.AddrPort
			err = lab.WaitFor(b.ctx, "sluice's new mapping", 10*time.Second, 100*time.Millisecond, func() (bool, error) {
				m, ok := b.mapping()
				now = m
				return ok, fmt.Errorf("no mapping yet")
			})
			if err != nil {
				t.Fatal(err)
			}
			if now == old {
				t.Fatalf("the NAT gave sluice its old port %v again: the test shows nothing", old)
			}
			err = lab.WaitFor(b.ctx, "the peer to follow sluice's new mapping "+now.String(), 10*time.Second, 200*time.Millisecond, func() (bool, error) {
				r := b.peerRemote()
				return r == now, fmt.Errorf("the peer sends to %v", r)
			})
			if err != nil {
				t.Fatal(err)
			}
			if m, ok := b.mapping(); !ok || m != now {
				t.Fatalf("sluice's mapping %v became %v (held %v)", now, m, ok)
			}
			in := mustPing(t, b.ctx, "after the new mapping peer->sluice", b.peerNS, b.gwIn, 10, 50*time.Millisecond)
			out := mustPing(t, b.ctx, "after the new mapping sluice->peer", b.gw.ns, b.peerIn, 10, 50*time.Millisecond)
			st := b.gw.stats().IKE.Stats
			measuref(t, "%s peer: the NAT forgot %v after %v stopped; new mapping %v; sluice's mapping checks %d; peer->sluice %d/%d, sluice->peer %d/%d",
				tc.name, old, forgot.Round(time.Second), now, st["nat_mapping_checks"], in.Received, in.Sent, out.Received, out.Sent)
			if st["nat_mapping_checks"] == 0 {
				t.Errorf("sluice sent no liveness check for the lost mapping")
			}
			if b.ps != nil {
				ps := b.ps.ike().Stats
				if tc.mobike && ps["mobike_updates"] == 0 {
					t.Errorf("the sluice peer with MOBIKE moved without UPDATE_SA_ADDRESSES: %v", ps)
				}
				if !tc.mobike && ps["nat_peer_moved"] != 1 {
					t.Errorf("the sluice peer counted %d NAT-T moves, want 1", ps["nat_peer_moved"])
				}
			}
		})
	}
}
