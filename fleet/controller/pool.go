// Package controller holds the fleet controller: one reconciler per
// GatewayPool reads the members from their Leases, pairs them, places the
// pool's Tunnels and TLSListeners, and writes one GatewayAssignment per
// live member (only those whose content changed), the objects' statuses,
// the pool's HA channel credentials and its ticket-key ring.
//
// The controller is not on the failover path: a gateway whose partner is
// lost takes its tunnels over through the sync channel; the controller
// records that (the new owner, a bumped epoch, the failover) and finds
// the survivor a new partner.
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/placement"
)

// ConditionRedundant is the pool's condition that every live member has
// a live partner, so every tunnel has a standby.
const ConditionRedundant = "Redundant"

// Stats counts the writes of a reconciler, for tests and benchmarks.
type Stats struct {
	AssignmentWrites     atomic.Int64 // created or updated assignments
	AssignmentDeletes    atomic.Int64
	TunnelStatusWrites   atomic.Int64
	ListenerStatusWrites atomic.Int64
	// PendingKeyHolders is how many live members had the ticket key
	// waiting to issue when the ring was last looked at.
	PendingKeyHolders atomic.Int64
}

// PoolReconciler reconciles one GatewayPool and everything placed on it.
type PoolReconciler struct {
	Client client.Client
	Scheme *runtime.Scheme
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Stats counts the writes.
	Stats Stats
}

