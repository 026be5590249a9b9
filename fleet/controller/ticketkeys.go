package controller

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	fleetv1 "github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// ticketKeySize is the size of a session-ticket key.
const ticketKeySize = 32

// advanceRing moves a pool's ticket-key ring on at now and reports
// whether it changed and when it next must be looked at (zero: only when
// a member reports). The rules:
//
//   - an empty ring, or one whose issuing key has issued for lifetime,
//     gets a new key, accept-only (version = the ring's new version);
//   - the newest accept-only key that never issued becomes the issuing
//     key once every live member has it (has reports that); the key that
//     issued until then is kept, accept-only;
//   - a key that began issuing 2×lifetime ago is retired, and a retired
//     key is dropped from the ring a lifetime later.
//
// ring is changed in place; each change bumps ring.Version.
func advanceRing(ring *fleetv1.TicketKeyRing, now time.Time, lifetime time.Duration, has func(version int64) bool) (changed bool, next time.Time) {
	bump := func() {
		if !changed {
			ring.Version++
			changed = true
		}
	}
	due := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	// Retire and drop.
	kept := ring.Keys[:0]
	for _, k := range ring.Keys {
		switch {
		case k.State == fleetv1.KeyRetired && k.Retired != nil && !now.Before(k.Retired.Add(lifetime)):
			bump()
			continue
		case k.State == fleetv1.KeyAccept && k.Issued != nil && !now.Before(k.Issued.Add(2*lifetime)):
			bump()
			t := now
			k.State, k.Retired = fleetv1.KeyRetired, &t
		}
		kept = append(kept, k)
	}
	ring.Keys = kept
	issuing, pending := -1, -1
	for i, k := range ring.Keys {
		switch {
		case k.State == fleetv1.KeyIssue:
			issuing = i
		case k.State == fleetv1.KeyAccept && k.Issued == nil:
			pending = i
		}
	}
	// Promote the pending key once every member has it.
	if pending >= 0 && has(ring.Keys[pending].Version) {
		bump()
		if issuing >= 0 {
			ring.Keys[issuing].State = fleetv1.KeyAccept
		}
		t := now
		ring.Keys[pending].State, ring.Keys[pending].Issued = fleetv1.KeyIssue, &t
		issuing, pending = pending, -1
	}
	// Add a key when there is no issuing key or it has issued long enough.
	if pending < 0 && (issuing < 0 || !now.Before(ring.Keys[issuing].Issued.Add(lifetime))) {
		bump()
		id := make([]byte, 8)
		key := make([]byte, ticketKeySize)
		rand.Read(id)
		rand.Read(key)
		ring.Keys = append(ring.Keys, fleetv1.TicketKey{
			ID: hex.EncodeToString(id), Key: key, State: fleetv1.KeyAccept,
			Version: ring.Version, Added: now,
		})
	}
	for _, k := range ring.Keys {
		switch {
		case k.State == fleetv1.KeyIssue && k.Issued != nil:
			due(k.Issued.Add(lifetime))
		case k.State == fleetv1.KeyAccept && k.Issued != nil:
			due(k.Issued.Add(2 * lifetime))
		case k.State == fleetv1.KeyRetired && k.Retired != nil:
			due(k.Retired.Add(lifetime))
		}
	}
	return changed, next
}
