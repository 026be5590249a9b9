package ha

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// loop is the event goroutine: it takes the peer's messages, new
// connections, handover requests and timer ticks one at a time, and it
// alone changes roles and epochs and calls the Handler.
func (m *Member) loop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	defer func() {
		m.mu.Lock()
		if m.conn != nil {
			m.conn.close()
			m.conn = nil
		}
		m.mu.Unlock()
	}()
	for {
		select {
		case <-m.ctx.Done():
			return
		case ev := <-m.events:
			m.handleEvent(ev)
			// Take what else is waiting before acking, so that acks
			// are cumulative over a burst.
			for range 64 {
				select {
				case ev := <-m.events:
					m.handleEvent(ev)
					continue
				default:
				}
				break
			}
			m.flushAcks()
		case c := <-m.newConns:
			m.adopt(c)
		case c := <-m.drained:
			m.resync(c)
		case req := <-m.handovers:
			m.startHandover(req)
		case req := <-m.aborts:
			if g := m.groups[req.group]; g != nil && g.ho != nil && g.ho.req == req {
				m.abortHandover(g, fmt.Errorf("ha: handover of %s abandoned", g.name))
			}
		case <-t.C:
			m.tick()
		}
	}
}

// adopt makes c the current connection, replacing (closing) any other.
func (m *Member) adopt(c *conn) {
	m.ctr.connections.Add(1)
	m.mu.Lock()
	old := m.conn
	m.conn = c
	var releasing []*group
	for _, g := range m.order {
		if g.ho != nil {
			// A handover's offer and its answer travel on one
			// connection: with the old one gone, either may be lost,
			// and nothing would end the handover.
			releasing = append(releasing, g)
		}
		g.asked = false
		g.peerSeen = false
		if g.role == roleOwner {
			// The peer may be a new process: it gets a fresh
			// snapshot once its heartbeat shows it is not an owner.
			// Grants wait meanwhile: the snapshot's ack covers them.
			g.sync = syncWaiting
			g.backlog = nil
		}
	}
	m.mu.Unlock()
	if old != nil {
		old.close()
	}
	c.start()
	m.log.Info("ha: sync connection up", "remote", c.raw.RemoteAddr().String())
	for _, g := range releasing {
		m.abortHandover(g, fmt.Errorf("ha: handover of %s: the sync connection was replaced before the peer answered", g.name))
	}
	m.sendHeartbeat()
}

// handleEvent handles a message from the peer or the end of a connection.
func (m *Member) handleEvent(ev event) {
	m.mu.Lock()
	current := ev.c == m.conn
	m.mu.Unlock()
	if !current {
		return
	}
	if ev.err != nil {
		var pe *protocolError
		if errors.As(ev.err, &pe) {
			m.ctr.badFrames.Add(1)
			m.log.Warn("ha: sync connection dropped: bad frame", "err", ev.err)
			m.mu.Lock()
			m.conn = nil
			for _, g := range m.order {
				if g.role == roleOwner && g.sync != syncNone {
					// The grants keep waiting: the standby may
					// be alive; the next connection resyncs it.
					g.sync = syncBroken
					g.backlog = nil
				}
			}
			m.mu.Unlock()
			ev.c.close()
			return
		}
		m.peerDown(fmt.Sprintf("connection ended: %v", ev.err))
		return
	}
	m.heard(ev.c)
	mm := ev.msg
	if mm.Type == mHeartbeat {
		m.handleHeartbeat(mm)
		return
	}
	m.mu.Lock()
	g := m.groups[mm.Group]
	m.mu.Unlock()
	if g == nil {
		m.log.Debug("ha: message for an unknown group", "group", mm.Group, "type", mm.Type.String())
		return
	}
	switch mm.Type {
	case mSnapshot, mBound, mForget, mIKE:
		if !m.fromOwner(g, mm.Epoch) {
			return
		}
		m.mu.Lock()
		switch mm.Type {
		case mSnapshot:
			g.replica = mm.State
			g.haveSnap = true
			g.ackSeq = mm.Seq
			g.ackDirty = true
		case mBound:
			if mm.UpTo > g.replica.Bounds[Key(mm.Key)] {
				g.replica.Bounds[Key(mm.Key)] = mm.UpTo
			}
			g.ackSeq = max(g.ackSeq, mm.Seq)
			g.ackDirty = true
		case mForget:
			delete(g.replica.Bounds, Key(mm.Key))
		case mIKE:
			if mm.Snap == nil {
				delete(g.replica.IKE, mm.Key)
			} else {
				g.replica.IKE[mm.Key] = mm.Snap
			}
		}
		m.mu.Unlock()
		if r, ok := m.h.(Recorder); ok {
			switch mm.Type {
			case mBound:
				r.Record(g.name, Key(mm.Key), mm.UpTo)
			case mSnapshot:
				for k, v := range mm.State.Bounds {
					r.Record(g.name, k, v)
				}
			}
		}
		if mm.Type == mSnapshot && m.cfg.Preempt {
			// The ack first: the owner hands over only to a
			// standby it knows is in sync.
			m.flushAcks()
		}
		m.maybeAskHandover(g)
	case mAck:
		m.handleAck(g, mm)
	case mHandover:
		m.takeHandover(g, mm)
	case mHandoverDone:
		m.handoverDone(g, mm)
	case mHandoverAsk:
		m.mu.Lock()
		ok := g.role == roleOwner && mm.Epoch == g.epoch && g.ho == nil
		m.mu.Unlock()
		if !ok {
			m.ctr.stale.Add(1)
			return
		}
		m.log.Info("ha: peer asks for the group back (preempt)", "group", g.name)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			ctx, cancel := context.WithTimeout(m.ctx, 10*m.detection())
			defer cancel()
			if err := m.Handover(ctx, g.name); err != nil && m.ctx.Err() == nil {
				m.log.Warn("ha: preempt handover failed", "group", g.name, "err", err)
			}
		}()
	}
}

