package lab

// The control socket of a running gateway (`sluice run`), through package
// control's client: waiting for a daemon, reading its counters. Each call
// opens its own short connection, so that a call cut short by a timeout
// leaves nothing out of step.

import (
	"context"
	"time"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/gateway"
)

// controlTimeout bounds one control call.
const controlTimeout = 5 * time.Second

// ControlCall sends one request (op and args; nil for none) to the control
// socket at path and decodes the result into result (nil to ignore it). It
// gives up when ctx ends, and after 5 seconds at most.
func ControlCall(ctx context.Context, path, op string, args, result any) error {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	c, err := control.Dial(ctx, path)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, op, args, result)
}

// ControlStats reads a gateway's counters through its control socket.
func ControlStats(ctx context.Context, path string) (gateway.Stats, error) {
	var s gateway.Stats
	err := ControlCall(ctx, path, control.OpStats, nil, &s)
	return s, err
}

// ControlTunnels lists a gateway's tunnels through its control socket.
func ControlTunnels(ctx context.Context, path string) ([]gateway.TunnelInfo, error) {
	var ts []gateway.TunnelInfo
	err := ControlCall(ctx, path, control.OpTunnelList, nil, &ts)
	return ts, err
}

// WaitControl waits until the control socket at path answers a stats
// request. If p is not nil and exits first, the wait ends with p's output.
func WaitControl(ctx context.Context, path string, timeout time.Duration, p *Process) error {
	return WaitFor(ctx, "control socket "+path, timeout, 0, func() (bool, error) {
		if err := p.checkRunning(); err != nil {
			return false, err
		}
		_, err := ControlStats(ctx, path)
		return err == nil, err
	})
}
