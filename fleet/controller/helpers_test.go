package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

const testNS = "sluice"

// clock is a settable clock for reconcilers.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func newPool(name string) *fleetv1.GatewayPool {
	return &fleetv1.GatewayPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
		Spec: fleetv1.GatewayPoolSpec{
			Steering: "vip", VIPInterface: "eth0", VIPPrefixLength: 32, SyncPort: 7310,
			TicketKeys: fleetv1.TicketKeys{Lifetime: &metav1.Duration{Duration: time.Hour}},
		},
	}
}

func newLease(pool, gw, zone string, renewed time.Time) *coordinationv1.Lease {
	d := int32(10)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: fleetv1.LeasePrefix + gw, Namespace: testNS,
			Labels:      map[string]string{fleetv1.LabelPool: pool, fleetv1.LabelGateway: gw},
			Annotations: map[string]string{fleetv1.AnnotationZone: zone, fleetv1.AnnotationAddress: "192.0.2." + fmt.Sprint(len(gw))},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &gw, LeaseDurationSeconds: &d,
			RenewTime: &metav1.MicroTime{Time: renewed},
		},
	}
}

func newTunnel(pool, name string) *fleetv1.Tunnel {
	return &fleetv1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: fleetv1.TunnelSpec{
			Pool: pool, Redundancy: 2, Version: 2, LocalAddrs: []string{"198.51.100.10"},
			Local: fleetv1.TunnelAuth{Auth: "psk"}, Remote: fleetv1.TunnelAuth{Auth: "psk"},
			Children: []fleetv1.TunnelChild{{Name: "net"}},
		},
	}
}

func newFakeClient(t testing.TB, objs ...client.Object) (client.Client, *PoolReconciler, *clock) {
	t.Helper()
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&fleetv1.GatewayPool{}, &fleetv1.Tunnel{}, &fleetv1.TLSListener{}, &fleetv1.GatewayAssignment{}).
		Build()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	return c, &PoolReconciler{Client: c, Scheme: s, Now: clk.Now}, clk
}

func reconcilePool(t testing.TB, r *PoolReconciler, pool string) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: pool}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func getTunnel(t testing.TB, c client.Client, name string) *fleetv1.Tunnel {
	t.Helper()
	var tn fleetv1.Tunnel
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, &tn); err != nil {
		t.Fatal(err)
	}
	return &tn
}

func assignments(t testing.TB, c client.Client) map[string]*fleetv1.GatewayAssignment {
	t.Helper()
	var l fleetv1.GatewayAssignmentList
	if err := c.List(context.Background(), &l, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	out := map[string]*fleetv1.GatewayAssignment{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

// reportApplied plays every agent: each assignment's status says its
// spec generation and ring version are applied.
func reportApplied(t testing.TB, c client.Client) {
	t.Helper()
	for _, a := range assignments(t, c) {
		a.Status.AppliedGeneration = a.Spec.Generation
		if err := c.Status().Update(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
}
