package ike

// IKE fragmentation (RFC 7383). Both sides announce
// N(IKEV2_FRAGMENTATION_SUPPORTED) in IKE_SA_INIT; from then on an
// encrypted message longer than Config.FragmentSize is sent as SKF
// fragments, each a message of its own with the same message ID, its
// piece of the plaintext protected on its own:
//
//	HDR(SKF), SKF{1/n, inner type}  ...  HDR(SKF), SKF{n/n, 0}
//
// A retransmission sends every fragment again, and a retransmitted
// request's fragment 1 brings back every fragment of the cached response
// (section 2.6.1). Received fragments are checked and decrypted one by
// one, then kept until all of their message are in: at most one message
// per direction per IKE SA, at most maxFragments fragments and
// MaxMessageLen bytes of plaintext, for at most Config.HalfOpenTimeout.
// What falls outside is dropped and counted.

import "net/netip"

// maxFragments bounds the fragments of one message, sent or received.
const maxFragments = 64

// reassembly is a message arriving in fragments.
type reassembly struct {
	id    uint32
	total int
	parts [][]byte // decrypted pieces, by fragment number - 1
	got   int
	size  int
	inner PayloadType // fragment 1's inner type
	first []byte      // fragment 1 as received (a retransmission's match)
	timer stopper
}

// fragmentSupported is our N(IKEV2_FRAGMENTATION_SUPPORTED) (RFC 7383
// section 2.3), or nil when Config.FragmentSize turns fragmentation off.
func (e *Endpoint) fragmentSupported() []Payload {
	if e.cfg.FragmentSize < 0 {
		return nil
	}
	return []Payload{&Notify{NType: FragmentationSupported}}
}

// fragMax is the largest message sa sends whole: Config.FragmentSize less
// the non-ESP marker on the NAT-T port; 0 when fragmentation is not in
// use on sa.
func (sa *ikeSA) fragMax() int {
	if !sa.frag || sa.ep.cfg.FragmentSize < 0 {
		return 0
	}
	n := sa.ep.cfg.FragmentSize
	if sa.local.Port() != sa.ep.cfg.Port {
		n -= len(nonESPMarker)
	}
	return n
}

// sealLocked encodes and protects a message of sa: one datagram, or its
// fragments.
func (sa *ikeSA) sealLocked(h Header, inner []Payload) ([][]byte, error) {
	sa.debugMessage("sending", &h, inner)
	pkts, err := sa.out.sealFragments(h, inner, sa.fragMax())
	if err == nil && len(pkts) > 1 {
		sa.ep.stats.TxFragments += uint64(len(pkts))
	}
	return pkts, err
}

// sendAllLocked sends every datagram of one message.
func (e *Endpoint) sendAllLocked(local, remote netip.AddrPort, pkts [][]byte) {
	for _, p := range pkts {
		e.sendLocked(local, remote, p)
	}
}

// fragment returns m's SKF payload, if it is a fragment.
func fragment(m *Message) (*EncryptedFragment, bool) {
	if len(m.Payloads) == 0 {
		return nil, false
	}
	f, ok := m.Payloads[len(m.Payloads)-1].(*EncryptedFragment)
	return f, ok
}

// fragmentLocked takes in one fragment f of raw (decoded as m), which the
// caller found in sa's window, into *slot (sa.fragReq or sa.fragResp).
// Once the message is whole it returns its inner payloads and its first
// fragment as received, and done; before, or when the fragment is
// dropped (counted), done is false.
func (sa *ikeSA) fragmentLocked(slot **reassembly, raw []byte, m *Message, f *EncryptedFragment) (inner []Payload, first []byte, done bool) {
	e := sa.ep
	if !sa.frag || int(f.Total) > maxFragments {
		e.stats.RxFragInvalid++
		return nil, nil, false
	}
	pt, err := sa.in.openFragment(raw, m, f)
	if err != nil {
		e.stats.RxIntegrityFailed++
		return nil, nil, false
	}
	r := *slot
	if r != nil && r.id != m.Header.MessageID {
		sa.dropReassemblyLocked(slot) // an older message's: the window moved on
		r = nil
	}
	if r != nil && int(f.Total) != r.total {
		// Section 2.6.1: a retransmission fragmented anew (a smaller
		// fragment size) has more fragments; fewer is a stale one.
		if int(f.Total) < r.total {
			e.stats.RxFragInvalid++
			return nil, nil, false
		}
		sa.dropReassemblyLocked(slot)
		r = nil
	}
	if r == nil {
		r = &reassembly{id: m.Header.MessageID, total: int(f.Total), parts: make([][]byte, f.Total)}
		*slot = r
		r.timer = e.cfg.clock.AfterFunc(e.cfg.HalfOpenTimeout, func() {
			e.mu.Lock()
			if *slot == r {
				*slot = nil
				e.stats.RxFragTimeout++
			}
			e.unlock()
		})
	}
	i := int(f.Number) - 1
	if r.parts[i] != nil {
		e.stats.RxFragDuplicate++
		return nil, nil, false
	}
	if r.size+len(pt) > MaxMessageLen {
		sa.dropReassemblyLocked(slot)
		e.stats.RxFragTooLarge++
		return nil, nil, false
	}
	e.stats.RxFragments++
	r.parts[i], r.size = pt, r.size+len(pt)
	r.got++
	if i == 0 {
		r.inner, r.first = f.Inner, raw
	}
	if r.got < r.total {
		return nil, nil, false
	}
	stop(r.timer)
	*slot = nil
	plain := make([]byte, 0, r.size)
	for _, p := range r.parts {
		plain = append(plain, p...)
	}
	inner, err = parsePayloads(r.inner, plain, false)
	if err != nil {
		e.stats.RxMalformed++
		e.cfg.Log.Debug("ike: reassembled message does not parse", "from", sa.remote, "err", err)
		return nil, nil, false
	}
	e.stats.RxReassembled++
	return inner, r.first, true
}

// dropReassemblyLocked forgets the message *slot was collecting.
func (sa *ikeSA) dropReassemblyLocked(slot **reassembly) {
	if r := *slot; r != nil {
		stop(r.timer)
		*slot = nil
	}
}

// openLocked checks and decrypts raw (decoded as m), a message in sa's
// window: a whole one, or a fragment into *slot. done is false when
// nothing is to be processed yet (a fragment of an incomplete message) or
// the message was dropped (counted); first is raw, or fragment 1 of a
// reassembled message.
func (sa *ikeSA) openLocked(slot **reassembly, raw []byte, m *Message) (inner []Payload, first []byte, done bool) {
	if f, ok := fragment(m); ok {
		inner, first, done = sa.fragmentLocked(slot, raw, m, f)
	} else {
		var err error
		if inner, err = sa.in.open(raw, m); err != nil {
			sa.ep.stats.RxIntegrityFailed++
			return nil, nil, false
		}
		first, done = raw, true
	}
	if done {
		sa.debugMessage("received", &m.Header, inner)
	}
	return inner, first, done
}
