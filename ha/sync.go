package ha

import (
	"slices"
	"time"
)

// Replication to the standby: the snapshot, the messages that follow it,
// acks and heartbeats.

// sendGroupLocked sends a message about an owned group to its standby as
// the group's sync state allows: held back while a snapshot is taken,
// dropped while there is no standby or a resync is due (the snapshot will
// carry its effect).
func (m *Member) sendGroupLocked(g *group, mm *msg) {
	switch g.sync {
	case syncCollecting:
		if len(g.backlog) >= queueLen {
			m.overflowLocked(m.conn)
			return
		}
		g.backlog = append(g.backlog, appendFrame(nil, mm))
	case syncSending, syncOK:
		m.enqueueLocked(appendFrame(nil, mm))
	}
}

// enqueueLocked queues a frame on the current connection. A full queue
// marks every standby out of sync.
func (m *Member) enqueueLocked(f []byte) bool {
	c := m.conn
	if c == nil {
		return false
	}
	select {
	case c.out <- f:
		m.ctr.framesOut.Add(1)
		return true
	default:
		m.overflowLocked(c)
		return false
	}
}

// overflowLocked marks the standbys out of sync after a frame was dropped;
// when c's queue drains, the event loop sends them snapshots.
func (m *Member) overflowLocked(c *conn) {
	if c == nil {
		return
	}
	if !c.overflow.Swap(true) {
		m.ctr.overflows.Add(1)
		m.log.Warn("ha: sync queue full: standby out of sync until resynced")
	}
	for _, g := range m.order {
		if g.role == roleOwner && g.sync != syncNone {
			g.sync = syncBroken
			g.backlog = nil
		}
	}
}

// dropSyncLocked ends g's sync with its standby and returns the grants
// that were waiting for it: they run now, since nobody else will carry
// the group from a state short of them.
func (m *Member) dropSyncLocked(g *group) []pendingGrant {
	grants := g.pending
	g.pending = nil
	g.sync = syncNone
	g.backlog = nil
	return grants
}

func runGrants(gs []pendingGrant) {
	for _, p := range gs {
		p.grant(p.upTo)
	}
}

// startSync sends g's whole state to the standby, then the changes made
// meanwhile.
func (m *Member) startSync(g *group) {
	m.mu.Lock()
	c := m.conn
	if g.role != roleOwner || c == nil || g.sync == syncCollecting {
		m.mu.Unlock()
		return
	}
	g.sync = syncCollecting
	g.backlog = nil
	m.mu.Unlock()

	st := m.h.Snapshot(g.name).clone()

	m.mu.Lock()
	defer m.mu.Unlock()
	if g.sync != syncCollecting || m.conn != c || g.role != roleOwner {
		return // overflowed or reconnected meanwhile: that path resyncs
	}
	for k, v := range g.bounds {
		if v > st.Bounds[k] {
			st.Bounds[k] = v
		}
	}
	g.seq++
	g.snapSeq = g.seq
	g.sync = syncSending
	m.ctr.resyncs.Add(1)
	if !m.enqueueLocked(appendFrame(nil, &msg{Type: mSnapshot, Group: g.name, Epoch: g.epoch, Seq: g.seq, State: st})) {
		return
	}
	for _, f := range g.backlog {
		if !m.enqueueLocked(f) {
			break
		}
	}
	g.backlog = nil
}

// resync sends snapshots to the standbys marked out of sync by an
// overflow of c's queue, now drained.
func (m *Member) resync(c *conn) {
	m.mu.Lock()
	if c != m.conn || !c.overflow.Swap(false) {
		m.mu.Unlock()
		return
	}
	var todo []*group
	for _, g := range m.order {
		if g.role == roleOwner && g.sync == syncBroken {
			todo = append(todo, g)
		}
	}
	m.mu.Unlock()
	for _, g := range todo {
		m.mu.Lock()
		g.sync = syncNone // startSync starts from here; grants keep waiting
		m.mu.Unlock()
		m.startSync(g)
	}
}

// handleAck runs the grants the standby's ack covers.
func (m *Member) handleAck(g *group, mm *msg) {
	now := time.Now()
	m.mu.Lock()
	if g.role != roleOwner || mm.Epoch != g.epoch {
		m.mu.Unlock()
		m.ctr.stale.Add(1)
		return
	}
	n := 0
	for n < len(g.pending) && g.pending[n].seq <= mm.Seq {
		n++
	}
	done := slices.Clone(g.pending[:n])
	g.pending = slices.Delete(g.pending, 0, n)
	if n > 0 {
		g.lag = now.Sub(done[n-1].sent)
		g.lagMax = max(g.lagMax, g.lag)
	}
	if g.sync == syncSending && mm.Seq >= g.snapSeq {
		g.sync = syncOK
		m.log.Info("ha: standby in sync", "group", g.name, "epoch", g.epoch)
	}
	m.mu.Unlock()
	runGrants(done)
}

// flushAcks acks what the standby recorded since the last flush.
func (m *Member) flushAcks() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.order {
		if g.ackDirty && g.role == roleStandby {
			m.enqueueLocked(appendFrame(nil, &msg{Type: mAck, Group: g.name, Epoch: g.epoch, Seq: g.ackSeq}))
		}
		g.ackDirty = false
	}
}

// sendHeartbeat queues a heartbeat with every group's role and epoch.
func (m *Member) sendHeartbeat() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		return
	}
	hb := &msg{Type: mHeartbeat, Ver: m.conn.ver, Groups: make([]hbGroup, 0, len(m.order))}
	for _, g := range m.order {
		hb.Groups = append(hb.Groups, hbGroup{
			Name: g.name, Role: g.role, Epoch: g.epoch, Preference: uint8(g.pref),
			Synced: g.role == roleStandby && g.haveSnap, IV: g.iv.next,
		})
	}
	m.enqueueLocked(appendFrame(nil, hb))
}
