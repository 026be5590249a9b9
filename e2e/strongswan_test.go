package e2e_test

// A sluice gateway opposite strongSwan's userspace data plane
// (kernel-libipsec), the two keyed by IKEv2 between charon and sluice:
//
//  1. Namespaces "ss" (strongSwan, site 10.1.0.0/24) and "gw" (sluice, site
//     10.2.0.0/24), joined by a veth (192.0.2.1 - 192.0.2.2); for NAT-T a
//     third, "nat", sits between them and masquerades sluice's side
//     (nftables). charon runs in "ss" with its own strongswan.conf
//     (STRONGSWAN_CONF) and a private /run (unshare -m and a tmpfs),
//     driven by swanctl over its own vici socket.
//  2. Either charon initiates (swanctl --initiate) and sluice responds, or
//     sluice initiates (start_action = "start"); PSK or certificates from
//     a test CA. ESP goes in UDP 4500 (libipsec does nothing else).
//  3. sluice's child and charon's CHILD_SA must have the same SPIs; ping
//     and iperf3 TCP go through both ways.
//
// The other tests here rekey the Child SA and the IKE SA under traffic,
// kill charon with SIGKILL and restart it (sluice's DPD finds it dead and
// initiates again), and put a NAT between the two.
//
// e2e/strongswan/README.md says the same for people who run it by hand.

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/internal/lab"
)

// The network of the interop tests.
var (
	ssWAN   = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}
	ssInner = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.1/24"), netip.MustParsePrefix("10.2.0.1/24")}
	// With a NAT between them: charon on the far side, the NAT's outside.
	natOut   = [2]netip.Prefix{netip.MustParsePrefix("198.51.100.2/24"), netip.MustParsePrefix("198.51.100.1/24")}
	natIn    = netip.MustParsePrefix("192.0.2.254/24") // the NAT's inside, sluice's default route
	ssIDs    = [2]string{"strongswan@e2e.sluice", "sluice@e2e.sluice"}
	ssIKE    = "aes128-sha256-x25519"
	ssIPerfS = 1
)

// requireCharon skips without charon, swanctl or the traffic tools,
// except under CI=true.
func requireCharon(t *testing.T) {
	t.Helper()
	lab.RequireCharon(t)
	requireTool(t, "ping", "iperf3")
}

// TestStrongSwanInterop negotiates with strongSwan 5.9.8 (charon with
// kernel-libipsec) over IKEv2, sluice as responder for each ESP suite both
// data planes support, sluice as initiator, and with certificates both
// ways, and sends ping and TCP through the tunnel both ways.
func TestStrongSwanInterop(t *testing.T) {
	cases := []struct {
		name, esp       string
		sluiceInitiates bool
		auth            string
		iperf           bool
	}{
		{"responder/aes128gcm16", "aes128gcm16", false, "psk", true},
		{"responder/aes256gcm16", "aes256gcm16", false, "psk", true},
		{"responder/chacha20poly1305", "chacha20poly1305", false, "psk", true},
		{"responder/aes128-sha256", "aes128-sha256", false, "psk", true},
		{"responder/aes256-sha256", "aes256-sha256", false, "psk", true},
		{"initiator/aes256gcm16", "aes256gcm16", true, "psk", true},
		{"initiator/certs", "aes128gcm16", true, "pubkey", false},
		{"responder/certs", "aes256-sha256", false, "pubkey", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireCharon(t)
			b := newSSBed(t, ssOptions{esp: tc.esp, auth: tc.auth, sluiceInitiates: tc.sluiceInitiates})
			ch := b.establish()
			b.traffic(tc.esp, tc.iperf)
			b.checkCharonSPIs(ch)
		})
	}
}

// TestStrongSwanDN: the gateway's [connection.local] and
// [connection.remote] ids are distinguished names (id = "CN=..."), both
// sides authenticate with certificates whose subjects are those names in
// UTF8String, and charon sends its DN in PrintableString; sluice as
// initiator and as responder, with ping through the tunnel (issue 16,
// defect 6: the id was read as an FQDN and DNs compared byte for byte).
func TestStrongSwanDN(t *testing.T) {
	for _, initiates := range []bool{true, false} {
		t.Run(map[bool]string{true: "initiator", false: "responder"}[initiates], func(t *testing.T) {
			requireCharon(t)
			b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "pubkey", sluiceInitiates: initiates, dn: true})
			ch := b.establish()
			b.traffic("DN ids", false)
			b.checkCharonSPIs(ch)
		})
	}
}

