package ha

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTLSRefusesStrangers: the channel's handshake refuses a peer whose
// certificate comes from another CA or names another member, on the
// accepting end and on the dialing end.
func TestTLSRefusesStrangers(t *testing.T) {
	checkLeaks(t)
	p := newPKI(t, "ha-test")
	other := newPKI(t, "ha-other")
	addrB := freePort(t)
	b := &node{h: newFakeHandler(), cfg: Config{
		Name: "b", PeerName: "a", Listen: addrB, Peer: freePort(t),
		TLS: p.tlsFor(t, "a", false, "b"), Interval: testInterval, Misses: testMisses,
		Groups: []Group{{Name: "g", Preference: 100}},
	}}
	b.start(t)

	// dial connects to b as a client with cfg and reports whether b
	// then talks to it (a heartbeat arrives) or cuts it off.
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addrB.String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = readFrame(c, nil)
		return err
	}
	// Another CA, the right name.
	if err := dial(other.tlsFor(t, "b", true, "a")); err == nil {
		t.Error("b accepted a certificate from another CA")
	} else {
		t.Logf("other CA: %v", err)
	}
	// The right CA, another name.
	if err := dial(p.tlsFor(t, "b", true, "c")); err == nil {
		t.Error("b accepted a certificate naming c")
	} else {
		t.Logf("wrong name: %v", err)
	}
	waitFor(t, "two handshake failures counted", func() bool { return b.Status().Counters.HandshakeFailures >= 2 })
	// The right certificate (a client certificate serves: key usages
	// are not checked).
	if err := dial(p.tlsFor(t, "b", true, "a")); err != nil {
		t.Errorf("b refused a's certificate: %v", err)
	}

	// The dialing end: a dials a server presenting a certificate that
	// names c.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", p.tlsFor(t, "a", false, "c"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	a := &node{h: newFakeHandler(), cfg: Config{
		Name: "a", PeerName: "b", Listen: freePort(t), Peer: netipAddrPort(t, ln.Addr()),
		TLS: p.tlsFor(t, "b", false, "a"), Interval: testInterval, Misses: testMisses,
	}}
	a.start(t)
	waitFor(t, "a to refuse the server naming c", func() bool { return a.Status().Counters.HandshakeFailures >= 1 })
	if n := a.Status().Counters.Connections; n != 0 {
		t.Errorf("a adopted %d connections to an impostor", n)
	}
}

// TestPairReplicates: both up, the preferred member owns the group;
// reservations are granted only once the standby holds them; IKE
// snapshots and forgotten keys reach the standby.
func TestPairReplicates(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 100, prefB: 200, startBFirst: true})
	waitSynced(t, b, a)
	if call, n := b.h.lastAcquire(); n != 1 || call.planned || len(call.st.Bounds) != 0 {
		t.Errorf("b's acquisitions: %d, last %+v; want one, unplanned, empty", n, call)
	}
	for i := range uint64(50) {
		reserve(t, b, a, "out/1", 1000*(i+1))
	}
	reserve(t, b, a, "in/2", 64)
	b.h.setIKE("g", "ike1", []byte("snap1"))
	b.IKEState("g", "ike1", []byte("snap1"))
	b.IKEState("g", "ike2", []byte("snap2"))
	b.IKEState("g", "ike2", nil)
	b.Forget("g", "in/2")
	waitFor(t, "a to hold ike1, drop ike2 and in/2", func() bool {
		v, ok := a.replicaIKE("ike1")
		_, ok2 := a.replicaIKE("ike2")
		return ok && string(v) == "snap1" && !ok2 && a.replicaBound("in/2") == 0
	})
	if got := a.replicaBound("out/1"); got != 50000 {
		t.Errorf("a holds out/1 up to %d, want 50000", got)
	}
	st := b.Status()
	if g := st.Groups[0]; g.Owner != "b" || g.Standby != "a" || g.SyncLagMax <= 0 || g.Pending != 0 {
		t.Errorf("b's status of g: %+v", g)
	}
	if !st.Members[1].Up || st.Counters.FramesIn == 0 || st.Counters.FramesOut == 0 {
		t.Errorf("b's status: %+v", st)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Error(err)
	}
}

