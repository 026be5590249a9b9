package ha

import (
	"fmt"
	"maps"
	"time"
)

// Roles: who owns a group, decided from the peer's heartbeats, its death
// and the witness.

// role is a member's part in a group, as heartbeats carry it.
type role byte

const (
	roleNone      role = iota // undecided: just started
	roleStandby               // holds the replicated state
	roleOwner                 // carries the group
	roleReleasing             // owner in a planned handover, waiting for the standby
	roleEnd
)

var roleNames = [...]string{"none", "standby", "owner", "releasing"}

func (r role) String() string {
	if r < roleEnd {
		return roleNames[r]
	}
	return fmt.Sprintf("role %d", byte(r))
}

// fromOwner decides whether a message about g with epoch comes from its
// rightful owner: a standby (or an undecided member) takes it and follows
// a newer epoch; an owner that sees a newer epoch yields. A message with
// an older epoch is counted and ignored.
func (m *Member) fromOwner(g *group, epoch uint64) bool {
	m.mu.Lock()
	r, cur := g.role, g.epoch
	switch {
	case (r == roleStandby || r == roleNone) && epoch >= cur:
		g.role = roleStandby
		g.epoch = epoch
		m.mu.Unlock()
		if r == roleNone {
			m.sendHeartbeat()
		}
		return true
	case r == roleOwner && epoch > cur:
		m.mu.Unlock()
		m.yield(g, epoch, "a newer owner")
		return true
	}
	m.mu.Unlock()
	m.ctr.stale.Add(1)
	return false
}

// handleHeartbeat records the peer's view of each group and acts on it.
func (m *Member) handleHeartbeat(mm *msg) {
	for _, hb := range mm.Groups {
		m.mu.Lock()
		g := m.groups[hb.Name]
		if g != nil {
			g.peerSeen, g.peerRole, g.peerEpoch, g.peerPref, g.peerSnap = true, hb.Role, hb.Epoch, int(hb.Preference), hb.Synced
			if mm.Ver >= wireV2 {
				g.iv.merge(m.ivSelf(), hb.IV)
			}
		}
		m.mu.Unlock()
		if g != nil {
			m.decide(g)
		}
	}
}

// preferred reports whether this member is preferred over the peer for
// g: higher preference, then the lower name.
func (m *Member) preferredLocked(g *group) bool {
	if g.pref != g.peerPref {
		return g.pref > g.peerPref
	}
	return m.cfg.Name < m.cfg.PeerName
}

// decide acts on the peer's last heartbeat for g.
func (m *Member) decide(g *group) {
	m.mu.Lock()
	r, pr := g.role, g.peerRole
	epoch, pepoch := g.epoch, g.peerEpoch
	pref := m.preferredLocked(g)
	mine := r == roleStandby && g.haveSnap
	theirs := pr == roleStandby && g.peerSnap
	st := g.replica
	m.mu.Unlock()
	waiting := func(r role) bool { return r == roleNone || r == roleStandby }
	switch {
	case waiting(r) && waiting(pr):
		// Nobody carries the group: both just started, or the owner
		// restarted and lost its state. A member holding a snapshot
		// takes it from one that holds none; otherwise the preferred
		// one does. The other follows its heartbeat.
		if mine && !theirs || mine == theirs && pref {
			if !mine {
				st = newState()
			}
			m.acquire(g, st, false, max(epoch, pepoch)+1, "no owner", -1, false)
		}
	case r == roleNone && (pr == roleOwner || pr == roleReleasing):
		m.mu.Lock()
		g.role, g.epoch = roleStandby, pepoch
		m.mu.Unlock()
		m.log.Info("ha: standby", "group", g.name, "epoch", pepoch)
		m.sendHeartbeat()
	case r == roleStandby && pr == roleOwner:
		if pepoch < epoch {
			m.ctr.stale.Add(1)
			return
		}
		m.mu.Lock()
		g.epoch = pepoch
		m.mu.Unlock()
		m.maybeAskHandover(g)
	case r == roleOwner && pr == roleOwner:
		if pepoch > epoch || pepoch == epoch && !pref {
			m.yield(g, pepoch, "both owners, the peer's claim is stronger")
		}
	case r == roleOwner && waiting(pr):
		m.mu.Lock()
		start := g.sync == syncNone || g.sync == syncWaiting
		m.mu.Unlock()
		if start {
			m.startSync(g)
		}
	}
}

