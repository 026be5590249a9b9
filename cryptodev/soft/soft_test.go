package soft_test

import (
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// TestConformance runs the engine conformance suite against soft.
func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) cryptodev.Engine { return soft.New() })
}

// TestQueueBounded: the queue holds at most MaxInFlight batches, a
// pipelined caller that always keeps some in flight allocates nothing, and a
// closed engine refuses work.
func TestQueueBounded(t *testing.T) {
	e := soft.New()
	q, err := e.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	b := &cryptodev.Batch{}
	for range soft.MaxInFlight {
		if err := q.Submit(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Submit(b); err != cryptodev.ErrQueueFull {
		t.Fatalf("submit past the bound: %v", err)
	}
	allocs := testing.AllocsPerRun(10000, func() {
		q.Dequeue(false)
		if err := q.Submit(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || q.InFlight() != soft.MaxInFlight {
		t.Fatalf("%v allocations per submit, %d in flight", allocs, q.InFlight())
	}
	e.Close()
	if err := q.Submit(b); err != cryptodev.ErrClosed {
		t.Fatalf("submit after Close: %v", err)
	}
	if _, err := e.NewQueue(); err != cryptodev.ErrClosed {
		t.Fatalf("NewQueue after Close: %v", err)
	}
}