// TestSnapshotOnJoin: a standby that joins gets the owner's whole state:
// the Handler's snapshot and the reservations granted while alone.
func TestSnapshotOnJoin(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, beforeSecond: func(a *node) {
		reserve(t, a, nil, "out/9", 999)
		a.h.setIKE("g", "ike9", []byte("s9"))
	}})
	waitSynced(t, a, b)
	if v, _ := b.replicaIKE("ike9"); b.replicaBound("out/9") != 999 || string(v) != "s9" {
		t.Errorf("b holds out/9 up to %d and ike9 %q; want 999 and s9", b.replicaBound("out/9"), v)
	}
}

// TestBothUpPreferred: members that start together (neither can own
// alone: the witness is silent) give the group to the more preferred,
// whatever the names.
func TestBothUpPreferred(t *testing.T) {
	w := blackhole(t)
	a, b := newPair(t, pairOpts{prefA: 100, prefB: 200, witnessA: w, witnessB: w})
	waitSynced(t, b, a)
}

// TestAloneWhenPeerSilent: a peer whose sync connection comes up (TLS
// completes) but which never says a word does not keep a starting member
// from acquiring its group alone: the wait for its hello is bounded.
func TestAloneWhenPeerSilent(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, beforeSecond: func(a *node) { a.mute.Store(true) }})
	waitFor(t, "b to own g alone", func() bool { return b.Owner("g") })
	if call, _ := b.h.lastAcquire(); call.planned {
		t.Errorf("b acquired g with %+v, want unplanned (alone at start)", call)
	}
	if !a.Owner("g") {
		t.Error("a, muted, stopped owning g")
	}
}

// TestAloneGrantsAtOnce: an owner without a standby grants on the
// caller's goroutine.
func TestAloneGrantsAtOnce(t *testing.T) {
	checkLeaks(t)
	p := newPKI(t, "ha-test")
	a := &node{h: newFakeHandler(), cfg: Config{
		Name: "a", PeerName: "b", Listen: freePort(t), Peer: freePort(t),
		TLS: p.tlsFor(t, "b", false, "a"), Interval: testInterval, Misses: testMisses,
		Groups: []Group{{Name: "g", Preference: 100}},
	}}
	a.start(t)
	waitFor(t, "a to own g alone", func() bool { return a.Owner("g") })
	var got uint64
	a.Reserve("g", "k", 7, func(u uint64) { got = u })
	if got != 7 {
		t.Errorf("alone: Reserve did not grant at once (got %d)", got)
	}
}

// TestTakeover: the owner dies (closed gracefully, killed with a reset,
// or cut off while its process lives on) and the standby takes over with
// the replicated bounds and IKE snapshots; when a partition heals, the
// higher epoch wins and the old owner becomes the standby.
func TestTakeover(t *testing.T) {
	for _, how := range []string{"close", "reset", "partition"} {
		t.Run(how, func(t *testing.T) {
			o := pairOpts{prefA: 200, prefB: 100}
			if how != "partition" {
				// b would notice missing heartbeats only after
				// 20 s, beyond waitFor's 10 s: it must see the
				// connection end.
				o.missesB = 1000
			}
			a, b := newPair(t, o)
			waitSynced(t, a, b)
			reserve(t, a, b, "out/1", 4096)
			a.h.setIKE("g", "ike1", []byte("snap1"))
			a.IKEState("g", "ike1", []byte("snap1"))
			waitFor(t, "b to hold ike1", func() bool { _, ok := b.replicaIKE("ike1"); return ok })

			switch how {
			case "close":
				a.Close()
			case "reset":
				a.mu.Lock()
				if tc, ok := a.conn.raw.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				a.mu.Unlock()
				a.Close()
			case "partition":
				a.mute.Store(true)
			}
			waitFor(t, "b to take over", func() bool { return b.Owner("g") })
			call, _ := b.h.lastAcquire()
			if call.planned || call.st.Bounds["out/1"] < 4096 || string(call.st.IKE["ike1"]) != "snap1" {
				t.Errorf("b acquired with %+v", call)
			}
			g := b.group()
			if g.Epoch != 2 || g.LastGap <= 0 || g.LastFailover.IsZero() || b.Status().Counters.Takeovers != 1 {
				t.Errorf("b's status after the takeover: %+v", g)
			}
			if how != "partition" {
				return
			}
			if !a.Owner("g") {
				t.Fatal("a, cut off without a witness, stopped owning g")
			}
			a.mute.Store(false)
			waitSynced(t, b, a)
			if a.h.releases() != 1 {
				t.Errorf("a released %d times, want 1", a.h.releases())
			}
			if a.group().Epoch != 2 {
				t.Errorf("a's epoch %d after the heal, want 2", a.group().Epoch)
			}
		})
	}
}

