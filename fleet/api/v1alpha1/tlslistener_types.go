package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TLSListenerSpec is one TLS listener that terminates TLS and forwards
// to a backend.
type TLSListenerSpec struct {
	// Pool names the GatewayPool (in the listener's namespace) the
	// listener is placed on.
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool"`

	// Listen is host:port, the host a VIP.
	// +kubebuilder:validation:MinLength=3
	Listen string `json:"listen"`

	// CertificateSecretRef names a kubernetes.io/tls Secret in the
	// listener's namespace.
	CertificateSecretRef LocalObjectRef `json:"certificateSecretRef"`

	// Backend is a URL or host:port.
	// +kubebuilder:validation:MinLength=1
	Backend string `json:"backend"`

	// Redundancy is 2 for an owner and a standby, 1 for an owner alone.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	// +optional
	Redundancy int32 `json:"redundancy,omitempty"`
}

// LocalObjectRef names an object in the referrer's namespace.
type LocalObjectRef struct {
	// Name is the object's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// TLSListenerStatus is where a listener is placed.
type TLSListenerStatus struct {
	// Owner is the gateway that serves the listener.
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
	// Conditions are the listener's conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// TLSListener is a TLS listener placed on a GatewayPool.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Listen",type=string,JSONPath=`.spec.listen`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.status.owner`
// +kubebuilder:printcolumn:name="Standby",type=string,JSONPath=`.status.standby`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TLSListener struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TLSListenerSpec   `json:"spec,omitempty"`
	Status TLSListenerStatus `json:"status,omitempty"`
}

// TLSListenerList is a list of TLSListeners.
//
// +kubebuilder:object:root=true
type TLSListenerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TLSListener `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TLSListener{}, &TLSListenerList{})
}
