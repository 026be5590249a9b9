package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayPoolSpec is the desired shape of a pool of gateways.
type GatewayPoolSpec struct {
	// NodeSelector selects the nodes whose gateways join the pool.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Steering is how traffic reaches a tunnel's owner: vip moves the
	// tunnel's address with its ownership (gratuitous ARP, unsolicited NA).
	// +kubebuilder:validation:Enum=vip
	// +kubebuilder:default=vip
	// +optional
	Steering string `json:"steering,omitempty"`

	// VIPInterface is the node interface the VIPs go on.
	// +kubebuilder:default=eth0
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +optional
	VIPInterface string `json:"vipInterface,omitempty"`

	// VIPPrefixLength is the prefix length the VIPs are added with.
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	// +optional
	VIPPrefixLength int32 `json:"vipPrefixLength,omitempty"`

	// Detection sets how fast a member notices its partner is gone.
	// +kubebuilder:default={}
	// +optional
	Detection Detection `json:"detection,omitempty"`

	// SyncPort is the TCP port of the HA sync channel on each node's
	// address.
	// +kubebuilder:default=7310
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	SyncPort int32 `json:"syncPort,omitempty"`

	// TicketKeys sets the rotation of the TLS session-ticket key ring.
	// +kubebuilder:default={}
	// +optional
	TicketKeys TicketKeys `json:"ticketKeys,omitempty"`
}

// Detection is the sync channel's failure detection.
type Detection struct {
	// Interval is the heartbeat interval.
	// +kubebuilder:default="100ms"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="interval must be positive"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Misses is how many heartbeats may be missed before the partner is
	// declared gone.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	// +optional
	Misses int32 `json:"misses,omitempty"`
}

// TicketKeys is the rotation of the pool's session-ticket key ring.
type TicketKeys struct {
	// Lifetime is how long a key issues tickets; it is accepted for as
	// long again after.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="lifetime must be at least 1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	Lifetime *metav1.Duration `json:"lifetime,omitempty"`
}

// PoolMember is one gateway of a pool as the controller last saw it.
type PoolMember struct {
	// Name is the gateway's name (its node's name).
	Name string `json:"name"`
	// Node is the node the gateway runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// Zone is the node's zone.
	// +optional
	Zone string `json:"zone,omitempty"`
	// Address is the node address of the sync channel and the tunnels.
	// +optional
	Address string `json:"address,omitempty"`
	// Live is whether the member's Lease is current.
	Live bool `json:"live"`
	// Partner is the other member of its HA pair: "" if none. A live
	// member whose partner was lost names the lost partner until it is
	// paired again, and holds the lost partner's tunnels.
	// +optional
	Partner string `json:"partner,omitempty"`
}

// GatewayPoolStatus is the observed state of a pool.
type GatewayPoolStatus struct {
	// Members are the pool's gateways, live and lately lost.
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []PoolMember `json:"members,omitempty"`
	// TicketKeySecret names the Secret holding the ticket-key ring.
	// +optional
	TicketKeySecret string `json:"ticketKeySecret,omitempty"`
	// ObservedGeneration is the spec generation the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are the pool's conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GatewayPool is a set of gateways the controller places tunnels and
// listeners on, in HA pairs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gwp
// +kubebuilder:printcolumn:name="Steering",type=string,JSONPath=`.spec.steering`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GatewayPoolSpec   `json:"spec,omitempty"`
	Status GatewayPoolStatus `json:"status,omitempty"`
}

// GatewayPoolList is a list of GatewayPools.
//
// +kubebuilder:object:root=true
type GatewayPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GatewayPool{}, &GatewayPoolList{})
}
