package ike_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
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
	if err := tp.Host.AddAddr("lo", netip.PrefixFrom(ssSite.Addr().Next(), 32)); err != nil {
		t.Fatal(err)
	}
	gw := tp.GatewayAddr()

	// charon on the host.
	psk := make([]byte, 16)
	rand.Read(psk)
	pskHex := hex.EncodeToString(psk)
	c := l.NewCharon(tp.Host, dir)
	lab.LogOnFailure(t, "charon log", c.Log(), 200)
	render(t, "testdata/strongswan/strongswan.conf.tmpl", c.Conf(), map[string]string{"Vici": c.Vici(), "Log": c.Log()})
	const ikeProps, espProps = "aes256gcm16-prfsha384-ecp384", "aes128gcm16"
	swconf := filepath.Join(dir, "swanctl.conf")
	render(t, "testdata/strongswan/swanctl-mobike.conf.tmpl", swconf, map[string]string{
		"Remote": gw.String(), "LocalID": ssIDStr, "RemoteID": slIDStr,
		"LocalTS": ssSite.String(), "RemoteTS": slSite.String(), "IKE": ikeProps, "ESP": espProps, "PSK": pskHex,
	})
	startCharon(t, ctx, c, swconf)

	// sluice's Endpoint on the gateway's address.
	var conns []*net.UDPConn
	for _, port := range []uint16{500, 4500} {
		uc, err := tp.Gateway.ListenUDP(netip.AddrPortFrom(gw, port))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, uc)
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
	peer := &ike.Peer{Name: "roadwarrior", Local: gw, LocalID: ike.ParseIdentity(slIDStr), RemoteID: ike.ParseIdentity(ssIDStr),
		PSK: []byte(pskHex), IKE: ikeP, ESP: espP, LocalTS: []netip.Prefix{slSite}, RemoteTS: []netip.Prefix{ssSite}}
	var mu sync.Mutex
	var established []*ike.ChildSA
	var moves []mobikeMove
	ep, err := ike.NewEndpoint(ike.Config{Peers: []*ike.Peer{peer}, RetransmitTimeout: 500 * time.Millisecond, RetransmitTries: 4,
		OnChildSA: func(c *ike.ChildSA) { mu.Lock(); established = append(established, c); mu.Unlock() },
		OnChildAddress: func(c *ike.ChildSA, local, remote netip.AddrPort) {
			mu.Lock()
			moves = append(moves, mobikeMove{c, local, remote})
			mu.Unlock()
		},
	}, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	tr.Serve(ep)

	// 1. Established over path 0.
	if out, err := c.Swanctl(ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
		t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, ep.Stats())
	}
	var child *ike.ChildSA
	err = lab.WaitFor(ctx, "sluice's Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(established) > 0 {
			child = established[0]
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
	for _, step := range []struct {
		what string
		do   func() error
		path int // -1: no move expected
	}{
		{"path 0 down", func() error { return tp.Down(0) }, 1},
		{"path 0 up", func() error { return tp.Up(0) }, -1},
		{"path 1 down", func() error { return tp.Down(1) }, 0},
	} {
		before := oneSA(t, ep).Children
		checked := ep.Stats().RoutabilityChecked
		mu.Lock()
		seen := len(moves)
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
				for _, mv := range moves[seen:] {
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
		for _, mv := range moves[seen:] {
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
	if s.MOBIKEUpdates != 2 || s.RoutabilityChecked != 2 || s.RoutabilityFailed+s.MOBIKERefused != 0 ||
		s.IKESAEstablished != 1 || s.Deleted != 0 {
		t.Errorf("stats: %d updates, %d checks passed, %d failed, %d refused, %d IKE SAs, %d deleted",
			s.MOBIKEUpdates, s.RoutabilityChecked, s.RoutabilityFailed, s.MOBIKERefused, s.IKESAEstablished, s.Deleted)
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