// TestStrongSwanRekeyUnderTraffic: sluice rekeys the Child SA every few
// seconds and the IKE SA once, while pings flow both ways; not one is
// lost, and the counters show the rekeys.
func TestStrongSwanRekeyUnderTraffic(t *testing.T) {
	requireCharon(t)
	// over_time 2s: 10% of 3 s left 0.3 s for the IKE SA's rekey, and a
	// loaded machine once froze for 0.67 s and let it expire.
	b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true, childRekey: "2s", ikeRekey: "3s", ikeOver: "2s"})
	first := b.establish()
	const n, interval = 500, 10 * time.Millisecond // 5 s: two Child SA rekeys and an IKE SA rekey at least
	done := make(chan pingRun, 1)
	go func() {
		r, lost, err := pingAll(b.ctx, b.gw.ns, ssInner[0].Addr(), n, interval)
		done <- pingRun{r, lost, err}
	}()
	r, lost, err := pingAll(b.ctx, b.ssNS, ssInner[1].Addr(), n, interval)
	if err != nil {
		t.Fatal(err)
	}
	measuref(t, "strongSwan rekeys: strongSwan->sluice: %v", r)
	if len(lost) > 0 {
		t.Errorf("strongSwan->sluice: %d of %d pings answered across the rekeys (lost icmp_seq %v)", r.Received, n, lost)
	}
	r2 := <-done
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	measuref(t, "strongSwan rekeys: sluice->strongSwan: %v", r2.r)
	if len(r2.lost) > 0 {
		t.Errorf("sluice->strongSwan: %d of %d pings answered across the rekeys (lost icmp_seq %v)", r2.r.Received, n, r2.lost)
	}
	if len(lost)+len(r2.lost) > 0 {
		gs := b.gw.stats()
		t.Logf("sluice data plane drops %v; IKE %v", drops(gs), gs.IKE.Stats)
		for _, sa := range gs.SAs {
			t.Logf("sluice SA %#x %s: %d packets, drops %v", sa.SPI, sa.Direction, sa.Packets, sa.Drops)
		}
	}
	st := b.gw.stats().IKE
	if st == nil || st.Stats["child_sa_rekeyed"] < 2 || st.Stats["ike_sa_rekeyed"] < 1 || st.Stats["child_sa_expired"] > 0 {
		t.Errorf("want at least 2 Child SA and 1 IKE SA rekeys, counters %v", st)
	}
	now := b.gw.waitChild(b.ctx, "net", time.Second, nil)
	if now.InSPI == first.InSPI {
		t.Errorf("the child still has its first SPI %#x", first.InSPI)
	}
	b.checkCharonSPIs(now)
}