func (r *PoolReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Names of the Secrets of a pool.
func caSecretName(pool string) string     { return pool + "-ha-ca" }
func haSecretName(pool, gw string) string { return pool + "-ha-" + gw }
func ticketSecretName(pool string) string { return pool + "-ticket-keys" }

// Reconcile brings the pool named by req and its objects to the state the
// Leases call for.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	now := r.now()
	var pool fleetv1.GatewayPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.markPending(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	ns := pool.Namespace

	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(ns), client.MatchingLabels{fleetv1.LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, err
	}
	all := membersFromLeases(leases.Items, now)
	var next time.Time
	due := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	byName := map[string]member{}
	var live []placement.Member
	for _, m := range all {
		byName[m.name] = m
		if m.live {
			live = append(live, placement.Member{Name: m.name, Zone: m.zone})
			due(m.expires)
		}
	}
	var assigns fleetv1.GatewayAssignmentList
	if err := r.Client.List(ctx, &assigns, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	current := map[string]*fleetv1.GatewayAssignment{}
	for i := range assigns.Items {
		a := &assigns.Items[i]
		if a.Spec.Pool == pool.Name {
			current[a.Name] = a
		}
	}

	pairs := placement.Pairs(live, prevPairs(pool.Status.Members, current))

	// Credentials and the ticket-key ring first: the assignments name them.
	if err := r.reconcileHACreds(ctx, &pool, live, pairs, now); err != nil {
		return ctrl.Result{}, err
	}
	ring, ringNext, err := r.reconcileRing(ctx, &pool, live, current, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	due(ringNext)

	// Placement.
	var tunnels fleetv1.TunnelList
	if err := r.Client.List(ctx, &tunnels, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var listeners fleetv1.TLSListenerList
	if err := r.Client.List(ctx, &listeners, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var tItems, lItems []placement.Item
	tPrev, lPrev := map[string]placement.Placement{}, map[string]placement.Placement{}
	var ts []*fleetv1.Tunnel
	for i := range tunnels.Items {
		t := &tunnels.Items[i]
		if t.Spec.Pool != pool.Name || t.DeletionTimestamp != nil {
			continue
		}
		ts = append(ts, t)
		tItems = append(tItems, placement.Item{Key: key(t.Namespace, t.Name), Redundancy: redundancy(t.Spec.Redundancy)})
		tPrev[key(t.Namespace, t.Name)] = placement.Placement{Owner: t.Status.Owner, Standby: t.Status.Standby, Epoch: t.Status.Epoch}
	}
	var ls []*fleetv1.TLSListener
	for i := range listeners.Items {
		l := &listeners.Items[i]
		if l.Spec.Pool != pool.Name || l.DeletionTimestamp != nil {
			continue
		}
		ls = append(ls, l)
		lItems = append(lItems, placement.Item{Key: key(l.Namespace, l.Name), Redundancy: redundancy(l.Spec.Redundancy)})
		lPrev[key(l.Namespace, l.Name)] = placement.Placement{Owner: l.Status.Owner, Standby: l.Status.Standby, Epoch: l.Status.Epoch}
	}
	// The assignments may carry a later epoch than a status the cache
	// has not caught up with: the epoch must not go back.
	// An owner's entry names the owner by the assignment it is in
	// (AssignedObject.Owner is the HA group, which a survivor holds for
	// its lost partner).
	for _, a := range current {
		gw := cmp.Or(a.Spec.Gateway, a.Name)
		for _, o := range a.Spec.Tunnels {
			if k := key(ns, o.Name); o.Role == fleetv1.RoleOwner && tPrev[k].Epoch < o.Epoch {
				tPrev[k] = placement.Placement{Owner: gw, Epoch: o.Epoch}
			}
		}
		for _, o := range a.Spec.Listeners {
			if k := key(ns, o.Name); o.Role == fleetv1.RoleOwner && lPrev[k].Epoch < o.Epoch {
				lPrev[k] = placement.Placement{Owner: gw, Epoch: o.Epoch}
			}
		}
	}
	tPlace := placement.Place(tItems, pairs, tPrev)
	lPlace := placement.Place(lItems, pairs, lPrev)

	// Assignments: one per live member, written when its content changed.
	if err := r.reconcileAssignments(ctx, &pool, leases.Items, pairs, byName, current, ts, tPlace, ls, lPlace, ring.Version); err != nil {
		return ctrl.Result{}, err
	}

	// Statuses: a write that fails (a conflict with a newer object) does
	// not hold up the others; the reconcile is retried for it.
	var errs []error
	isLive := func(name string) bool { return byName[name].live }
	for _, t := range ts {
		p := tPlace[key(t.Namespace, t.Name)]
		st := t.Status.DeepCopy()
		placeStatus(&st.Owner, &st.Standby, &st.Epoch, &st.Phase, &st.LastFailover, p, redundancy(t.Spec.Redundancy), isLive, now)
		st.ObservedGeneration = t.Generation
		st.ChildSAs = childSAs(current[p.Owner], t.Name)
		if equality.Semantic.DeepEqual(st, &t.Status) {
			continue
		}
		t.Status = *st
		if err := r.Client.Status().Update(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("controller: tunnel %s status: %w", t.Name, err))
			continue
		}
		r.Stats.TunnelStatusWrites.Add(1)
	}
	for _, l := range ls {
		p := lPlace[key(l.Namespace, l.Name)]
		st := l.Status.DeepCopy()
		placeStatus(&st.Owner, &st.Standby, &st.Epoch, &st.Phase, &st.LastFailover, p, redundancy(l.Spec.Redundancy), isLive, now)
		st.ObservedGeneration = l.Generation
		if equality.Semantic.DeepEqual(st, &l.Status) {
			continue
		}
		l.Status = *st
		if err := r.Client.Status().Update(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("controller: listener %s status: %w", l.Name, err))
			continue
		}
		r.Stats.ListenerStatusWrites.Add(1)
	}

	if err := r.writePoolStatus(ctx, &pool, pairs, byName); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		if len(errs) > 3 {
			errs = append(errs[:3], fmt.Errorf("controller: and %d more", len(errs)-3))
		}
		return ctrl.Result{}, errors.Join(errs...)
	}
	if next.IsZero() {
		return ctrl.Result{}, nil
	}
	// A moment past the instant, so the Lease has lapsed when we look.
	return ctrl.Result{RequeueAfter: next.Sub(now) + 10*time.Millisecond}, nil
}

func key(ns, name string) string { return ns + "/" + name }

func redundancy(r int32) int {
	if r == 1 {
		return 1
	}
	return 2
}

// placeStatus sets an object's placement fields from p: a change of owner
// away from a member that is no longer live is a failover.
func placeStatus(owner, standby *string, epoch *int64, phase *string, last **fleetv1.Failover, p placement.Placement, red int, isLive func(string) bool, now time.Time) {
	if *owner != "" && p.Owner != "" && *owner != p.Owner && !isLive(*owner) {
		*last = &fleetv1.Failover{Time: metav1.NewTime(now.Truncate(time.Second)), From: *owner, To: p.Owner}
	}
	*owner, *standby, *epoch = p.Owner, p.Standby, p.Epoch
	switch {
	case p.Owner == "":
		*phase = fleetv1.PhaseUnplaced
	case red > 1 && p.Standby == "":
		*phase = fleetv1.PhaseDegraded
	default:
		*phase = fleetv1.PhasePlaced
	}
}

// childSAs returns the child SAs the owner's agent reported for tunnel.
func childSAs(a *fleetv1.GatewayAssignment, tunnel string) []fleetv1.ChildSAStatus {
	if a == nil {
		return nil
	}
	var out []fleetv1.ChildSAStatus
	for _, c := range a.Status.ChildSAs {
		if c.Tunnel == tunnel {
			out = append(out, fleetv1.ChildSAStatus{Name: c.Name, SPIIn: c.SPIIn, SPIOut: c.SPIOut})
		}
	}
	return out
}

// markPending sets the objects of a pool that does not exist to Pending.
func (r *PoolReconciler) markPending(ctx context.Context, pool types.NamespacedName) error {
	var tunnels fleetv1.TunnelList
	if err := r.Client.List(ctx, &tunnels, client.InNamespace(pool.Namespace)); err != nil {
		return err
	}
	for i := range tunnels.Items {
		t := &tunnels.Items[i]
		if t.Spec.Pool != pool.Name || (t.Status.Phase == fleetv1.PhasePending && t.Status.Owner == "") {
			continue
		}
		t.Status.Phase, t.Status.Owner, t.Status.Standby = fleetv1.PhasePending, "", ""
		if err := r.Client.Status().Update(ctx, t); err != nil {
			return err
		}
		r.Stats.TunnelStatusWrites.Add(1)
	}
	var listeners fleetv1.TLSListenerList
	if err := r.Client.List(ctx, &listeners, client.InNamespace(pool.Namespace)); err != nil {
		return err
	}
	for i := range listeners.Items {
		l := &listeners.Items[i]
		if l.Spec.Pool != pool.Name || (l.Status.Phase == fleetv1.PhasePending && l.Status.Owner == "") {
			continue
		}
		l.Status.Phase, l.Status.Owner, l.Status.Standby = fleetv1.PhasePending, "", ""
		if err := r.Client.Status().Update(ctx, l); err != nil {
			return err
		}
		r.Stats.ListenerStatusWrites.Add(1)
	}
	return nil
}

// reconcileAssignments writes the assignment of every live member whose
// content changed (bumping its generation) and deletes those of members
// that are not live. Before it writes one, the agent of every Lease is
// given the access its assignment calls for (agentaccess.go).
func (r *PoolReconciler) reconcileAssignments(ctx context.Context, pool *fleetv1.GatewayPool, leases []coordinationv1.Lease, pairs []placement.Pair,
	byName map[string]member, current map[string]*fleetv1.GatewayAssignment,
	ts []*fleetv1.Tunnel, tPlace map[string]placement.Placement,
	ls []*fleetv1.TLSListener, lPlace map[string]placement.Placement, ringVersion int64) error {
	want := map[string]*fleetv1.GatewayAssignmentSpec{}
	for _, p := range pairs {
		for _, gw := range p.Names() {
			partner := p.Partner(gw)
			if partner == "" {
				// A survivor keeps naming its lost partner, so its
				// sync channel's configuration does not change.
				partner = p.Lost
			}
			want[gw] = &fleetv1.GatewayAssignmentSpec{
				Pool: pool.Name, Gateway: gw, Zone: byName[gw].zone,
				Partner: partner, PartnerAddress: r.partnerAddress(pool, byName, partner),
				HASecret: haSecretName(pool.Name, gw), TicketKeySecret: ticketSecretName(pool.Name),
				TicketKeyVersion: ringVersion,
			}
		}
	}
	add := func(list func(*fleetv1.GatewayAssignmentSpec) *[]fleetv1.AssignedObject, name string, p placement.Placement) {
		if s := want[p.Owner]; s != nil {
			*list(s) = append(*list(s), fleetv1.AssignedObject{Name: name, Role: fleetv1.RoleOwner, Owner: p.Group, Epoch: p.Epoch})
		}
		if s := want[p.Standby]; s != nil && p.Standby != "" {
			*list(s) = append(*list(s), fleetv1.AssignedObject{Name: name, Role: fleetv1.RoleStandby, Owner: p.Group, Epoch: p.Epoch})
		}
	}
	tunnelsOf := func(s *fleetv1.GatewayAssignmentSpec) *[]fleetv1.AssignedObject { return &s.Tunnels }
	listenersOf := func(s *fleetv1.GatewayAssignmentSpec) *[]fleetv1.AssignedObject { return &s.Listeners }
	for _, t := range ts {
		add(tunnelsOf, t.Name, tPlace[key(t.Namespace, t.Name)])
	}
	for _, l := range ls {
		add(listenersOf, l.Name, lPlace[key(l.Namespace, l.Name)])
	}
	byObjName := func(a, b fleetv1.AssignedObject) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	}
	names := make([]string, 0, len(want))
	for gw, s := range want {
		names = append(names, gw)
		slices.SortFunc(s.Tunnels, byObjName)
		slices.SortFunc(s.Listeners, byObjName)
	}
	slices.Sort(names)
	if err := r.reconcileAgentAccess(ctx, pool, leases, want, ts, ls); err != nil {
		return err
	}
	for _, gw := range names {
		s := want[gw]
		cur := current[gw]
		if cur != nil {
			s.Generation = cur.Spec.Generation
			if equality.Semantic.DeepEqual(s, &cur.Spec) {
				continue
			}
			s.Generation++
			cur.Spec = *s
			if err := r.Client.Update(ctx, cur); err != nil {
				return fmt.Errorf("controller: assignment %s: %w", gw, err)
			}
			r.Stats.AssignmentWrites.Add(1)
			continue
		}
		s.Generation = 1
		a := &fleetv1.GatewayAssignment{
			ObjectMeta: metav1.ObjectMeta{Name: gw, Namespace: pool.Namespace, Labels: map[string]string{fleetv1.LabelPool: pool.Name}},
			Spec:       *s,
		}
		if err := controllerutil.SetControllerReference(pool, a, r.Scheme); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, a); err != nil {
			return fmt.Errorf("controller: assignment %s: %w", gw, err)
		}
		r.Stats.AssignmentWrites.Add(1)
	}
	for gw, a := range current {
		if want[gw] != nil {
			continue
		}
		if err := r.Client.Delete(ctx, a); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("controller: assignment %s: %w", gw, err)
		}
		r.Stats.AssignmentDeletes.Add(1)
	}
	return nil
}

