package ike

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Test tasks, registered for every Endpoint of the package's tests but
// taking part only for peers whose names say so.

// roundsNotify is a private-use status notify (RFC 7296 section 3.10.1)
// that carries a round number.
const roundsNotify NotifyType = 40960

// roundsLog records what the test tasks saw, by peer name.
var roundsLog struct {
	sync.Mutex
	seen map[string][]string
}

func logRound(peer, what string) {
	roundsLog.Lock()
	defer roundsLog.Unlock()
	if roundsLog.seen == nil {
		roundsLog.seen = map[string][]string{}
	}
	roundsLog.seen[peer] = append(roundsLog.seen[peer], what)
}

func roundsSeen(peer string) []string {
	roundsLog.Lock()
	defer roundsLog.Unlock()
	return slices.Clone(roundsLog.seen[peer])
}

// roundsTask makes IKE_AUTH take four rounds (as EAP does): the
// initiator sends N(40960) with the round number until round 3; the
// responder echoes each, off the lock in round 2, and is done with
// round 3.
type roundsTask struct{ echo byte }

func init() {
	registerTask(IKE_AUTH, orderEAP+1, func(sa *ikeSA) task {
		if sa.peer == nil || !strings.HasPrefix(sa.peer.Name, "rounds") {
			return nil
		}
		return &roundsTask{}
	})
}

func (t *roundsTask) build(x *exchange) taskStatus {
	if x.sa.initiator {
		x.add(&Notify{NType: roundsNotify, Data: []byte{byte(x.round)}})
		return taskMore
	}
	x.add(&Notify{NType: roundsNotify, Data: []byte{t.echo}})
	if t.echo == 3 {
		return taskDone
	}
	return taskMore
}

func (t *roundsTask) process(x *exchange) taskStatus {
	n := findNotify(x.in, roundsNotify)
	if n == nil || len(n.Data) != 1 || int(n.Data[0]) != x.round {
		return x.fail(InvalidSyntax, nil)
	}
	side := "r"
	if x.sa.initiator {
		side = "i"
	}
	logRound(x.sa.peer.Name, side+string('0'+n.Data[0]))
	if x.sa.initiator {
		if n.Data[0] == 3 {
			return taskDone
		}
		return taskMore
	}
	if x.round == 2 {
		return x.offLock(func() func() taskStatus {
			echo := n.Data[0]
			return func() taskStatus { t.echo = echo; return taskMore }
		})
	}
	t.echo = n.Data[0]
	return taskMore
}

// TestTaskRounds: a task that asks for more rounds keeps IKE_AUTH going
// on both sides (a request and a response per round, the message IDs in
// sequence), with work off the lock in one of them; the IKE SA is up when
// the last round ends.
func TestTaskRounds(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.Name, pb.Name = "rounds-a", "rounds-b"
	p := newPair(t, pa, pb, nil)
	ca, err := p.a.Initiate(ctx(t), "rounds-a")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	if got, want := roundsSeen("rounds-b"), []string{"r0", "r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("responder saw %v, want %v", got, want)
	}
	if got, want := roundsSeen("rounds-a"), []string{"i0", "i1", "i2", "i3"}; !slices.Equal(got, want) {
		t.Fatalf("initiator saw %v, want %v", got, want)
	}
	if a, b := p.a.Stats(), p.b.Stats(); a.IKEAuthInitiated != 4 || b.IKEAuthAnswered != 4 {
		t.Fatalf("IKE_AUTH rounds: initiated %d, answered %d; want 4", a.IKEAuthInitiated, b.IKEAuthAnswered)
	}
	// The message IDs went on from the rounds: a Delete still works.
	if err := p.a.Delete(ctx(t), ca); err != nil {
		t.Fatal(err)
	}
}

// exchIntermediate stands for IKE_INTERMEDIATE (RFC 9242): a setup
// exchange between IKE_SA_INIT and IKE_AUTH, by registration only.
const exchIntermediate ExchangeType = 43

// interTask runs two rounds of the exchange between IKE_SA_INIT and
// IKE_AUTH and adds octets to what AUTH covers, as IntAuth does; the
// peer named "inter-bad" adds other octets, and AUTH fails.
type interTask struct{}