// TestStrongSwanRekeyNoLoss: the Child SA is rekeyed three times under
// pings both ways at 100 a second, once with charon starting each rekey
// (sluice responds) and once with sluice starting them; not one ping is
// lost and sluice drops nothing for an unknown SPI. As rekey responder
// sluice installs its new inbound SA before its answer leaves, and keeps
// sending on the old SA until the requester's Delete, as strongSwan does.
// A reply up to a second late counts (pinger): late is not lost.
func TestStrongSwanRekeyNoLoss(t *testing.T) {
	cases := []struct {
		name string
		o    ssOptions
	}{
		{"strongswan-rekeys", ssOptions{esp: "aes128gcm16", auth: "psk", ssChildRekey: "3s"}},
		{"sluice-rekeys", ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true, childRekey: "2s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireCharon(t)
			b := newSSBed(t, tc.o)
			b.establish()
			waitPing(t, b.ctx, b.ssNS, ssInner[1].Addr())
			waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
			rekeyed := func() uint64 {
				if st := b.gw.stats().IKE; st != nil {
					return st.Stats["child_sa_rekeyed"]
				}
				return 0
			}
			const rekeys = 3
			espCount := func() (opened, sealed, txErrors uint64) {
				for _, w := range b.gw.stats().Dataplane.Workers {
					opened, sealed, txErrors = opened+w.Opened, sealed+w.Sealed, txErrors+w.TxErrors
				}
				return opened, sealed, txErrors
			}
			r0, d0 := rekeyed(), drops(b.gw.stats())
			opened0, sealed0, txErrors0 := espCount()
			// One ping each way, 100 a second, from before the first
			// rekey until a second of traffic after the third (at most
			// a minute); stop judges what was sent a second before it.
			const interval = 10 * time.Millisecond
			toSluiceP, err := startPinger(b.ctx, b.ssNS, ssInner[1].Addr(), interval, 0)
			if err != nil {
				t.Fatal(err)
			}
			toSSP, err := startPinger(b.ctx, b.gw.ns, ssInner[0].Addr(), interval, 0)
			if err != nil {
				toSluiceP.stop()
				t.Fatal(err)
			}
			var openedAtLast uint64
			err = lab.WaitFor(b.ctx, fmt.Sprintf("%d rekeys under traffic", rekeys), time.Minute, 50*time.Millisecond, func() (bool, error) {
				opened, _, _ := espCount()
				if openedAtLast == 0 && rekeyed() >= r0+rekeys {
					openedAtLast = opened
				}
				// Each 10 ms, one request and one reply reach sluice.
				return openedAtLast != 0 && opened >= openedAtLast+2*uint64(pingTail/interval),
					fmt.Errorf("%d rekeys", rekeyed()-r0)
			})
			toSluice, lostToSluice, err1 := toSluiceP.stop()
			toSS, lostToSS, err2 := toSSP.stop()
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range []error{err1, err2} {
				if err != nil {
					t.Fatal(err)
				}
			}
			measuref(t, "%s, %d rekeys: strongSwan->sluice %d/%d pings answered (max rtt %.0f ms); sluice->strongSwan %d/%d (max rtt %.0f ms)", tc.name, rekeyed()-r0,
				toSluice.Received, toSluice.Sent, toSluice.Max, toSS.Received, toSS.Sent, toSS.Max)
			d := dropsSince(drops(b.gw.stats()), d0)
			if d["unknown_spi"] > 0 {
				t.Errorf("sluice dropped ESP for an unknown SPI across the rekeys: %v", d)
			}
			if len(lostToSluice)+len(lostToSS) > 0 {
				opened, sealed, txErrors := espCount()
				// Each ping answered is one ESP packet each way at sluice;
				// one lost before sluice is missing from opened.
				t.Logf("sluice opened %d ESP packets, sealed %d, %d transmit errors", opened-opened0, sealed-sealed0, txErrors-txErrors0)
				gs := b.gw.stats()
				t.Logf("sluice data plane drops %v; IKE %v", d, gs.IKE.Stats)
				for _, sa := range gs.SAs {
					t.Logf("sluice SA %#x %s: %d packets, drops %v", sa.SPI, sa.Direction, sa.Packets, sa.Drops)
				}
				t.Errorf("pings lost across the rekeys: strongSwan->sluice %d of %d answered (lost icmp_seq %v), sluice->strongSwan %d of %d (lost %v)",
					toSluice.Received, toSluice.Sent, lostToSluice, toSS.Received, toSS.Sent, lostToSS)
			}
			if st := b.gw.stats().IKE; st == nil || st.Stats["child_sa_expired"] > 0 {
				t.Errorf("a Child SA expired: %v", st)
			}
			b.checkCharonSPIs(b.gw.waitChild(b.ctx, "net", time.Second, nil))
		})
	}
}

// TestStrongSwanRestart: charon is killed (SIGKILL) and started again;
// sluice's liveness checks find it dead, and sluice (start_action =
// "start") negotiates a new IKE SA and child with it.
func TestStrongSwanRestart(t *testing.T) {
	requireCharon(t)
	b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true, dpd: "1s"})
	first := b.establish()
	mustPing(t, b.ctx, "before the restart", b.gw.ns, ssInner[0].Addr(), 5, 20*time.Millisecond)
	b.ch.Kill()
	start := time.Now()
	b.startCharon()
	now := b.gw.waitChild(b.ctx, "net", 30*time.Second, func(c gateway.IKEChildInfo) bool { return c.InSPI != first.InSPI })
	t.Logf("sluice re-established its child %v after charon restarted", time.Since(start).Round(time.Millisecond))
	waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
	mustPing(t, b.ctx, "after the restart", b.gw.ns, ssInner[0].Addr(), 10, 20*time.Millisecond)
	b.checkCharonSPIs(now)
	if st := b.gw.stats().IKE; st == nil || st.Stats["peers_dead"] < 1 {
		t.Errorf("no dead peer counted: %v", st)
	}
}

