package controller

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sluicegw/sluice/ha"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// checkConsistent checks that every tunnel's status matches the
// assignments: its owner lists it as owner, its standby as standby, with
// the status's epoch, and no one else lists it.
func checkConsistent(t *testing.T, c client.Client, tunnels []string) {
	t.Helper()
	as := assignments(t, c)
	for _, name := range tunnels {
		tn := getTunnel(t, c, name)
		if tn.Status.Owner == "" {
			t.Fatalf("tunnel %s has no owner: %+v", name, tn.Status)
		}
		for gw, a := range as {
			var role string
			for _, o := range a.Spec.Tunnels {
				if o.Name == name {
					role = o.Role
					if o.Epoch != tn.Status.Epoch || !groupOK(o, tn.Status) {
						t.Fatalf("%s in %s's assignment: %+v, status owner %s epoch %d", name, gw, o, tn.Status.Owner, tn.Status.Epoch)
					}
				}
			}
			want := ""
			switch gw {
			case tn.Status.Owner:
				want = fleetv1.RoleOwner
			case tn.Status.Standby:
				want = fleetv1.RoleStandby
			}
			if role != want {
				t.Fatalf("%s: %s's assignment has role %q, want %q (status %+v)", name, gw, role, want, tn.Status)
			}
		}
	}
}

func TestReconcilePlacesTunnels(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	objs := []client.Object{newPool("p"),
		newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z2", now), newLease("p", "gw-c", "z1", now)}
	var names []string
	for i := range 12 {
		n := "t" + string(rune('a'+i))
		names = append(names, n)
		objs = append(objs, newTunnel("p", n))
	}
	c, r, _ := newFakeClient(t, objs...)
	res := reconcilePool(t, r, "p")
	if res.RequeueAfter <= 0 || res.RequeueAfter > 11*time.Second {
		t.Errorf("requeue after %v, want the Leases' lapse within 10s", res.RequeueAfter)
	}
	as := assignments(t, c)
	if len(as) != 3 {
		t.Fatalf("%d assignments, want 3", len(as))
	}
	// gw-b (z2) pairs across zones; one of the z1 gateways is alone.
	for gw, a := range as {
		if a.Spec.Generation != 1 || a.Spec.HASecret != "p-ha-"+gw || a.Spec.TicketKeySecret != "p-ticket-keys" {
			t.Errorf("%s: %+v", gw, a.Spec)
		}
	}
	if as["gw-b"].Spec.Partner == "" || as[as["gw-b"].Spec.Partner].Spec.Partner != "gw-b" {
		t.Fatalf("gw-b's partner %q does not name it back", as["gw-b"].Spec.Partner)
	}
	checkConsistent(t, c, names)
	for _, n := range names {
		st := getTunnel(t, c, n).Status
		if st.Epoch != 1 {
			t.Errorf("%s: epoch %d, want 1", n, st.Epoch)
		}
		want := fleetv1.PhasePlaced
		if st.Standby == "" {
			want = fleetv1.PhaseDegraded
		}
		if st.Phase != want {
			t.Errorf("%s: phase %s, want %s", n, st.Phase, want)
		}
	}
	// A second pass writes nothing.
	w := r.Stats.AssignmentWrites.Load()
	s := r.Stats.TunnelStatusWrites.Load()
	reconcilePool(t, r, "p")
	if d := r.Stats.AssignmentWrites.Load() - w; d != 0 {
		t.Errorf("an unchanged pool rewrote %d assignments", d)
	}
	if d := r.Stats.TunnelStatusWrites.Load() - s; d != 0 {
		t.Errorf("an unchanged pool rewrote %d tunnel statuses", d)
	}
	var pool fleetv1.GatewayPool
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p"}, &pool); err != nil {
		t.Fatal(err)
	}
	if len(pool.Status.Members) != 3 || pool.Status.TicketKeySecret != "p-ticket-keys" {
		t.Fatalf("pool status %+v", pool.Status)
	}
	if c := meta.FindStatusCondition(pool.Status.Conditions, ConditionRedundant); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "MemberAlone" {
		t.Fatalf("three members, one alone: condition %+v", c)
	}
}