// maybeAskHandover asks the owner for g back when this member is a
// standby in sync, preempts and is more preferred.
func (m *Member) maybeAskHandover(g *group) {
	if !m.cfg.Preempt {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g.role != roleStandby || !g.haveSnap || g.asked || !g.peerSeen || g.peerRole != roleOwner || g.pref <= g.peerPref {
		return
	}
	g.asked = true
	m.enqueueLocked(appendFrame(nil, &msg{Type: mHandoverAsk, Group: g.name, Epoch: g.epoch}))
}

// acquire makes this member g's owner at epoch with st. It returns false
// if the Handler refused.
//
// gap >= 0 marks a takeover, gap after the owner's last frame: it is
// recorded and logged.
//
// A handover's acquisition holds the messages it causes (reservations
// the Handler makes) in the backlog, for takeHandover to send after its
// answer; otherwise, with the peer connected, reservations wait for the
// snapshot it is due.
func (m *Member) acquire(g *group, st *State, planned bool, epoch uint64, why string, gap time.Duration, handover bool) bool {
	if st == nil {
		st = newState()
	}
	m.mu.Lock()
	prev, prevEpoch := g.role, g.epoch
	// Owner before the Handler runs, so that reservations it makes while
	// acquiring are recorded for the standby.
	g.role, g.epoch = roleOwner, epoch
	switch {
	case handover:
		g.sync = syncCollecting
	case m.conn != nil && m.peerUp:
		g.sync = syncWaiting
	default:
		g.sync = syncNone
	}
	g.backlog = nil
	g.bounds = maps.Clone(st.Bounds)
	if g.bounds == nil {
		g.bounds = make(map[Key]uint64)
	}
	g.fenced = false
	g.asked = false
	g.acquiring = true
	// A fresh block even if the Handler refuses: it may have sealed
	// under it before it did.
	iv := m.allocIVLocked(g)
	m.mu.Unlock()
	if err := m.h.Acquire(g.name, st, planned, iv); err != nil {
		m.mu.Lock()
		g.role, g.epoch = prev, prevEpoch
		g.acquiring = false
		m.mu.Unlock()
		m.log.Error("ha: acquire failed", "group", g.name, "err", err)
		return false
	}
	m.mu.Lock()
	g.acquiring = false
	g.replica, g.haveSnap = newState(), false
	if gap >= 0 {
		m.ctr.takeovers.Add(1)
		g.lastFailover, g.lastGap = time.Now(), gap
	}
	// A releasing peer gets its snapshot once it says it is a standby.
	peer := m.peerUp && m.conn != nil && g.peerSeen && (g.peerRole == roleNone || g.peerRole == roleStandby)
	m.mu.Unlock()
	if gap >= 0 {
		m.log.Warn("ha: took over", "group", g.name, "epoch", epoch, "gap", gap, "why", why, "bounds", len(st.Bounds), "ike", len(st.IKE), "iv_epoch", fmt.Sprintf("%08x", iv))
	} else {
		m.log.Info("ha: owner", "group", g.name, "epoch", epoch, "planned", planned, "why", why, "iv_epoch", fmt.Sprintf("%08x", iv))
	}
	m.sendHeartbeat()
	if peer {
		m.startSync(g)
	}
	return true
}

// yield makes this owner g's standby at epoch: the Handler releases it
// and the new owner will send a snapshot.
func (m *Member) yield(g *group, epoch uint64, why string) {
	m.mu.Lock()
	g.role, g.epoch = roleStandby, epoch
	grants := m.dropSyncLocked(g)
	g.replica, g.haveSnap = newState(), false
	g.fenced = false
	m.mu.Unlock()
	m.h.Release(g.name)
	runGrants(grants)
	m.log.Warn("ha: released", "group", g.name, "epoch", epoch, "why", why)
	m.sendHeartbeat()
}

// alone acts for a member that does not hear its peer: standbys take
// over, and undecided groups are acquired once the peer has had
// Interval*Misses since the start to show up (twice that while a sync
// connection is open and its hello still on the way: a peer that answers
// slowly is not one to claim the group against). Both wait for the
// witness when one is configured.
func (m *Member) alone(now time.Time) {
	var takeover, fresh []*group
	m.mu.Lock()
	wait := m.detection()
	if m.conn != nil {
		wait *= 2
	}
	for _, g := range m.order {
		switch {
		case g.role == roleStandby:
			takeover = append(takeover, g)
		case g.role == roleNone && now.Sub(m.start) >= wait:
			fresh = append(fresh, g)
		}
	}
	lastHeard := m.lastHeard
	m.mu.Unlock()
	if len(takeover)+len(fresh) == 0 {
		return
	}
	if !m.witnessReachable() {
		m.ctr.takeoversBlocked.Add(1)
		return
	}
	for _, g := range takeover {
		m.mu.Lock()
		st, epoch := g.replica, g.epoch+1
		m.mu.Unlock()
		m.acquire(g, st, false, epoch, "peer down", time.Since(lastHeard), false)
	}
	for _, g := range fresh {
		m.acquire(g, newState(), false, g.epoch+1, "alone at start", -1, false)
	}
}

// checkFences fences the groups of an owner that has heard neither its
// peer nor the witness for twice the detection time, and unfences them
// when it hears either again. Without a witness nothing is fenced.
func (m *Member) checkFences() {
	if m.cfg.Witness == "" {
		return
	}
	now := time.Now()
	m.mu.Lock()
	contact := latest(m.lastHeard, m.start, time.Unix(0, m.witnessOK.Load()))
	isolated := now.Sub(contact) > 2*m.detection()
	var change []*group
	for _, g := range m.order {
		if g.role == roleOwner && g.fenced != isolated {
			g.fenced = isolated
			change = append(change, g)
		}
	}
	m.mu.Unlock()
	for _, g := range change {
		if isolated {
			m.ctr.fences.Add(1)
			m.log.Warn("ha: fenced: neither the peer nor the witness heard", "group", g.name, "for", now.Sub(contact))
		} else {
			m.log.Info("ha: unfenced", "group", g.name)
		}
		m.h.Fence(g.name, isolated)
	}
}
