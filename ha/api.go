package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"time"
)

// Config configures a Member.
type Config struct {
	Name     string         // this member
	PeerName string         // the other member; its certificate must carry it
	Listen   netip.AddrPort // the sync channel: this member listens here
	Peer     netip.AddrPort // the other member's sync address; the listener accepts connections from its address alone
	TLS      *tls.Config    // from TLSConfig: both ends of the channel

	Interval time.Duration // heartbeat interval
	Misses   int           // heartbeats missed before the peer is dead

	// Witness is an optional TCP host:port, reachable when a connect
	// to it completes within Interval (a refused one is not reachable:
	// see the package documentation for what makes a good witness).
	// With one, a member takes a group over (or acquires it alone at
	// start) only when the witness is reachable, and an owner that
	// reaches neither its peer nor the witness for twice the detection
	// time is fenced.
	Witness string

	Groups []Group
	Logger *slog.Logger // nil: discard

	// Preempt makes this member, once it is the in-sync standby of a
	// group it prefers more than the peer does, ask the peer for the
	// group by planned handover (once per connection).
	Preempt bool
}

// Group is a set of tunnels and addresses that move together, with this
// member's preference for owning it (higher wins, 0..255).
type Group struct {
	Name       string
	Preference int
}

// Key is an SA's identity, chosen by the gateway ("out/<spi>/<peer>", ...).
type Key string

// State is what a standby holds of one group, and what a takeover or a
// handover installs. Bounds are reservation bounds (on a takeover:
// everything up to a bound may have been used) or, from Handler.Release, the
// exact sequence state. IKE holds opaque IKE SA snapshots by the gateway's
// key.
type State struct {
	Bounds map[Key]uint64
	IKE    map[string][]byte
	// Seq, in a handover's state, holds each SA's exact last sequence
	// number, where the new owner resumes; Bounds then holds what the
	// releasing member, its standby from then on, already records for it
	// (a step above), so the new owner's first packets need not wait for
	// an acknowledgement. A takeover's state has none: the new owner
	// resumes above Bounds.
	Seq map[Key]uint64
}

func newState() *State {
	return &State{Bounds: make(map[Key]uint64), IKE: make(map[string][]byte), Seq: make(map[Key]uint64)}
}

// clone returns a deep enough copy of st (snapshot byte slices are shared:
// nobody writes them after they are handed over).
func (st *State) clone() *State {
	c := newState()
	if st != nil {
		maps.Copy(c.Bounds, st.Bounds)
		maps.Copy(c.IKE, st.IKE)
		maps.Copy(c.Seq, st.Seq)
	}
	return c
}

// Recorder is a Handler that keeps, as a standby, the bounds it holds in
// state of its own that outlives the process (a state directory), so
// that a member started alone after both were lost still starts above
// what the owner used. Record is called from the member's goroutine for
// each bound a standby takes (a Bound message, a snapshot), right after
// it is taken and before its acknowledgement leaves; it must not block
// (it may record in the background).
type Recorder interface {
	Record(group string, k Key, upTo uint64)
}

// Handler is the gateway side of a Member. The member calls it from its
// own goroutine, one call at a time; a call should return promptly (well
// within Interval*Misses), since heartbeats wait for it. A Handler may call
// the Member's Reserve, Forget, IKEState, Owner and Status from inside
// these methods; not Handover or Close.
type Handler interface {
	// Acquire makes this member the group's owner with st (never nil;
	// the Handler may keep it): on a takeover (planned false) Bounds are
	// reserved bounds and everything up to them may have been used; on
	// a handover (planned true) they are exact. It returns once traffic
	// is carried here. ivEpoch is the first AEAD IV epoch of a block of
	// IVBlockEpochs that no instance of the group's SAs on either member
	// has used (the package documentation says how far that holds): the
	// group's outbound AEAD SAs seal under it from now on (esp.SA.Resume),
	// and so do those installed while this member owns the group, but for
	// an SA whose key an earlier instance here may have used in this
	// block, which takes a fresh one (Member.NewIVEpoch).
	Acquire(group string, st *State, planned bool, ivEpoch uint32) error
	// Release stops carrying the group and returns its exact final
	// state (sequence numbers, IKE SAs).
	Release(group string) *State
	// Fence stops (true) or resumes (false) sealing for the group: the
	// owner is isolated and another member may have taken over. A
	// fenced group that is released (the peer took it over meanwhile)
	// gets Release and no Fence(false).
	Fence(group string, fenced bool)
	// Snapshot returns the group's whole state for a standby that just
	// joined. The member adds the reservations it has seen to Bounds, so
	// the Handler need not track those still waiting for their grant.
	Snapshot(group string) *State
}

// Status is a member's view of the pair, JSON-friendly for the control
// socket.
type Status struct {
	Name     string         `json:"name"`
	Members  []MemberStatus `json:"members"`
	Groups   []GroupStatus  `json:"groups"`
	Counters Counters       `json:"counters"`
}

