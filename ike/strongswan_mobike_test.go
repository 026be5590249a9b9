package ike_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/ike/eap"
	"github.com/sluicegw/sluice/internal/lab"
)

// mobikeMove is one OnChildAddress report.
type mobikeMove struct {
	child         *ike.ChildSA
	local, remote netip.AddrPort
}

// TestStrongSwanMOBIKE: charon, a road warrior with two paths to sluice
// (lab.TwoPath) and mobike = yes, establishes over path 0; path 0 goes
// away, charon moves the IKE SA with UPDATE_SA_ADDRESSES (RFC 4555) and
// sluice answers it, checks the new address (return routability, COOKIE2)
// and reports the Child SA's new outer addresses (OnChildAddress; a
// Child SA charon's rekey made on the new path before the check passed
// needs none). Then path 0 comes back, path 1 goes away, and charon
// moves back. The IKE SA keeps its SPIs on both sides throughout
// (charon, on kernel-libipsec, rekeys the Child SA after each move: it
// cannot update an installed SA's addresses).
func TestStrongSwanMOBIKE(t *testing.T) {
	mobikeMoves(t, newMobikeBed(t, false), 1)
}

// TestStrongSwanMOBIKEEAP: TestStrongSwanMOBIKE's road warrior
// authenticating with EAP (EAP-MSCHAPv2, EAP-TLS), sluice with its
// certificate, moving four times: the IKE SA moves each time, as with a
// PSK; charon does not reauthenticate (it would if sluice's last
// IKE_AUTH response, the one with AUTH, SA and TS, lacked
// N(MOBIKE_SUPPORTED): issue 28 defect 9).
func TestStrongSwanMOBIKEEAP(t *testing.T) {
	for _, auth := range []string{"eap-mschapv2", "eap-tls"} {
		t.Run(auth, func(t *testing.T) {
			b := newMobikeBedAuth(t, false, auth)
			mobikeMoves(t, b, 2)
			data, err := os.ReadFile(b.c.Log())
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), "reauthenticating IKE_SA"); n != 0 {
				t.Errorf("charon reauthenticated %d times", n)
			}
		})
	}
}

