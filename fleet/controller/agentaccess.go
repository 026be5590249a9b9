package controller

// agentaccess.go gives each gateway's node agent an identity of its own
// and the permissions its assignment calls for, no more: the fleet's
// Node authorizer, which lets a kubelet read only the Secrets of the pods
// bound to its node.
//
// For the Lease of each gateway g of the pool the controller keeps, in
// the pool's namespace and owned by that Lease (so that they go with it):
//
//   - ServiceAccount sluice-agent-<g> (fleetv1.AgentServiceAccount);
//   - Role sluice-agent-<g>: get, update and delete of Lease
//     sluice-gw-<g>; get, list and watch of GatewayAssignment g and get,
//     update and patch of its status; get of the pool, of the Tunnels and
//     TLSListeners g's assignment names, and of the Secrets they and the
//     assignment name (their PSKs and certificates, g's own HA Secret,
//     the ticket-key ring). Every rule lists its resourceNames: none is
//     left out, since an empty list would grant every name;
//   - RoleBinding sluice-agent-<g> of that Role to that ServiceAccount.
//
// The agent's pod runs as the shared ServiceAccount sluice-agent, which
// may only create its Lease and request a token for sluice-agent-<g>;
// the admission policies of deploy/base/rbac.yaml hold both to the node
// the pod's token is bound to. The Role is written before the assignment
// that needs it, so that the agent is never told of a Secret it may not
// read yet.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// leaseGateway returns the gateway a Lease is the membership Lease of,
// from its name, or "" if it is not one (a name without the prefix, or a
// gateway label naming another gateway: the label is not trusted, the
// admission policy holds only the name to the agent's node).
func leaseGateway(l *coordinationv1.Lease) string {
	gw, ok := strings.CutPrefix(l.Name, fleetv1.LeasePrefix)
	if !ok || gw == "" {
		return ""
	}
	if lg := l.Labels[fleetv1.LabelGateway]; lg != "" && lg != gw {
		return ""
	}
	return gw
}

// agentRules returns the rules of gateway gw's agent Role: its Lease,
// and, when spec (its assignment, nil for none yet) is set, the
// assignment and what it names. tunnels and listeners are the pool's.
func agentRules(gw string, spec *fleetv1.GatewayAssignmentSpec, tunnels []*fleetv1.Tunnel, listeners []*fleetv1.TLSListener) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	rule := func(group, resource string, verbs []string, names ...string) {
		names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "" })
		if len(names) == 0 {
			return // no resourceNames would grant every name
		}
		slices.Sort(names)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource},
			Verbs: verbs, ResourceNames: slices.Compact(names)})
	}
	rule(coordinationv1.GroupName, "leases", []string{"get", "update", "delete"}, fleetv1.LeasePrefix+gw)
	if spec == nil {
		return rules
	}
	g := fleetv1.GroupVersion.Group
	rule(g, "gatewayassignments", []string{"get", "list", "watch"}, gw)
	rule(g, "gatewayassignments/status", []string{"get", "update", "patch"}, gw)
	rule(g, "gatewaypools", []string{"get"}, spec.Pool)
	secrets := []string{spec.HASecret, spec.TicketKeySecret}
	var tNames, lNames []string
	for _, o := range spec.Tunnels {
		tNames = append(tNames, o.Name)
		if i := slices.IndexFunc(tunnels, func(t *fleetv1.Tunnel) bool { return t.Name == o.Name }); i >= 0 && tunnels[i].Spec.PSKSecretRef != nil {
			secrets = append(secrets, tunnels[i].Spec.PSKSecretRef.Name)
		}
	}
	for _, o := range spec.Listeners {
		lNames = append(lNames, o.Name)
		if i := slices.IndexFunc(listeners, func(l *fleetv1.TLSListener) bool { return l.Name == o.Name }); i >= 0 {
			secrets = append(secrets, listeners[i].Spec.CertificateSecretRef.Name)
		}
	}
	rule(g, "tunnels", []string{"get"}, tNames...)
	rule(g, "tlslisteners", []string{"get"}, lNames...)
	rule(corev1.GroupName, "secrets", []string{"get"}, secrets...)
	return rules
}

