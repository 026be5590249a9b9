package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Member is this gateway's end of an HA pair. Its methods are safe for
// concurrent use.
type Member struct {
	cfg Config
	h   Handler
	log *slog.Logger
	ln  net.Listener

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup
	start     time.Time

	events    chan event
	newConns  chan *conn
	drained   chan *conn
	handovers chan *handoverReq
	aborts    chan *handoverReq
	closing   <-chan struct{}

	handshakeSlots chan struct{} // acceptLoop: one token per handshake in progress

	witnessOK atomic.Int64 // unix nanoseconds of the last reachable probe
	mute      atomic.Bool  // tests: drop every frame in and out (a partition)
	ctr       counters

	mu        sync.Mutex
	groups    map[string]*group
	order     []*group  // as configured
	conn      *conn     // the current connection, nil when none
	peerUp    bool      // a frame heard within Interval*Misses
	lastHeard time.Time // the peer's last frame
}

type counters struct {
	framesIn, framesOut, stale, overflows, resyncs, badFrames, handshakeFailures,
	connections, takeovers, takeoversBlocked, handovers, fences atomic.Uint64
}

// syncState is how far an owner's standby has come.
type syncState byte

const (
	syncNone       syncState = iota // no standby: reservations granted at once
	syncCollecting                  // snapshot being taken: messages held in backlog
	syncSending                     // snapshot queued, not yet acked
	syncOK                          // standby acked a snapshot
	syncBroken                      // a frame was dropped: resync when the queue drains
)

// group is one group's membership state. Fields are guarded by Member.mu;
// only the event loop changes role and epoch.
type group struct {
	name  string
	pref  int
	role  role
	epoch uint64

	// Owner side.
	sync        syncState
	seq         uint64 // last sequence number given to an acked message
	snapSeq     uint64 // the snapshot's: its ack puts the standby in sync
	pending     []pendingGrant
	bounds      map[Key]uint64 // every bound reserved while owner
	backlog     [][]byte       // frames held while collecting
	fenced      bool
	lag, lagMax time.Duration
	ho          *handoverOp
	acquiring   bool // role is owner, Handler.Acquire not yet returned

	// Standby side.
	replica  *State
	haveSnap bool
	ackSeq   uint64
	ackDirty bool
	asked    bool // preempt: handover asked on this connection

	// The peer's last heartbeat.
	peerSeen  bool
	peerRole  role
	peerEpoch uint64
	peerPref  int
	peerSnap  bool // the peer is a standby holding a snapshot

	lastFailover time.Time
	lastGap      time.Duration
}

type pendingGrant struct {
	seq   uint64
	upTo  uint64
	sent  time.Time
	grant func(uint64)
}

type handoverOp struct {
	req   *handoverReq
	epoch uint64 // offered to the standby
	st    *State // released
}

// Start listens on cfg.Listen, starts connecting to the peer and returns
// the member. Groups start with no owner; see the package documentation
// for how they get one.
func Start(cfg Config, h Handler) (*Member, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen.String())
	if err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Member{
		cfg: cfg, h: h, log: log.With("member", cfg.Name), ln: ln,
		ctx: ctx, cancel: cancel, start: time.Now(), closing: ctx.Done(),
		events:    make(chan event, 64),
		newConns:  make(chan *conn),
		drained:   make(chan *conn, 1),
		handovers: make(chan *handoverReq),
		aborts:    make(chan *handoverReq),

		handshakeSlots: make(chan struct{}, maxHandshakes),
		groups:         make(map[string]*group),
	}
	for _, gc := range cfg.Groups {
		g := &group{name: gc.Name, pref: gc.Preference, bounds: make(map[Key]uint64), replica: newState()}
		m.groups[g.name] = g
		m.order = append(m.order, g)
	}
	m.wg.Add(2)
	go m.acceptLoop()
	go m.loop()
	if cfg.Name < cfg.PeerName {
		m.wg.Add(1)
		go m.dialLoop()
	}
	if cfg.Witness != "" {
		m.wg.Add(1)
		go m.witnessLoop()
	}
	return m, nil
}

// Close stops the member: it closes the listener and the connection and
// waits for its goroutines. It does not call the Handler (the groups it
// owns stay with the gateway); reservations still waiting for their ack
// are dropped without a grant. Close is idempotent.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		m.ln.Close()
	})
	m.wg.Wait()
	return nil
}

// Owner reports whether this member owns group: Handler.Acquire has
// returned, and neither Release nor a handover has begun.
func (m *Member) Owner(group string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	return g != nil && g.role == roleOwner && !g.acquiring
}

