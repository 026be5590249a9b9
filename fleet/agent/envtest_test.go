package agent

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
)

// startAPIServer starts kube-apiserver and etcd with the CRDs of
// deploy/crd (fleettest.StartAPIServer) and returns a client of it.
func startAPIServer(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	env, cfg := fleettest.StartAPIServer(t)
	c, err := client.New(cfg, client.Options{Scheme: testScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// TestAgentAgainstAPIServer runs the agent on a real API server: it
// holds its Lease, watches its own assignment (and no other), applies on
// a change of it at once (no resync or poll in the test's time), writes
// the status through the status subresource, and deletes its Lease when
// it stops.
func TestAgentAgainstAPIServer(t *testing.T) {
	env, c := startAPIServer(t)
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		t.Fatal(err)
	}
	objs := testObjects()
	// gw-b's assignment, which gw-a's agent must not see.
	other := &v1alpha1.GatewayAssignment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "gw-b"},
		Spec: v1alpha1.GatewayAssignmentSpec{Pool: "pool", Gateway: "gw-b", Generation: 1}}
	for _, o := range append(objs, other) {
		o.SetResourceVersion("")
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}

	cache, err := NewAssignmentCache(env.Config, nil, testScheme(t), testNS, "gw-a")
	if err != nil {
		t.Fatal(err)
	}
	fg := &fakeGateway{}
	a, err := New(Config{Client: c, Assignments: cache, Gateway: "gw-a", Namespace: testNS, Pool: "pool", Zone: "z1",
		NodeAddress: testInputs().NodeAddress, Dir: t.TempDir(), ControlSocket: "/run/sluice/sluice.sock", Dial: fg.dial,
		RenewInterval: 100 * time.Millisecond, PollInterval: time.Hour, ResyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WakeOn(ctx, cache); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	cacheDone, runDone := make(chan error, 1), make(chan error, 1)
	go func() { cacheDone <- cache.Start(runCtx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	if !cache.WaitForCacheSync(runCtx) {
		t.Fatal("the assignment cache did not sync")
	}
	go func() { runDone <- a.Run(runCtx) }()

	leaseKey := client.ObjectKey{Namespace: testNS, Name: LeaseName("gw-a")}
	waitFor(t, "the lease and the first apply", func() bool {
		var l coordinationv1.Lease
		return c.Get(ctx, leaseKey, &l) == nil && len(fg.applied()) == 1 && getAssignment(t, c).Status.AppliedGeneration == 3
	})
	var list v1alpha1.GatewayAssignmentList
	if err := cache.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "gw-a" {
		t.Errorf("the agent's cache holds %d assignments, want gw-a's alone", len(list.Items))
	}

	// A change of the assignment is applied at once: the watch wakes the
	// agent (its poll and resync are an hour away).
	asg := getAssignment(t, c)
	asg.Spec.Generation = 4
	asg.Spec.Tunnels = asg.Spec.Tunnels[:1]
	if err := c.Update(ctx, asg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the apply of generation 4", func() bool {
		return len(fg.applied()) == 2 && getAssignment(t, c).Status.AppliedGeneration == 4
	})

	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, leaseKey, &l); !apierrors.IsNotFound(err) {
		t.Errorf("lease after the agent stopped: %v", err)
	}
}