// partnerAddress returns the address of partner from its Lease, or the
// pool's status for a lost member whose Lease is gone.
func (r *PoolReconciler) partnerAddress(pool *fleetv1.GatewayPool, byName map[string]member, partner string) string {
	if partner == "" {
		return ""
	}
	if m, ok := byName[partner]; ok && m.address != "" {
		return m.address
	}
	for _, m := range pool.Status.Members {
		if m.Name == partner {
			return m.Address
		}
	}
	return ""
}

// writePoolStatus records the members (live ones, and lost ones a
// survivor still names) and their partners.
func (r *PoolReconciler) writePoolStatus(ctx context.Context, pool *fleetv1.GatewayPool, pairs []placement.Pair, byName map[string]member) error {
	st := pool.Status.DeepCopy()
	old := map[string]fleetv1.PoolMember{}
	for _, m := range pool.Status.Members {
		old[m.Name] = m
	}
	st.Members = nil
	addMember := func(name, partner string, live bool) {
		m, ok := byName[name]
		pm := fleetv1.PoolMember{Name: name, Node: name, Zone: m.zone, Address: m.address, Live: live, Partner: partner}
		if !ok {
			o := old[name]
			pm.Zone, pm.Address = o.Zone, o.Address
		}
		st.Members = append(st.Members, pm)
	}
	for _, p := range pairs {
		if p.B != "" {
			addMember(p.A, p.B, true)
			addMember(p.B, p.A, true)
			continue
		}
		addMember(p.A, p.Lost, true)
		if p.Lost != "" {
			addMember(p.Lost, p.A, false)
		}
	}
	slices.SortFunc(st.Members, func(a, b fleetv1.PoolMember) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	st.TicketKeySecret = ticketSecretName(pool.Name)
	st.ObservedGeneration = pool.Generation
	cond := metav1.Condition{Type: ConditionRedundant, Status: metav1.ConditionTrue, Reason: "Paired",
		Message: "every live member has a live partner", ObservedGeneration: pool.Generation}
	for _, p := range pairs {
		if p.B == "" {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "MemberAlone", p.A+" has no live partner"
			break
		}
	}
	if len(pairs) == 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "NoMembers", "no gateway's Lease is current"
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if equality.Semantic.DeepEqual(st, &pool.Status) {
		return nil
	}
	pool.Status = *st
	return r.Client.Status().Update(ctx, pool)
}

// reconcileHACreds makes sure the pool CA Secret exists and every live
// member has a current certificate from it in its HA Secret; the Secret of
// a member neither live nor named by a survivor is deleted.
func (r *PoolReconciler) reconcileHACreds(ctx context.Context, pool *fleetv1.GatewayPool, live []placement.Member, pairs []placement.Pair, now time.Time) error {
	keep := map[string]bool{}
	for _, p := range pairs {
		keep[p.A], keep[p.B], keep[p.Lost] = true, true, true
	}
	var old corev1.SecretList
	if err := r.Client.List(ctx, &old, client.InNamespace(pool.Namespace), client.MatchingLabels{fleetv1.LabelPool: pool.Name}); err != nil {
		return err
	}
	for i := range old.Items {
		s := &old.Items[i]
		gw := s.Labels[fleetv1.LabelGateway]
		if gw == "" || keep[gw] || s.Name != haSecretName(pool.Name, gw) {
			continue
		}
		if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("controller: HA secret %s: %w", s.Name, err)
		}
	}
	var ca corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: caSecretName(pool.Name)}, &ca)
	if apierrors.IsNotFound(err) {
		certPEM, keyPEM, err := newCA(pool.Name, now)
		if err != nil {
			return err
		}
		ca = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: caSecretName(pool.Name), Namespace: pool.Namespace, Labels: map[string]string{fleetv1.LabelPool: pool.Name}},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{keyCert: certPEM, keyKey: keyPEM},
		}
		if err := controllerutil.SetControllerReference(pool, &ca, r.Scheme); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, &ca); err != nil {
			return fmt.Errorf("controller: HA CA secret: %w", err)
		}
	} else if err != nil {
		return err
	}
	for _, m := range live {
		name := haSecretName(pool.Name, m.Name)
		var s corev1.Secret
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: name}, &s)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		exists := err == nil
		if exists && memberCertCurrent(s.Data, ca.Data[keyCert], fleetv1.HAMemberName(m.Name), now) {
			continue
		}
		certPEM, keyPEM, err := issueMember(ca.Data[keyCert], ca.Data[keyKey], fleetv1.HAMemberName(m.Name), now)
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{keyCert: certPEM, keyKey: keyPEM, keyCA: ca.Data[keyCert]}
		if exists {
			if err := r.Client.Update(ctx, &s); err != nil {
				return fmt.Errorf("controller: HA secret %s: %w", name, err)
			}
			continue
		}
		s.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: pool.Namespace, Labels: map[string]string{fleetv1.LabelPool: pool.Name, fleetv1.LabelGateway: m.Name}}
		s.Type = corev1.SecretTypeTLS
		if err := controllerutil.SetControllerReference(pool, &s, r.Scheme); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, &s); err != nil {
			return fmt.Errorf("controller: HA secret %s: %w", name, err)
		}
	}
	return nil
}