// TestStrongSwanNAT: a NAT (nftables masquerade) between sluice and
// charon; sluice initiates from behind it, both detect the NAT, IKE moves
// to port 4500 and ESP goes in UDP (sluice's connection does not force
// it), and ping goes through.
func TestStrongSwanNAT(t *testing.T) {
	requireCharon(t)
	requireTool(t, "nft")
	b := newSSBed(t, ssOptions{esp: "aes256gcm16", auth: "psk", sluiceInitiates: true, nat: true})
	ch := b.establish()
	if !ch.Encap || !strings.HasSuffix(ch.PeerAddr, ":4500") {
		t.Errorf("behind a NAT the child must use ESP in UDP to port 4500: %+v", ch)
	}
	if cs := b.gw.ike().Connections; len(cs) != 1 || !strings.HasSuffix(cs[0].IKERemote, ":4500") {
		t.Errorf("behind a NAT IKE must move to port 4500: %+v", cs)
	}
	waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
	mustPing(t, b.ctx, "NAT-T sluice->strongSwan", b.gw.ns, ssInner[0].Addr(), 20, 10*time.Millisecond)
	mustPing(t, b.ctx, "NAT-T strongSwan->sluice", b.ssNS, ssInner[1].Addr(), 20, 10*time.Millisecond)
	b.checkCharonSPIs(ch)
	if out, err := b.ch.Swanctl(b.ctx, "--list-sas"); err != nil || !strings.Contains(out, natOut[1].Addr().String()+"[4500]") {
		t.Errorf("charon does not see sluice at the NAT's address, port 4500: %v\n%s", err, out)
	}
}

// TestStrongSwanNATKeepAlive: sluice behind a NAT that forgets an idle
// UDP mapping after 3 s, charon outside it. With keep_alive = "1s" sluice
// sends NAT-keepalives while idle, so after 10 s of silence charon still
// reaches sluice through the NAT (pings charon->sluice first, which
// need the mapping, then back); with keep_alive = "0s" (what sluice did
// before it had keepalives) the same silence kills the tunnel, which
// shows that the NAT does forget.
func TestStrongSwanNATKeepAlive(t *testing.T) {
	const mapping, idle = 3, 10 * time.Second
	for _, tc := range []struct {
		name, keepAlive string
		survives        bool
	}{
		{"keepalive", "1s", true},
		{"off", "0s", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCharon(t)
			requireTool(t, "nft", "sysctl")
			b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true, nat: true,
				natUDPTimeout: mapping, gwKeepAlive: tc.keepAlive})
			ch := b.establish()
			if !ch.Encap {
				t.Fatalf("behind a NAT the child must use ESP in UDP: %+v", ch)
			}
			waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
			mustPing(t, b.ctx, "NAT-T strongSwan->sluice before the silence", b.ssNS, ssInner[1].Addr(), 5, 10*time.Millisecond)
			// Silence on both sides (no DPD, no rekeys, no traffic) for
			// more than three times the NAT's mapping timeout: the
			// subject of the test is time passing, so it waits for it.
			kaBefore := b.gw.stats().IKE.Stats["keep_alives"]
			time.Sleep(idle)
			kas := b.gw.stats().IKE.Stats["keep_alives"] - kaBefore
			r, err := ping(b.ctx, b.ssNS, ssInner[1].Addr(), 5, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			measuref(t, "keep_alive %s, NAT mapping %ds, %v idle: %d NAT-keepalives sent; then strongSwan->sluice %d/%d pings answered",
				tc.keepAlive, mapping, idle, kas, r.Received, r.Sent)
			if !tc.survives {
				if kas != 0 {
					t.Errorf("%d NAT-keepalives with keep_alive = \"0s\"", kas)
				}
				if r.Received == r.Sent {
					t.Fatalf("the NAT kept its mapping through %v of silence: the test shows nothing", idle)
				}
				return
			}
			if want := uint64(idle/time.Second) - 2; kas < want {
				t.Errorf("%d NAT-keepalives in %v idle with keep_alive %s, want at least %d", kas, idle, tc.keepAlive, want)
			}
			if r.Received != r.Sent {
				t.Fatalf("after %v idle behind the NAT strongSwan->sluice: %d of %d pings answered", idle, r.Received, r.Sent)
			}
			mustPing(t, b.ctx, "NAT-T sluice->strongSwan after the silence", b.gw.ns, ssInner[0].Addr(), 5, 10*time.Millisecond)
			b.checkCharonSPIs(ch)
		})
	}
}