// Reserve records that the owner may use k's sequence space up to upTo,
// and calls grant(upTo) once that is safe. That is at once, on the
// caller's goroutine before Reserve returns, when this member has no
// standby attached to the group (alone: nobody can take over from a
// lower bound) or does not own it (nothing to replicate); so the caller
// must not hold a lock that grant takes. Otherwise it is once the standby
// has recorded the bound, on the member's event goroutine; a standby
// still receiving its snapshot or being resynced after an overflow counts
// as attached, and its grants wait for the snapshot's ack. Grants still
// waiting when the standby dies run then, all at once; those waiting at
// Close are dropped. grant must not call Handover or Close. Reserve never
// blocks on the channel.
func (m *Member) Reserve(group string, k Key, upTo uint64, grant func(upTo uint64)) {
	m.mu.Lock()
	g := m.groups[group]
	if g == nil || g.role != roleOwner {
		m.mu.Unlock()
		grant(upTo)
		return
	}
	if upTo > g.bounds[k] {
		g.bounds[k] = upTo
	}
	if g.sync == syncNone {
		m.mu.Unlock()
		grant(upTo)
		return
	}
	g.seq++
	g.pending = append(g.pending, pendingGrant{seq: g.seq, upTo: upTo, sent: time.Now(), grant: grant})
	m.sendGroupLocked(g, &msg{Type: mBound, Group: g.name, Epoch: g.epoch, Seq: g.seq, Key: string(k), UpTo: upTo})
	m.mu.Unlock()
}

// Forget drops k on both members (its SA is gone).
func (m *Member) Forget(group string, k Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || g.role != roleOwner {
		return
	}
	delete(g.bounds, k)
	m.sendGroupLocked(g, &msg{Type: mForget, Group: g.name, Epoch: g.epoch, Key: string(k)})
}

// IKEState sends an IKE SA's snapshot (nil: the SA is gone) to the
// standby, which keeps the latest by key. snap is encoded before IKEState
// returns; the caller may reuse it. It never blocks.
func (m *Member) IKEState(group, key string, snap []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || g.role != roleOwner {
		return
	}
	mm := &msg{Type: mIKE, Group: g.name, Epoch: g.epoch, Key: key, Snap: snap}
	if snap != nil && len(snap) == 0 {
		mm.Snap = []byte{}
	}
	m.sendGroupLocked(g, mm)
}

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

// Status returns the member's view of the pair.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Name: m.cfg.Name}
	st.Members = []MemberStatus{
		{Name: m.cfg.Name, Address: m.cfg.Listen.String(), Self: true, Up: true},
		{Name: m.cfg.PeerName, Address: m.cfg.Peer.String(), Up: m.peerUp, LastHeard: m.lastHeard},
	}
	for _, g := range m.order {
		gs := GroupStatus{
			Name: g.name, Role: g.role.String(), Epoch: g.epoch, Preference: g.pref,
			Fenced: g.fenced, Pending: len(g.pending), SyncLag: g.lag, SyncLagMax: g.lagMax,
			LastFailover: g.lastFailover, LastGap: g.lastGap,
		}
		switch g.role {
		case roleOwner, roleReleasing:
			gs.Owner = m.cfg.Name
			gs.InSync = g.sync == syncOK
			if m.peerUp && (g.sync != syncNone || g.peerSeen && g.peerRole == roleStandby) {
				gs.Standby = m.cfg.PeerName
			}
		case roleStandby:
			gs.Standby = m.cfg.Name
			gs.InSync = g.haveSnap
			if m.peerUp && g.peerSeen && g.peerRole == roleOwner {
				gs.Owner = m.cfg.PeerName
			}
		}
		st.Groups = append(st.Groups, gs)
	}
	c := &m.ctr
	st.Counters = Counters{
		FramesIn: c.framesIn.Load(), FramesOut: c.framesOut.Load(), StaleEpoch: c.stale.Load(),
		QueueOverflows: c.overflows.Load(), Resyncs: c.resyncs.Load(), BadFrames: c.badFrames.Load(),
		HandshakeFailures: c.handshakeFailures.Load(), Connections: c.connections.Load(),
		Takeovers: c.takeovers.Load(), TakeoversBlocked: c.takeoversBlocked.Load(),
		Handovers: c.handovers.Load(), Fences: c.fences.Load(),
	}
	return st
}