// reconcileRing advances the pool's ticket-key ring and stores it. A live
// member has a key when its agent reports the ring version that added it,
// or reports it applied an assignment generation naming that version.
func (r *PoolReconciler) reconcileRing(ctx context.Context, pool *fleetv1.GatewayPool, live []placement.Member, assigns map[string]*fleetv1.GatewayAssignment, now time.Time) (*fleetv1.TicketKeyRing, time.Time, error) {
	name := ticketSecretName(pool.Name)
	var s corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: name}, &s)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, time.Time{}, err
	}
	exists := err == nil
	ring := &fleetv1.TicketKeyRing{}
	if exists && len(s.Data[fleetv1.TicketKeyRingKey]) > 0 {
		if err := json.Unmarshal(s.Data[fleetv1.TicketKeyRingKey], ring); err != nil {
			// A ring we cannot read is started again: the gateways
			// keep the ring in force until a new one is applied.
			log.FromContext(ctx).Error(err, "ticket-key ring unreadable, starting a new one", "secret", name)
			ring = &fleetv1.TicketKeyRing{Version: 0}
		}
	}
	has := func(version int64) bool {
		n := 0
		for _, m := range live {
			a := assigns[m.Name]
			switch {
			case a == nil:
			case a.Status.TicketKeyVersion >= version,
				a.Spec.TicketKeyVersion >= version && a.Status.AppliedGeneration >= a.Spec.Generation:
				n++
			}
		}
		r.Stats.PendingKeyHolders.Store(int64(n))
		return n == len(live)
	}
	lifetime := 24 * time.Hour
	if l := pool.Spec.TicketKeys.Lifetime; l != nil && l.Duration >= time.Minute {
		lifetime = l.Duration
	}
	changed, next := advanceRing(ring, now, lifetime, has)
	if !changed && exists {
		return ring, next, nil
	}
	data, err := json.Marshal(ring)
	if err != nil {
		return nil, time.Time{}, err
	}
	s.Data = map[string][]byte{fleetv1.TicketKeyRingKey: data}
	if exists {
		if err := r.Client.Update(ctx, &s); err != nil {
			return nil, time.Time{}, fmt.Errorf("controller: ticket-key secret: %w", err)
		}
		return ring, next, nil
	}
	s.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: pool.Namespace, Labels: map[string]string{fleetv1.LabelPool: pool.Name}}
	s.Type = corev1.SecretTypeOpaque
	if err := controllerutil.SetControllerReference(pool, &s, r.Scheme); err != nil {
		return nil, time.Time{}, err
	}
	if err := r.Client.Create(ctx, &s); err != nil {
		return nil, time.Time{}, fmt.Errorf("controller: ticket-key secret: %w", err)
	}
	return ring, next, nil
}