func TestReconcileLeaseDeletedFailsOver(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	objs := []client.Object{newPool("p")}
	for _, gw := range []string{"gw-a", "gw-b", "gw-c", "gw-d", "gw-e", "gw-f"} {
		objs = append(objs, newLease("p", gw, "z"+gw[3:], now))
	}
	var names []string
	for i := range 60 {
		n := "t" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		names = append(names, n)
		objs = append(objs, newTunnel("p", n))
	}
	c, r, _ := newFakeClient(t, objs...)
	reconcilePool(t, r, "p")
	before := assignments(t, c)
	lost := "gw-c"
	partner := before[lost].Spec.Partner
	owned := map[string]int64{}
	for _, n := range names {
		if st := getTunnel(t, c, n).Status; st.Owner == lost {
			owned[n] = st.Epoch
		}
	}
	if len(owned) == 0 {
		t.Fatal("the lost gateway owned no tunnel; pick another")
	}
	if err := c.Delete(context.Background(), newLease("p", lost, "", now)); err != nil {
		t.Fatal(err)
	}
	w := r.Stats.AssignmentWrites.Load()
	reconcilePool(t, r, "p")
	for n, epoch := range owned {
		st := getTunnel(t, c, n).Status
		if st.Owner != partner || st.Epoch != epoch+1 || st.Standby != "" || st.Phase != fleetv1.PhaseDegraded {
			t.Errorf("%s after losing %s: %+v, want owner %s, epoch %d, no standby, Degraded", n, lost, st, partner, epoch+1)
		}
		if f := st.LastFailover; f == nil || f.From != lost || f.To != partner {
			t.Errorf("%s: last failover %+v, want %s -> %s", n, f, lost, partner)
		}
	}
	after := assignments(t, c)
	if _, ok := after[lost]; ok {
		t.Errorf("the lost gateway's assignment is still there")
	}
	var sec corev1.Secret
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ha-" + lost}, &sec); err != nil {
		t.Errorf("the lost gateway's HA secret, which its survivor names: %v", err)
	}
	if d := r.Stats.AssignmentWrites.Load() - w; d != 1 {
		t.Errorf("losing a member rewrote %d assignments, want 1 (its partner's)", d)
	}
	for gw, a := range after {
		if gw != partner && a.ResourceVersion != before[gw].ResourceVersion {
			t.Errorf("%s's assignment was rewritten: generation %d -> %d", gw, before[gw].Spec.Generation, a.Spec.Generation)
		}
	}
	if a := after[partner]; a.Spec.Partner != lost || a.Spec.Generation != before[partner].Spec.Generation+1 {
		t.Errorf("survivor's assignment: partner %q generation %d; want it to keep naming %s, generation bumped", a.Spec.Partner, a.Spec.Generation, lost)
	}
	checkConsistent(t, c, names)

	// A new gateway joins: it pairs with the survivor, which gets a
	// standby again.
	if err := c.Create(context.Background(), newLease("p", "gw-g", "zg", now)); err != nil {
		t.Fatal(err)
	}
	reconcilePool(t, r, "p")
	after = assignments(t, c)
	if after[partner].Spec.Partner != "gw-g" || after["gw-g"].Spec.Partner != partner {
		t.Fatalf("the new gateway did not pair with the survivor: %q, %q", after[partner].Spec.Partner, after["gw-g"].Spec.Partner)
	}
	checkConsistent(t, c, names)
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ha-" + lost}, &sec); !apierrors.IsNotFound(err) {
		t.Errorf("the lost gateway's HA secret after its survivor paired again: %v, want it deleted", err)
	}
	for _, n := range names {
		if st := getTunnel(t, c, n).Status; st.Phase != fleetv1.PhasePlaced {
			t.Errorf("%s: %+v after the join, want Placed", n, st)
		}
	}
}

func TestReconcileLeaseLapses(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, r, clk := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z2", now.Add(-5*time.Second)),
		newTunnel("p", "t1"), newTunnel("p", "t2"), newTunnel("p", "t3"), newTunnel("p", "t4"))
	clk.t = now
	res := reconcilePool(t, r, "p")
	if got, want := res.RequeueAfter.Round(time.Second), 5*time.Second; got != want {
		t.Fatalf("requeue after %v, want %v (gw-b's Lease lapses then)", res.RequeueAfter, want)
	}
	clk.t = now.Add(res.RequeueAfter)
	reconcilePool(t, r, "p")
	for _, n := range []string{"t1", "t2", "t3", "t4"} {
		if st := getTunnel(t, c, n).Status; st.Owner != "gw-a" {
			t.Errorf("%s: %+v, want gw-a to own it once gw-b's Lease lapsed", n, st)
		}
	}
}

func TestReconcileCopiesChildSAs(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, r, _ := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newTunnel("p", "t1"))
	reconcilePool(t, r, "p")
	a := assignments(t, c)["gw-a"]
	a.Status.ChildSAs = []fleetv1.AssignedChildSA{{Tunnel: "t1", Name: "net", SPIIn: "0xc0000001", SPIOut: "0xc0000002"}, {Tunnel: "other", Name: "x"}}
	if err := c.Status().Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	reconcilePool(t, r, "p")
	got := getTunnel(t, c, "t1").Status.ChildSAs
	if len(got) != 1 || got[0] != (fleetv1.ChildSAStatus{Name: "net", SPIIn: "0xc0000001", SPIOut: "0xc0000002"}) {
		t.Fatalf("child SAs %+v", got)
	}
}