// TestWitness: a standby takes over when the witness answers (a connect
// completes); not when it is silent, nor when connects to it are refused
// (a reset may come from anything on the path). An owner that hears neither its
// peer nor the witness is fenced, and unfenced when it hears one again,
// or released when the peer took over meanwhile.
func TestWitness(t *testing.T) {
	t.Run("listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		w := ln.Addr().String()
		a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, witnessA: w, witnessB: w})
		waitSynced(t, a, b)
		a.mute.Store(true)
		waitFor(t, "b to take over", func() bool { return b.Owner("g") })
		if a.h.isFenced("g") {
			t.Error("a fenced while it reaches the witness")
		}
	})
	t.Run("refused", func(t *testing.T) {
		// A listener while the pair forms (a acquires alone only
		// with a reachable witness), then a closed port: every
		// connect is answered by a reset.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		w := ln.Addr().String()
		a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, witnessA: w, witnessB: w})
		waitSynced(t, a, b)
		ln.Close()
		if c, err := net.Dial("tcp", w); err == nil {
			c.Close()
			t.Fatal("the witness's port still accepts")
		}
		a.mute.Store(true)
		waitFor(t, "a to be fenced", func() bool { return a.h.isFenced("g") })
		waitFor(t, "b to decline a takeover", func() bool { return b.Status().Counters.TakeoversBlocked > 0 })
		if b.Owner("g") {
			t.Error("b took over on a refused connect to the witness")
		}
	})
	t.Run("silent", func(t *testing.T) {
		w := blackhole(t)
		a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, witnessA: w, witnessB: w})
		waitSynced(t, a, b)
		a.mute.Store(true)
		waitFor(t, "a to be fenced", func() bool { return a.h.isFenced("g") })
		waitFor(t, "b to decline a takeover", func() bool { return b.Status().Counters.TakeoversBlocked > 0 })
		if b.Owner("g") {
			t.Error("b took over without the witness")
		}
		a.mute.Store(false)
		waitFor(t, "a to be unfenced", func() bool { return !a.h.isFenced("g") })
		waitSynced(t, a, b)
		if n := a.Status().Counters.Fences; n != 1 {
			t.Errorf("a counted %d fences, want 1", n)
		}
	})
	t.Run("fenced-then-released", func(t *testing.T) {
		wa, silence := witness(t)
		wb, _ := witness(t)
		a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, witnessA: wa, witnessB: wb})
		waitSynced(t, a, b)
		silence() // a alone loses the witness
		a.mute.Store(true)
		waitFor(t, "b to take over and a to be fenced", func() bool { return b.Owner("g") && a.h.isFenced("g") })
		a.mute.Store(false)
		waitSynced(t, b, a)
		if a.h.releases() != 1 {
			t.Errorf("a released %d times, want 1", a.h.releases())
		}
	})
}

