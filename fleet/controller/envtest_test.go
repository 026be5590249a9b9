package controller

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
)

var testEnv struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testEnv.env != nil {
		testEnv.env.Stop()
	}
	os.Exit(code)
}

// startEnv starts (once per test binary) a real kube-apiserver and etcd
// with the CRDs of deploy/crd. Without the binaries the test fails under
// CI and is skipped elsewhere.
func startEnv(t *testing.T) *rest.Config {
	t.Helper()
	env := fleettest.Environment(t)
	testEnv.once.Do(func() {
		testEnv.env = env
		testEnv.cfg, testEnv.err = testEnv.env.Start()
	})
	if testEnv.err != nil {
		t.Fatalf("envtest: %v", testEnv.err)
	}
	return testEnv.cfg
}

// envClient returns a client and a namespace of its own for one test.
func envClient(t *testing.T, cfg *rest.Config) (client.Client, string) {
	t.Helper()
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return c, ns.Name
}

// runController runs the leader-elected manager on ns until the test ends.
func runController(t *testing.T, cfg *rest.Config, ns string) *PoolReconciler {
	t.Helper()
	r, _ := runStoppableController(t, cfg, ns)
	return r
}

// runStoppableController is runController that also returns a function
// stopping the manager (which then gives up its leadership).
func runStoppableController(t *testing.T, cfg *rest.Config, ns string) (*PoolReconciler, func()) {
	t.Helper()
	mgr, r, err := NewManager(cfg, Options{Namespace: ns, LeaderElection: true, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// waitFor polls cond every 50ms until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func envLease(ns, pool, gw, zone string) *coordinationv1.Lease {
	l := newLease(pool, gw, zone, time.Now())
	l.Namespace = ns
	d := int32(3600) // does not lapse during the test
	l.Spec.LeaseDurationSeconds = &d
	return l
}

func TestEnvSchemaRefusesBadObjects(t *testing.T) {
	cfg := startEnv(t)
	c, ns := envClient(t, cfg)
	ctx := context.Background()
	bad := map[string]client.Object{}
	p := newPool("bad-steering")
	p.Namespace, p.UID, p.Spec.Steering = ns, "", "bgp"
	bad["steering enum"] = p
	p = newPool("short-lifetime")
	p.Namespace, p.UID = ns, ""
	p.Spec.TicketKeys.Lifetime = &metav1.Duration{Duration: 30 * time.Second}
	bad["lifetime under 1m"] = p
	p = newPool("misses")
	p.Namespace, p.UID, p.Spec.Detection.Misses = ns, "", 1
	bad["misses under 2"] = p
	tn := newTunnel("p", "no-local-addrs")
	tn.Namespace, tn.Spec.LocalAddrs = ns, nil
	bad["missing localAddrs"] = tn
	tn = newTunnel("p", "bad-auth")
	tn.Namespace, tn.Spec.Local.Auth = ns, "eap"
	bad["auth enum"] = tn
	tn = newTunnel("p", "no-children")
	tn.Namespace, tn.Spec.Children = ns, nil
	bad["no children"] = tn
	tn = newTunnel("p", "redundancy")
	tn.Namespace, tn.Spec.Redundancy = ns, 3
	bad["redundancy 3"] = tn
	for what, o := range bad {
		err := c.Create(ctx, o)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: created, or refused for another reason: %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	// A good pool gets its defaults from the schema.
	p = &fleetv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: ns}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Steering != "vip" || p.Spec.VIPInterface != "eth0" || p.Spec.SyncPort != 7310 || p.Spec.Detection.Misses != 3 ||
		p.Spec.Detection.Interval == nil || p.Spec.Detection.Interval.Duration != 100*time.Millisecond || p.Spec.TicketKeys.Lifetime == nil || p.Spec.TicketKeys.Lifetime.Duration != 24*time.Hour {
		t.Errorf("pool defaults: %+v", p.Spec)
	}
	tn = newTunnel("good", "good")
	tn.Namespace, tn.Spec.Redundancy, tn.Spec.PSKSecretRef = ns, 0, &fleetv1.SecretKeyRef{Name: "psk"}
	if err := c.Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if tn.Spec.Redundancy != 2 || tn.Spec.PSKSecretRef.Key != "psk" {
		t.Errorf("tunnel defaults: redundancy %d, psk key %q", tn.Spec.Redundancy, tn.Spec.PSKSecretRef.Key)
	}
	// Status enums are checked too.
	tn.Status.Phase = "Lost"
	if err := c.Status().Update(ctx, tn); !apierrors.IsInvalid(err) {
		t.Errorf("status phase Lost: %v", err)
	}
}

func TestEnvPlacementAndFailover(t *testing.T) {
	cfg := startEnv(t)
	c, ns := envClient(t, cfg)
	ctx := context.Background()
	runController(t, cfg, ns)
	pool := newPool("p")
	pool.Namespace, pool.UID = ns, ""
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*coordinationv1.Lease{envLease(ns, "p", "gw-a", "z1"), envLease(ns, "p", "gw-b", "z2"), envLease(ns, "p", "gw-c", "z1")} {
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for i := range 20 {
		tn := newTunnel("p", "t"+string(rune('a'+i)))
		tn.Namespace = ns
		if err := c.Create(ctx, tn); err != nil {
			t.Fatal(err)
		}
		names = append(names, tn.Name)
	}
	list := func() (map[string]fleetv1.GatewayAssignment, map[string]fleetv1.Tunnel) {
		var al fleetv1.GatewayAssignmentList
		var tl fleetv1.TunnelList
		if err := c.List(ctx, &al, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if err := c.List(ctx, &tl, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		as, ts := map[string]fleetv1.GatewayAssignment{}, map[string]fleetv1.Tunnel{}
		for _, a := range al.Items {
			as[a.Name] = a
		}
		for _, tn := range tl.Items {
			ts[tn.Name] = tn
		}
		return as, ts
	}
	// consistent: every tunnel's owner and standby list it with its epoch.
	consistent := func(as map[string]fleetv1.GatewayAssignment, ts map[string]fleetv1.Tunnel) bool {
		for _, n := range names {
			st := ts[n].Status
			if st.Owner == "" {
				return false
			}
			for _, gw := range []string{st.Owner, st.Standby} {
				if gw == "" {
					continue
				}
				found := false
				for _, o := range as[gw].Spec.Tunnels {
					found = found || (o.Name == n && o.Epoch == st.Epoch && groupOK(o, st))
				}
				if !found {
					return false
				}
			}
		}
		return true
	}
	var as map[string]fleetv1.GatewayAssignment
	var ts map[string]fleetv1.Tunnel
	waitFor(t, "three assignments and every tunnel placed", func() (bool, error) {
		as, ts = list()
		return len(as) == 3 && consistent(as, ts), nil
	})
	standbys := 0
	for _, n := range names {
		if ts[n].Status.Standby != "" {
			standbys++
		}
	}
	if standbys == 0 {
		t.Error("no tunnel has a standby")
	}
	// A fourth gateway joins: two pairs, every tunnel with a standby.
	if err := c.Create(ctx, envLease(ns, "p", "gw-d", "z2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "four assignments, every tunnel Placed", func() (bool, error) {
		as, ts = list()
		if len(as) != 4 || !consistent(as, ts) {
			return false, nil
		}
		for _, n := range names {
			if ts[n].Status.Phase != fleetv1.PhasePlaced {
				return false, nil
			}
		}
		return true, nil
	})
	// The gateway owning the first tunnel is lost.
	lost := ts[names[0]].Status.Owner
	partner := as[lost].Spec.Partner
	epochs := map[string]int64{}
	for _, n := range names {
		if ts[n].Status.Owner == lost {
			epochs[n] = ts[n].Status.Epoch
		}
	}
	before := as
	if err := c.Delete(ctx, envLease(ns, "p", lost, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost gateway's tunnels owned by its partner", func() (bool, error) {
		as, ts = list()
		if _, ok := as[lost]; ok || !consistent(as, ts) {
			return false, nil
		}
		for n := range epochs {
			if ts[n].Status.Owner != partner {
				return false, nil
			}
		}
		return true, nil
	})
	for n, e := range epochs {
		st := ts[n].Status
		if st.Epoch != e+1 || st.Standby != "" || st.Phase != fleetv1.PhaseDegraded {
			t.Errorf("%s: %+v, want epoch %d, no standby, Degraded", n, st, e+1)
		}
		if f := st.LastFailover; f == nil || f.From != lost || f.To != partner || f.Time.IsZero() {
			t.Errorf("%s: last failover %+v, want %s -> %s", n, f, lost, partner)
		}
	}
	for gw, a := range as {
		if gw != partner && a.ResourceVersion != before[gw].ResourceVersion {
			t.Errorf("%s's assignment was rewritten (generation %d -> %d)", gw, before[gw].Spec.Generation, a.Spec.Generation)
		}
	}
}

func TestEnvTicketRingWaitsForMembers(t *testing.T) {
	cfg := startEnv(t)
	c, ns := envClient(t, cfg)
	ctx := context.Background()
	r := runController(t, cfg, ns)
	pool := newPool("p")
	pool.Namespace, pool.UID = ns, ""
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*coordinationv1.Lease{envLease(ns, "p", "gw-a", "z1"), envLease(ns, "p", "gw-b", "z2")} {
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	ring := func() *fleetv1.TicketKeyRing {
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p-ticket-keys"}, &s); err != nil {
			return nil
		}
		var r fleetv1.TicketKeyRing
		if err := json.Unmarshal(s.Data[fleetv1.TicketKeyRingKey], &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	var version int64
	waitFor(t, "an accept-only ring named by both assignments", func() (bool, error) {
		r := ring()
		if r == nil || states(r) != "a" {
			return false, nil
		}
		version = r.Version
		for _, gw := range []string{"gw-a", "gw-b"} {
			var a fleetv1.GatewayAssignment
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: gw}, &a); err != nil {
				return false, err
			}
			if a.Spec.TicketKeyVersion != version {
				return false, nil
			}
		}
		return true, nil
	})
	report := func(gw string) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var a fleetv1.GatewayAssignment
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: gw}, &a); err != nil {
				return err
			}
			a.Status.AppliedGeneration = a.Spec.Generation
			return c.Status().Update(ctx, &a)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	report("gw-a")
	// The controller sees gw-a's report (the pool's reconcile runs on the
	// assignment's change); the key must not issue on it alone.
	waitFor(t, "the controller counting gw-a's report", func() (bool, error) {
		return r.Stats.PendingKeyHolders.Load() == 1, nil
	})
	if s := states(ring()); s != "a" {
		t.Fatalf("ring %q with one of two members reporting, want accept-only", s)
	}
	lastReport := time.Now()
	report("gw-b")
	waitFor(t, "the key issuing", func() (bool, error) {
		r := ring()
		return r != nil && states(r) == "i", nil
	})
	if k := ring().Keys[0]; k.Issued == nil || k.Issued.Before(lastReport.Add(-time.Second)) {
		t.Fatalf("the key issued at %v, before the last member reported at %v", k.Issued, lastReport)
	}
}

// TestEnvLeaderElection runs two controllers: only the leader writes;
// when it stops, the other takes over.
func TestEnvLeaderElection(t *testing.T) {
	cfg := startEnv(t)
	c, ns := envClient(t, cfg)
	ctx := context.Background()
	r1, stop1 := runStoppableController(t, cfg, ns)
	r2, stop2 := runStoppableController(t, cfg, ns)
	pool := newPool("p")
	pool.Namespace, pool.UID = ns, ""
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, envLease(ns, "p", "gw-a", "z1")); err != nil {
		t.Fatal(err)
	}
	assigned := func(gw string) func() (bool, error) {
		return func() (bool, error) {
			var a fleetv1.GatewayAssignment
			err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: gw}, &a)
			return err == nil, err
		}
	}
	waitFor(t, "gw-a's assignment", assigned("gw-a"))
	w1, w2 := r1.Stats.AssignmentWrites.Load(), r2.Stats.AssignmentWrites.Load()
	if (w1 == 0) == (w2 == 0) {
		t.Fatalf("assignment writes %d and %d: want exactly one controller writing", w1, w2)
	}
	follower, stopLeader := r2, stop1
	if w2 > 0 {
		follower, stopLeader = r1, stop2
	}
	stopLeader()
	if err := c.Create(ctx, envLease(ns, "p", "gw-b", "z2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gw-b's assignment from the other controller", assigned("gw-b"))
	if follower.Stats.AssignmentWrites.Load() == 0 {
		t.Fatal("the follower wrote nothing after the leader stopped")
	}
}