// ssOptions shape one strongSwan test bed.
type ssOptions struct {
	esp, auth            string
	sluiceInitiates      bool
	childRekey, ikeRekey string // sluice's; "" is the default
	ikeOver              string // sluice's IKE over_time; "" is 10% of ikeRekey
	dpd                  string // sluice's dpd_delay
	nat                  bool
	// dn identifies both sides by distinguished names (ssDNs), the
	// subjects of their certificates (auth "pubkey").
	dn bool
	// Traffic selectors other than the two sites' subnets: charon's, in
	// swanctl's syntax ("10.1.0.0/25[icmp]"), and sluice's.
	ssLocalTS, ssRemoteTS string
	gwLocalTS, gwRemoteTS []netip.Prefix
	ssChildRekey          string // charon's child rekey_time (rand_time 0); "" never
	natUDPTimeout         int    // with nat: the NAT forgets an idle UDP mapping after this many seconds; 0 is the kernel's
	gwKeepAlive           string // sluice's [ike] keep_alive; "" leaves the default
	// eap: charon authenticates with this EAP method (its local auth,
	// sluice's remote auth), sluice with its certificate (auth "pubkey");
	// with eapID, charon's eap_id and password, and sluice's type = "eap"
	// secret for it (gwPassword).
	eap, eapID, eapPassword, gwPassword string
	// gwEAPID is sluice's eap_id ("" its default, %any); gwAnyID: sluice's
	// connection takes any remote id (a road warrior's), not charon's.
	gwEAPID string
	gwAnyID bool
	// link is sluice's [udp] link; "" leaves the default.
	link string
}

// ssDNs are the identities of a test with ssOptions.dn: charon's, sluice's.
var ssDNs = [2]string{"CN=sw.example.test", "CN=sl.example.test"}

// ids are charon's and sluice's identities.
func (o ssOptions) ids() [2]string {
	if o.dn {
		return ssDNs
	}
	return ssIDs
}

// ssBed is charon in "ss" and sluice in "gw", set up to negotiate.
type ssBed struct {
	t              *testing.T
	ctx            context.Context
	l              *lab.Lab
	dir            string
	o              ssOptions
	ssNS           *lab.Netns
	ch             *lab.Charon
	gw             *site
	ssAddr, gwAddr netip.Addr // outer addresses; with a NAT, charon's is outside it
	swconf         string
	natNS          *lab.Netns // with a NAT: the router that masquerades sluice's side
}