// TestHandover: a planned handover moves the exact state and back; with
// no standby in sync it is refused.
func TestHandover(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	reserve(t, a, b, "out/1", 4096)
	a.h.mu.Lock()
	a.h.state["g"] = &State{Bounds: map[Key]uint64{"out/1": 1234}, IKE: map[string][]byte{"ike1": []byte("exact")}}
	a.h.mu.Unlock()

	// b reserves while it acquires, as a gateway does: granted only
	// once a, which becomes its standby, holds the bound.
	granted := make(chan error, 1)
	b.h.mu.Lock()
	b.h.onAcquire = func(string) {
		b.Reserve("g", "out/1", 2000, func(upTo uint64) {
			if got := a.replicaBound("out/1"); got < upTo {
				granted <- fmt.Errorf("granted %d to the new owner while its standby holds %d", upTo, got)
				return
			}
			granted <- nil
		})
	}
	b.h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Handover(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Error(err)
		}
	case <-ctx.Done():
		t.Fatal("the reservation made while acquiring was never granted")
	}
	if !b.Owner("g") || a.Owner("g") {
		t.Fatalf("after the handover: a owner %v, b owner %v", a.Owner("g"), b.Owner("g"))
	}
	call, _ := b.h.lastAcquire()
	if !call.planned || call.st.Bounds["out/1"] != 1234 || string(call.st.IKE["ike1"]) != "exact" {
		t.Errorf("b acquired with %+v, want planned with the exact state", call)
	}
	waitSynced(t, b, a)
	if e := b.group().Epoch; e != 2 {
		t.Errorf("epoch %d after the handover, want 2", e)
	}
	reserve(t, b, a, "out/1", 5000)
	b.h.mu.Lock()
	b.h.onAcquire = nil
	b.h.mu.Unlock()

	// And back, with "" for every group b owns.
	if err := b.Handover(ctx, ""); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, a, b)
	if call, _ := a.h.lastAcquire(); !call.planned || call.st.Bounds["out/1"] < 1234 {
		t.Errorf("a acquired with %+v", call)
	}
	for _, n := range []*node{a, b} {
		if h := n.Status().Counters.Handovers; h != 2 {
			t.Errorf("%s counted %d handovers, want 2", n.cfg.Name, h)
		}
	}

	// No standby: refused, and a keeps the group.
	b.Close()
	waitFor(t, "a to see b down", func() bool { return !a.Status().Members[1].Up })
	if err := a.Handover(ctx, "g"); err == nil {
		t.Error("a handed over with no standby")
	} else {
		t.Log(err)
	}
	if !a.Owner("g") {
		t.Error("a lost g in a refused handover")
	}
}

// TestHandoverAbandoned: a standby that does not answer in time leaves
// the group with its owner, which takes it back at an epoch above the one
// offered; the late standby then yields to it.
func TestHandoverAbandoned(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	// b may have released once already: when its hello is slower than
	// the detection time (a loaded machine, the race detector), it
	// starts as an owner alone and yields when it hears a's stronger claim.
	released := b.h.releases()
	gate := make(chan struct{})
	b.h.mu.Lock()
	b.h.gate = gate
	b.h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Handover(ctx, "g") }()
	waitFor(t, "b to be acquiring", func() bool { return b.group().Role == "owner" })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Handover returned nil though b never finished")
	} else {
		t.Log(err)
	}
	waitFor(t, "a to own g again", func() bool { return a.Owner("g") })
	close(gate)
	waitSynced(t, a, b)
	if e := a.group().Epoch; e != 3 {
		t.Errorf("epoch %d, want 3 (above the 2 offered)", e)
	}
	if call, _ := a.h.lastAcquire(); !call.planned {
		t.Errorf("a took g back with %+v, want planned (its exact state)", call)
	}
	if n := b.h.releases() - released; n != 1 {
		t.Errorf("b released %d times after the abandoned handover, want 1", n)
	}
}

// TestGrantsWhenStandbyDies: reservations waiting for a standby's ack
// are granted when it is found dead (the owner is alone now), not before.
func TestGrantsWhenStandbyDies(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	b.mute.Store(true)
	granted := make(chan bool, 1)
	a.Reserve("g", "out/1", 100, func(uint64) { granted <- a.Status().Members[1].Up })
	select {
	case up := <-granted:
		if up {
			t.Error("granted while the mute standby was still up")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never granted")
	}
}

// TestStaleEpoch: messages about a group with an older epoch than the
// receiver's are ignored and counted.
func TestStaleEpoch(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	reserve(t, a, b, "out/1", 10)
	// Messages at epoch 0 (the group is at 1), injected as if the
	// current connection had delivered them.
	b.mu.Lock()
	c := b.conn
	b.mu.Unlock()
	b.events <- event{c: c, msg: &msg{Type: mBound, Group: "g", Epoch: 0, Seq: 99, Key: "out/1", UpTo: 1 << 40}}
	b.events <- event{c: c, msg: &msg{Type: mSnapshot, Group: "g", Epoch: 0, Seq: 100, State: newState()}}
	a.mu.Lock()
	ca := a.conn
	a.mu.Unlock()
	a.events <- event{c: ca, msg: &msg{Type: mAck, Group: "g", Epoch: 0, Seq: 1 << 20}}
	waitFor(t, "the stale messages counted", func() bool {
		return b.Status().Counters.StaleEpoch >= 2 && a.Status().Counters.StaleEpoch >= 1
	})
	if got := b.replicaBound("out/1"); got != 10 {
		t.Errorf("b holds out/1 up to %d after stale messages, want 10", got)
	}
}

// TestPreempt: a more preferred member that joins takes its group back
// by handover once in sync.
func TestPreempt(t *testing.T) {
	// a joins with a long detection time: a slow hello (-race, a loaded
	// machine) must not let it start as an owner alone, which would take
	// the group without the handover under test.
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100, preempt: true, startBFirst: true, missesA: 500})
	waitSynced(t, a, b)
	call, _ := a.h.lastAcquire()
	if !call.planned {
		t.Errorf("a acquired g by %+v, want a handover", call)
	}
	if b.h.releases() != 1 {
		t.Errorf("b released %d times", b.h.releases())
	}
}

