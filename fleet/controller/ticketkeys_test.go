package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

func states(r *fleetv1.TicketKeyRing) string {
	s := ""
	for _, k := range r.Keys {
		s += k.State[:1]
	}
	return s
}

func TestAdvanceRing(t *testing.T) {
	const life = time.Hour
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ring := &fleetv1.TicketKeyRing{}
	members := int64(0) // the ring version every member has
	has := func(v int64) bool { return v <= members }
	step := func(at time.Duration, want string) {
		t.Helper()
		advanceRing(ring, t0.Add(at), life, has)
		if got := states(ring); got != want {
			t.Fatalf("at %v (members have v%d): states %q, want %q", at, members, got, want)
		}
	}
	step(0, "a") // a new ring starts accept-only
	if len(ring.Keys[0].Key) != ticketKeySize || ring.Version != 1 || ring.Keys[0].Version != 1 {
		t.Fatalf("first key %+v, ring version %d", ring.Keys[0], ring.Version)
	}
	step(time.Minute, "a") // nobody has it yet
	members = 1
	step(2*time.Minute, "i")   // everyone has it: it issues
	step(30*time.Minute, "i")  // not yet its lifetime
	step(62*time.Minute, "ia") // a lifetime on: a successor, accept-only
	step(70*time.Minute, "ia") // not applied everywhere: the old key issues on
	members = ring.Version
	step(75*time.Minute, "ai")         // promoted; the old key accepts
	step(2*life+time.Minute, "ai")     // the old key issued from 0:02: retired at 2:02
	step(2*life+3*time.Minute, "ri")   // retired
	step(2*life+16*time.Minute, "ria") // the key issuing since 1:15 gets a successor
	members = ring.Version
	step(2*life+17*time.Minute, "rai") //
	step(3*life+4*time.Minute, "ai")   // the retired key is dropped a lifetime after 2:03
	_, next := advanceRing(ring, t0.Add(3*life+5*time.Minute), life, has)
	if next.IsZero() || !next.After(t0.Add(3*life+5*time.Minute)) {
		t.Fatalf("next due %v", next)
	}
	v := ring.Version
	if changed, _ := advanceRing(ring, t0.Add(3*life+5*time.Minute), life, has); changed || ring.Version != v {
		t.Fatal("an unchanged ring was changed")
	}
}

func readRing(t *testing.T, c client.Client) *fleetv1.TicketKeyRing {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "p-ticket-keys"}, &s); err != nil {
		t.Fatal(err)
	}
	var r fleetv1.TicketKeyRing
	if err := json.Unmarshal(s.Data[fleetv1.TicketKeyRingKey], &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestReconcileRingWaitsForEveryMember: a key issues only once every live
// member's agent reports the generation that carries it.
func TestReconcileRingWaitsForEveryMember(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, r, _ := newFakeClient(t, newPool("p"), newLease("p", "gw-a", "z1", now), newLease("p", "gw-b", "z2", now), newLease("p", "gw-c", "z3", now))
	reconcilePool(t, r, "p")
	ring := readRing(t, c)
	if states(ring) != "a" {
		t.Fatalf("new ring %q, want one accept-only key", states(ring))
	}
	as := assignments(t, c)
	for gw, a := range as {
		if a.Spec.TicketKeyVersion != ring.Version {
			t.Fatalf("%s's assignment carries ring version %d, want %d", gw, a.Spec.TicketKeyVersion, ring.Version)
		}
	}
	// Two of three report.
	for _, gw := range []string{"gw-a", "gw-b"} {
		a := as[gw]
		a.Status.AppliedGeneration = a.Spec.Generation
		if err := c.Status().Update(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	reconcilePool(t, r, "p")
	if s := states(readRing(t, c)); s != "a" {
		t.Fatalf("ring %q after two of three members applied it, want still accept-only", s)
	}
	reportApplied(t, c)
	reconcilePool(t, r, "p")
	ring = readRing(t, c)
	if s := states(ring); s != "i" {
		t.Fatalf("ring %q after every member applied it, want it issuing", s)
	}
	for gw, a := range assignments(t, c) {
		if a.Spec.TicketKeyVersion != ring.Version {
			t.Fatalf("%s's assignment carries ring version %d, want %d", gw, a.Spec.TicketKeyVersion, ring.Version)
		}
	}
}
