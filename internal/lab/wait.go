package lab

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultPoll is the interval WaitFor polls at when given none.
const DefaultPoll = 10 * time.Millisecond

// ErrStop, returned by a WaitFor condition, ends the wait at once with the
// condition's error: the thing waited for will never happen (the process
// that should have created it has exited).
var ErrStop = errors.New("lab: stop waiting")

// WaitFor polls cond every interval (0: DefaultPoll) until it returns true,
// ctx ends, or timeout passes. cond's last error is kept for the message: a
// condition reports why it is not met yet by returning false and an error.
// An error wrapping ErrStop ends the wait at once. what names the condition
// in the error: "waiting for TUN sluice0 in sl-1-ab-a: ...".
func WaitFor(ctx context.Context, what string, timeout, interval time.Duration, cond func() (bool, error)) error {
	if interval <= 0 {
		interval = DefaultPoll
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		if errors.Is(err, ErrStop) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			why := ctx.Err()
			if errors.Is(why, context.DeadlineExceeded) {
				why = fmt.Errorf("not within %v", timeout)
			}
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last: %v)", what, why, last)
			}
			return fmt.Errorf("waiting for %s: %w", what, why)
		case <-t.C:
		}
	}
}

// WaitLink waits until the interface exists in the namespace. If p is not
// nil and exits first, the wait ends with p's output.
func (n *Netns) WaitLink(ctx context.Context, ifname string, timeout time.Duration, p *Process) error {
	return WaitFor(ctx, fmt.Sprintf("%s in %s", ifname, n.name), timeout, 0, func() (bool, error) {
		if err := p.checkRunning(); err != nil {
			return false, err
		}
		return n.HasLink(ifname)
	})
}

// checkRunning returns an error wrapping ErrStop if the process (when not
// nil) has exited.
func (p *Process) checkRunning() error {
	if p == nil {
		return nil
	}
	if done, err := p.Exited(); done {
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%w: %s (pid %d) exited: %v%s", ErrStop, p.name, p.Pid(), err, p.tail())
	}
	return nil
}