func TestReconcileMissingPoolIsPending(t *testing.T) {
	tn := newTunnel("nopool", "t1")
	tn.Status.Owner, tn.Status.Phase, tn.Status.Epoch = "gw-a", fleetv1.PhasePlaced, 3
	c, r, _ := newFakeClient(t, tn)
	reconcilePool(t, r, "nopool")
	if st := getTunnel(t, c, "t1").Status; st.Phase != fleetv1.PhasePending || st.Owner != "" || st.Epoch != 3 {
		t.Fatalf("%+v, want Pending, no owner, epoch kept", st)
	}
}

// TestHASecretsServeTheSyncChannel writes two members' HA Secrets to
// files and runs the gateway's own sync-channel TLS (ha.TLSConfig) over
// them: each member checks the other's name.
func TestHASecretsServeTheSyncChannel(t *testing.T) {
	// Node names [ha] does not take as they are are issued for the name
	// the agent renders (HAMemberName).
	for _, names := range [][2]string{{"gw-a", "gw-b"}, {"ip-10-0-0-1.ec2.internal", "Node-B.example.net"}} {
		t.Run(names[0], func(t *testing.T) { testHASecrets(t, names[0], names[1]) })
	}
}

func testHASecrets(t *testing.T, gwA, gwB string) {
	now := time.Now()
	c, r, clk := newFakeClient(t, newPool("p"), newLease("p", gwA, "z1", now), newLease("p", gwB, "z2", now))
	clk.t = now
	reconcilePool(t, r, "p")
	dir := t.TempDir()
	load := func(gw, peer string) *tls.Config {
		var s corev1.Secret
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ha-" + gw}, &s); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{keyCert, keyKey, keyCA} {
			if err := os.WriteFile(filepath.Join(dir, gw+k), s.Data[k], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := ha.TLSConfig(filepath.Join(dir, gw+keyCert), filepath.Join(dir, gw+keyKey), filepath.Join(dir, gw+keyCA), fleetv1.HAMemberName(peer))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	handshake := func(client, server *tls.Config) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		errc := make(chan error, 1)
		go func() {
			b, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			defer b.Close()
			b.SetDeadline(time.Now().Add(10 * time.Second))
			errc <- tls.Server(b, server).Handshake()
		}()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a.SetDeadline(time.Now().Add(10 * time.Second))
		cerr := tls.Client(a, client).Handshake()
		a.Close()
		if serr := <-errc; cerr == nil {
			cerr = serr
		}
		return cerr
	}
	if err := handshake(load(gwA, gwB), load(gwB, gwA)); err != nil {
		t.Fatalf("sync channel handshake: %v", err)
	}
	// gw-a expecting someone else refuses gw-b.
	if err := handshake(load(gwA, "gw-x"), load(gwB, gwA)); err == nil {
		t.Fatal("a member accepted a peer certificate naming another gateway")
	}
	// A second pass issues nothing new.
	var s1, s2 corev1.Secret
	c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ha-" + gwA}, &s1)
	reconcilePool(t, r, "p")
	c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ha-" + gwA}, &s2)
	if s1.ResourceVersion != s2.ResourceVersion {
		t.Error("a current member certificate was issued again")
	}
}

func TestReconcilePlacesListeners(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := &fleetv1.TLSListener{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS},
		Spec: fleetv1.TLSListenerSpec{Pool: "p", Listen: "198.51.100.20:443", Backend: "10.0.0.1:80",
			CertificateSecretRef: fleetv1.LocalObjectRef{Name: "web-tls"}, Redundancy: 2},
	}
	c, r, _ := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z2", now), l)
	reconcilePool(t, r, "p")
	var got fleetv1.TLSListener
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "web"}, &got); err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if st.Owner == "" || st.Standby == "" || st.Owner == st.Standby || st.Epoch != 1 || st.Phase != fleetv1.PhasePlaced {
		t.Fatalf("listener status %+v", st)
	}
	as := assignments(t, c)
	if ls := as[st.Owner].Spec.Listeners; len(ls) != 1 || ls[0].Role != fleetv1.RoleOwner {
		t.Fatalf("owner's listeners %+v", ls)
	}
	if ls := as[st.Standby].Spec.Listeners; len(ls) != 1 || ls[0].Role != fleetv1.RoleStandby || ls[0].Owner != st.Owner {
		t.Fatalf("standby's listeners %+v", ls)
	}
}

