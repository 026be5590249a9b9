package control

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
)

// GatewayBackend serves a running *gateway.Gateway to the control socket
// and the metrics endpoint. Its Reload re-reads the file the running
// configuration came from (Config().File); SIGHUP handlers call it too.
type GatewayBackend struct {
	// OnReload, if set before the backend is used, is called with the
	// configuration after each reload that applied it (not after one that
	// was refused), e.g. to apply its log level.
	OnReload func(*config.Gateway)

	g   *gateway.Gateway
	log *slog.Logger
	// file is the configuration file the gateway started from.
	file string
	// reloadMu makes each reload read the file and apply it before the
	// next one reads: an older file is never applied over a newer one.
	// It serialises Apply with reloads too.
	reloadMu sync.Mutex
	// applied is the name of the last configuration applied over the
	// socket (Apply), "" while the running one is the file's: a reload
	// is refused once it is set.
	applied string
}

// NewGatewayBackend adapts g. log (nil: discard) gets a line for each
// reload refused.
func NewGatewayBackend(g *gateway.Gateway, log *slog.Logger) *GatewayBackend {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &GatewayBackend{g: g, log: log, file: g.Config().File}
}

// SAs lists the SAs.
func (b *GatewayBackend) SAs() []gateway.SAInfo { return b.g.SAs() }

// Tunnels lists the tunnels.
func (b *GatewayBackend) Tunnels() []gateway.TunnelInfo { return b.g.Tunnels() }

// Policies lists the policies.
func (b *GatewayBackend) Policies() []gateway.PolicyInfo { return b.g.Policies() }

// Stats reads the counters.
func (b *GatewayBackend) Stats() gateway.Stats { return b.g.Stats() }

// AddSA installs sa on a running tunnel (gateway.Gateway.AddSA).
func (b *GatewayBackend) AddSA(tunnel, dir string, sa *config.SA) error {
	return b.g.AddSA(tunnel, dir, sa)
}

// IKE describes the IKE connections (gateway.Gateway.IKE).
func (b *GatewayBackend) IKE() gateway.IKEInfo { return b.g.IKE() }

// InitiateIKE negotiates a connection (gateway.Gateway.InitiateIKE).
func (b *GatewayBackend) InitiateIKE(ctx context.Context, name string) error {
	return b.g.InitiateIKE(ctx, name)
}

// TerminateIKE deletes a connection's SAs (gateway.Gateway.TerminateIKE).
func (b *GatewayBackend) TerminateIKE(ctx context.Context, name string) error {
	return b.g.TerminateIKE(ctx, name)
}

// HAStatus is gateway.Gateway.HAStatus.
func (b *GatewayBackend) HAStatus() (ha.Status, bool) { return b.g.HAStatus() }

// HAHandover is gateway.Gateway.HAHandover.
func (b *GatewayBackend) HAHandover(ctx context.Context, group string) error {
	return b.g.HAHandover(ctx, group)
}

// DelSA removes an inbound SA (gateway.Gateway.DelSA).
func (b *GatewayBackend) DelSA(spi uint32) error { return b.g.DelSA(spi) }

// Reload re-reads the configuration file and applies it. A file that does
// not load, names an engine that is not registered or a TLS file that
// cannot be read, is refused with its
// file:line:col errors and the running configuration stays; so does a
// change the gateway refuses (one that needs a restart).
func (b *GatewayBackend) Reload() ([]string, error) {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	file := b.file
	if b.applied != "" {
		err := fmt.Errorf("control: reload: the running configuration was applied over the control socket (config.apply of %q); re-reading %s would drop what was applied: send the next one with config.apply, or restart sluice to run the file again", b.applied, file)
		b.log.Error("reload refused; the running configuration stays", "file", file, "err", err)
		return nil, err
	}
	changes, err := reloadFile(b.g, file)
	if err != nil {
		b.log.Error("reload refused; the running configuration stays", "file", file, "err", err)
		return changes, err
	}
	// The gateway logs what it changed.
	if b.OnReload != nil {
		b.OnReload(b.g.Config())
	}
	return changes, nil
}

// Apply parses text as the configuration file name and applies it as
// Reload applies the file (applyConfig), with ticketKeys, if not nil, as
// the TLS session ticket key ring (gateway.Gateway.Apply). From the first
// Apply that changed the running configuration on, Reload is refused. The
// text is never logged: errors carry positions, fields and messages, not
// the values of secrets.
func (b *GatewayBackend) Apply(name, text string, ticketKeys [][32]byte) ([]string, error) {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	next, err := config.ParseGateway(name, []byte(text))
	var changes []string
	if err == nil {
		changes, err = applyConfig(b.g, next, ticketKeys)
		if b.g.Config() == next {
			// In force, in whole or in part.
			b.applied = name
		}
	}
	if err != nil {
		b.log.Error("configuration applied over the control socket refused; the running configuration stays", "name", name, "err", err)
		return changes, err
	}
	if b.OnReload != nil {
		b.OnReload(b.g.Config())
	}
	return changes, nil
}

func reloadFile(g *gateway.Gateway, file string) ([]string, error) {
	if file == "" {
		return nil, fmt.Errorf("control: reload: the running configuration did not come from a file")
	}
	next, err := config.LoadGateway(file)
	if err != nil {
		return nil, err
	}
	return applyConfig(g, next, nil)
}

// applyConfig is what reload and config.apply do with a configuration
// that parsed: check its engines and TLS files, then apply it.
func applyConfig(g *gateway.Gateway, next *config.Gateway, ticketKeys [][32]byte) ([]string, error) {
	if err := next.CheckEngines(cryptodev.CheckEngine); err != nil {
		return nil, err
	}
	if err := next.CheckTLSFiles(); err != nil {
		return nil, err
	}
	return g.Apply(next, ticketKeys)
}

var (
	_ Backend      = (*GatewayBackend)(nil)
	_ ApplyBackend = (*GatewayBackend)(nil)
)
