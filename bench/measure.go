package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// loop is the measured work of one goroutine (a crypto thread or an ESP
// worker). Its methods are called from that goroutine only.
type loop interface {
	// step does one unit of work, usually one batch: submit what it can,
	// collect what is complete. It returns the ops (or packets) and the
	// bytes that completed during the step.
	step() (ops, bytes int, err error)
	// drain waits for everything the loop still has in flight.
	drain()
}

// counter is one loop's progress, written by the loop's goroutine only and
// read by the coordinator; the lock keeps ops and bytes of one step
// together (a torn read skews bytes per op). Each sits on its own cache line.
type counter struct {
	mu         sync.Mutex
	ops, bytes uint64
	_          [40]byte
}

// window is what a measurement counted between its two reads: ops and
// bytes completed, the wall time, and the CPU time the whole process used
// meanwhile (every goroutine: threads, engine workers, the runtime).
type window struct {
	ops, bytes uint64
	elapsed    time.Duration
	cpu        time.Duration
}

func (w window) opsPerSec() float64   { return float64(w.ops) / w.elapsed.Seconds() }
func (w window) bytesPerSec() float64 { return float64(w.bytes) / w.elapsed.Seconds() }

// DefaultWarmup returns the warm-up used for a run of duration d when the
// caller sets none: a tenth of d, between 20 ms and 300 ms.
func DefaultWarmup(d time.Duration) time.Duration {
	return min(max(d/10, 20*time.Millisecond), 300*time.Millisecond)
}

// progressTick is how often the coordinator reports progress.
const progressTick = 100 * time.Millisecond

// measure runs every loop on its own goroutine, from a common start, for
// warmup and then for d, and returns what they completed during d (or
// longer, up to 10d, if nothing completed in d). progress (which may be
// nil) is called with the fraction of the run done. A loop that fails stops
// the run and its error is returned. Every loop is drained before measure
// returns.
func measure(ctx context.Context, loops []loop, warmup, d time.Duration, progress func(float64)) (window, error) {
	if progress == nil {
		progress = func(float64) {}
	}
	if warmup <= 0 {
		warmup = DefaultWarmup(d)
	}
	counters := make([]counter, len(loops))
	var (
		stop    atomic.Bool
		errOnce sync.Once
		runErr  error
		wg      sync.WaitGroup
	)
	failed := make(chan struct{})
	start := make(chan struct{})
	for i, l := range loops {
		wg.Add(1)
		go func(l loop, c *counter) {
			defer wg.Done()
			defer l.drain()
			<-start
			var ops, bytes uint64
			for !stop.Load() {
				o, b, err := l.step()
				if err != nil {
					errOnce.Do(func() { runErr = err; close(failed) })
					stop.Store(true)
					return
				}
				ops += uint64(o)
				bytes += uint64(b)
				c.mu.Lock()
				c.ops, c.bytes = ops, bytes
				c.mu.Unlock()
			}
		}(l, &counters[i])
	}
	read := func() (ops, bytes uint64, t time.Time, cpu time.Duration) {
		for i := range counters {
			c := &counters[i]
			c.mu.Lock()
			ops += c.ops
			bytes += c.bytes
			c.mu.Unlock()
		}
		return ops, bytes, time.Now(), processCPU()
	}
	finish := func(w window, err error) (window, error) {
		stop.Store(true)
		wg.Wait()
		if runErr != nil {
			return window{}, runErr
		}
		return w, err
	}

	total := warmup + d
	began := time.Now()
	close(start)
	tick := time.NewTicker(progressTick)
	defer tick.Stop()
	// sleepUntil waits for t while reporting progress; it returns false if
	// the run was cancelled or a loop failed.
	sleepUntil := func(t time.Time) error {
		timer := time.NewTimer(time.Until(t))
		defer timer.Stop()
		for {
			select {
			case <-timer.C:
				return nil
			case <-tick.C:
				progress(min(1, float64(time.Since(began))/float64(total)))
			case <-failed:
				return errors.New("bench: loop failed")
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := sleepUntil(began.Add(warmup)); err != nil {
		return finish(window{}, err)
	}
	ops0, bytes0, t0, cpu0 := read()
	if err := sleepUntil(t0.Add(d)); err != nil {
		return finish(window{}, err)
	}
	ops1, bytes1, t1, cpu1 := read()
	// A window in which no batch completed (a starved machine, or batches
	// of slow signatures) is stretched until one does, up to ten times.
	for limit := t0.Add(10 * d); ops1 == ops0 && t1.Before(limit); ops1, bytes1, t1, cpu1 = read() {
		if err := sleepUntil(t1.Add(min(d, progressTick))); err != nil {
			return finish(window{}, err)
		}
	}
	progress(1)
	return finish(window{ops: ops1 - ops0, bytes: bytes1 - bytes0, elapsed: t1.Sub(t0), cpu: cpu1 - cpu0}, nil)
}

// cleanupStack releases what a run set up, last first.
type cleanupStack []func()

func (c *cleanupStack) push(f func()) { *c = append(*c, f) }

func (c *cleanupStack) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}
