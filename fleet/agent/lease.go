package agent

// lease.go holds this gateway's membership Lease: created when missing,
// renewed every RenewInterval, deleted on shutdown (which tells the
// controller at once that the member is gone, and so hands its tunnels to
// the partner).

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// The membership Lease's defaults: it lasts DefaultLeaseDuration and is
// renewed every DefaultRenewInterval.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewInterval = 3 * time.Second
)

// LeaseName returns the name of gateway's membership Lease.
func LeaseName(gateway string) string { return v1alpha1.LeasePrefix + gateway }

// renewLease creates the Lease, or renews it (renewTime now, and the
// labels, annotations and holder this agent is configured with).
func (a *Agent) renewLease(ctx context.Context) error {
	now := metav1.NewMicroTime(a.now())
	secs := int32(a.cfg.LeaseDuration / time.Second)
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: a.cfg.Namespace, Name: LeaseName(a.cfg.Gateway)}
	err := a.cfg.Client.Get(ctx, key, &l)
	if err != nil {
		// Not found, or not readable yet: the node's own account, which
		// reads the Lease, is made by the controller once the Lease
		// exists, so the pod's account (LeaseCreator) creates it.
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		a.leaseMeta(&l)
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &a.cfg.Gateway, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
		cerr := a.cfg.LeaseCreator.Create(ctx, &l)
		switch {
		case cerr == nil:
			return nil
		case apierrors.IsNotFound(err) || !apierrors.IsAlreadyExists(cerr):
			return fmt.Errorf("agent: create lease %s: %w", key, cerr)
		}
		return fmt.Errorf("agent: get lease %s: %w", key, err)
	}
	a.leaseMeta(&l)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != a.cfg.Gateway {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = &a.cfg.Gateway, &now
	}
	l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &secs, &now
	if err := a.cfg.Client.Update(ctx, &l); err != nil {
		return fmt.Errorf("agent: renew lease %s: %w", key, err)
	}
	return nil
}

// leaseMeta sets l's labels and annotations.
func (a *Agent) leaseMeta(l *coordinationv1.Lease) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[v1alpha1.LabelPool], l.Labels[v1alpha1.LabelGateway] = a.cfg.Pool, a.cfg.Gateway
	l.Annotations[v1alpha1.AnnotationZone] = a.cfg.Zone
	l.Annotations[v1alpha1.AnnotationAddress] = a.cfg.NodeAddress.String()
}

// deleteLease deletes the Lease, if this gateway still holds it.
func (a *Agent) deleteLease(ctx context.Context) error {
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: a.cfg.Namespace, Name: LeaseName(a.cfg.Gateway)}
	if err := a.cfg.Client.Get(ctx, key, &l); err != nil {
		return client.IgnoreNotFound(err)
	}
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != a.cfg.Gateway {
		return nil
	}
	err := a.cfg.Client.Delete(ctx, &l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("agent: delete lease %s: %w", key, err)
	}
	return nil
}

// holdLease renews the Lease every RenewInterval until ctx ends, then
// deletes it (within a few seconds of its own).
func (a *Agent) holdLease(ctx context.Context) {
	t := time.NewTicker(a.cfg.RenewInterval)
	defer t.Stop()
	for {
		if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("lease renewal failed", "err", err)
		}
		select {
		case <-ctx.Done():
			if a.cfg.KeepLease {
				return
			}
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := a.deleteLease(dctx); err != nil {
				a.log.Warn("lease not deleted", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