// loop is the event goroutine: it alone changes roles and epochs and
// calls the Handler.
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
	for _, g := range m.order {
		g.asked = false
		g.peerSeen = false
		if g.role == roleOwner {
			// The peer may be a new process: it gets a fresh
			// snapshot once its heartbeat shows it is not an owner.
			// Waiting grants stay: the snapshot's ack covers them.
			g.sync = syncNone
			g.backlog = nil
		}
	}
	m.mu.Unlock()
	if old != nil {
		old.close()
	}
	c.start()
	m.log.Info("ha: sync connection up", "remote", c.raw.RemoteAddr().String())
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
			m.acquire(g, st, false, max(epoch, pepoch)+1, "no owner", -1)
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
		start := g.sync == syncNone
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
func (m *Member) acquire(g *group, st *State, planned bool, epoch uint64, why string, gap time.Duration) bool {
	if st == nil {
		st = newState()
	}
	m.mu.Lock()
	prev, prevEpoch := g.role, g.epoch
	// Owner before the Handler runs, so that reservations it makes while
	// acquiring are recorded for the standby.
	g.role, g.epoch = roleOwner, epoch
	g.sync = syncNone
	g.bounds = maps.Clone(st.Bounds)
	if g.bounds == nil {
		g.bounds = make(map[Key]uint64)
	}
	g.fenced = false
	g.asked = false
	g.acquiring = true
	m.mu.Unlock()
	if err := m.h.Acquire(g.name, st, planned); err != nil {
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
		m.log.Warn("ha: took over", "group", g.name, "epoch", epoch, "gap", gap, "why", why, "bounds", len(st.Bounds), "ike", len(st.IKE))
	} else {
		m.log.Info("ha: owner", "group", g.name, "epoch", epoch, "planned", planned, "why", why)
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
	hb := &msg{Type: mHeartbeat, Groups: make([]hbGroup, 0, len(m.order))}
	for _, g := range m.order {
		hb.Groups = append(hb.Groups, hbGroup{
			Name: g.name, Role: g.role, Epoch: g.epoch, Preference: uint8(g.pref),
			Synced: g.role == roleStandby && g.haveSnap,
		})
	}
	m.enqueueLocked(appendFrame(nil, hb))
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

// alone acts for a member that does not hear its peer: standbys take
// over, and undecided groups are acquired once the peer has had
// Interval*Misses since the start to show up. Both wait for the witness
// when one is configured.
func (m *Member) alone(now time.Time) {
	var takeover, fresh []*group
	m.mu.Lock()
	for _, g := range m.order {
		switch {
		case g.role == roleStandby:
			takeover = append(takeover, g)
		case g.role == roleNone && now.Sub(m.start) >= m.detection():
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
		m.acquire(g, st, false, epoch, "peer down", time.Since(lastHeard))
	}
	for _, g := range fresh {
		m.acquire(g, newState(), false, g.epoch+1, "alone at start", -1)
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
	m.acquire(g, ho.st, true, ho.epoch+1, "handover abandoned", -1)
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
	done := &msg{Type: mHandoverDone, Group: g.name, Epoch: mm.Epoch}
	if m.acquire(g, mm.State, true, mm.Epoch, "handover", -1) {
		m.ctr.handovers.Add(1)
	} else {
		done.Epoch = 0 // refused: the old owner takes it back
	}
	m.mu.Lock()
	m.enqueueLocked(appendFrame(nil, done))
	m.mu.Unlock()
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
	g.replica, g.haveSnap = newState(), false
	m.mu.Unlock()
	m.ctr.handovers.Add(1)
	runGrants(grants)
	m.log.Info("ha: handed over", "group", g.name, "epoch", ho.epoch)
	m.sendHeartbeat()
	ho.req.done <- nil
}

// witnessLoop probes the witness every Interval, for fencing.
func (m *Member) witnessLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if m.probeWitness() {
			m.witnessOK.Store(time.Now().UnixNano())
		}
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
}

// witnessReachable probes the witness now; true without one.
func (m *Member) witnessReachable() bool {
	if m.cfg.Witness == "" {
		return true
	}
	if m.probeWitness() {
		m.witnessOK.Store(time.Now().UnixNano())
		return true
	}
	return false
}

// probeWitness reports whether a TCP connect to the witness succeeds or
// is refused within Interval: either way the network to it works.
func (m *Member) probeWitness() bool {
	d := net.Dialer{Timeout: m.cfg.Interval}
	c, err := d.DialContext(m.ctx, "tcp", m.cfg.Witness)
	if err == nil {
		c.Close()
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
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
