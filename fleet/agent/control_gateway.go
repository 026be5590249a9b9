package agent

// control_gateway.go is the one adapter between the agent's Gateway and
// the gateway's control socket (package control).

import (
	"context"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/gateway"
)

// opApply is the control operation that applies a whole configuration.
const opApply = "config.apply"

// applyArgs are config.apply's arguments.
type applyArgs struct {
	Name       string      `json:"name"`
	Config     string      `json:"config"`
	TicketKeys []ticketKey `json:"ticket_keys,omitempty"`
}

type ticketKey struct {
	ID    string `json:"id"`
	Key   []byte `json:"key"`
	Issue bool   `json:"issue,omitempty"`
}

// ControlDialer returns a Dialer of the control socket at path.
func ControlDialer(path string) Dialer {
	return func(ctx context.Context) (Gateway, error) {
		c, err := control.Dial(ctx, path)
		if err != nil {
			return nil, err
		}
		return controlGateway{c}, nil
	}
}

// controlGateway is a Gateway over a control.Client.
type controlGateway struct{ c *control.Client }

func (g controlGateway) Apply(ctx context.Context, req ApplyRequest) error {
	args := applyArgs{Name: req.Name, Config: req.Config}
	for _, k := range req.TicketKeys {
		args.TicketKeys = append(args.TicketKeys, ticketKey{ID: k.ID, Key: k.Key, Issue: k.Issue})
	}
	var r control.ReloadResult
	return g.c.Call(ctx, opApply, args, &r)
}

func (g controlGateway) IKE(ctx context.Context) (gateway.IKEInfo, error) { return g.c.IKE(ctx) }

func (g controlGateway) Close() error { return g.c.Close() }