// detection is how long the peer may be silent before it is dead.
func (m *Member) detection() time.Duration {
	return m.cfg.Interval * time.Duration(m.cfg.Misses)
}

// heard notes a frame from the peer on c.
func (m *Member) heard(c *conn) {
	m.mu.Lock()
	m.lastHeard = time.Unix(0, c.lastRx.Load())
	up := m.peerUp
	m.peerUp = true
	m.mu.Unlock()
	if !up {
		m.log.Info("ha: peer up", "peer", m.cfg.PeerName)
	}
	m.checkFences()
}

// tick runs every Interval: heartbeat, the peer's death, takeovers
// waiting for the witness, the start alone, fencing.
func (m *Member) tick() {
	m.sendHeartbeat()
	now := time.Now()
	m.mu.Lock()
	if c := m.conn; c != nil {
		if m.peerUp {
			m.lastHeard = time.Unix(0, c.lastRx.Load())
		}
	}
	var silent bool
	if m.peerUp {
		silent = now.Sub(m.lastHeard) > m.detection()
	} else if c := m.conn; c != nil {
		// Connected but never heard: drop it and dial again.
		silent = now.Sub(time.Unix(0, c.lastRx.Load())) > m.detection()
	}
	up := m.peerUp
	m.mu.Unlock()
	if silent {
		m.peerDown(fmt.Sprintf("no frame for %v", m.detection()))
		return
	}
	if !up {
		m.alone(now)
	}
	m.checkFences()
}

// peerDown handles the peer's death: its connection is closed, the
// grants waiting for it run, and standbys take over.
func (m *Member) peerDown(why string) {
	m.mu.Lock()
	wasUp := m.peerUp
	m.peerUp = false
	c := m.conn
	m.conn = nil
	var grants []pendingGrant
	var releasing []*group
	for _, g := range m.order {
		g.peerSeen = false
		if g.role == roleOwner {
			grants = append(grants, m.dropSyncLocked(g)...)
		}
		if g.role == roleReleasing {
			releasing = append(releasing, g)
		}
	}
	m.mu.Unlock()
	if c != nil {
		c.close()
	}
	if wasUp {
		m.log.Warn("ha: peer down", "peer", m.cfg.PeerName, "why", why)
	}
	runGrants(grants)
	for _, g := range releasing {
		m.abortHandover(g, fmt.Errorf("ha: handover of %s: peer down: %s", g.name, why))
	}
	if wasUp {
		m.alone(time.Now())
	}
}

// latest returns the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}
