package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Roles of a gateway for a tunnel or a listener.
const (
	// RoleOwner serves the object.
	RoleOwner = "owner"
	// RoleStandby holds the object's configuration to take it over.
	RoleStandby = "standby"
)

// AssignedObject is one tunnel or listener of an assignment.
type AssignedObject struct {
	// Name is the object's name, in the assignment's namespace.
	Name string `json:"name"`
	// Role is the gateway's role for it.
	// +kubebuilder:validation:Enum=owner;standby
	Role string `json:"role"`
	// Owner is the member whose HA group holds the object's VIP: the
	// object's owner, or, once that member is lost, still the lost
	// member (its partner owns the object by owning the lost member's
	// group, which the partner took over without the API server; moving
	// the VIP to the partner's own group would renegotiate the tunnel).
	// +optional
	Owner string `json:"owner,omitempty"`
	// Epoch is the object's ownership epoch.
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch"`
}

// GatewayAssignmentSpec is everything one gateway serves, written by the
// controller only.
type GatewayAssignmentSpec struct {
	// Pool names the gateway's GatewayPool.
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool"`
	// Gateway is the gateway's name (its node's name).
	// +kubebuilder:validation:MinLength=1
	Gateway string `json:"gateway"`
	// Zone is the gateway's zone.
	// +optional
	Zone string `json:"zone,omitempty"`
	// Partner is the other member of its HA pair, "" if none.
	// +optional
	Partner string `json:"partner,omitempty"`
	// PartnerAddress is the partner's node address.
	// +optional
	PartnerAddress string `json:"partnerAddress,omitempty"`
	// Generation is bumped on every rewrite of the spec.
	// +kubebuilder:validation:Minimum=0
	Generation int64 `json:"generation"`
	// Tunnels are the tunnels the gateway owns or stands by for.
	// +optional
	// +listType=map
	// +listMapKey=name
	Tunnels []AssignedObject `json:"tunnels,omitempty"`
	// Listeners are the TLS listeners the gateway owns or stands by for.
	// +optional
	// +listType=map
	// +listMapKey=name
	Listeners []AssignedObject `json:"listeners,omitempty"`
	// HASecret names the Secret holding the gateway's sync-channel
	// certificate and key (tls.crt, tls.key) and the pool CA (ca.crt).
	// +optional
	HASecret string `json:"haSecret,omitempty"`
	// TicketKeySecret names the Secret holding the ticket-key ring.
	// +optional
	TicketKeySecret string `json:"ticketKeySecret,omitempty"`
	// TicketKeyVersion is the ring version the gateway must apply: the
	// agent applies the ring from TicketKeySecret once its version is at
	// least this.
	// +optional
	TicketKeyVersion int64 `json:"ticketKeyVersion,omitempty"`
}

// AssignedChildSA is a child SA a gateway negotiated for a tunnel.
type AssignedChildSA struct {
	// Tunnel is the tunnel's name.
	Tunnel string `json:"tunnel"`
	// Name is the child's name.
	Name string `json:"name"`
	// SPIIn is the inbound SPI, 0x%08x.
	// +optional
	SPIIn string `json:"spiIn,omitempty"`
	// SPIOut is the outbound SPI, 0x%08x.
	// +optional
	SPIOut string `json:"spiOut,omitempty"`
}

// GatewayAssignmentStatus is what the gateway's agent applied, written
// by the agent only.
type GatewayAssignmentStatus struct {
	// AppliedGeneration is the spec generation the gateway runs.
	// +optional
	AppliedGeneration int64 `json:"appliedGeneration,omitempty"`
	// TicketKeyVersion is the ticket-key ring version the gateway runs.
	// +optional
	TicketKeyVersion int64 `json:"ticketKeyVersion,omitempty"`
	// Message is the last apply's error, "" after a success.
	// +optional
	Message string `json:"message,omitempty"`
	// ChildSAs are the child SAs of the tunnels the gateway owns.
	// +optional
	ChildSAs []AssignedChildSA `json:"childSAs,omitempty"`
}

// GatewayAssignment is one gateway's share of its pool: named after the
// gateway, in the pool's namespace, written by the controller, watched by
// that gateway's agent alone.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gwa
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Partner",type=string,JSONPath=`.spec.partner`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.spec.generation`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.appliedGeneration`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayAssignment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GatewayAssignmentSpec   `json:"spec,omitempty"`
	Status GatewayAssignmentStatus `json:"status,omitempty"`
}

// GatewayAssignmentList is a list of GatewayAssignments.
//
// +kubebuilder:object:root=true
type GatewayAssignmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayAssignment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GatewayAssignment{}, &GatewayAssignmentList{})
}