// TestResyncAfterOverflow: a full send queue puts the standby out of
// sync; reservations wait, and a fresh snapshot, once the queue drains,
// brings it back in sync and grants them.
func TestResyncAfterOverflow(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	a.mu.Lock()
	a.overflowLocked(a.conn) // what enqueueLocked does when the queue is full
	a.mu.Unlock()
	if a.group().InSync {
		t.Fatal("still in sync after an overflow")
	}
	reserve(t, a, b, "out/1", 777) // granted after the resync, held by b
	waitSynced(t, a, b)
	st := a.Status().Counters
	if st.QueueOverflows != 1 || st.Resyncs < 2 {
		t.Errorf("counters %+v", st)
	}
}

// TestHostileFrames: a peer with good credentials that sends an
// oversized length, an unknown type or garbage is cut off and counted,
// and the member still takes the next connection; bytes that are not
// TLS fail the handshake.
func TestHostileFrames(t *testing.T) {
	checkLeaks(t)
	p := newPKI(t, "ha-test")
	addrB := freePort(t)
	b := &node{h: newFakeHandler(), cfg: Config{
		Name: "b", PeerName: "a", Listen: addrB, Peer: freePort(t),
		TLS: p.tlsFor(t, "a", false, "b"), Interval: testInterval, Misses: testMisses,
		Groups: []Group{{Name: "g", Preference: 100}},
	}}
	b.start(t)
	client := p.tlsFor(t, "b", false, "a")

	oversized := binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	unknown := []byte{0, 0, 0, 2, 0xee, 0}
	truncated := []byte{0, 0, 0, 3, byte(mBound), 5, 'x'}
	garbage := bytes.Repeat([]byte{0x42}, 64)
	for i, bad := range [][]byte{oversized, unknown, truncated, garbage} {
		c, err := tls.Dial("tcp", addrB.String(), client)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(bad); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c) // heartbeats until b cuts it off
		c.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("frame %d: b kept the connection", i)
		}
		want := uint64(i + 1)
		waitFor(t, "the bad frame counted", func() bool { return b.Status().Counters.BadFrames >= want })
	}
	raw, err := net.Dial("tcp", addrB.String())
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(garbage)
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, raw)
	raw.Close()
	waitFor(t, "the handshake failure counted", func() bool { return b.Status().Counters.HandshakeFailures >= 1 })

	// Still serving; and a newer connection replaces an older one.
	var conns []*tls.Conn
	for range 2 {
		c, err := tls.Dial("tcp", addrB.String(), client)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := readFrame(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := decodeMsg(f, wireV2); err != nil || m.Type != mHeartbeat {
			t.Fatalf("b sent %v, %v; want a heartbeat", m, err)
		}
		conns = append(conns, c)
	}
	if _, err := io.Copy(io.Discard, conns[0]); err != nil {
		t.Errorf("the older connection: %v, want closed by b", err)
	}
}

// TestConfigCheck: Start refuses configurations it cannot run.
func TestConfigCheck(t *testing.T) {
	good := Config{Name: "a", PeerName: "b", Listen: freePort(t), Peer: freePort(t), TLS: &tls.Config{}, Interval: testInterval, Misses: 3}
	for _, bad := range []func(*Config){
		func(c *Config) { c.PeerName = "a" },
		func(c *Config) { c.TLS = nil },
		func(c *Config) { c.Interval = 0 },
		func(c *Config) { c.Misses = 0 },
		func(c *Config) { c.Groups = []Group{{Name: "g"}, {Name: "g"}} },
		func(c *Config) { c.Groups = []Group{{Name: "g", Preference: 256}} },
	} {
		c := good
		bad(&c)
		if m, err := Start(c, newFakeHandler()); err == nil {
			m.Close()
			t.Errorf("Start accepted %+v", c)
		}
	}
}

