package ha

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/lograte"
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

	handshakes handshakes     // acceptLoop: the handshakes in progress
	refuseLog  lograte.Bucket // connections from other addresses (admit.go)
	failLog    lograte.Bucket // failed handshakes, slots full

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
	connections, takeovers, takeoversBlocked, handovers, fences, refusedSources atomic.Uint64
}

// syncState is how far an owner's standby has come.
type syncState byte

const (
	syncNone       syncState = iota // no standby: reservations granted at once
	syncCollecting                  // snapshot being taken: messages held in backlog
	syncSending                     // snapshot queued, not yet acked
	syncOK                          // standby acked a snapshot
	syncBroken                      // a frame was dropped: resync when the queue drains
	syncWaiting                     // a peer is connected: its snapshot is due once it says it is not an owner
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

	iv ivBlocks // both members' AEAD IV epoch blocks (iv.go)
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
		refuseLog: lograte.Bucket{Every: logEvery},
		failLog:   lograte.Bucket{Every: logEvery},

		groups: make(map[string]*group),
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
			if m.peerUp && (g.sync != syncNone && g.sync != syncWaiting || g.peerSeen && g.peerRole == roleStandby) {
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
		Handovers: c.handovers.Load(), Fences: c.fences.Load(), RefusedSources: c.refusedSources.Load(),
	}
	return st
}
