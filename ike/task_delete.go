package ike

// Deletes in INFORMATIONAL (section 1.4.1), as responder: D(IKE) ends the
// IKE SA once our (empty) answer is out; D(ESP, SPIs) names the peer's
// inbound SPIs of Child SAs it deleted, and our answer names ours. An
// INFORMATIONAL without anything a task takes is a liveness check,
// answered empty. A Child SA whose Delete of ours crosses the peer's is
// left out of our answer (deletingLocked).

func init() { registerTask(INFORMATIONAL, orderDelete, newDeleteTask) }

type deleteTask struct {
	ours []uint32 // our inbound SPIs of the Child SAs the peer deleted
}

func newDeleteTask(*ikeSA) task { return &deleteTask{} }

func (t *deleteTask) process(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	for _, p := range x.in {
		d, ok := p.(*Delete)
		if !ok {
			continue
		}
		switch d.Protocol {
		case ProtoIKE:
			e.cfg.Log.Info("ike: peer deleted the IKE SA", sa.logAttrs()...)
			x.remove = true
			t.ours = nil
			return taskDone
		case ProtoESP:
			for _, spi := range d.SPIs {
				for _, c := range sa.children {
					if spi == c.OutSPI {
						e.cfg.Log.Debug("ike: peer deleted a Child SA", sa.logAttrs("child", c.Child, "in_spi", ESPSPI(c.InSPI), "out_spi", ESPSPI(c.OutSPI))...)
						if !deletingLocked(sa, c) { // deletechild.go
							t.ours = append(t.ours, c.InSPI)
						}
						x.later(sa.dropChildLocked(c)...)
						break
					}
				}
			}
		}
	}
	return taskMore
}

func (t *deleteTask) build(x *exchange) taskStatus {
	if len(t.ours) > 0 {
		x.add(&Delete{Protocol: ProtoESP, SPIs: t.ours})
	}
	return taskDone
}

// deleteIKEOurs is our Delete of the IKE SA: D(IKE); once the peer
// answers, the IKE SA is gone.
type deleteIKEOurs struct{}

func (deleteIKEOurs) build(x *exchange) taskStatus {
	x.add(&Delete{Protocol: ProtoIKE})
	return taskMore
}

func (deleteIKEOurs) process(x *exchange) taskStatus {
	x.sa.ep.stats.Deleted++
	x.later(x.sa.ep.removeLocked(x.sa, errDeleted)...)
	return taskDone
}

// deleteChildOurs is our Delete of a Child SA that a rekey replaced
// (rekey.go): D(ESP, old's inbound SPI); once the peer answers, old goes
// and waiter learns next, its successor.
type deleteChildOurs struct {
	old, next *ChildSA
	waiter    chan result
}

func (t *deleteChildOurs) build(x *exchange) taskStatus {
	x.add(&Delete{Protocol: ProtoESP, SPIs: []uint32{t.old.InSPI}})
	return taskMore
}

func (t *deleteChildOurs) process(x *exchange) taskStatus {
	x.later(x.sa.dropChildLocked(t.old)...)
	x.later(reply(t.waiter, t.next, nil)...)
	return taskDone
}
