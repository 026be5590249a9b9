package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TunnelSpec is one IKEv2 connection, the [[connection]] schema of the
// gateway's configuration one to one.
type TunnelSpec struct {
	// Pool names the GatewayPool (in the Tunnel's namespace) the tunnel
	// is placed on.
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool"`

	// Redundancy is 2 for an owner and a standby, 1 for an owner alone.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	// +optional
	Redundancy int32 `json:"redundancy,omitempty"`

	// Version is the IKE version.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Enum=2
	// +optional
	Version int32 `json:"version,omitempty"`

	// LocalAddrs are the local addresses; the first is the VIP the
	// tunnel lives on.
	// +kubebuilder:validation:MinItems=1
	LocalAddrs []string `json:"localAddrs"`

	// InsideAddrs are addresses on the gateways' inside that move with
	// the tunnel, as [[ha.group]] addresses ("10.1.0.1/24 dev lan0"):
	// the next hop the site's routers send the tunnel's traffic to, held
	// by whichever member owns the tunnel (steering vip).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F.:]+/[0-9]+ dev [^ /]+$`
	// +optional
	InsideAddrs []string `json:"insideAddrs,omitempty"`

	// RemoteAddrs are the peer's addresses.
	// +optional
	RemoteAddrs []string `json:"remoteAddrs,omitempty"`

	// Proposals are the IKE proposals, swanctl style.
	// +optional
	Proposals string `json:"proposals,omitempty"`

	// DPDDelay is the dead-peer-detection interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	DPDDelay *metav1.Duration `json:"dpdDelay,omitempty"`

	// RekeyTime is the IKE SA's rekey time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	RekeyTime *metav1.Duration `json:"rekeyTime,omitempty"`

	// OverTime is the hard lifetime's margin over the rekey time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	OverTime *metav1.Duration `json:"overTime,omitempty"`

	// Encap forces UDP encapsulation.
	// +optional
	Encap bool `json:"encap,omitempty"`

	// Local is how this end authenticates.
	Local TunnelAuth `json:"local"`

	// Remote is how the peer authenticates.
	Remote TunnelAuth `json:"remote"`

	// PSKSecretRef names the Secret (in the Tunnel's namespace) whose key
	// holds the pre-shared key, raw bytes.
	// +optional
	PSKSecretRef *SecretKeyRef `json:"pskSecretRef,omitempty"`

	// Children are the connection's child SAs.
	// +kubebuilder:validation:MinItems=1
	Children []TunnelChild `json:"children"`
}

// TunnelAuth is one end's authentication.
type TunnelAuth struct {
	// Auth is the method.
	// +kubebuilder:validation:Enum=psk;pubkey
	Auth string `json:"auth"`
	// ID is the identity.
	// +optional
	ID string `json:"id,omitempty"`
	// Certs are certificate file names or Secret names.
	// +optional
	Certs []string `json:"certs,omitempty"`
	// CACerts are the trusted CAs (remote end only).
	// +optional
	CACerts []string `json:"cacerts,omitempty"`
}

// SecretKeyRef names a key of a Secret in the referrer's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key is the key within the Secret.
	// +kubebuilder:default=psk
	// +optional
	Key string `json:"key,omitempty"`
}

// TunnelChild is one child SA of a connection.
type TunnelChild struct {
	// Name is the child's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// LocalTS are the local traffic selectors.
	// +optional
	LocalTS []string `json:"localTS,omitempty"`
	// RemoteTS are the remote traffic selectors.
	// +optional
	RemoteTS []string `json:"remoteTS,omitempty"`
	// ESPProposals are the ESP proposals, swanctl style.
	// +optional
	ESPProposals string `json:"espProposals,omitempty"`
	// StartAction is what the gateway does with the child at start.
	// +kubebuilder:validation:Enum=none;trap;start
	// +optional
	StartAction string `json:"startAction,omitempty"`
	// RekeyTime is the child SA's rekey time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	RekeyTime *metav1.Duration `json:"rekeyTime,omitempty"`
	// LifeTime is the child SA's hard lifetime.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	LifeTime *metav1.Duration `json:"lifeTime,omitempty"`
}

// Phases of a placed object.
const (
	// PhasePending is an object the controller has not placed yet.
	PhasePending = "Pending"
	// PhasePlaced is an object with its owner and, if it wants one, its
	// standby.
	PhasePlaced = "Placed"
	// PhaseDegraded is an object with an owner but no standby it wants.
	PhaseDegraded = "Degraded"
	// PhaseUnplaced is an object no live member owns.
	PhaseUnplaced = "Unplaced"
)

// Failover is an ownership change caused by a lost member.
type Failover struct {
	// Time is when the controller recorded the change.
	Time metav1.Time `json:"time"`
	// From is the lost owner.
	From string `json:"from"`
	// To is the new owner.
	To string `json:"to"`
	// GapMillis is the traffic gap the new owner measured, if it
	// reported one.
	// +optional
	GapMillis int64 `json:"gapMillis,omitempty"`
}

// ChildSAStatus is one negotiated child SA: its SPIs, never its keys.
type ChildSAStatus struct {
	// Name is the child's name.
	Name string `json:"name"`
	// SPIIn is the inbound SPI, 0x%08x.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-f]{8}$`
	// +optional
	SPIIn string `json:"spiIn,omitempty"`
	// SPIOut is the outbound SPI, 0x%08x.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-f]{8}$`
	// +optional
	SPIOut string `json:"spiOut,omitempty"`
}

// TunnelStatus is where a tunnel is placed and what it negotiated.
type TunnelStatus struct {
	// Owner is the gateway that serves the tunnel.
	// +optional
	Owner string `json:"owner,omitempty"`
	// Standby is the gateway that takes over if the owner is lost.
	// +optional
	Standby string `json:"standby,omitempty"`
	// Epoch is bumped on every change of owner; it never decreases.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Phase is the placement's state.
	// +kubebuilder:validation:Enum=Pending;Placed;Degraded;Unplaced
	// +optional
	Phase string `json:"phase,omitempty"`
	// LastFailover is the last ownership change caused by a lost member.
	// +optional
	LastFailover *Failover `json:"lastFailover,omitempty"`
	// ChildSAs are the child SAs the owner negotiated.
	// +optional
	ChildSAs []ChildSAStatus `json:"childSAs,omitempty"`
	// Conditions are the tunnel's conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Tunnel is an IPsec connection placed on a GatewayPool.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.status.owner`
// +kubebuilder:printcolumn:name="Standby",type=string,JSONPath=`.status.standby`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Tunnel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TunnelSpec   `json:"spec,omitempty"`
	Status TunnelStatus `json:"status,omitempty"`
}

// TunnelList is a list of Tunnels.
//
// +kubebuilder:object:root=true
type TunnelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tunnel `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tunnel{}, &TunnelList{})
}