func TestLeaseUpdateMatters(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	old := newLease("p", "gw-a", "z1", now.Add(-3*time.Second))
	renewed := old.DeepCopy()
	renewed.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if leaseUpdateMatters(old, renewed, now) {
		t.Error("the renewal of a current Lease woke the pool")
	}
	lapsed := newLease("p", "gw-a", "z1", now.Add(-20*time.Second))
	if !leaseUpdateMatters(lapsed, renewed, now) {
		t.Error("the renewal of a lapsed Lease did not wake the pool")
	}
	moved := renewed.DeepCopy()
	moved.Annotations[fleetv1.AnnotationAddress] = "192.0.2.99"
	if !leaseUpdateMatters(renewed, moved, now) {
		t.Error("a new address did not wake the pool")
	}
}

// TestReconcileEpochNeverGoesBack: a tunnel status older than the
// assignments (a cache behind) does not make the epoch go back.
func TestReconcileEpochNeverGoesBack(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, r, _ := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z2", now), newTunnel("p", "t1"))
	reconcilePool(t, r, "p")
	tn := getTunnel(t, c, "t1")
	owner := tn.Status.Owner
	// Owner changed twice since the status the cache holds.
	for _, a := range assignments(t, c) {
		for i := range a.Spec.Tunnels {
			a.Spec.Tunnels[i].Epoch = 5
		}
		if err := c.Update(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	tn.Status.Owner, tn.Status.Epoch = "gw-gone", 1
	if err := c.Status().Update(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	reconcilePool(t, r, "p")
	if st := getTunnel(t, c, "t1").Status; st.Owner != owner || st.Epoch != 5 {
		t.Fatalf("status %+v, want owner %s at epoch 5 (the assignments' epoch)", st, owner)
	}
	for gw, a := range assignments(t, c) {
		if a.Spec.Tunnels[0].Epoch != 5 {
			t.Fatalf("%s's assignment: epoch %d, want 5", gw, a.Spec.Tunnels[0].Epoch)
		}
	}
}

// TestReconcileKeepsPairsOfAssignments: a reconcile that wrote the
// assignments but not the pool's status (it failed in between) does not
// lose the pairing: the next one reads the partners from the assignments.
func TestReconcileKeepsPairsOfAssignments(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, r, _ := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z1", now))
	reconcilePool(t, r, "p")
	var pool fleetv1.GatewayPool
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p"}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Status.Members = nil
	if err := c.Status().Update(context.Background(), &pool); err != nil {
		t.Fatal(err)
	}
	// gw-c in another zone would be the better partner for a fresh pairing.
	if err := c.Create(context.Background(), newLease("p", "gw-c", "z2", now)); err != nil {
		t.Fatal(err)
	}
	reconcilePool(t, r, "p")
	as := assignments(t, c)
	if as["gw-a"].Spec.Partner != "gw-b" || as["gw-b"].Spec.Partner != "gw-a" || as["gw-c"].Spec.Partner != "" {
		t.Fatalf("partners a=%q b=%q c=%q, want a and b kept together", as["gw-a"].Spec.Partner, as["gw-b"].Spec.Partner, as["gw-c"].Spec.Partner)
	}
}

// TestReconcileStatusFailureDoesNotHoldUpOthers: one tunnel whose status
// write fails does not keep the others from theirs; the reconcile
// reports the error so it is retried.
func TestReconcileStatusFailureDoesNotHoldUpOthers(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).
		WithObjects(newPool("p"), newLease("p", "gw-a", "z1", now), newTunnel("p", "t1"), newTunnel("p", "t2"), newTunnel("p", "t3")).
		WithStatusSubresource(&fleetv1.GatewayPool{}, &fleetv1.Tunnel{}, &fleetv1.TLSListener{}, &fleetv1.GatewayAssignment{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			if o.GetName() == "t1" {
				return apierrors.NewConflict(fleetv1.GroupVersion.WithResource("tunnels").GroupResource(), "t1", nil)
			}
			return c.SubResource(sub).Update(ctx, o, opts...)
		}}).Build()
	r := &PoolReconciler{Client: c, Scheme: s, Now: func() time.Time { return now }}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "p"}}); err == nil {
		t.Fatal("a failed status write was not reported")
	}
	for _, n := range []string{"t2", "t3"} {
		if st := getTunnel(t, c, n).Status; st.Owner != "gw-a" {
			t.Errorf("%s: %+v, want it placed despite t1's failure", n, st)
		}
	}
}

// groupOK reports whether an assignment's entry names the HA group the
// tunnel's status implies: its owner's, or, taken over, the lost owner's.
func groupOK(o fleetv1.AssignedObject, st fleetv1.TunnelStatus) bool {
	return o.Owner == st.Owner || (st.LastFailover != nil && st.LastFailover.To == st.Owner && o.Owner == st.LastFailover.From)
}