// mobikeMoves establishes charon's IKE SA over b's path 0 and takes the
// paths away in turn, cycles times: path 0 down (charon moves to path
// 1), path 0 up, path 1 down (it moves back), path 1 up; each move
// keeps the IKE SA.
func mobikeMoves(t *testing.T, b *mobikeBed, cycles int) {
	ctx, tp, c, ep, gw, mu := b.ctx, b.tp, b.c, b.ep, b.tp.GatewayAddr(), &b.mu

	// 1. Established over path 0.
	if out, err := c.Swanctl(ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
		t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, ep.Stats())
	}
	var child *ike.ChildSA
	err := lab.WaitFor(ctx, "sluice's Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(b.established) > 0 {
			child = b.established[0]
		}
		return child != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := oneSA(t, ep)
	if first.Remote.Addr() != tp.HostAddr(0) {
		t.Fatalf("the IKE SA is with %v, not path 0's %v", first.Remote, tp.HostAddr(0))
	}

	// 2. Path 0 goes away: charon moves to path 1. 3. Path 0 comes back
	// (charon stays on path 1 and tells sluice its additional address)
	// and path 1 goes away: charon moves back to path 0. A move is
	// followed by charon's rekey of the Child SA: kernel-libipsec cannot
	// change an installed SA's addresses, so charon makes new ones.
	type step struct {
		what string
		do   func() error
		path int // -1: no move expected
	}
	var steps []step
	for i := range cycles {
		if i > 0 {
			steps = append(steps, step{"path 1 up", func() error { return tp.Up(1) }, -1})
		}
		steps = append(steps, step{"path 0 down", func() error { return tp.Down(0) }, 1},
			step{"path 0 up", func() error { return tp.Up(0) }, -1},
			step{"path 1 down", func() error { return tp.Down(1) }, 0})
	}
	for _, step := range steps {
		before := oneSA(t, ep).Children
		checked := ep.Stats().RoutabilityChecked
		mu.Lock()
		seen := len(b.moves)
		mu.Unlock()
		start := time.Now()
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		if step.path < 0 {
			continue
		}
		want := netip.AddrPortFrom(tp.HostAddr(step.path), 4500)
		// The check passed, and every Child SA sends to the new address:
		// moved there (OnChildAddress), or made there (charon's rekey
		// may overtake sluice's check).
		err := lab.WaitFor(ctx, fmt.Sprintf("%s: the Child SAs at %v", step.what, want), 20*time.Second, 10*time.Millisecond, func() (bool, error) {
			if ep.Stats().RoutabilityChecked <= checked {
				return false, nil
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range oneSA(t, ep).Children {
				ok := c.Remote == want
				for _, mv := range b.moves[seen:] {
					ok = ok || (mv.child == c && mv.remote == want)
				}
				if !ok {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%v (sluice stats %+v, IKE SAs %+v)", err, ep.Stats(), ep.IKESAs())
		}
		mu.Lock()
		for _, mv := range b.moves[seen:] {
			t.Logf("%s: the Child SA %08x/%08x moved to %v <-> %v in %v", step.what, mv.child.InSPI, mv.child.OutSPI,
				mv.local, mv.remote, time.Since(start).Round(time.Millisecond))
			if !slices.Contains(before, mv.child) || mv.remote != want || mv.local != netip.AddrPortFrom(gw, 4500) {
				t.Errorf("%s: moved %p (want one of %v) to %v <-> %v, want %v <-> %v", step.what, mv.child, before, mv.local, mv.remote,
					netip.AddrPortFrom(gw, 4500), want)
			}
		}
		mu.Unlock()
		// The IKE SA is the same on both sides, at the new address.
		now := oneSA(t, ep)
		if now.SPIi != first.SPIi || now.SPIr != first.SPIr || now.Remote != want {
			t.Errorf("%s: sluice's IKE SA %x/%x with %v; want %x/%x with %v", step.what,
				now.SPIi, now.SPIr, now.Remote, first.SPIi, first.SPIr, want)
		}
		spis := fmt.Sprintf("%016x_i* %016x_r", first.SPIi, first.SPIr) // * marks the initiator
		err = lab.WaitFor(ctx, fmt.Sprintf("%s: charon's IKE SA %s at %v", step.what, spis, want), 10*time.Second, 20*time.Millisecond, func() (bool, error) {
			out, err := c.Swanctl(ctx, "--list-sas")
			return strings.Contains(out, spis) && strings.Contains(out, want.Addr().String()+"[4500]") && strings.Count(out, "ESTABLISHED") == 1, err
		})
		if err != nil {
			out, _ := c.Swanctl(ctx, "--list-sas")
			t.Errorf("%v\n%s", err, out)
		}
	}
	s := ep.Stats()
	t.Logf("sluice stats: %+v", s)
	if moves := uint64(2 * cycles); s.MOBIKEUpdates != moves || s.RoutabilityChecked != moves || s.RoutabilityFailed+s.MOBIKERefused != 0 ||
		s.IKESAEstablished != 1 || s.Deleted != 0 {
		t.Errorf("stats: %d updates, %d checks passed, %d failed, %d refused, %d IKE SAs, %d deleted",
			s.MOBIKEUpdates, s.RoutabilityChecked, s.RoutabilityFailed, s.MOBIKERefused, s.IKESAEstablished, s.Deleted)
	}
}

// mobikeBed is a MOBIKE interop bed on lab.TwoPath: charon and sluice's
// Endpoint, one on the host with two paths, the other on the gateway,
// and what the Endpoint reported.
type mobikeBed struct {
	ctx         context.Context
	tp          *lab.TwoPath
	c           *lab.Charon
	ep          *ike.Endpoint
	mu          sync.Mutex
	established []*ike.ChildSA
	moves       []mobikeMove
}

// newMobikeBed starts charon (mobike = yes, PSK) and sluice's Endpoint:
// charon on the host, initiating to the gateway's address, or, with
// sluiceMoves, sluice on the host (a socket on each of its addresses,
// ports 500 and 4500, its Peer's Remote the gateway) and charon
// answering on the gateway.
func newMobikeBed(t *testing.T, sluiceMoves bool) *mobikeBed {
	t.Helper()
	return newMobikeBedAuth(t, sluiceMoves, "psk")
}

// newMobikeBedAuth is newMobikeBed with charon authenticating with auth:
// "psk", or "eap-mschapv2" (user carol) or "eap-tls" (its certificate
// from a test CA) to sluice's EAP server, sluice signing with its
// certificate from that CA.
func newMobikeBedAuth(t *testing.T, sluiceMoves bool, auth string) *mobikeBed {
	t.Helper()
	lab.RequireCharon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tp, err := l.NewTwoPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gw := tp.GatewayAddr()
	ssNS, slNS, remote := tp.Host, tp.Gateway, gw.String()
	slLocals := []netip.Addr{gw}
	if sluiceMoves {
		ssNS, slNS, remote = tp.Gateway, tp.Host, "%any"
		slLocals = []netip.Addr{tp.HostAddr(0), tp.HostAddr(1)}
	}
	// charon routes its side of the tunnel from an address in its local
	// traffic selector.
	if err := ssNS.AddAddr("lo", netip.PrefixFrom(ssSite.Addr().Next(), 32)); err != nil {
		t.Fatal(err)
	}
	psk := make([]byte, 16)
	rand.Read(psk)
	pskHex := hex.EncodeToString(psk)
	c := l.NewCharon(ssNS, dir)
	lab.LogOnFailure(t, "charon log", c.Log(), 200)
	confTmpl := "testdata/strongswan/strongswan.conf.tmpl"
	if auth != "psk" {
		confTmpl = "testdata/strongswan/strongswan-eap.conf.tmpl"
	}
	render(t, confTmpl, c.Conf(), map[string]string{"Vici": c.Vici(), "Log": c.Log()})
	const ikeProps, espProps = "aes256gcm16-prfsha384-ecp384", "aes128gcm16"
	swconf := filepath.Join(dir, "swanctl.conf")
	vars := map[string]string{
		"Remote": remote, "LocalID": ssIDStr, "RemoteID": slIDStr,
		"LocalTS": ssSite.String(), "RemoteTS": slSite.String(), "IKE": ikeProps, "ESP": espProps, "PSK": pskHex,
	}
	var creds *testCreds
	if auth != "psk" {
		creds = newTestCreds(t, c, &certAuth{sluiceKey: "p256", charonKey: "p256"})
		vars["EAPAuth"], vars["CA"] = auth, creds.caFile
		if auth == "eap-mschapv2" {
			vars["EAPID"], vars["Password"] = "carol", "carol's pw"
		} else {
			vars["ClientCert"] = creds.charonCert
		}
	}
	render(t, "testdata/strongswan/swanctl-mobike.conf.tmpl", swconf, vars)
	startCharon(t, ctx, c, swconf)

	var conns []*net.UDPConn
	for _, a := range slLocals {
		for _, port := range []uint16{500, 4500} {
			uc, err := slNS.ListenUDP(netip.AddrPortFrom(a, port))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, uc)
		}
	}
	tr, err := ike.NewUDPTransport(conns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, ikeProps)
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, espProps)
	if err != nil {
		t.Fatal(err)
	}
	peer := &ike.Peer{Name: "roadwarrior", Local: slLocals[0], LocalID: ike.ParseIdentity(slIDStr), RemoteID: ike.ParseIdentity(ssIDStr),
		PSK: []byte(pskHex), IKE: ikeP, ESP: espP, LocalTS: []netip.Prefix{slSite}, RemoteTS: []netip.Prefix{ssSite}}
	if sluiceMoves {
		peer.Remote = gw
	}
	if creds != nil {
		peer.PSK = nil
		peer.Signer, peer.Certificates = creds.signer, []*x509.Certificate{creds.sluiceCert}
		e := &eap.Config{}
		switch auth {
		case "eap-mschapv2":
			peer.RemoteID = ike.Identity{} // any IDi: EAP proves the user
			e.Methods = []eap.Type{eap.TypeMSCHAPv2}
			e.Password = func(id string) ([]byte, bool) { return []byte("carol's pw"), id == "carol" }
		case "eap-tls":
			pool := x509.NewCertPool()
			pool.AddCert(creds.ca)
			e.Methods = []eap.Type{eap.TypeTLS}
			e.TLS = &tls.Config{ClientCAs: pool, Certificates: []tls.Certificate{{
				Certificate: [][]byte{creds.sluiceCert.Raw}, PrivateKey: creds.signer, Leaf: creds.sluiceCert}}}
		default:
			t.Fatalf("auth %q", auth)
		}
		peer.EAP = e
	}
	b := &mobikeBed{ctx: ctx, tp: tp, c: c}
	b.ep, err = ike.NewEndpoint(ike.Config{Peers: []*ike.Peer{peer}, RetransmitTimeout: 500 * time.Millisecond, RetransmitTries: 4,
		OnChildSA: func(c *ike.ChildSA) { b.mu.Lock(); b.established = append(b.established, c); b.mu.Unlock() },
		OnChildAddress: func(c *ike.ChildSA, local, remote netip.AddrPort) {
			b.mu.Lock()
			b.moves = append(b.moves, mobikeMove{c, local, remote})
			b.mu.Unlock()
		},
	}, tr)
	if err != nil {
		t.Fatal(err)
	}
	ep := b.ep
	t.Cleanup(func() { ep.Close() })
	tr.Serve(ep)
	return b
}

// TestStrongSwanMOBIKEInitiator: sluice on the host with two paths,
// charon (mobike = yes) answering on the gateway. sluice establishes
// over path 0; path 0 goes away and sluice moves the IKE SA to path 1
// (Endpoint.UpdateAddresses: UPDATE_SA_ADDRESSES with NAT detection and
// COOKIE2, which charon echoes); charon then holds the same IKE SA at
// the new address, sluice reports its Child SA's new outer addresses, and
// the IKE SA carries on there: charon rekeys the Child SA over it.
func TestStrongSwanMOBIKEInitiator(t *testing.T) {
	b := newMobikeBed(t, true)
	ctx, tp, ep := b.ctx, b.tp, b.ep
	ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
	child, err := ep.Initiate(ictx, "roadwarrior")
	icancel()
	if err != nil {
		t.Fatalf("sluice initiating: %v (stats %+v)", err, ep.Stats())
	}
	first := oneSA(t, ep)
	if err := tp.Down(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	uctx, ucancel := context.WithTimeout(ctx, 20*time.Second)
	err = ep.UpdateAddresses(uctx, child, tp.HostAddr(1))
	ucancel()
	if err != nil {
		t.Fatalf("UpdateAddresses: %v (stats %+v)", err, ep.Stats())
	}
	t.Logf("sluice moved to %v in %v", tp.HostAddr(1), time.Since(start).Round(time.Millisecond))
	now := oneSA(t, ep)
	want := netip.AddrPortFrom(tp.HostAddr(1), first.Local.Port())
	if now.SPIi != first.SPIi || now.SPIr != first.SPIr || now.Local != want {
		t.Errorf("sluice's IKE SA %x/%x at %v; want %x/%x at %v", now.SPIi, now.SPIr, now.Local, first.SPIi, first.SPIr, want)
	}
	b.mu.Lock()
	moves := slices.Clone(b.moves)
	b.mu.Unlock()
	if len(moves) != 1 || moves[0].child != child || moves[0].local != want || moves[0].remote != first.Remote {
		t.Errorf("moves %+v, want %p to %v <-> %v", moves, child, want, first.Remote)
	}
	spis := fmt.Sprintf("%016x_i %016x_r*", first.SPIi, first.SPIr) // * marks charon's side, the responder
	err = lab.WaitFor(ctx, "charon's IKE SA at the new address", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		out, err := b.c.Swanctl(ctx, "--list-sas")
		return strings.Contains(out, spis) && strings.Contains(out, tp.HostAddr(1).String()+"[") && strings.Count(out, "ESTABLISHED") == 1, err
	})
	if err != nil {
		out, _ := b.c.Swanctl(ctx, "--list-sas")
		t.Fatalf("%v\n%s", err, out)
	}
	// The IKE SA carries on at the new address: charon rekeys the Child
	// SA over it (kernel-libipsec's charon also rekeys it by itself
	// after a move, as it cannot update an installed SA's addresses).
	rekeyed := ep.Stats().ChildSARekeyed
	if out, err := b.c.Swanctl(ctx, "--rekey", "--child", "net"); err != nil {
		t.Fatalf("charon rekeying: %v\n%s", err, out)
	}
	err = lab.WaitFor(ctx, "a rekey over the new path", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		return ep.Stats().ChildSARekeyed > rekeyed, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := ep.Stats(); s.MOBIKEUpdates != 1 || s.RoutabilityFailed != 0 || s.IKESAEstablished != 1 || s.Deleted != 0 {
		t.Errorf("stats %+v", s)
	}
}

// oneSA returns ep's one IKE SA.
func oneSA(t *testing.T, ep *ike.Endpoint) ike.IKESAInfo {
	t.Helper()
	l := ep.IKESAs()
	if len(l) != 1 {
		t.Fatalf("sluice has %d IKE SAs: %+v", len(l), l)
	}
	return l[0]
}
