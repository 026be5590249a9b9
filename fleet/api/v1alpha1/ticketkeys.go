package v1alpha1

import (
	"time"
)

// TicketKeyRingKey is the key of a ticket-key Secret's data that holds
// the ring as JSON.
const TicketKeyRingKey = "ring.json"

// Ticket-key states.
const (
	// KeyAccept is a key that decrypts tickets but issues none.
	KeyAccept = "accept"
	// KeyIssue is the key that issues tickets (at most one per ring).
	KeyIssue = "issue"
	// KeyRetired is a key no gateway may use any more.
	KeyRetired = "retired"
)

// TicketKeyRing is a pool's TLS session-ticket key ring, stored as JSON
// under TicketKeyRingKey in the pool's ticket-key Secret. The controller
// writes it; agents apply the keys in state accept and issue and ignore
// retired ones.
//
// +kubebuilder:object:generate=false
type TicketKeyRing struct {
	// Version is bumped on every change of the ring.
	Version int64 `json:"version"`
	// Keys are the ring's keys, oldest first.
	Keys []TicketKey `json:"keys"`
}

// TicketKey is one key of a ring.
//
// +kubebuilder:object:generate=false
type TicketKey struct {
	// ID names the key.
	ID string `json:"id"`
	// Key is the 32-byte key (base64 in JSON).
	Key []byte `json:"key"`
	// State is accept, issue or retired.
	State string `json:"state"`
	// Version is the ring version that added the key.
	Version int64 `json:"version"`
	// Added is when the key was added (accept-only).
	Added time.Time `json:"added"`
	// Issued is when the key became the issuing key.
	Issued *time.Time `json:"issued,omitempty"`
	// Retired is when the key was retired.
	Retired *time.Time `json:"retired,omitempty"`
}
