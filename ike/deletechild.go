package ike

// Deleting one Child SA of several (RFC 7296 section 1.4.1): an
// INFORMATIONAL with D(ESP, our inbound SPI) of that Child SA only; the
// peer answers with D(ESP, its inbound SPI) of the pair, and the IKE SA
// and its other Child SAs stay. The peer's such request is answered by
// deleteTask (task_delete.go).

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DeleteChild deletes child alone, telling the peer with an
// INFORMATIONAL exchange (section 1.4.1); the IKE SA that carries it and
// its other Child SAs stay (an IKE SA may be left without Child SAs).
// child is reported through OnDelete once the peer answers. When another
// request of the IKE SA is outstanding, it waits for it first. It returns
// an error if child is not established here or is being deleted or was
// replaced by a rekey; when ctx ends first, child goes anyway once the
// peer answers (or with its IKE SA).
func (e *Endpoint) DeleteChild(ctx context.Context, child *ChildSA) error {
	_, err := e.call(ctx, func(w chan result) ([]func(), error) {
		ent := e.children[child.InSPI]
		if ent == nil || ent.c != child || !ent.sa.up() {
			return nil, errors.New("ike: no such Child SA")
		}
		if ent.deleting || ent.replaced {
			return nil, errors.New("ike: the Child SA is being deleted or was rekeyed")
		}
		ent.deleting = true
		fail := func(err error) []func() {
			ent.deleting = false
			return reply(w, nil, err)
		}
		return ent.sa.enqueueLocked(op{
			run: func(sa *ikeSA) []func() {
				if e.children[child.InSPI] != ent || ent.replaced {
					return fail(errors.New("ike: the Child SA went meanwhile"))
				}
				r := &request{exch: INFORMATIONAL, kind: reqDeleteChild, old: child, waiter: w}
				if err := sa.startLocked(r, &deleteChildOurs{old: child, waiter: w}); err != nil {
					return fail(err)
				}
				return nil
			},
			fail: fail,
		}), nil
	}, nil)
	return err
}

// TerminateChild deletes the pair of the child named child alone
// (Endpoint.DeleteChild; swanctl's terminate --child), telling the peer:
// its IKE SA and the peer's other children stay. The child is not
// initiated again by the Controller until Initiate asks (for its peer).
func (c *Controller) TerminateChild(ctx context.Context, child string) error {
	c.mu.Lock()
	ep, ch := c.ep, c.children[child]
	if ch == nil || ep == nil {
		c.mu.Unlock()
		return fmt.Errorf("ike: no child named %q", child)
	}
	ch.terminated, ch.retryAt = true, time.Time{}
	// A pair the peer's rekey made, held for the old one's Delete, would
	// take the tunnel over: it goes first.
	pairs := []*ChildSA{ch.held, ch.cur}
	c.mu.Unlock()
	if pairs[1] == nil {
		return fmt.Errorf("%w of child %q", ErrNoChildSA, child)
	}
	var errs []error
	for _, sa := range pairs {
		if sa != nil {
			errs = append(errs, ep.DeleteChild(ctx, sa))
		}
	}
	return errors.Join(errs...)
}

// deletingLocked reports whether our outstanding request on sa deletes
// c: a Delete of the peer's for c then crosses ours, and our answer must
// not name c again (section 1.4.1: "the responses MUST NOT include
// delete payloads for the deleted SAs").
func deletingLocked(sa *ikeSA, c *ChildSA) bool {
	r := sa.pending
	return r != nil && r.kind == reqDeleteChild && r.old == c
}
