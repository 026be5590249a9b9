package controller

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// LeaderElectionID is the name of the Lease the controller's replicas
// elect their leader with.
const LeaderElectionID = "sluice-fleet-controller"

// NewScheme returns a scheme with the core types and the fleet's.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := fleetv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Options configure NewManager.
type Options struct {
	// Namespace is the namespace the controller serves and elects its
	// leader in; "" serves all (the election then needs
	// LeaderElectionNamespace).
	Namespace string
	// LeaderElection turns the election on (the Deployment runs two).
	LeaderElection bool
	// LeaderElectionNamespace is where the election's Lease lives when
	// Namespace is "".
	LeaderElectionNamespace string
	// MetricsAddr and ProbeAddr are the listen addresses of the metrics
	// and health endpoints; "0" turns one off.
	MetricsAddr, ProbeAddr string
	// SkipNameValidation lets a process run more than one manager (tests).
	SkipNameValidation bool
}

// The permissions the controller needs (controller-gen rbac reads these).
//
// +kubebuilder:rbac:groups=sluice.io,resources=gatewaypools;tunnels;tlslisteners,verbs=get;list;watch
// +kubebuilder:rbac:groups=sluice.io,resources=gatewaypools/status;tunnels/status;tlslisteners/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sluice.io,resources=gatewayassignments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=delete

// NewManager returns a manager running the pool reconciler, leader
// elected when opts say so.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, *PoolReconciler, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, nil, err
	}
	mo := ctrl.Options{
		Scheme:                        scheme,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        opts.ProbeAddr,
	}
	mo.Metrics.BindAddress = opts.MetricsAddr
	// Cache only the Leases and Secrets of pools: not every Secret of the
	// namespace (the PSKs among them) nor every Lease of the cluster.
	pooled, err := labels.Parse(fleetv1.LabelPool)
	if err != nil {
		return nil, nil, err
	}
	// So with the agents' identities (agentaccess.go).
	mo.Cache.ByObject = map[client.Object]cache.ByObject{
		&corev1.Secret{}:         {Label: pooled},
		&coordinationv1.Lease{}:  {Label: pooled},
		&corev1.ServiceAccount{}: {Label: pooled},
		&rbacv1.Role{}:           {Label: pooled},
		&rbacv1.RoleBinding{}:    {Label: pooled},
	}
	if opts.Namespace != "" {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{opts.Namespace: {}}
		if mo.LeaderElectionNamespace == "" {
			mo.LeaderElectionNamespace = opts.Namespace
		}
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, nil, err
	}
	r := &PoolReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}
	if err := r.setup(mgr, opts.SkipNameValidation); err != nil {
		return nil, nil, err
	}
	return mgr, r, nil
}

// leaseUpdateMatters reports whether an update of a Lease can change the
// membership: a renewal of a Lease that is current changes nothing (its
// lapse is found by the requeue at its expiry), so the renewals of a
// hundred gateways every few seconds do not each place the whole pool.
func leaseUpdateMatters(old, cur *coordinationv1.Lease, now time.Time) bool {
	if !equality.Semantic.DeepEqual(old.Labels, cur.Labels) || !equality.Semantic.DeepEqual(old.Annotations, cur.Annotations) ||
		!equality.Semantic.DeepEqual(old.Spec.LeaseDurationSeconds, cur.Spec.LeaseDurationSeconds) ||
		!equality.Semantic.DeepEqual(old.Spec.HolderIdentity, cur.Spec.HolderIdentity) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) {
		return true
	}
	ms := membersFromLeases([]coordinationv1.Lease{*old}, now)
	return len(ms) == 1 && !ms[0].live
}

// SetupWithManager registers the reconciler: a pool is reconciled when it,
// one of its Leases, Tunnels, TLSListeners or GatewayAssignments, or a
// Secret it owns changes.
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.setup(mgr, false)
}

func (r *PoolReconciler) setup(mgr ctrl.Manager, skipNameValidation bool) error {
	toPool := func(pool func(client.Object) string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := pool(o)
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewaypool").
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		For(&fleetv1.GatewayPool{}).
		Owns(&corev1.Secret{}).
		Watches(&coordinationv1.Lease{}, toPool(func(o client.Object) string { return o.GetLabels()[fleetv1.LabelPool] }),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return leaseUpdateMatters(e.ObjectOld.(*coordinationv1.Lease), e.ObjectNew.(*coordinationv1.Lease), time.Now())
			}})).
		Watches(&fleetv1.Tunnel{}, toPool(func(o client.Object) string { return o.(*fleetv1.Tunnel).Spec.Pool })).
		Watches(&fleetv1.TLSListener{}, toPool(func(o client.Object) string { return o.(*fleetv1.TLSListener).Spec.Pool })).
		Watches(&fleetv1.GatewayAssignment{}, toPool(func(o client.Object) string { return o.(*fleetv1.GatewayAssignment).Spec.Pool })).
		// An agent's identity changed or deleted by another hand is put back.
		Watches(&corev1.ServiceAccount{}, toPool(func(o client.Object) string { return o.GetLabels()[fleetv1.LabelPool] })).
		Watches(&rbacv1.Role{}, toPool(func(o client.Object) string { return o.GetLabels()[fleetv1.LabelPool] })).
		Watches(&rbacv1.RoleBinding{}, toPool(func(o client.Object) string { return o.GetLabels()[fleetv1.LabelPool] })).
		Complete(r)
}
