package gateway

// The writer of inbound reservations (DESIGN.md decision 7, state.go):
// an inbound SA with durable state is leased (esp.Lease) by the state
// directory instead of recording its bounds itself, so that no write and
// no fsync happen on a data-path lane with the SA's lock held.
//
//  1. Ask: the SA, on its lane and with its lock held, asks for the next
//     bound when half of its step is left (esp.Lease). The ask only joins
//     the writer's queue and, if no writer runs, starts one.
//  2. Write: the writer takes every ask queued so far (one group) and
//     writes each state file's bound into its slot of the slot file
//     (stateslots.go), in the copy not written last.
//  3. Commit: one fdatasync of the slot file makes the whole group
//     durable (group commit).
//  4. Grant: each SA's lease is granted what its slot now holds durably.
//     The SA accepts nothing above a granted bound, so whatever the
//     writer was doing when the process died, the slot's other copy or
//     the new one (a torn copy fails its CRC) or the SA's own file holds
//     at least every number that may have been accepted.
//
// Asks made while a group is written form the next group. The writer
// ends when the queue is empty; a group with failures (the directory
// went away, the disk is full) is retried after stateRetry, and its SAs
// drop what reaches their bound at once (esp.Lease.Fail) instead of
// waiting, each failure counted and logged as for outbound records.

import (
	"log/slog"
	"sync"
	"time"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/sad"
)

// Leases from the state directory: an inbound step aims at stateLeaseStep
// of traffic (it doubles while asks come faster than every half of it and
// halves when they come slower than twice it, so in steady traffic an SA
// asks every one to four seconds, at least ReplayReserveMin numbers at a
// time), up to stateLeaseStepMax; an outbound step is esp.SeqReserveBlock.
// A packet that reaches an ungranted bound (a burst far faster than the
// step was sized for) waits up to stateLeaseWait for its record, as long
// as an fdatasync may take on a loaded machine (the records on the lane
// before waited for theirs however long they took); once per ask, and
// not while a group has taken longer than that (stateWriter.slow), so a
// stuck disk stalls a lane about one wait, not one per SA.
const (
	stateLeaseStep    = 2 * time.Second
	stateLeaseStepMax = 20 * time.Second
	stateLeaseWait    = 500 * time.Millisecond
)

// stateRetry is how long the writer waits before it retries records that
// failed.
var stateRetry = 100 * time.Millisecond

// stateWriter records the bounds inbound SAs ask for, in groups, off the
// data path. The zero value is ready; it has no goroutine while nothing is
// asked.
type stateWriter struct {
	mu      sync.Mutex
	queue   []*leasedState // asks waiting for the next group
	spare   []*leasedState // the last group's slice, reused
	running bool
	// slow says that the group being written has taken longer than a
	// packet waits (stateLeaseWait): the SAs that ask meanwhile drop
	// at their bound at once (esp.Lease.Fail) instead of each waiting
	// with its lock held, in turn, on a lane.
	slow  bool
	slots slotFile // where the bounds go
	// testHook, if set (by tests), runs at each step of a group with the
	// step's name: "write" before a file is written, "renamed" after a
	// group's files are in place, "synced" after the directory fsync,
	// before the grants.
	testHook func(step string)
}

// leasedState is one inbound SA runtime's durable lease.
type leasedState struct {
	f     *stateFile
	lease *esp.Lease
	health
	// Guarded by stateWriter.mu.
	upTo   uint64 // the highest bound asked for
	queued bool
	// failed is the outcome of its last record; the writer's own.
	failed bool
}

// health keeps an SA's StateHealth and logs its failures: the first at
// once, then at most every StateLogInterval while they last. One goroutine
// at a time calls note (the SA's owner, or the writer).
type health struct {
	h       *sad.StateHealth
	log     *slog.Logger
	what    []any
	lastLog time.Time
}