// MemberStatus is one member as seen from here.
type MemberStatus struct {
	Name      string    `json:"name"`
	Address   string    `json:"address"`
	Self      bool      `json:"self"`
	Up        bool      `json:"up"`
	LastHeard time.Time `json:"last_heard,omitzero"` // the peer's last frame; zero for self or never
}

// GroupStatus is one group as seen from here.
type GroupStatus struct {
	Name       string `json:"name"`
	Role       string `json:"role"`    // this member's: none, standby, owner, releasing
	Owner      string `json:"owner"`   // "" when unknown
	Standby    string `json:"standby"` // "" when none
	Epoch      uint64 `json:"epoch"`
	Preference int    `json:"preference"`
	InSync     bool   `json:"in_sync"` // owner: its standby acked a snapshot; standby: it holds one
	Fenced     bool   `json:"fenced"`
	Pending    int    `json:"pending_grants"`

	SyncLag      time.Duration `json:"sync_lag_ns"`     // last bound sent to its ack
	SyncLagMax   time.Duration `json:"sync_lag_max_ns"` // the largest seen
	LastFailover time.Time     `json:"last_failover,omitzero"`
	LastGap      time.Duration `json:"last_gap_ns"` // at the last takeover: since the owner's last frame
}

// Counters count the channel's and the membership's events since Start.
type Counters struct {
	FramesIn          uint64 `json:"frames_in"`
	FramesOut         uint64 `json:"frames_out"`
	StaleEpoch        uint64 `json:"stale_epoch"`     // messages with an older epoch, ignored
	QueueOverflows    uint64 `json:"queue_overflows"` // full send queue: standby resynced
	Resyncs           uint64 `json:"resyncs"`         // snapshots sent
	BadFrames         uint64 `json:"bad_frames"`      // undecodable: connection dropped
	HandshakeFailures uint64 `json:"handshake_failures"`
	RefusedSources    uint64 `json:"refused_sources"` // connections from another address than the peer's, closed before TLS
	Connections       uint64 `json:"connections"`
	Takeovers         uint64 `json:"takeovers"`
	TakeoversBlocked  uint64 `json:"takeovers_blocked"` // peer dead but the witness unreachable
	Handovers         uint64 `json:"handovers"`         // completed, on either side
	Fences            uint64 `json:"fences"`
}

// ErrClosed is returned by calls on a closed Member.
var ErrClosed = errors.New("ha: member closed")

func (c *Config) check() error {
	switch {
	case c.Name == "" || c.PeerName == "":
		return errors.New("ha: Name and PeerName are required")
	case c.Name == c.PeerName:
		return fmt.Errorf("ha: Name and PeerName are both %q", c.Name)
	case c.TLS == nil:
		return errors.New("ha: TLS config is required")
	case c.Interval <= 0:
		return fmt.Errorf("ha: Interval %v must be positive", c.Interval)
	case c.Misses < 1:
		return fmt.Errorf("ha: Misses %d must be at least 1", c.Misses)
	case !c.Listen.IsValid() || !c.Peer.IsValid():
		return errors.New("ha: Listen and Peer addresses are required")
	}
	seen := make(map[string]bool)
	for _, g := range c.Groups {
		if g.Name == "" || seen[g.Name] {
			return fmt.Errorf("ha: group name %q empty or repeated", g.Name)
		}
		if g.Preference < 0 || g.Preference > 255 {
			return fmt.Errorf("ha: group %s: preference %d not in 0..255", g.Name, g.Preference)
		}
		seen[g.Name] = true
	}
	return nil
}

// Handover hands group (every group this member owns when "") to the
// standby: the Handler releases it, its exact state goes to the standby,
// which acquires it with planned true. It returns once the standby has
// taken it, or with an error: no standby in sync, the peer died, or ctx
// ended. In the last two cases the handover is abandoned and this member
// acquires the group again with the state it released (planned true), at
// an epoch above the one it offered, so that a standby that took it late
// yields.
func (m *Member) Handover(ctx context.Context, group string) error {
	var groups []string
	if group == "" {
		m.mu.Lock()
		for _, g := range m.groups {
			if g.role == roleOwner {
				groups = append(groups, g.name)
			}
		}
		m.mu.Unlock()
	} else {
		groups = []string{group}
	}
	var errs []error
	for _, name := range groups {
		req := &handoverReq{group: name, done: make(chan error, 1)}
		select {
		case m.handovers <- req:
		case <-m.closing:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("ha: handover of %s: %w", name, ctx.Err())
		}
		select {
		case err := <-req.done:
			errs = append(errs, err)
		case <-ctx.Done():
			// Abandon it, unless it completed meanwhile: every
			// request the loop took gets exactly one answer.
			select {
			case m.aborts <- req:
			case <-m.closing:
				return ErrClosed
			}
			select {
			case err := <-req.done:
				if err != nil {
					err = fmt.Errorf("ha: handover of %s: %w", name, ctx.Err())
				}
				errs = append(errs, err)
			case <-m.closing:
				return ErrClosed
			}
		case <-m.closing:
			return ErrClosed
		}
	}
	return errors.Join(errs...)
}

type handoverReq struct {
	group string
	done  chan error // buffered: the loop never waits on it
}