func newSSBed(t *testing.T, o ssOptions) *ssBed {
	ctx := testContext(t, defaultSetup)
	l := lab.NewForTest(t, nil)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	b := &ssBed{t: t, ctx: ctx, l: l, dir: dir, o: o}
	if b.ssNS, err = l.NewNetns(ctx, "ss"); err != nil {
		t.Fatal(err)
	}
	gwNS, err := l.NewNetns(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if !o.nat {
		if err := l.Veth(b.ssNS, wanIf, gwNS, wanIf); err != nil {
			t.Fatal(err)
		}
		for i, ns := range []*lab.Netns{b.ssNS, gwNS} {
			if err := ns.AddAddr(wanIf, ssWAN[i]); err != nil {
				t.Fatal(err)
			}
		}
		b.ssAddr, b.gwAddr = ssWAN[0].Addr(), ssWAN[1].Addr()
	} else {
		natNS, err := l.NewNetns(ctx, "nat")
		if err != nil {
			t.Fatal(err)
		}
		b.natNS = natNS
		if err := l.Veth(b.ssNS, wanIf, natNS, "out0"); err != nil {
			t.Fatal(err)
		}
		if err := l.Veth(natNS, "in0", gwNS, wanIf); err != nil {
			t.Fatal(err)
		}
		for _, a := range []struct {
			ns *lab.Netns
			If string
			p  netip.Prefix
		}{{b.ssNS, wanIf, natOut[0]}, {natNS, "out0", natOut[1]}, {natNS, "in0", natIn}, {gwNS, wanIf, ssWAN[1]}} {
			if err := a.ns.AddAddr(a.If, a.p); err != nil {
				t.Fatal(err)
			}
		}
		if err := gwNS.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), wanIf, natIn.Addr()); err != nil {
			t.Fatal(err)
		}
		rules := filepath.Join(dir, "nat.nft")
		if err := os.WriteFile(rules, []byte("table ip nat {\n  chain post {\n    type nat hook postrouting priority 100;\n    oifname \"out0\" masquerade\n  }\n}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmds := [][]string{{"sysctl", "-qw", "net.ipv4.ip_forward=1"}, {"nft", "-f", rules}}
		if o.natUDPTimeout > 0 {
			// Conntrack's timeouts are per namespace: the NAT's alone.
			for _, k := range []string{"nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"} {
				cmds = append(cmds, []string{"sysctl", "-qw", fmt.Sprintf("net.netfilter.%s=%d", k, o.natUDPTimeout)})
			}
		}
		for _, cmd := range cmds {
			if out, err := natNS.Exec(ctx, cmd[0], cmd[1:]...); err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(cmd, " "), err, out)
			}
		}
		b.ssAddr, b.gwAddr = natOut[0].Addr(), ssWAN[1].Addr()
	}
	// charon needs an address in its local traffic selector: it installs
	// the route into its TUN device with it as the source.
	if err := b.ssNS.AddAddr("lo", netip.PrefixFrom(ssInner[0].Addr(), 32)); err != nil {
		t.Fatal(err)
	}

	// charon.
	b.ch = l.NewCharon(b.ssNS, dir)
	lab.LogOnFailure(t, "strongSwan log", b.ch.Log(), 80)
	psk := randomHex(16)
	remote := b.gwAddr.String()
	if o.nat {
		remote = "%any"
	}
	renderTemplate(t, "strongswan/strongswan.conf.tmpl", b.ch.Conf(), map[string]string{"Vici": b.ch.Vici(), "Log": b.ch.Log(), "EAP": o.eap})
	b.swconf = filepath.Join(dir, "swanctl.conf")
	ssRekey, ssLife := "0s", "0s"
	if o.ssChildRekey != "" {
		d, err := time.ParseDuration(o.ssChildRekey)
		if err != nil {
			t.Fatal(err)
		}
		ssRekey, ssLife = o.ssChildRekey, (3 * d).String()
	}
	ssLocalTS, ssRemoteTS := cmp.Or(o.ssLocalTS, ssInner[0].Masked().String()), cmp.Or(o.ssRemoteTS, ssInner[1].Masked().String())
	renderTemplate(t, "strongswan/swanctl.conf.tmpl", b.swconf, map[string]string{
		"Local": b.ssAddr.String(), "Remote": remote, "IKE": ssIKE, "Auth": o.auth,
		"LocalTS": ssLocalTS, "RemoteTS": ssRemoteTS,
		"LocalID": o.ids()[0], "RemoteID": o.ids()[1], "ESP": o.esp, "PSK": psk,
		"ChildRekey": ssRekey, "ChildLife": ssLife,
		"EAP": o.eap, "EAPID": o.eapID, "EAPPassword": o.eapPassword,
	})
	cc := connConfig{
		Name: "strongswan", Local: b.gwAddr, Remote: b.ssAddr, Proposals: ssIKE,
		LocalID: o.ids()[1], RemoteID: o.ids()[0], Auth: o.auth, DPDDelay: o.dpd, RekeyTime: o.ikeRekey, OverTime: o.ikeOver,
		Child: "net", LocalTS: []netip.Prefix{ssInner[1].Masked()}, RemoteTS: []netip.Prefix{ssInner[0].Masked()},
		ESP: o.esp, ChildRekeyTime: o.childRekey, Start: "none",
	}
	if o.gwLocalTS != nil {
		cc.LocalTS = o.gwLocalTS
	}
	if o.gwRemoteTS != nil {
		cc.RemoteTS = o.gwRemoteTS
	}
	if o.childRekey != "" {
		// Room for a rekey that waits behind the IKE SA's: the child
		// must not expire at rekey_time + 10%; the rekey comes at
		// rekey_time less up to life_time - rekey_time (swanctl's
		// rand_time).
		cc.ChildLifeTime = "3s"
	}
	if o.sluiceInitiates {
		cc.Start = "start"
	} else {
		cc.Remote = netip.Addr{} // %any: sluice only responds
	}
	if o.auth == "psk" {
		cc.PSK = fmt.Sprintf("%x", psk)
	} else {
		b.certs(&cc)
	}
	if o.eap != "" {
		cc.EAP, cc.EAPID = o.eap, o.gwEAPID
		if o.gwAnyID {
			cc.RemoteID = ""
		}
		if o.eapID != "" {
			cc.EAPPasswords = map[string]string{o.eapID: o.gwPassword}
		}
	}
	b.startCharon()

	b.gw = &site{tb: &testbed{t: t, ctx: ctx, lab: l, dir: dir}, name: "gw", ns: gwNS, wan: b.gwAddr,
		cfgPath: filepath.Join(dir, "gateway-gw.toml"), sock: filepath.Join(dir, "gw.sock"), logPath: filepath.Join(dir, "gateway-gw.log")}
	lab.LogOnFailure(t, "sluice log", b.gw.logPath, 40)
	cfg := &gwConfig{TUN: []netip.Prefix{ssInner[1]}, UDP: netip.AddrPortFrom(b.gwAddr, 4500), Connections: []connConfig{cc}, Link: o.link}
	if o.dpd != "" {
		cfg.IKE = &config.FileIKE{RetransmitTimeout: "250ms", RetransmitTries: 2}
	}
	if o.gwKeepAlive != "" {
		if cfg.IKE == nil {
			cfg.IKE = &config.FileIKE{}
		}
		cfg.IKE.KeepAlive = o.gwKeepAlive
	}
	captureNS(t, l, []*lab.Netns{b.ssNS, gwNS}, b.ch.Log(), b.gw.logPath)
	b.gw.start(cfg)
	return b
}

// startCharon starts charon and loads its configuration.
func (b *ssBed) startCharon() {
	b.t.Helper()
	if err := b.ch.Start(b.ctx); err != nil {
		b.t.Fatalf("strongSwan: %v", err)
	}
	if err := b.ch.Load(b.ctx, b.swconf, 1); err != nil {
		b.t.Fatalf("strongSwan: %v", err)
	}
}

// establish has the initiator negotiate and returns sluice's child.
func (b *ssBed) establish() gateway.IKEChildInfo {
	b.t.Helper()
	start := time.Now()
	if !b.o.sluiceInitiates {
		if out, err := b.ch.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
			b.t.Fatalf("strongSwan initiating: %v\n%s", err, out)
		}
	}
	ch := b.gw.waitChild(b.ctx, "net", 20*time.Second, nil)
	b.t.Logf("IKE_SA and CHILD_SA between sluice and strongSwan (%s, %s) in %v: SPIs in %#x out %#x, suite %s",
		map[bool]string{true: "sluice initiated", false: "strongSwan initiated"}[b.o.sluiceInitiates], b.o.auth,
		time.Since(start).Round(time.Millisecond), ch.InSPI, ch.OutSPI, ch.Suite)
	if ch.Suite != b.o.esp {
		b.t.Errorf("negotiated suite %q, want %q", ch.Suite, b.o.esp)
	}
	return ch
}