// sampleMsgs is one message of each type.
func sampleMsgs() []*msg {
	st := &State{Bounds: map[Key]uint64{"out/1": 1 << 40, "in/2": 3}, IKE: map[string][]byte{"ike": []byte("x"), "empty": {}}, Seq: map[Key]uint64{"out/1": 1<<40 - 5}}
	return []*msg{
		{Type: mHeartbeat, Ver: wireV1, Groups: []hbGroup{{"g", roleOwner, 7, 200, false, [2]uint64{}}, {"h", roleStandby, 1, 0, true, [2]uint64{}}}},
		{Type: mHeartbeat, Ver: wireV2, Groups: []hbGroup{{"g", roleOwner, 7, 200, false, [2]uint64{1 << 22, 0}}, {"h", roleStandby, 1, 0, true, [2]uint64{5, 1<<23 - 1}}}},
		{Type: mSnapshot, Group: "g", Epoch: 7, Seq: 9, State: st},
		{Type: mBound, Group: "g", Epoch: 7, Seq: 10, Key: "out/1", UpTo: 1 << 50},
		{Type: mAck, Group: "g", Epoch: 7, Seq: 10},
		{Type: mForget, Group: "g", Epoch: 7, Key: "in/2"},
		{Type: mIKE, Group: "g", Epoch: 7, Key: "ike", Snap: []byte("snap")},
		{Type: mIKE, Group: "g", Epoch: 7, Key: "ike"},
		{Type: mHandover, Group: "g", Epoch: 8, State: st},
		{Type: mHandoverDone, Group: "g", Epoch: 8},
		{Type: mHandoverAsk, Group: "g", Epoch: 8},
	}
}

// TestWireRoundTrip: every message decodes to what was encoded, and every
// truncation of it is an error; a heartbeat of one version does not
// decode as the other.
func TestWireRoundTrip(t *testing.T) {
	for _, m := range sampleMsgs() {
		if m.Ver == 0 {
			m.Ver = wireV2
		}
		f := appendFrame(nil, m)
		got, err := readFrame(bytes.NewReader(f), nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type == mHeartbeat {
			if _, err := decodeMsg(got, wireV1+wireV2-m.Ver); err == nil {
				t.Errorf("a version %d heartbeat decoded as the other version", m.Ver)
			}
		}
		d, err := decodeMsg(got, m.Ver)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		if !sameMsg(d, m) {
			t.Errorf("%v: decoded %+v, want %+v", m.Type, d, m)
		}
		for n := range len(got) {
			if _, err := decodeMsg(got[:n], m.Ver); err == nil {
				t.Errorf("%v cut to %d bytes decoded", m.Type, n)
			}
		}
	}
}

// sameMsg compares messages, nil and empty maps alike.
func sameMsg(a, b *msg) bool {
	a2, b2 := *a, *b
	a2.State, b2.State = nil, nil
	aj, _ := json.Marshal(a2)
	bj, _ := json.Marshal(b2)
	if !bytes.Equal(aj, bj) || (a.Snap == nil) != (b.Snap == nil) {
		return false
	}
	if (a.State == nil) != (b.State == nil) {
		return false
	}
	if a.State == nil {
		return true
	}
	sj := func(s *State) string { // JSON sorts map keys
		j, _ := json.Marshal(s)
		return string(j)
	}
	return sj(a.State) == sj(b.State)
}

// FuzzDecode: the frame reader and decoder take any bytes without a
// panic or an outsized allocation, and what decodes encodes back to the
// same message.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMsgs() {
		f.Add(appendFrame(nil, m), m.Ver == wireV1)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, false)
	f.Fuzz(func(t *testing.T, b []byte, v1 bool) {
		ver := wireV2
		if v1 {
			ver = wireV1
		}
		r := bytes.NewReader(b)
		var buf []byte
		for {
			fr, err := readFrame(r, buf)
			if err != nil {
				return
			}
			buf = fr[:0]
			m, err := decodeMsg(fr, ver)
			if err != nil {
				continue
			}
			again, err := decodeMsg(appendFrame(nil, m)[frameHeader:], ver)
			if err != nil {
				t.Fatalf("re-encoded %v does not decode: %v", m.Type, err)
			}
			if !sameMsg(m, again) {
				t.Fatalf("%v: %+v became %+v", m.Type, m, again)
			}
		}
	})
}

