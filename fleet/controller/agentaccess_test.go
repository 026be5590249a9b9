package controller

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// TestAgentRulesNameEverything: every rule of an agent's Role lists its
// resourceNames (an empty list would grant every name), and they are
// the gateway's own Lease, assignment and status, its pool, the tunnels
// and listeners it is assigned and their Secrets, its HA Secret and the
// ticket-key ring; not another gateway's HA Secret, the CA, or a tunnel
// placed elsewhere. Before its first assignment, only the Lease.
func TestAgentRulesNameEverything(t *testing.T) {
	t1, t2, t3 := newTunnel("pool", "t1"), newTunnel("pool", "t2"), newTunnel("pool", "t3")
	t1.Spec.PSKSecretRef = &fleetv1.SecretKeyRef{Name: "t1-psk"}
	t2.Spec.PSKSecretRef = &fleetv1.SecretKeyRef{Name: "shared-psk"}
	t3.Spec.PSKSecretRef = &fleetv1.SecretKeyRef{Name: "t3-psk"}
	l1 := &fleetv1.TLSListener{}
	l1.Name, l1.Spec.CertificateSecretRef.Name = "web", "web-cert"
	spec := &fleetv1.GatewayAssignmentSpec{Pool: "pool", Gateway: "gw-a", HASecret: haSecretName("pool", "gw-a"),
		TicketKeySecret: ticketSecretName("pool"),
		Tunnels:         []fleetv1.AssignedObject{{Name: "t1", Role: fleetv1.RoleOwner}, {Name: "t2", Role: fleetv1.RoleStandby}, {Name: "gone"}},
		Listeners:       []fleetv1.AssignedObject{{Name: "web", Role: fleetv1.RoleOwner}}}
	got := map[string][]string{}
	for _, r := range agentRules("gw-a", spec, []*fleetv1.Tunnel{t1, t2, t3}, []*fleetv1.TLSListener{l1}) {
		if len(r.ResourceNames) == 0 || len(r.Resources) != 1 || slices.Contains(r.Verbs, "*") {
			t.Errorf("rule %+v", r)
			continue
		}
		got[r.Resources[0]] = r.ResourceNames
	}
	want := map[string][]string{
		"leases":                    {"sluice-gw-gw-a"},
		"gatewayassignments":        {"gw-a"},
		"gatewayassignments/status": {"gw-a"},
		"gatewaypools":              {"pool"},
		"tunnels":                   {"gone", "t1", "t2"},
		"tlslisteners":              {"web"},
		"secrets":                   {"pool-ha-gw-a", "pool-ticket-keys", "shared-psk", "t1-psk", "web-cert"},
	}
	for res, names := range want {
		if !slices.Equal(got[res], names) {
			t.Errorf("%s: %q, want %q", res, got[res], names)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rules for %v", got)
	}

	// Before the first assignment: the Lease alone. No listener: no
	// tlslisteners rule at all (not one with no names).
	if rs := agentRules("gw-b", nil, nil, nil); len(rs) != 1 || rs[0].Resources[0] != "leases" {
		t.Errorf("rules without an assignment: %+v", rs)
	}
	spec.Listeners = nil
	for _, r := range agentRules("gw-a", spec, []*fleetv1.Tunnel{t1, t2, t3}, nil) {
		if r.Resources[0] == "tlslisteners" {
			t.Errorf("a tlslisteners rule with no listener: %+v", r)
		}
	}
}

// TestLeaseNameNamesTheMember: a Lease's member is its name; a Lease
// labelled for another gateway (which the admission policy lets no agent
// create) or not named sluice-gw-* makes no member.
func TestLeaseNameNamesTheMember(t *testing.T) {
	now := time.Now()
	forged := newLease("pool", "gw-a", "z1", now)
	forged.Labels[fleetv1.LabelGateway] = "gw-b"
	odd := newLease("pool", "gw-c", "z1", now)
	odd.Name = "something-else"
	ms := membersFromLeases(append([]coordinationv1.Lease{}, *newLease("pool", "gw-d", "z1", now), *forged, *odd), now)
	if len(ms) != 1 || ms[0].name != "gw-d" {
		t.Errorf("members %+v, want gw-d alone", ms)
	}
}
