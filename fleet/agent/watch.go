package agent

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// NewAssignmentCache returns a cache that holds one object: gateway's
// GatewayAssignment in namespace, watched with the field selector
// metadata.name=gateway, so that the API server sends this agent the
// events of its own assignment and of no other. Reading any other kind
// through it fails rather than starting a watch of every object of that
// kind. Start it, wait for its sync, and pass it to WakeOn. mapper, if not
// nil, maps kinds to resources (PodMapper: cfg may not authenticate
// before the controller has made the node's account); nil asks cfg's API
// server.
func NewAssignmentCache(cfg *rest.Config, mapper meta.RESTMapper, scheme *runtime.Scheme, namespace, gateway string) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:                      scheme,
		Mapper:                      mapper,
		ReaderFailOnMissingInformer: true,
		ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.GatewayAssignment{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", gateway),
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("agent: assignment cache: %w", err)
	}
	return c, nil
}

// WakeOn makes every event of c's GatewayAssignment informer wake the
// agent (and creates the informer, which the cache's Start then runs).
func (a *Agent) WakeOn(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, &v1alpha1.GatewayAssignment{})
	if err != nil {
		return fmt.Errorf("agent: assignment informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.Wake() },
		UpdateFunc: func(any, any) { a.Wake() },
		DeleteFunc: func(any) { a.Wake() },
	})
	if err != nil {
		return fmt.Errorf("agent: assignment informer: %w", err)
	}
	return nil
}
