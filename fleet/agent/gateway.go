package agent

import (
	"context"

	"github.com/sluicegw/sluice/gateway"
)

// Gateway is the running gateway beside the agent, as the agent drives it
// over the control socket (ControlGateway; tests use a fake). A Gateway
// is one connection: when a call fails because the connection is gone
// (the gateway stopped or restarted), the agent closes it, dials again
// and applies its configuration again, since a restarted gateway runs
// its bootstrap file, not what the agent applied.
type Gateway interface {
	// Apply hands the gateway a whole configuration, as config.apply: the
	// gateway parses it as a file named req.Name and reloads to it
	// losslessly. An invalid configuration is refused with an error that
	// names req.Name, the line and the field.
	Apply(ctx context.Context, req ApplyRequest) error
	// IKE is ike.list: the connections and their children, with SPIs.
	IKE(ctx context.Context) (gateway.IKEInfo, error)
	// Close closes the connection.
	Close() error
}

// ApplyRequest is a whole configuration for Gateway.Apply.
type ApplyRequest struct {
	// Name is what the gateway's errors call the text (its file name).
	Name string
	// Config is the TOML text, secrets ([[secret]] PSKs) included.
	Config string
	// TicketKeys, when not empty, are the TLS session-ticket key ring
	// every listener uses; empty leaves the ring in force.
	TicketKeys []TicketKey
}

// TicketKey is one TLS session-ticket key of a ring.
type TicketKey struct {
	ID    string
	Key   []byte // 32 bytes
	Issue bool   // the key new tickets are sealed with; at most one
}

// Dialer connects to the gateway's control socket.
type Dialer func(ctx context.Context) (Gateway, error)
