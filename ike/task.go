package ike

// Exchanges made of tasks, one per concern (the shape of strongSwan's
// libcharon tasks; the code is this package's own). An IKE SA is set up
// by a sequence of exchanges: IKE_SA_INIT, any exchange registered between
// (IKE_INTERMEDIATE, RFC 9242), then IKE_AUTH. Each exchange is a list of
// tasks, made fresh for it from the registry (registerTask), in the order
// of their registration numbers. A round of an exchange is one request and
// its response; each task takes two steps per round:
//
//	initiator: build (adds to our request) ──> send ──> process (reads the response)
//	responder: process (reads the request) ──> build (adds to our response) ──> send
//
// A step answers with a taskStatus: taskMore to take the next step (or
// the next round), taskDone when the task has finished (it takes no
// further step in this exchange), taskFailed (the exchange fails: the
// responder answers with the Notify error the task named, the initiator
// gives the IKE SA up), or taskAsync when it runs work off the lock
// (exchange.offLock) and the exchange resumes with the work's result.
// An exchange ends when no task is left; while one is (EAP's rounds,
// several additional key exchanges), the initiator sends another request
// of the same exchange type and the responder answers the next one.
//
//	task_ikeinit.go  SA, KE, Nonce; COOKIE and INVALID_KE_PAYLOAD retries
//	task_natd.go     NAT detection, the move to the NAT-T port (2.23)
//	task_certpre.go  N(SIGNATURE_HASH_ALGORITHMS), CERTREQ
//	task_frag.go     N(IKEV2_FRAGMENTATION_SUPPORTED) (RFC 7383)
//	task_auth.go     IDi/IDr, CERT, AUTH, the responder's choice of peer,
//	                 INITIAL_CONTACT
//	task_child.go    the Child SA of IKE_AUTH: SA, TSi, TSr
//
// A new concern is a file with its task type and one line such as
//
//	func init() { registerTask(IKE_AUTH, orderConfig, newConfigTask) }
//
// whose factory returns nil where the task takes no part (one role, a
// peer without the feature).

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
)

// taskStatus is a task step's answer.
type taskStatus uint8

const (
	// taskDone: the task has finished; it takes no further step in this
	// exchange.
	taskDone taskStatus = iota
	// taskMore: the task goes on: its next step in this round, or, after
	// its last step of a round, another round of the same exchange.
	taskMore
	// taskFailed: the exchange fails with what exchange.fail recorded.
	taskFailed
	// taskAsync: work runs off the lock (exchange.offLock); the step's
	// status is then what its finish returns.
	taskAsync
)

// task is one concern of an exchange. Both steps run with the IKE SA's
// lock held (today Endpoint.mu); the exchange passed in carries the
// peer's message of the round, our message being built, the IKE SA
// (exchange.sa) and the IKE SA's setup state (exchange.setup).
type task interface {
	// build adds the task's payloads to our message of the round: the
	// request as initiator, the response as responder.
	build(x *exchange) taskStatus
	// process reads the peer's message of the round (exchange.in): the
	// response as initiator, the request as responder.
	process(x *exchange) taskStatus
}

// taskFactory makes a task for an exchange of sa; nil when the task
// takes no part in it. In a setup exchange sa.initiator is the role; an
// exchange of an established IKE SA is made when the peer's request
// arrives (exchange.ours is false: the task answers).
type taskFactory func(sa *ikeSA) task

// Registration numbers: the order in which an exchange's tasks take
// their steps (and add their payloads). New concerns pick a number
// between.
const (
	orderIKEInit      = 10 // task_ikeinit.go
	orderNATD         = 20 // task_natd.go
	orderCertPre      = 30 // task_certpre.go
	orderFrag         = 40 // task_frag.go
	orderAuth         = 50 // task_auth.go
	orderEAP          = 55 // EAP (runs its rounds after the responder's AUTH)
	orderConfig       = 60 // configuration payloads
	orderMOBIKE       = 70 // MOBIKE
	orderChild        = 80 // task_child.go
	orderIntermediate = 90 // IKE_INTERMEDIATE's tasks (their exchange has none of the above)

	// CREATE_CHILD_SA and INFORMATIONAL (answered on an established IKE SA).
	orderIKERekey = 10 // ikerekey.go: an SA payload of protocol IKE
	orderChildSA  = 20 // rekey.go: a new Child SA or a Child SA's rekey
	orderDelete   = 10 // task_delete.go
)

