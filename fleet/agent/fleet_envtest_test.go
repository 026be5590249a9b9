package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/controller"
)

// TestFleetOnAPIServer runs the controller and two agents (with fake
// gateways) on a real API server: from the agents' Leases the controller
// pairs the two gateways and assigns them a Tunnel; each agent renders
// what its assignment says (the partner's address as its [ha] peer, the
// tunnel in the owner's group) and applies it; and when one agent stops
// (its Lease deleted), the other is assigned the tunnel as owner, in the
// lost owner's group.
func TestFleetOnAPIServer(t *testing.T) {
	env, c := startAPIServer(t)
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}))
	must(c.Create(ctx, &v1alpha1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "pool"}}))
	tn := testTunnel("t1", "192.0.2.10", "198.51.100.1")
	tn.ResourceVersion = ""
	must(c.Create(ctx, tn))
	must(c.Create(ctx, testSecret("t1-psk", map[string][]byte{"psk": []byte("a pre-shared key of t1")})))

	mgr, _, err := controller.NewManager(env.Config, controller.Options{Namespace: testNS, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	must(err)
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-mdone })

	type member struct {
		fg     *fakeGateway
		cancel context.CancelFunc
		done   chan error
	}
	members := map[string]*member{}
	for i, gw := range []string{"gw-a", "gw-b"} {
		cache, err := NewAssignmentCache(env.Config, nil, testScheme(t), testNS, gw)
		must(err)
		fg := &fakeGateway{}
		a, err := New(Config{Client: c, Assignments: cache, Gateway: gw, Namespace: testNS, Pool: "pool", Zone: "z" + gw[3:],
			NodeAddress: netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}), Dir: t.TempDir(), ControlSocket: "/run/sluice/sluice.sock",
			Dial: fg.dial, RenewInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond})
		must(err)
		must(a.WakeOn(ctx, cache))
		actx, cancel := context.WithCancel(ctx)
		m := &member{fg: fg, cancel: cancel, done: make(chan error, 2)}
		go func() { m.done <- cache.Start(actx) }()
		go func() { m.done <- a.Run(actx) }()
		t.Cleanup(func() { cancel(); <-m.done; <-m.done })
		members[gw] = m
	}

	// lastConfig is what gw's gateway was last given, parsed.
	lastConfig := func(gw string) *config.Gateway {
		ap := members[gw].fg.applied()
		if len(ap) == 0 {
			return nil
		}
		g, err := config.ParseGateway("applied", []byte(ap[len(ap)-1].Config))
		if err != nil {
			t.Fatalf("%s was given a configuration that does not parse: %v", gw, err)
		}
		return g
	}
	var owner string
	waitFor(t, "both gateways configured as a pair with t1", func() bool {
		owner = ""
		for gw, peer := range map[string]string{"gw-a": "10.9.0.2:7310", "gw-b": "10.9.0.1:7310"} {
			g := lastConfig(gw)
			if g == nil || g.HA == nil || g.HA.Peer.String() != peer || len(g.Connections) != 1 {
				return false
			}
			if grp := g.HAGroupOf(g.Connections[0].Local); grp != "" {
				owner = grp
			}
		}
		return owner != ""
	})
	var tun v1alpha1.Tunnel
	must(c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "t1"}, &tun))
	if tun.Status.Owner != owner {
		t.Errorf("tunnel owner %q, but the VIP is in group %q", tun.Status.Owner, owner)
	}

	// The owner's agent stops: its Lease goes, and the survivor is
	// assigned the tunnel as its owner.
	survivor := map[string]string{"gw-a": "gw-b", "gw-b": "gw-a"}[owner]
	members[owner].cancel()
	waitFor(t, "the owner's lease deleted", func() bool {
		var l coordinationv1.Lease
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: LeaseName(owner)}, &l))
	})
	waitFor(t, "the tunnel owned by the survivor", func() bool {
		var asg v1alpha1.GatewayAssignment
		if c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: survivor}, &asg) != nil {
			return false
		}
		for _, o := range asg.Spec.Tunnels {
			if o.Name == "t1" && o.Role == v1alpha1.RoleOwner && asg.Status.AppliedGeneration == asg.Spec.Generation {
				return true
			}
		}
		return false
	})
	g := lastConfig(survivor)
	// The tunnel stays in the lost owner's group, which the survivor took
	// over: moving it to the survivor's own would renegotiate it.
	if got := g.HAGroupOf(g.Connections[0].Local); got != owner || !strings.HasPrefix(g.HA.Peer.String(), "10.9.0.") {
		t.Errorf("after the failover, the survivor's configuration has t1 in group %q (want the lost owner's, %q), peer %v", got, owner, g.HA.Peer)
	}
}
