package ha

import "fmt"

// Planned handover: the owner releases a group, sends its exact state at
// epoch+1 and waits for the standby's answer.

// startHandover begins a planned handover of req.group.
func (m *Member) startHandover(req *handoverReq) {
	m.mu.Lock()
	g := m.groups[req.group]
	var err error
	switch {
	case g == nil:
		err = fmt.Errorf("ha: handover: no group %q", req.group)
	case g.role != roleOwner:
		err = fmt.Errorf("ha: handover of %s: this member is %v, not its owner", g.name, g.role)
	case !m.peerUp || g.sync != syncOK:
		err = fmt.Errorf("ha: handover of %s: no standby in sync", g.name)
	}
	if err != nil {
		m.mu.Unlock()
		req.done <- err
		return
	}
	g.role = roleReleasing
	m.mu.Unlock()
	m.sendHeartbeat()

	st := m.h.Release(g.name)
	if st == nil {
		st = newState()
	}

	m.mu.Lock()
	g.ho = &handoverOp{req: req, epoch: g.epoch + 1, st: st}
	ok := m.enqueueLocked(appendFrame(nil, &msg{Type: mHandover, Group: g.name, Epoch: g.ho.epoch, State: st}))
	m.mu.Unlock()
	m.log.Info("ha: handing over", "group", g.name, "epoch", g.ho.epoch)
	if !ok {
		m.abortHandover(g, fmt.Errorf("ha: handover of %s: the sync channel did not take it", g.name))
	}
}

// abortHandover takes g back after a handover that did not complete, at
// an epoch above the one offered.
func (m *Member) abortHandover(g *group, err error) {
	m.mu.Lock()
	ho := g.ho
	g.ho = nil
	m.mu.Unlock()
	if ho == nil {
		return
	}
	m.log.Warn("ha: handover abandoned, taking the group back", "group", g.name, "err", err)
	m.acquire(g, ho.st, true, ho.epoch+1, "handover abandoned", -1, false)
	ho.req.done <- err
}

// takeHandover acquires g from its owner's exact state and says so.
func (m *Member) takeHandover(g *group, mm *msg) {
	m.mu.Lock()
	ok := (g.role == roleStandby || g.role == roleNone) && mm.Epoch > g.epoch
	m.mu.Unlock()
	if !ok {
		m.ctr.stale.Add(1)
		return
	}
	if !m.acquire(g, mm.State, true, mm.Epoch, "handover", -1, true) {
		// Refused: the old owner takes it back.
		m.mu.Lock()
		m.enqueueLocked(appendFrame(nil, &msg{Type: mHandoverDone, Group: g.name}))
		m.mu.Unlock()
		return
	}
	m.ctr.handovers.Add(1)
	// The old owner keeps the state it released as its replica: it is
	// in sync from the start, so that what the Handler reserved while
	// acquiring follows the answer, and reservations are acked at once.
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enqueueLocked(appendFrame(nil, &msg{Type: mHandoverDone, Group: g.name, Epoch: mm.Epoch}))
	if g.sync != syncCollecting {
		return // reconnected or overflowed meanwhile: that path resyncs
	}
	g.sync = syncOK
	for _, f := range g.backlog {
		if !m.enqueueLocked(f) {
			break
		}
	}
	g.backlog = nil
}

// handoverDone completes (or, refused, abandons) this member's handover
// of g.
func (m *Member) handoverDone(g *group, mm *msg) {
	m.mu.Lock()
	ho := g.ho
	if ho == nil || (mm.Epoch != ho.epoch && mm.Epoch != 0) {
		m.mu.Unlock()
		m.ctr.stale.Add(1)
		return
	}
	if mm.Epoch == 0 {
		m.mu.Unlock()
		m.abortHandover(g, fmt.Errorf("ha: handover of %s: the standby could not acquire it", g.name))
		return
	}
	g.ho = nil
	g.role, g.epoch = roleStandby, ho.epoch
	grants := m.dropSyncLocked(g)
	// The new owner started from the released state and sends only
	// changes from here.
	g.replica, g.haveSnap, g.ackSeq = ho.st.clone(), true, 0
	m.mu.Unlock()
	m.ctr.handovers.Add(1)
	runGrants(grants)
	m.log.Info("ha: handed over", "group", g.name, "epoch", ho.epoch)
	m.sendHeartbeat()
	ho.req.done <- nil
}