// reconcileAgentAccess keeps the ServiceAccount, Role and RoleBinding of
// the agent of every gateway with a Lease in the pool, the Role granting
// what want (the assignments about to be written) names.
func (r *PoolReconciler) reconcileAgentAccess(ctx context.Context, pool *fleetv1.GatewayPool, leases []coordinationv1.Lease,
	want map[string]*fleetv1.GatewayAssignmentSpec, tunnels []*fleetv1.Tunnel, listeners []*fleetv1.TLSListener) error {
	for i := range leases {
		l := &leases[i]
		gw := leaseGateway(l)
		if gw == "" || l.DeletionTimestamp != nil {
			continue
		}
		name := fleetv1.AgentServiceAccount(gw)
		if len(gw) > fleetv1.MaxGatewayNameLen || len(validation.IsDNS1123Subdomain(name)) > 0 {
			log.FromContext(ctx).Error(nil, "no agent identity for a gateway whose name makes no ServiceAccount name", "gateway", gw, "lease", l.Name)
			continue
		}
		meta := func() metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: name, Namespace: pool.Namespace, Labels: map[string]string{
				fleetv1.LabelPool: pool.Name, fleetv1.LabelGateway: gw}}
		}
		sa := &corev1.ServiceAccount{ObjectMeta: meta(), AutomountServiceAccountToken: new(bool)}
		role := &rbacv1.Role{ObjectMeta: meta(), Rules: agentRules(gw, want[gw], tunnels, listeners)}
		rb := &rbacv1.RoleBinding{ObjectMeta: meta(),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: pool.Namespace}}}
		for _, o := range []client.Object{sa, role, rb} {
			if err := r.ensureOwned(ctx, l, o); err != nil {
				return fmt.Errorf("controller: agent identity of %s: %w", gw, err)
			}
		}
	}
	return nil
}

// ensureOwned creates o, owned by the Lease l, or makes the existing
// object say what o says (its labels, its owner, its rules, binding or
// token setting).
func (r *PoolReconciler) ensureOwned(ctx context.Context, l *coordinationv1.Lease, o client.Object) error {
	o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease",
		Name: l.Name, UID: l.UID}})
	cur := o.DeepCopyObject().(client.Object)
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, cur)
	if apierrors.IsNotFound(err) {
		return r.Client.Create(ctx, o)
	} else if err != nil {
		return err
	}
	same := equality.Semantic.DeepEqual(cur.GetLabels(), o.GetLabels()) &&
		equality.Semantic.DeepEqual(cur.GetOwnerReferences(), o.GetOwnerReferences())
	switch c := cur.(type) {
	case *corev1.ServiceAccount:
		w := o.(*corev1.ServiceAccount)
		same = same && equality.Semantic.DeepEqual(c.AutomountServiceAccountToken, w.AutomountServiceAccountToken)
		c.AutomountServiceAccountToken = w.AutomountServiceAccountToken
	case *rbacv1.Role:
		w := o.(*rbacv1.Role)
		same = same && equality.Semantic.DeepEqual(c.Rules, w.Rules)
		c.Rules = w.Rules
	case *rbacv1.RoleBinding:
		w := o.(*rbacv1.RoleBinding)
		if c.RoleRef != w.RoleRef {
			// The role a binding names cannot change: bind again.
			if err := r.Client.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
				return err
			}
			return r.Client.Create(ctx, w)
		}
		same = same && equality.Semantic.DeepEqual(c.Subjects, w.Subjects)
		c.Subjects = w.Subjects
	}
	if same {
		return nil
	}
	cur.SetLabels(o.GetLabels())
	cur.SetOwnerReferences(o.GetOwnerReferences())
	return r.Client.Update(ctx, cur)
}
