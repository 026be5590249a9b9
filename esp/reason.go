package esp

import (
	"fmt"
	"sync/atomic"
)

// Reason says why a packet was dropped. ReasonNone means it was not.
type Reason uint8

const (
	ReasonNone Reason = iota
	// Parsing and classification (before an SA is known).
	ReasonMalformed   // truncated or inconsistent IP/UDP/ESP headers
	ReasonNotESP      // not IP protocol 50 nor ESP-in-UDP
	ReasonFragment    // an IP fragment of an ESP packet (no reassembly)
	ReasonIKE         // UDP 4500 with the non-ESP marker (RFC 3948 section 2.2): for IKE, not ESP
	ReasonKeepalive   // NAT-keepalive (RFC 3948 section 2.3)
	ReasonUnknownSPI  // no SA for (destination, SPI)
	ReasonUnsupported // a packet shape sluice does not handle (e.g. IPv6 extension headers in transport mode)
	// Inbound.
	ReasonReplay     // replayed or older than the anti-replay window
	ReasonTakeover   // as ReasonReplay, at or below the number a takeover resumed at (SA.Resume): what a takeover refuses of the peer's packets
	ReasonAuthFailed // ICV did not verify
	ReasonBadLength  // ciphertext not a whole number of cipher blocks, or shorter than IV+trailer+ICV
	ReasonBadPadding // padding bytes not 1, 2, 3, ... (RFC 4303 section 2.4) or pad length past the payload
	ReasonBadInner   // next header or inner packet not valid for the SA's mode
	ReasonDummy      // next header 59: a dummy packet (RFC 4303 section 2.6), dropped silently
	// Outbound.
	ReasonSeqExhausted // the sequence number reached its limit: the SA needs a rekey (RFC 4303 section 3.3.3)
	ReasonNoRoom       // the buffer has too little headroom or tailroom for the ESP overhead
	// Both.
	ReasonSeqReserve  // sequence numbers could not be reserved durably (see Config.SeqReserve), or a standby has not yet acknowledged them (Config.Lease)
	ReasonFenced      // the SA is fenced (Lease.Fence): this member does not own it now (a standby's copy, or an owner cut off from its pair)
	ReasonLifetime    // the SA's hard lifetime (packets or bytes) is reached
	ReasonQueueFull   // the crypto engine refused the batch
	ReasonCryptoError // the engine could not run the op (invalid or unsupported)
	NumReasons
)

var reasonNames = [NumReasons]string{
	ReasonNone:         "none",
	ReasonMalformed:    "malformed",
	ReasonNotESP:       "not_esp",
	ReasonFragment:     "fragment",
	ReasonIKE:          "ike",
	ReasonKeepalive:    "keepalive",
	ReasonUnknownSPI:   "unknown_spi",
	ReasonUnsupported:  "unsupported",
	ReasonReplay:       "replay",
	ReasonTakeover:     "replay_takeover",
	ReasonAuthFailed:   "auth_failed",
	ReasonBadLength:    "bad_length",
	ReasonBadPadding:   "bad_padding",
	ReasonBadInner:     "bad_inner",
	ReasonDummy:        "dummy",
	ReasonSeqExhausted: "seq_exhausted",
	ReasonNoRoom:       "no_room",
	ReasonSeqReserve:   "seq_reserve_failed",
	ReasonFenced:       "ha_fenced",
	ReasonLifetime:     "lifetime_expired",
	ReasonQueueFull:    "queue_full",
	ReasonCryptoError:  "crypto_error",
}

// String is the reason's name as counters and summaries print it.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// DropCounters counts drops by reason. Each counter has one writer (the
// goroutine that owns the SA or the link) and any number of readers.
type DropCounters [NumReasons]atomic.Uint64

// Inc adds one to reason r. Only the owning goroutine calls it.
func (d *DropCounters) Inc(r Reason) { inc(&d[r], 1) }

// Map returns the non-zero counters by name.
func (d *DropCounters) Map() map[string]uint64 {
	m := map[string]uint64{}
	for r := ReasonNone + 1; r < NumReasons; r++ {
		if v := d[r].Load(); v != 0 {
			m[r.String()] = v
		}
	}
	return m
}

// inc is a single-writer increment: no locked instruction on the data path,
// yet readers on other goroutines see whole values.
func inc(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }
