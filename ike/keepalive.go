package ike

// NAT-keepalives (RFC 3948 section 2.3, RFC 7296 section 2.23). When NAT
// detection finds our own address translated (NAT_DETECTION_DESTINATION_IP
// did not match the address the peer's message came to), a NAT between us
// and the peer keeps a mapping for our UDP flow only while packets go
// out: when it expires, the peer can reach us no longer, neither with IKE
// nor with ESP. So while we are behind a NAT and send nothing else, a
// one-byte datagram (0xFF) goes to the peer every Config.KeepAlive from
// the IKE SA's addresses (port 4500: the socket ESP in UDP leaves from),
// as strongSwan's keep_alive does.
//
//	every KeepAlive/2, for each established IKE SA behind a NAT:
//	  1. locked:   note its Child SAs
//	  2. unlocked: ask the data plane what it sent on them (Config.ESPSent)
//	  3. locked:   send 0xFF unless ESP went out since the last look or a
//	               keepalive did within KeepAlive
//
// So no more than KeepAlive passes between two datagrams we send to the
// peer, and an idle IKE SA sends one keepalive every KeepAlive.

import (
	"slices"
	"time"
)

// DefaultKeepAlive is Config.KeepAlive's default (strongSwan's
// keep_alive).
const DefaultKeepAlive = 20 * time.Second

// natKeepalive is the payload of a NAT-keepalive.
var natKeepalive = []byte{0xff}

// keepAlive is an IKE SA's NAT-keepalive state.
type keepAlive struct {
	t       stopper
	sent    uint64 // what Config.ESPSent said at the last look
	sinceKA int    // looks since the last keepalive
}

// startKeepAliveLocked starts sa's keepalives if we are behind a NAT.
func (sa *ikeSA) startKeepAliveLocked() {
	e := sa.ep
	if !sa.natHere || e.cfg.KeepAlive <= 0 || sa.ka.t != nil {
		return
	}
	e.cfg.Log.Info("ike: we are behind a NAT: sending NAT-keepalives", "peer", sa.peer.Name, "every", e.cfg.KeepAlive)
	sa.armKeepAliveLocked()
}

func (sa *ikeSA) armKeepAliveLocked() {
	e := sa.ep
	sa.ka.t = e.cfg.clock.AfterFunc(e.cfg.KeepAlive/2, func() { e.keepAliveDue(sa) })
}

func (sa *ikeSA) stopKeepAliveLocked() {
	stop(sa.ka.t)
	sa.ka.t = nil
}

// keepAliveDue is one look at sa (drawn at the top of the file): it
// sends a keepalive when no ESP went out since the last look, KeepAlive/2
// ago, and no keepalive within KeepAlive.
func (e *Endpoint) keepAliveDue(sa *ikeSA) {
	e.mu.Lock()
	if sa.removed || sa.ka.t == nil || e.closed {
		e.unlock()
		return
	}
	children := slices.Clone(sa.children)
	e.unlock()
	var sent uint64
	if f := e.cfg.ESPSent; f != nil {
		for _, c := range children {
			sent += f(c)
		}
	}
	e.mu.Lock()
	defer e.unlock()
	if sa.removed || sa.ka.t == nil || e.closed {
		return
	}
	busy := sent != sa.ka.sent
	sa.ka.sent = sent
	sa.ka.sinceKA++
	if !busy && sa.ka.sinceKA >= 2 {
		sa.ka.sinceKA = 0
		e.stats.KeepAlives++
		e.outbox = append(e.outbox, datagram{sa.local, sa.remote, natKeepalive}) // unlock sends it
	}
	sa.armKeepAliveLocked()
}
