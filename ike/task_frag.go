package ike

// IKE fragmentation's announcement in IKE_SA_INIT (RFC 7383 section
// 2.3): both sides send N(IKEV2_FRAGMENTATION_SUPPORTED), the responder
// only in answer to the initiator's; from then on frag.go fragments
// long messages (ikeSA.frag).

func init() { registerTask(IKE_SA_INIT, orderFrag, newFragTask) }

type fragTask struct {
	peer bool // responder: the initiator announced it
}

func newFragTask(*ikeSA) task { return &fragTask{} }

func (t *fragTask) build(x *exchange) taskStatus {
	sa := x.sa
	if sa.initiator {
		x.add(sa.ep.fragmentSupported()...)
		return taskMore
	}
	if f := sa.ep.fragmentSupported(); f != nil && t.peer {
		sa.frag = true
		x.add(f...)
	}
	return taskDone
}

func (t *fragTask) process(x *exchange) taskStatus {
	sa := x.sa
	announced := findNotify(x.in, FragmentationSupported) != nil
	if sa.initiator {
		sa.frag = sa.ep.cfg.FragmentSize > 0 && announced
		return taskDone
	}
	t.peer = announced
	return taskMore
}
