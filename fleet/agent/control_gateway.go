package agent

// control_gateway.go is the one adapter between the agent's Gateway and
// the gateway's control socket (package control): config.apply and
// ike.list.

import (
	"context"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/gateway"
)

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
	args := control.ApplyArgs{Name: req.Name, Config: req.Config}
	for _, k := range req.TicketKeys {
		args.TicketKeys = append(args.TicketKeys, control.TicketKey{ID: k.ID, Key: k.Key, Issue: k.Issue})
	}
	_, err := g.c.Apply(ctx, args)
	return err
}

func (g controlGateway) IKE(ctx context.Context) (gateway.IKEInfo, error) { return g.c.IKE(ctx) }

func (g controlGateway) Close() error { return g.c.Close() }