// note records the outcome of a record of the SA's bound in file path.
func (s *health) note(path string, err error) {
	h := s.h
	if err == nil {
		if h.Failing.Swap(false) {
			s.log.Info("sequence-number reservation recorded again; the SA carries traffic", s.what...)
		}
		return
	}
	h.Failures.Add(1)
	msg := err.Error()
	h.LastError.Store(&msg)
	first := !h.Failing.Swap(true)
	if now := time.Now(); first || now.Sub(s.lastLog) >= StateLogInterval {
		s.lastLog = now
		s.log.Error("cannot record the sequence-number reservation in the state directory; "+
			"the SA drops its packets (seq_reserve_failed) until it can",
			append(s.what, "file", path, "failures", h.Failures.Load(), "err", err)...)
	}
}

// ask queues a bound of e for the next group. It runs on the SA's lane
// with the SA's lock held: it takes only the writer's lock, briefly, and
// never waits for a write.
func (w *stateWriter) ask(e *leasedState, upTo uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.upTo = max(e.upTo, upTo)
	if !e.queued {
		e.queued = true
		w.queue = append(w.queue, e)
	}
	if w.slow {
		e.lease.Fail(true)
	}
	if !w.running {
		w.running = true
		go w.run()
	}
}

// run writes groups until none is queued.
func (w *stateWriter) run() {
	var failed []*leasedState
	for {
		w.mu.Lock()
		for _, e := range failed {
			if !e.queued {
				e.queued = true
				w.queue = append(w.queue, e)
			}
		}
		failed = failed[:0]
		group := w.queue
		if len(group) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.queue = w.spare[:0]
		want := make([]uint64, len(group))
		for i, e := range group {
			e.queued = false
			want[i] = e.upTo
		}
		w.mu.Unlock()

		// A group slower than a packet waits makes its SAs and the
		// ones that ask meanwhile drop at their bounds at once.
		fired := make(chan struct{})
		slow := time.AfterFunc(stateLeaseWait, func() {
			defer close(fired)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.slow = true
			for _, e := range group {
				e.lease.Fail(true)
			}
			for _, e := range w.queue {
				e.lease.Fail(true)
			}
		})
		failed = w.commit(group, want, failed)
		if !slow.Stop() {
			<-fired
		}

		w.mu.Lock()
		if w.slow {
			// Undo what the timer did to the group's recorded SAs; the
			// queued ones' next group undoes theirs.
			w.slow = false
			for _, e := range group {
				e.lease.Fail(e.failed)
			}
		}
		clear(group)
		w.spare = group[:0]
		w.mu.Unlock()
		if len(failed) > 0 {
			time.Sleep(stateRetry)
		}
	}
}

// commit records one group: want[i] for group[i]. It grants every SA whose
// bound is durable and appends the others to failed.
func (w *stateWriter) commit(group []*leasedState, want []uint64, failed []*leasedState) []*leasedState {
	hook := w.testHook
	if hook == nil {
		hook = func(string) {}
	}
	// 2. Write each file once, with the highest bound its SAs ask for
	// (more than one runtime may write a file: stateFile).
	errs := make([]error, len(group))
	done := map[*stateFile]int{} // file -> the group index that wrote it
	for i, e := range group {
		v := want[i]
		for j, o := range group {
			if o.f == e.f {
				v = max(v, want[j])
			}
		}
		if j, ok := done[e.f]; ok {
			errs[i], want[i] = errs[j], want[j]
			continue
		}
		done[e.f] = i
		hook("write")
		want[i], errs[i] = e.f.recordSlot(v)
	}
	hook("written")
	// 3. One fdatasync of the slot file makes the group durable.
	syncErr := w.slots.sync()
	if syncErr != nil {
		for i, e := range group {
			if j := done[e.f]; j == i && errs[i] == nil {
				e.f.unsynced()
			}
		}
	}
	hook("synced")
	// 4. Grant what is durable.
	for i, e := range group {
		err := errs[i]
		if err == nil {
			err = syncErr
		}
		if errs[i] == errStateGone || err == errSlotsClosed {
			continue // the SA or the gateway is gone: nothing to grant or retry
		}
		e.note(e.f.path, err)
		e.failed = err != nil
		e.lease.Fail(e.failed)
		if err != nil {
			failed = append(failed, e)
			continue
		}
		e.lease.Grant(want[i])
	}
	return failed
}