func init() {
	registerTask(exchIntermediate, orderIntermediate, func(sa *ikeSA) task {
		if sa.peer == nil || !strings.HasPrefix(sa.peer.Name, "inter") {
			return nil
		}
		return interTask{}
	})
}

func (interTask) build(x *exchange) taskStatus {
	x.add(&Notify{NType: roundsNotify, Data: []byte{byte(x.round)}})
	if x.sa.initiator || x.round == 0 {
		return taskMore
	}
	return taskDone
}

func (interTask) process(x *exchange) taskStatus {
	n := findNotify(x.in, roundsNotify)
	if n == nil || len(n.Data) != 1 || int(n.Data[0]) != x.round {
		return x.fail(InvalidSyntax, nil)
	}
	// Both sides add what both saw (RFC 9242 IntAuth is such a chain).
	extra := []byte("round")
	if x.sa.peer.Name == "inter-bad" {
		extra = []byte("other")
	}
	x.setup.authOctets = append(append(x.setup.authOctets, extra...), n.Data[0])
	logRound(x.sa.peer.Name, "x"+string('0'+n.Data[0]))
	if x.sa.initiator && x.round == 1 {
		return taskDone
	}
	return taskMore
}

// TestTaskSetupExchange: an exchange type registered for setup tasks runs
// between IKE_SA_INIT and IKE_AUTH, for as many rounds as its task asks,
// and what it adds to the AUTH octets is covered by both AUTHs; peers
// without the task skip it.
func TestTaskSetupExchange(t *testing.T) {
	if got := setupExchanges(); !slices.Equal(got, []ExchangeType{IKE_SA_INIT, exchIntermediate, IKE_AUTH}) {
		t.Fatalf("setup exchanges %v", got)
	}
	t.Run("both", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		pa.Name, pb.Name = "inter-a", "inter-b"
		p := newPair(t, pa, pb, nil)
		ca, err := p.a.Initiate(ctx(t), "inter-a")
		if err != nil {
			t.Fatal(err)
		}
		checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
		if got, want := roundsSeen("inter-b"), []string{"x0", "x1"}; !slices.Equal(got, want) {
			t.Fatalf("responder saw %v, want %v", got, want)
		}
		if got, want := roundsSeen("inter-a"), []string{"x0", "x1"}; !slices.Equal(got, want) {
			t.Fatalf("initiator saw %v, want %v", got, want)
		}
		// IKE_AUTH came with message ID 3, after two rounds.
		if err := p.a.Delete(ctx(t), ca); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("auth octets differ", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		pa.Name, pb.Name = "inter-a2", "inter-bad"
		p := newPair(t, pa, pb, nil)
		_, err := p.a.Initiate(ctx(t), "inter-a2")
		if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("Initiate: %v, want AUTHENTICATION_FAILED", err)
		}
		if s := p.b.Stats(); s.AuthFailed != 1 {
			t.Fatalf("responder's AuthFailed %d", s.AuthFailed)
		}
	})
	t.Run("skipped", func(t *testing.T) {
		pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
			t.Fatal(err)
		}
		if s := p.a.Stats(); s.TxPackets != 2 {
			t.Fatalf("initiator sent %d datagrams, want 2 (IKE_SA_INIT, IKE_AUTH)", s.TxPackets)
		}
	})
}

