package sched

// Benchmarks: sched against soft on the same workload, AES-128-GCM in ESP
// layout (tag after the data, in place), batches of 64 ops.
//
//	go test -run XXX -bench . -benchtime 2s ./cryptodev/sched/
//
// BenchmarkSched is one submitter: "pipelined" keeps pipelineDepth batches
// in flight, as an asynchronous data plane does (submit, go on, collect);
// "run" submits one batch and waits for it (cryptodev.Run), where only
// splitting a batch between workers helps. soft completes every batch in
// the submitter, on one core. BenchmarkSchedConcurrent is several
// submitters, each with its own queue.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

const (
	benchOps      = 64
	pipelineDepth = 8
)

var benchSizes = []int{64, 1420}

func BenchmarkSched(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("soft/%dB", size), func(b *testing.B) {
			benchPipelined(b, soft.New(), size)
		})
		b.Run(fmt.Sprintf("sched/pipelined/%dB", size), func(b *testing.B) {
			e, _ := New(Options{})
			defer e.Close()
			b.ReportMetric(float64(e.Workers()), "workers")
			benchPipelined(b, e, size)
		})
		b.Run(fmt.Sprintf("sched/run/%dB", size), func(b *testing.B) {
			e, _ := New(Options{})
			defer e.Close()
			b.ReportMetric(float64(e.Workers()), "workers")
			benchRun(b, e, size)
		})
	}
}

// benchPipelined keeps up to pipelineDepth batches in flight on one queue.
func benchPipelined(b *testing.B, e cryptodev.Engine, size int) {
	key := gcmKey(b, e)
	q, _ := e.NewQueue()
	defer q.Close()
	batches := make([]*cryptodev.Batch, pipelineDepth)
	for i := range batches {
		batches[i] = gcmBatch(b, key, benchOps, size)
	}
	b.SetBytes(int64(benchOps * size))
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	for i := 0; i < b.N; i++ {
		// Batches come back in order, so once fewer than
		// pipelineDepth are in flight, batch i%pipelineDepth is free.
		for q.InFlight() >= pipelineDepth {
			q.Dequeue(true)
		}
		if err := q.Submit(batches[i%pipelineDepth]); err != nil {
			b.Fatal(err)
		}
	}
	for q.InFlight() > 0 {
		q.Dequeue(true)
	}
	checkBench(b, batches)
}

// benchRun submits one batch at a time and waits for it.
func benchRun(b *testing.B, e cryptodev.Engine, size int) {
	key := gcmKey(b, e)
	q, _ := e.NewQueue()
	defer q.Close()
	batch := gcmBatch(b, key, benchOps, size)
	b.SetBytes(int64(benchOps * size))
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	for i := 0; i < b.N; i++ {
		if err := cryptodev.Run(q, batch); err != nil {
			b.Fatal(err)
		}
	}
	checkBench(b, []*cryptodev.Batch{batch})
}

func checkBench(b *testing.B, batches []*cryptodev.Batch) {
	for _, bt := range batches {
		for i := range bt.Ops {
			if st := bt.Ops[i].Status; st != cryptodev.StatusOK && !(b.N < pipelineDepth && st == cryptodev.StatusPending) {
				b.Fatalf("op status %v", st)
			}
		}
	}
}

// BenchmarkSchedConcurrent runs several submitters at once, each with its
// own queue and pipelineDepth batches in flight.
func BenchmarkSchedConcurrent(b *testing.B) {
	for _, size := range benchSizes {
		for _, subs := range []int{2, 8} {
			b.Run(fmt.Sprintf("soft/%dsub/%dB", subs, size), func(b *testing.B) {
				benchConcurrent(b, soft.New(), subs, size)
			})
			b.Run(fmt.Sprintf("sched/%dsub/%dB", subs, size), func(b *testing.B) {
				e, _ := New(Options{})
				defer e.Close()
				benchConcurrent(b, e, subs, size)
			})
		}
	}
}

func benchConcurrent(b *testing.B, e cryptodev.Engine, subs, size int) {
	key := gcmKey(b, e)
	type submitter struct {
		q       cryptodev.Queue
		batches []*cryptodev.Batch
	}
	ss := make([]submitter, subs)
	for i := range ss {
		ss[i].q, _ = e.NewQueue()
		for range pipelineDepth {
			ss[i].batches = append(ss[i].batches, gcmBatch(b, key, benchOps, size))
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.SetBytes(int64(benchOps * size))
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	var wg sync.WaitGroup
	for i := range ss {
		wg.Add(1)
		go func(s *submitter) {
			defer wg.Done()
			for n := 0; left.Add(-1) >= 0; n++ {
				for s.q.InFlight() >= pipelineDepth {
					s.q.Dequeue(true)
				}
				if err := s.q.Submit(s.batches[n%pipelineDepth]); err != nil {
					b.Error(err)
					return
				}
			}
			for s.q.InFlight() > 0 {
				s.q.Dequeue(true)
			}
		}(&ss[i])
	}
	wg.Wait()
	b.StopTimer()
	for i := range ss {
		ss[i].q.Close()
	}
}

// BenchmarkOverhead measures the engine's own cost per batch: batches of
// one 16-byte op, pipelined on one queue.
func BenchmarkOverhead(b *testing.B) {
	b.Run("soft", func(b *testing.B) { benchTiny(b, soft.New()) })
	b.Run("sched", func(b *testing.B) {
		e, _ := New(Options{})
		defer e.Close()
		benchTiny(b, e)
	})
}

func benchTiny(b *testing.B, e cryptodev.Engine) {
	key := gcmKey(b, e)
	q, _ := e.NewQueue()
	defer q.Close()
	batches := make([]*cryptodev.Batch, pipelineDepth)
	for i := range batches {
		batches[i] = gcmBatch(b, key, 1, 16)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for q.InFlight() >= pipelineDepth {
			q.Dequeue(true)
		}
		if err := q.Submit(batches[i%pipelineDepth]); err != nil {
			b.Fatal(err)
		}
	}
	for q.InFlight() > 0 {
		q.Dequeue(true)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time the process spent per op since start:
// unlike ns/op it is not inflated by other load on the machine, and it
// shows what spinning and handoffs cost.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
