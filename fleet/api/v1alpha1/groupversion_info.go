// Package v1alpha1 holds the sluice.io/v1alpha1 custom resources: a
// GatewayPool of gateways, the Tunnels and TLSListeners placed on it, and
// the GatewayAssignment the controller writes for each gateway.
//
// +kubebuilder:object:generate=true
// +groupName=sluice.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these resources.
	GroupVersion = schema.GroupVersion{Group: "sluice.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Labels and annotations of the membership Leases, shared by the
// controller and the agent.
const (
	// LabelPool names the GatewayPool a Lease belongs to.
	LabelPool = "sluice.io/pool"
	// LabelGateway names the gateway holding a Lease.
	LabelGateway = "sluice.io/gateway"
	// AnnotationZone is the zone of a gateway's node.
	AnnotationZone = "sluice.io/zone"
	// AnnotationAddress is the node address the sync channel and the
	// tunnels use.
	AnnotationAddress = "sluice.io/address"
	// LeasePrefix is the prefix of a gateway's Lease name: the Lease of
	// gateway g is LeasePrefix+g.
	LeasePrefix = "sluice-gw-"
)