// TestQueueOnGoneSA: a request queued on an IKE SA that is gone fails at
// once instead of waiting in a queue that never runs.
func TestQueueOnGoneSA(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p := newPair(t, pa, pb, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	p.a.mu.Lock()
	sa := p.a.ikeSAOfLocked(c)
	after := p.a.removeLocked(sa, nil)
	var got error
	ran := false
	after = append(after, sa.enqueueLocked(op{
		run:  func(*ikeSA) []func() { ran = true; return nil },
		fail: func(err error) []func() { got = err; return nil },
	})...)
	p.a.mu.Unlock()
	run(after)
	if ran || got == nil {
		t.Fatalf("ran %v, failed with %v", ran, got)
	}
}

// lockProbe is a Transport that, on its first Send, looks whether the
// Endpoint's lock is free: Send must run without it.
type lockProbe struct {
	memPort
	e      *Endpoint
	once   sync.Once
	locked chan bool
}

func (l *lockProbe) Send(local, remote netip.AddrPort, pkt []byte) error {
	l.once.Do(func() {
		free := l.e.mu.TryLock()
		if free {
			l.e.mu.Unlock()
		}
		l.locked <- !free
	})
	return l.memPort.Send(local, remote, pkt)
}

// TestSendWithoutLock: the Endpoint calls Transport.Send with its lock
// released (the first datagram of an Initiate, when nothing else holds
// it).
func TestSendWithoutLock(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	n := newMemNet(t)
	probe := &lockProbe{memPort: memPort{n}, locked: make(chan bool, 1)}
	a, err := NewEndpoint(Config{Peers: []*Peer{pa}}, probe)
	if err != nil {
		t.Fatal(err)
	}
	probe.e = a
	b, err := NewEndpoint(Config{Peers: []*Peer{pb}}, memPort{n})
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.eps[addrA], n.eps[addrB] = a, b
	n.mu.Unlock()
	if _, err := a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	if <-probe.locked {
		t.Fatal("Transport.Send ran with the Endpoint's lock held")
	}
}

// TestChildDHOffLock: the responder's Diffie-Hellman for a CREATE_CHILD_SA
// with PFS runs without its lock: while it is blocked, the Endpoint
// answers calls; once it finishes, the rekey completes.
func TestChildDHOffLock(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16-x25519", "aes128-sha256-x25519", "aes128gcm16-x25519")
	g := newGate(t)
	var armed atomic.Bool
	p := newPair(t, pa, pb, func(a, b *Config) {
		b.newDH = func(group uint16) (DH, error) {
			d, err := NewDH(group)
			if armed.Load() {
				return slowDH{d, g}, err
			}
			return d, err
		}
	})
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := p.a.Rekey(ctx(t), c)
		done <- err
	}()
	select {
	case <-g.waiting: // b computes g^ir for the new Child SA
	case err := <-done:
		t.Fatalf("the rekey ended (%v) without the responder's DH off its lock", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the responder's DH for CREATE_CHILD_SA did not start off its lock")
	}
	stats := make(chan Stats, 1)
	go func() { stats <- p.b.Stats() }()
	select {
	case <-stats:
	case <-time.After(5 * time.Second):
		t.Fatal("the responder's lock is held while its DH for CREATE_CHILD_SA runs")
	}
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// eapNotify is a private-use status notify that stands for EAP in
// TestTaskEAPRounds: 1 challenge, 2 answer, 3 success.
const eapNotify NotifyType = 40970

// fakeEAP is a made-up EAP method in two round trips, for peers named
// "taskeap-...": the responder sends a challenge, the initiator echoes it, the
// responder says success; both take the MSK from the challenge.
type fakeEAP struct {
	challenge []byte
	state     int
}

func init() {
	onPeerAuthEAP(func(p *Peer) bool { return strings.HasPrefix(p.Name, "taskeap-") })
	onLocalAuthEAP(func(p *Peer) bool { return strings.HasPrefix(p.Name, "taskeap-") })
	registerTask(IKE_AUTH, orderEAP, func(sa *ikeSA) task {
		if sa.initiator && !usesEAPClient(sa.peer) {
			return nil
		}
		return &fakeEAP{}
	})
}

func fakeMSK(challenge []byte) []byte {
	h := sha256.Sum256(append([]byte("msk"), challenge...))
	return h[:]
}

func (t *fakeEAP) build(x *exchange) taskStatus {
	if x.sa.initiator {
		if t.state == 1 {
			x.add(&Notify{NType: eapNotify, Data: append([]byte{2}, t.challenge...)})
		}
		return taskMore
	}
	switch t.state {
	case 0:
		t.challenge = randomNonce()
		x.add(&Notify{NType: eapNotify, Data: append([]byte{1}, t.challenge...)})
		t.state = 1
		return taskMore
	case 2:
		x.add(&Notify{NType: eapNotify, Data: []byte{3}})
		x.setup.msk = fakeMSK(t.challenge)
		if x.setup.peer.Name == "taskeap-bad" {
			x.setup.msk = fakeMSK(nil) // not the initiator's
		}
		return taskDone
	}
	return taskMore
}

func (t *fakeEAP) process(x *exchange) taskStatus {
	peer := x.sa.peer // the initiator's; the responder's is the one its identity chose
	if x.setup.peer != nil {
		peer = x.setup.peer
	}
	if !x.setup.eap || !strings.HasPrefix(peer.Name, "taskeap-") {
		return taskDone // the peer authenticates with AUTH, or with a real EAP method (task_eap.go)
	}
	n := findNotify(x.in, eapNotify)
	if x.sa.initiator {
		switch {
		case n != nil && len(n.Data) > 1 && n.Data[0] == 1:
			t.challenge, t.state = bytes.Clone(n.Data[1:]), 1
		case n != nil && len(n.Data) == 1 && n.Data[0] == 3:
			if peer.Name == "taskeap-stall" {
				return taskMore // never takes the MSK: no AUTH follows, only empty requests
			}
			x.setup.msk = fakeMSK(t.challenge)
			return taskDone
		}
		return taskMore
	}
	if t.state == 1 {
		if n == nil || len(n.Data) < 1 || n.Data[0] != 2 || !bytes.Equal(n.Data[1:], t.challenge) {
			return x.fail(AuthenticationFailed, errors.New("fake EAP: wrong answer"))
		}
		t.state = 2
	}
	return taskMore
}

// TestTaskEAPRounds: with EAP (a made-up method standing in), the
// initiator's first IKE_AUTH carries no AUTH, the responder answers with
// its AUTH and the method's rounds follow; then both AUTHs are MACs with
// the method's MSK (RFC 7296 section 2.16), and the Child SA of the first
// request is made in the last round.
func TestTaskEAPRounds(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.Name, pb.Name = "taskeap-a", "taskeap-b"
	p := newPair(t, pa, pb, nil)
	ca, err := p.a.Initiate(ctx(t), "taskeap-a")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
	// IDi | IDr AUTH EAP(challenge) ; EAP(answer) | EAP(success) ; AUTH | AUTH SA TS
	if a, b := p.a.Stats(), p.b.Stats(); a.IKEAuthInitiated != 3 || b.IKEAuthAnswered != 3 {
		t.Fatalf("IKE_AUTH rounds: initiated %d, answered %d; want 3", a.IKEAuthInitiated, b.IKEAuthAnswered)
	}
}

// TestTaskEAPWrongMSK: an initiator whose AUTH is not made with the
// responder's MSK is refused with AUTHENTICATION_FAILED.
func TestTaskEAPWrongMSK(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.Name, pb.Name = "taskeap-a", "taskeap-bad"
	p := newPair(t, pa, pb, nil)
	_, err := p.a.Initiate(ctx(t), "taskeap-a")
	if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
		t.Fatalf("Initiate: %v, want AUTHENTICATION_FAILED", err)
	}
	if s := p.b.Stats(); s.AuthFailed != 1 || s.IKESAEstablished != 0 {
		t.Fatalf("responder: AuthFailed %d, established %d", s.AuthFailed, s.IKESAEstablished)
	}
}

// TestTaskEAPNoAuthAfterSuccess: after EAP-Success the initiator's next
// IKE_AUTH request must carry its AUTH (RFC 7296 section 2.16); one
// without is refused with AUTHENTICATION_FAILED, so an initiator that
// never sends AUTH cannot keep the half-made IKE SA in rounds forever.
func TestTaskEAPNoAuthAfterSuccess(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.Name, pb.Name = "taskeap-stall", "taskeap-b"
	p := newPair(t, pa, pb, nil)
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.a.Initiate(c, "taskeap-stall")
	if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
		t.Fatalf("Initiate: %v, want AUTHENTICATION_FAILED (responder answered %d IKE_AUTH requests)", err, p.b.Stats().IKEAuthAnswered)
	}
	// IDi | IDr AUTH EAP(challenge) ; EAP(answer) | EAP(success) ; (nothing) | N(AUTHENTICATION_FAILED)
	if s := p.b.Stats(); s.IKEAuthAnswered != 3 || s.AuthFailed != 1 || s.IKESAEstablished != 0 {
		t.Fatalf("responder: answered %d IKE_AUTH requests, AuthFailed %d, established %d; want 3, 1, 0",
			s.IKEAuthAnswered, s.AuthFailed, s.IKESAEstablished)
	}
}