type taskReg struct {
	exch  ExchangeType
	order int
	make  taskFactory
}

// taskRegistry holds every registered task, by exchange and order.
var taskRegistry []taskReg

// registerTask adds a task to every exchange of type exch, at position
// order (the order* constants). Call it from an init function. An
// exchange type other than IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA and
// INFORMATIONAL is a setup exchange between IKE_SA_INIT and IKE_AUTH
// (IKE_INTERMEDIATE).
func registerTask(exch ExchangeType, order int, f taskFactory) {
	taskRegistry = append(taskRegistry, taskReg{exch, order, f})
	slices.SortStableFunc(taskRegistry, func(a, b taskReg) int { return a.order - b.order })
}

// newTasks makes the tasks of an exchange of type exch for sa.
func newTasks(sa *ikeSA, exch ExchangeType) []task {
	var ts []task
	for _, r := range taskRegistry {
		if r.exch != exch {
			continue
		}
		if t := r.make(sa); t != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// saGoneHooks run (locked) when an IKE SA is forgotten (removeLocked),
// after its Child SAs are: a feature releases what it holds for it (a
// virtual IP). An IKE SA rekey's predecessor has handed its feature
// state on (moveChildrenLocked) before it goes.
var saGoneHooks []func(sa *ikeSA)

// onIKESAGone registers a saGoneHooks function; call it from an init
// function.
func onIKESAGone(f func(sa *ikeSA)) { saGoneHooks = append(saGoneHooks, f) }

// setupExchanges returns the exchanges that set an IKE SA up, in order:
// IKE_SA_INIT, the registered ones between, IKE_AUTH.
func setupExchanges() []ExchangeType {
	out := []ExchangeType{IKE_SA_INIT}
	for _, r := range taskRegistry {
		switch r.exch {
		case IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA, INFORMATIONAL:
			continue
		}
		if !slices.Contains(out, r.exch) {
			out = append(out, r.exch)
		}
	}
	slices.Sort(out[1:])
	return append(out, IKE_AUTH)
}

// setupRank is exch's place in setupExchanges, -1 when it is none of
// them.
func setupRank(exch ExchangeType) int {
	return slices.Index(setupExchanges(), exch)
}

// setup is an IKE SA's state while it is being set up (ikeSA.setup, nil
// once it is established): what the tasks of one setup exchange leave for
// those of the next.
type setup struct {
	x *exchange // the exchange under way, or the last one done

	// peer is the responder's choice of peer configuration in IKE_AUTH
	// (task_auth.go), before it is verified; ikeSA.peer once it is.
	peer *Peer
	// peerAuthed: the peer's AUTH verified (task_auth.go); the Child SA
	// is negotiated from here.
	peerAuthed bool

	// child is the Child SA that IKE_AUTH made (task_child.go); the IKE
	// SA reports it once it is established.
	child *ChildSA
	// pressure: cookies were due when the responder's IKE_SA_INIT
	// arrived (its half-open SA lives shorter).
	pressure bool
	// authOctets are appended to the octets that AUTH signs or MACs,
	// both ways (RFC 9242 section 3.3.2: IntAuth); nil without.
	authOctets []byte
	// msk, once set by an EAP task, is the key the initiator's AUTH is
	// a MAC with (section 2.16) instead of its configured credentials.
	msk []byte
	// eapID, once EAP succeeded, is the identity it proved (the
	// EAP-MSCHAPv2 user, the EAP-TLS certificate's subject): the IKE
	// SA's remote identity from then on, instead of the unproven IDi.
	eapID Identity
	// eap: the responder authenticates the initiator with EAP (set by
	// the EAP task before the AUTH task's first step): task_auth.go
	// answers the first IKE_AUTH request without the initiator's AUTH
	// and verifies it in the round where msk is known.
	eap bool
	// vip is what the configuration payload task (task_config.go) tells
	// the Child SA task: selectors, the virtual IPs, a refusal.
	vip vipSetup
}

type stepKind uint8

const (
	stepBuild stepKind = iota
	stepProcess
)

// exchange is one exchange of an IKE SA under way: its tasks, the round's
// messages and where the tasks' steps stand.
type exchange struct {
	sa    *ikeSA
	setup *setup
	typ   ExchangeType
	tasks []task
	round int // 0 for the first round
	// ours: we sent the exchange's request (the IKE SA's initiator in
	// its setup exchanges; either side in later ones).
	ours bool

	// The peer's message of the round.
	in            []Payload
	inRaw         []byte  // as received (reassembled): AUTH signs IKE_SA_INIT's
	hdr           *Header // its header
	local, remote netip.AddrPort

	// Our message of the round.
	out []Payload

	// remove: the responder forgets the IKE SA once its response is
	// sent (the peer deleted it).
	remove bool
	// retry: the initiator sends the exchange again from its start
	// (IKE_SA_INIT after COOKIE or INVALID_KE_PAYLOAD).
	retry bool
	// The failure: the Notify the responder answers with (nil: none)
	// and why.
	notify *Notify
	err    error
	after  []func() // callbacks once the lock is released
	sent   []func() // run (locked) once our message of the round is sealed

	step stepKind
	i    int    // the next task of the step
	keep []task // the tasks that go on after this step
	slot bool   // holds a job slot (job.go)
}

// add appends payloads to our message of the round.
func (x *exchange) add(ps ...Payload) { x.out = append(x.out, ps...) }

// later adds callbacks to run once the lock is released.
func (x *exchange) later(fs ...func()) { x.after = append(x.after, fs...) }

// onSent runs f with the lock held once our message of the round is
// sealed and sent: a responder's keys change after its response
// (IKE_INTERMEDIATE's additional key exchanges).
func (x *exchange) onSent(f func()) { x.sent = append(x.sent, f) }

// sentLocked runs the onSent functions of the round.
func (x *exchange) sentLocked() {
	fs := x.sent
	x.sent = nil
	for _, f := range fs {
		f()
	}
}

// fail records why the exchange fails: a responder answers with the
// Notify error n (0: not at all), an initiator gives the IKE SA up with
// err.
func (x *exchange) fail(n NotifyType, err error) taskStatus {
	if n != 0 {
		return x.failWith(&Notify{NType: n}, err)
	}
	return x.failWith(nil, err)
}

// failWith is fail with a Notify that carries data.
func (x *exchange) failWith(n *Notify, err error) taskStatus {
	if err == nil {
		err = errors.New("ike: exchange failed")
	}
	x.notify, x.err = n, err
	return taskFailed
}

// offLock runs work without the lock (job.go) and returns taskAsync: the
// step's task returns that at once. work must not touch the IKE SA: it
// gets copies of what it needs. Its finish runs with the lock held, if
// the IKE SA is still where the step left it (otherwise the result is
// dropped and counted, Stats.CryptoStale), and returns the step's status.
// While the work runs, the IKE SA's messages are dropped (Stats.RxBusy):
// the peer retransmits.
func (x *exchange) offLock(work func() (finish func() taskStatus)) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !x.slot && !x.acquireLocked() {
		// Only a step not begun by a message can get here (none does
		// today): run the work here rather than not at all.
		return work()()
	}
	e.jobSeq++
	id, st := e.jobSeq, sa.state
	sa.job = id
	go func() {
		finish := work()
		e.mu.Lock()
		var after []func()
		if sa.removed || sa.job != id || sa.state != st || e.closed {
			e.stats.CryptoStale++
			x.releaseLocked()
		} else {
			sa.job = 0
			after = x.resumeLocked(finish())
			after = append(after, sa.replayBacklogLocked()...)
		}
		e.unlock()
		run(after)
	}()
	return taskAsync
}

// acquireLocked takes a job slot for the round (Config.MaxCryptoJobs),
// counted when none is free.
func (x *exchange) acquireLocked() bool {
	if x.slot {
		return true
	}
	select {
	case x.sa.ep.jobs <- struct{}{}:
		x.slot = true
		return true
	default:
		x.sa.ep.stats.CryptoBusy++
		return false
	}
}

func (x *exchange) releaseLocked() {
	if x.slot {
		x.slot = false
		<-x.sa.ep.jobs
	}
}

// newExchangeLocked starts sa's setup exchange of type typ with fresh
// tasks.
func (sa *ikeSA) newExchangeLocked(typ ExchangeType) *exchange {
	if sa.setup == nil {
		sa.setup = &setup{}
	}
	x := &exchange{sa: sa, setup: sa.setup, typ: typ, ours: sa.initiator}
	x.tasks = newTasks(sa, typ)
	sa.setup.x = x
	return x
}

// beginLocked starts a step over the exchange's tasks.
func (x *exchange) beginLocked(step stepKind) {
	x.step, x.i, x.keep = step, 0, nil
	if step == stepBuild {
		x.out = nil
	}
}

// resumeLocked goes on after a task's off-lock work returned st.
func (x *exchange) resumeLocked(st taskStatus) []func() {
	if after, stop := x.statusLocked(st); stop {
		return after
	}
	x.i++
	return x.runLocked()
}

// statusLocked applies the status of the current task's step; stop
// when the step cannot go on (a failure, a retry).
func (x *exchange) statusLocked(st taskStatus) (after []func(), stop bool) {
	switch st {
	case taskFailed:
		x.releaseLocked()
		return x.failedLocked(), true
	case taskMore:
		x.keep = append(x.keep, x.tasks[x.i])
	}
	if x.retry {
		x.keep = nil
		x.i = len(x.tasks)
	}
	return nil, false
}

// runLocked runs the step's remaining tasks, then what follows the step:
// sending our message, the next round or exchange, the end of the setup.
// It returns when the exchange waits for the network or for work off the
// lock, or has ended.
func (x *exchange) runLocked() []func() {
	for {
		for ; x.i < len(x.tasks); x.i++ {
			var st taskStatus
			if x.step == stepBuild {
				st = x.tasks[x.i].build(x)
			} else {
				st = x.tasks[x.i].process(x)
			}
			if st == taskAsync {
				return x.takeAfter()
			}
			if after, stop := x.statusLocked(st); stop {
				return after
			}
		}
		x.tasks, x.keep, x.i = x.keep, nil, 0
		if !x.nextStepLocked() {
			x.releaseLocked()
			return x.takeAfter()
		}
	}
}

func (x *exchange) takeAfter() []func() {
	a := x.after
	x.after = nil
	return a
}

// nextStepLocked does what follows a completed step and reports whether
// another step follows at once (on x, which may then be another exchange
// of the setup: sa.setup.x).
func (x *exchange) nextStepLocked() bool {
	sa := x.sa
	if x.setup == nil {
		// An exchange of an established IKE SA: one round. Our queued
		// requests may go once it is done.
		if !x.ours && x.step == stepProcess {
			x.beginLocked(stepBuild)
			return true
		}
		if !x.ours {
			x.tasks = nil
			x.sendResponseLocked()
		}
		if !sa.removed {
			x.after = append(x.after, sa.idleLocked()...)
		}
		return false
	}
	if x.ours {
		if x.step == stepBuild {
			if len(x.tasks) == 0 {
				// Nothing to send: the exchange is not needed
				// (IKE_INTERMEDIATE without additional key exchanges).
				return x.nextExchangeLocked()
			}
			x.sendRequestLocked()
			return false
		}
		switch {
		case x.retry:
			x.retry = false
			x.tasks = newTasks(sa, x.typ)
			x.round = 0
		case len(x.tasks) > 0:
			x.round++
		default:
			return x.nextExchangeLocked()
		}
		x.beginLocked(stepBuild)
		return true
	}
	if x.step == stepProcess {
		x.beginLocked(stepBuild)
		return true
	}
	last := len(x.tasks) == 0 && x.typ == IKE_AUTH
	if last {
		x.after = append(x.after, sa.establishLocked(sa.setup.child)...)
	}
	x.sendResponseLocked()
	x.round++
	return false
}

// nextExchangeLocked moves the initiator on to the setup exchange after
// x, or, after IKE_AUTH, establishes the IKE SA.
func (x *exchange) nextExchangeLocked() bool {
	sa := x.sa
	ex := setupExchanges()
	i := slices.Index(ex, x.typ)
	if i < 0 || i+1 >= len(ex) {
		x.after = append(x.after, sa.establishLocked(sa.setup.child)...)
		x.after = append(x.after, sa.idleLocked()...)
		return false
	}
	n := sa.newExchangeLocked(ex[i+1])
	n.slot, x.slot = x.slot, false
	n.after, x.after = x.after, nil
	n.beginLocked(stepBuild)
	// Go on with n: the caller's loop runs on x, so copy n into it.
	*x = *n
	sa.setup.x = x
	return true
}

// failedLocked ends a failed exchange: the responder answers with the
// Notify and forgets the IKE SA; the initiator gives it up.
func (x *exchange) failedLocked() []func() {
	sa, e := x.sa, x.sa.ep
	after := x.takeAfter()
	if x.ours {
		return append(after, sa.failLocked(x.err)...)
	}
	if x.typ == IKE_SA_INIT {
		e.cfg.Log.Debug("ike: IKE_SA_INIT refused", "from", x.remote, "err", x.err)
		if x.notify != nil {
			r := &Message{Header: Header{SPIi: sa.spii, Exchange: IKE_SA_INIT, Flags: FlagResponse}, Payloads: []Payload{x.notify}}
			if b, err := r.Encode(); err == nil {
				e.sendLocked(x.local, x.remote, b)
			}
		}
		return append(after, e.removeLocked(sa, x.err)...)
	}
	var resp []Payload
	if x.notify != nil {
		resp = []Payload{x.notify}
	}
	sa.nextPeer++
	// A failed setup exchange takes the IKE SA with it; a later one
	// only answers with its error.
	remove := x.setup != nil || x.remove
	return append(after, sa.respondLocked(x.local, x.remote, x.inRaw, x.typ, x.hdr.MessageID, resp, nil, remove)...)
}

// sendRequestLocked sends the initiator's request of the round.
func (x *exchange) sendRequestLocked() {
	sa := x.sa
	if x.typ == IKE_SA_INIT {
		m := &Message{Header: sa.header(IKE_SA_INIT, 0, false), Payloads: x.out}
		sa.debugMessage("sending", &m.Header, x.out)
		raw, err := m.Encode()
		if err != nil {
			x.after = append(x.after, sa.failLocked(err)...)
			return
		}
		sa.state = stateInitSent
		sa.initReq = raw
		sa.nextReq = 1
		sa.pending = &request{id: 0, exch: IKE_SA_INIT, pkts: [][]byte{raw}}
		sa.ep.sendLocked(sa.local, sa.remote, raw)
		sa.armLocked()
		x.sentLocked()
		return
	}
	sa.state = stateAuthSent
	if err := sa.sendRequestLocked(&request{exch: x.typ}, x.out); err != nil {
		x.after = append(x.after, sa.failLocked(err)...)
		return
	}
	x.sentLocked()
}

// sendResponseLocked sends the responder's response of the round.
func (x *exchange) sendResponseLocked() {
	sa, e := x.sa, x.sa.ep
	if x.typ == IKE_SA_INIT {
		r := &Message{Header: sa.header(IKE_SA_INIT, 0, true), Payloads: x.out}
		sa.debugMessage("sending", &r.Header, x.out)
		b, err := r.Encode()
		if err != nil {
			x.after = append(x.after, e.removeLocked(sa, err)...)
			return
		}
		sa.initResp = b
		e.stats.countExchange(IKE_SA_INIT, false)
		e.sendLocked(x.local, x.remote, b)
		x.sentLocked()
		return
	}
	sa.nextPeer++
	after := x.takeAfter()
	x.after = sa.respondLocked(x.local, x.remote, x.inRaw, x.typ, x.hdr.MessageID, x.out, after, x.remove)
	x.sentLocked()
}

// startSetupLocked begins the initiator's setup: IKE_SA_INIT's request.
func (sa *ikeSA) startSetupLocked() []func() {
	x := sa.newExchangeLocked(IKE_SA_INIT)
	x.beginLocked(stepBuild)
	return x.runLocked()
}

// setupResponseLocked hands the response to the initiator's setup
// request to its exchange.
func (sa *ikeSA) setupResponseLocked(m *Message, raw []byte) []func() {
	e := sa.ep
	x := sa.setup.x
	inner := m.Payloads
	if m.Header.Exchange == IKE_SA_INIT {
		sa.debugMessage("received", &m.Header, inner)
	} else {
		var done bool
		if inner, _, done = sa.openLocked(&sa.fragResp, raw, m); !done {
			return nil
		}
	}
	if !x.acquireLocked() {
		return nil // counted; our retransmission brings the response again
	}
	if m.Header.Exchange != IKE_SA_INIT {
		e.stats.countExchange(m.Header.Exchange, true)
		sa.lastHeard = e.cfg.clock.Now()
	}
	sa.stopTimerLocked()
	sa.pending = nil
	x.in, x.inRaw, x.hdr = inner, raw, &m.Header
	x.beginLocked(stepProcess)
	return x.runLocked()
}

// setupRequestLocked hands a request of the peer during the responder's
// setup to its exchange: the current one when it has rounds to go, else
// the next setup exchange the request's type names (one the initiator
// found not needed is skipped). It reports false when the request has no
// place in the setup.
func (sa *ikeSA) setupRequestLocked(local, remote netip.AddrPort, raw []byte, m *Message, inner []Payload) ([]func(), bool) {
	exch := m.Header.Exchange
	x := sa.setup.x
	if x == nil || len(x.tasks) == 0 {
		if setupRank(exch) <= setupRank(sa.setupDone()) {
			return nil, false
		}
		x = sa.newExchangeLocked(exch)
	} else if exch != x.typ {
		return nil, false
	}
	if !x.acquireLocked() {
		return nil, true // counted; the peer retransmits
	}
	sa.setAddrsLocked(local, remote) // the initiator may have moved to the NAT-T port (2.23)
	x.local, x.remote = local, remote
	x.in, x.inRaw, x.hdr = inner, raw, &m.Header
	x.beginLocked(stepProcess)
	return x.runLocked(), true
}

// setupDone is the last setup exchange the responder completed.
func (sa *ikeSA) setupDone() ExchangeType {
	if x := sa.setup.x; x != nil {
		return x.typ
	}
	return IKE_SA_INIT
}

// answerLocked answers a request of the peer on an established IKE SA
// (CREATE_CHILD_SA, INFORMATIONAL) with the tasks registered for its
// exchange type: one round, process then build. It reports false when
// no task is registered for the type.
func (sa *ikeSA) answerLocked(local, remote netip.AddrPort, raw []byte, m *Message, inner []Payload) ([]func(), bool) {
	tasks := newTasks(sa, m.Header.Exchange)
	if len(tasks) == 0 {
		return nil, false
	}
	sa.lastHeard = sa.ep.cfg.clock.Now()
	x := &exchange{sa: sa, typ: m.Header.Exchange, tasks: tasks, local: local, remote: remote,
		in: inner, inRaw: raw, hdr: &m.Header}
	x.beginLocked(stepProcess)
	return x.runLocked(), true
}

// startLocked sends a request of ours on an established IKE SA, of type
// r.exch, built by tasks (their build steps, which must not go off the
// lock) and processed by those of them that answered taskMore when the
// response arrives (their process steps: what they do is theirs; the
// status is not looked at). r carries the kind and state that a snapshot
// keeps (snapshot.go) for the tasks that requestTasks makes again.
func (sa *ikeSA) startLocked(r *request, tasks ...task) error {
	x := &exchange{sa: sa, typ: r.exch, ours: true}
	for _, t := range tasks {
		switch t.build(x) {
		case taskFailed:
			return x.err
		case taskMore:
			r.tasks = append(r.tasks, t)
		}
	}
	return sa.sendRequestLocked(r, x.out)
}

// requestTasks returns the tasks that process the response to r: those
// it was sent with, or, for a request a snapshot carried over (Adopt),
// those its kind names. None: a liveness check, or a Delete of a Child
// SA that went anyway, whose answer needs nothing.
func (sa *ikeSA) requestTasks(r *request) []task {
	if r.tasks != nil {
		return r.tasks
	}
	switch r.kind {
	case reqRekey, reqNewChild:
		return []task{&childSAOurs{r: r.rekey}}
	case reqRekeyIKE:
		return []task{&ikeRekeyOurs{r: r.ikeRekey}}
	case reqDeleteChild:
		return []task{&deleteChildOurs{old: r.old, next: r.next, waiter: r.waiter}}
	case reqDeleteIKE:
		return []task{deleteIKEOurs{}}
	}
	if sa.state == stateDeleting {
		return []task{deleteIKEOurs{}}
	}
	return nil
}

// dhNeed is a Diffie-Hellman that an exchange of an established IKE SA
// (CREATE_CHILD_SA) needs: with our key pair own (the requester's, made
// with its request) or a new one of group, and the peer's KE data ke.
// The exchange computes it off the lock (withDH) and runs its step again
// with the result.
type dhNeed struct {
	own   DH
	group uint16
	ke    []byte
}

// dhDone is a dhNeed computed: our key pair and g^ir, or err (dh nil: no
// key pair could be made; dh set: the peer's KE data is bad).
type dhDone struct {
	dh  DH
	gir []byte
	err error
}

// compute does the work of n; it touches no IKE SA state.
func (n *dhNeed) compute(e *Endpoint) *dhDone {
	dh := n.own
	if dh == nil {
		var err error
		if dh, err = e.newDH(n.group); err != nil {
			return &dhDone{err: err}
		}
	}
	gir, err := dh.Shared(n.ke)
	return &dhDone{dh: dh, gir: gir, err: err}
}

// withDH runs step, a task step that returns a dhNeed when it needs a
// Diffie-Hellman: the DH is computed off the lock and step runs again,
// under the lock, with it (checking again what may have changed
// meanwhile).
func (x *exchange) withDH(step func(pre *dhDone) (taskStatus, *dhNeed)) taskStatus {
	st, need := step(nil)
	if need == nil {
		return st
	}
	e := x.sa.ep
	ke := bytes.Clone(need.ke)
	need.ke = ke
	return x.offLock(func() func() taskStatus {
		d := need.compute(e)
		return func() taskStatus {
			st, again := step(d)
			if again != nil {
				return x.fail(0, errors.New("ike: a Diffie-Hellman computed off the lock did not fit"))
			}
			return st
		}
	})
}

// replayBacklogLocked processes, in order, the messages that arrived
// while sa's work was off the lock, until another job starts.
func (sa *ikeSA) replayBacklogLocked() []func() {
	var after []func()
	// Once sa is gone, each message still goes to its IKE SA: another's
	// may have waited here (ikeSA.waitsFor), sa's own are unknown now.
	for (sa.job == 0 || sa.removed) && len(sa.backlog) > 0 {
		f := sa.backlog[0]
		sa.backlog = sa.backlog[1:]
		after = append(after, f()...)
	}
	return after
}