// traffic sends ping both ways, and iperf3 TCP both ways if asked.
func (b *ssBed) traffic(what string, iperf bool) {
	t := b.t
	t.Helper()
	ssIn, gwIn := ssInner[0].Addr(), ssInner[1].Addr()
	waitPing(t, b.ctx, b.ssNS, gwIn)
	waitPing(t, b.ctx, b.gw.ns, ssIn)
	mustPing(t, b.ctx, "strongSwan "+what+" strongSwan->sluice", b.ssNS, gwIn, 20, 10*time.Millisecond)
	mustPing(t, b.ctx, "strongSwan "+what+" sluice->strongSwan", b.gw.ns, ssIn, 20, 10*time.Millisecond)
	if iperf {
		mustIperf(t, b.gw.tb, "strongSwan "+what+" strongSwan->sluice", b.gw.ns, gwIn, b.ssNS, iperfOptions{Seconds: ssIPerfS, Bind: ssIn})
		mustIperf(t, b.gw.tb, "strongSwan "+what+" sluice->strongSwan", b.ssNS, ssIn, b.gw.ns, iperfOptions{Seconds: ssIPerfS})
	}
	// sluice opened everything strongSwan sent it.
	for _, sa := range b.gw.sas() {
		for _, bad := range []string{"auth_failed", "replay", "bad_padding", "bad_inner"} {
			if sa.Direction == "in" && sa.Drops[bad] > 0 {
				t.Errorf("sluice SA %#x dropped %d packets from strongSwan for %s", sa.SPI, sa.Drops[bad], bad)
			}
		}
	}
}

// checkCharonSPIs checks that charon lists the child's two SPIs.
func (b *ssBed) checkCharonSPIs(ch gateway.IKEChildInfo) {
	b.t.Helper()
	out, err := b.ch.Swanctl(b.ctx, "--list-sas")
	if err != nil {
		b.t.Error(err)
		return
	}
	for _, spi := range []uint32{ch.InSPI, ch.OutSPI} {
		if !strings.Contains(out, fmt.Sprintf("%08x", spi)) {
			b.t.Errorf("strongSwan does not list SPI %08x:\n%s", spi, out)
		}
	}
}

// certs makes a test CA with a certificate for each side (ECDSA P-256,
// the identities as rfc822 subjectAltNames): charon's in its swanctl
// directory, sluice's in files its configuration names.
func (b *ssBed) certs(cc *connConfig) {
	t := b.t
	ca, err := certgen.NewCA("sluice e2e CA")
	if err != nil {
		t.Fatal(err)
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	issue := func(id string, k *ecdsa.PrivateKey) *x509.Certificate {
		var cert *x509.Certificate
		var err error
		if b.o.dn {
			// The subject is the DN in UTF8String, as openssl writes it;
			// charon sends its DN in PrintableString.
			cn := strings.TrimPrefix(id, "CN=")
			var subject []byte
			subject, err = asn1.Marshal(pkix.RDNSequence{{{Type: asn1.ObjectIdentifier{2, 5, 4, 3},
				Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(cn)}}}})
			if err == nil {
				cert, err = ca.CertifySubject(k.Public(), subject, []string{cn})
			}
		} else {
			cert, err = ca.Certify(k.Public(), []string{id})
		}
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	ck := newKey()
	caFile, _, err := b.ch.WriteCredentials(ca.Cert, issue(b.o.ids()[0], ck), ck)
	if err != nil {
		t.Fatal(err)
	}
	sk := newKey()
	der, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	cc.Certs = []string{filepath.Join(b.dir, "sluice", "sluice.pem")}
	cc.CACerts = []string{filepath.Join(b.dir, "x509ca", caFile)}
	cc.KeyFile = filepath.Join(b.dir, "sluice", "sluice.key")
	if err := lab.WritePEM(cc.Certs[0], "CERTIFICATE", issue(b.o.ids()[1], sk).Raw); err != nil {
		t.Fatal(err)
	}
	if err := lab.WritePEM(cc.KeyFile, "PRIVATE KEY", der); err != nil {
		t.Fatal(err)
	}
}

// ipCmd runs iproute2's ip with args and fails the test if it fails.
func ipCmd(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// renderTemplate renders the template file tmpl (relative to this package)
// with data into out.
func renderTemplate(t *testing.T, tmpl, out string, data any) {
	t.Helper()
	if err := lab.RenderTemplate(tmpl, out, data); err != nil {
		t.Fatal(err)
	}
}