// netipAddrPort converts a listener's address.
func netipAddrPort(t testing.TB, a net.Addr) netip.AddrPort {
	t.Helper()
	return a.(*net.TCPAddr).AddrPort()
}

// TestHandshakeFlood: silent connections from the peer's own address
// hold at most maxHandshakes handshakes in progress; each beyond closes
// the oldest (counted), so that the peer, connecting while they are still
// open, is served. Before, the slots were refused to newcomers: four idle
// connections from the peer's address kept it out.
func TestHandshakeFlood(t *testing.T) {
	checkLeaks(t)
	p := newPKI(t, "ha-test")
	addrB := freePort(t)
	b := &node{h: newFakeHandler(), cfg: Config{
		Name: "b", PeerName: "a", Listen: addrB, Peer: freePort(t),
		TLS: p.tlsFor(t, "a", false, "b"), Interval: testInterval, Misses: testMisses,
	}}
	b.cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	b.start(t)
	const n = maxHandshakes + 6
	var silent []net.Conn
	for range n {
		c, err := net.Dial("tcp", addrB.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	waitFor(t, "the oldest connections closed", func() bool {
		return b.Status().Counters.HandshakeFailures >= n-maxHandshakes
	})
	if got := b.handshakes.count(); got > maxHandshakes {
		t.Fatalf("%d handshakes in progress, want at most %d", got, maxHandshakes)
	}
	// The peer, with the last maxHandshakes silent ones still open.
	c, err := tls.Dial("tcp", addrB.String(), p.tlsFor(t, "b", false, "a"))
	if err != nil {
		t.Fatalf("the peer was refused while silent connections held the slots: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := readFrame(c, nil); err != nil {
		t.Fatalf("b does not talk during the flood: %v", err)
	}
	for _, c := range silent {
		c.Close()
	}
	waitFor(t, "the handshakes to end", func() bool { return b.handshakes.count() == 0 })
}

// TestSockopts: both ends of the channel set TCP_NODELAY and a
// TCP_USER_TIMEOUT of the detection time.
func TestSockopts(t *testing.T) {
	a, b := newPair(t, pairOpts{prefA: 200, prefB: 100})
	waitSynced(t, a, b)
	for _, n := range []*node{a, b} {
		n.mu.Lock()
		raw := n.conn.raw.(*net.TCPConn)
		n.mu.Unlock()
		sc, err := raw.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var timeout, nodelay int
		sc.Control(func(fd uintptr) {
			timeout, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
			nodelay, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY)
		})
		want := int((testInterval * testMisses).Milliseconds())
		if timeout != want || nodelay == 0 {
			t.Errorf("%s: TCP_USER_TIMEOUT %d ms (want %d), TCP_NODELAY %d", n.cfg.Name, timeout, want, nodelay)
		}
	}
}

// TestHandoverConnectionReplaced: the owner's handover offer is lost with
// its connection (the peer found the owner silent, took the group and
// connected again) before an answer came. The new connection ends the
// handover: the owner takes the group back above the epoch it offered,
// Handover returns an error, and the pair settles on one owner. Before,
// the owner waited for an answer that could not come, and its SIGTERM
// handover hung behind it (seen once in CI, e2e TestHASplitBrain, where
// the new connection was adopted before the old one's end was read).
// Here the old connection's end is usually read first, and the peer-down
// path ends the handover, so this test passes without the adopt change
// too: it holds the outcome, not that ordering.
func TestHandoverConnectionReplaced(t *testing.T) {
	// b owns; its own detection is slow, so that only the new
	// connection can end its handover.
	a, b := newPair(t, pairOpts{prefA: 100, prefB: 200, missesB: 100, startBFirst: true})
	waitSynced(t, b, a)
	b.mute.Store(true)
	done := make(chan error, 1)
	go func() { done <- b.Handover(context.Background(), "g") }()
	waitFor(t, "a to take g from the silent b", func() bool { return a.Owner("g") })
	waitFor(t, "b to adopt a's new connection", func() bool { return b.ctr.connections.Load() >= 2 })
	b.mute.Store(false)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Handover returned nil, but the offer was lost")
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("Handover did not return within 10s of the new connection")
	}
	waitFor(t, "one owner of g", func() bool { return a.Owner("g") != b.Owner("g") })
}
