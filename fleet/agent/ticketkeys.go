package agent

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// ticketKeys reads the pool's ticket-key ring from its Secret (name):
// the keys to apply (accept and issue; retired ones are left out; none
// while no key issues) and the ring's version. A ring older than want (the version the assignment asks
// for) is an error to retry: the Secret read is behind the controller.
func ticketKeys(s *corev1.Secret, name string, want int64) ([]TicketKey, int64, error) {
	if s == nil {
		return nil, 0, fmt.Errorf("agent: ticket-key Secret %s not found", name)
	}
	data, ok := s.Data[v1alpha1.TicketKeyRingKey]
	if !ok {
		return nil, 0, fmt.Errorf("agent: ticket-key Secret %s has no %s", name, v1alpha1.TicketKeyRingKey)
	}
	var ring v1alpha1.TicketKeyRing
	if err := json.Unmarshal(data, &ring); err != nil {
		return nil, 0, fmt.Errorf("agent: ticket-key Secret %s: %s: %w", name, v1alpha1.TicketKeyRingKey, err)
	}
	if ring.Version < want {
		return nil, 0, fmt.Errorf("agent: ticket-key Secret %s holds ring version %d, the assignment asks for %d", name, ring.Version, want)
	}
	var keys []TicketKey
	issuers := 0
	for _, k := range ring.Keys {
		switch k.State {
		case v1alpha1.KeyAccept, v1alpha1.KeyIssue:
		default:
			continue
		}
		if len(k.Key) != 32 {
			return nil, 0, fmt.Errorf("agent: ticket-key Secret %s: key %s has %d bytes (want 32)", name, k.ID, len(k.Key))
		}
		if k.State == v1alpha1.KeyIssue {
			issuers++
		}
		keys = append(keys, TicketKey{ID: k.ID, Key: k.Key, Issue: k.State == v1alpha1.KeyIssue})
	}
	switch {
	case issuers > 1:
		return nil, 0, fmt.Errorf("agent: ticket-key Secret %s: %d keys in state issue (want at most one)", name, issuers)
	case issuers == 0:
		// A ring of accept-only keys (a new pool's first) is not one the
		// gateway can issue from: the gateway keeps the ring it has
		// until a key issues.
		return nil, ring.Version, nil
	}
	return keys, ring.Version, nil
}
