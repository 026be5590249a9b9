package gateway

// The gateway's TLS service: the [[tls]] and [[tls_origin]] sections of its
// configuration, run by package tls. The gateway maps the configuration to
// tls.Config, lends the service its crypto engines (the keys live there),
// reloads it with the rest of the configuration and reads its counters.
//
// A configuration with only TLS sections (config.Gateway.TLSOnly) makes a
// TLS-only gateway: Start opens no TUN device, no ESP sockets, no state
// directory and no data plane, so it runs without root; the SA and tunnel
// views are empty, its Stats have no workers or receivers, and a reload
// that would add tunnels needs a restart.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/sad"
	"github.com/sluicegw/sluice/tls"
)

// TLSInfo is one TLS listener's or origin's counters, as the control
// socket's stats reply carries them (JSON keys in tls.Stats).
type TLSInfo = tls.Stats

// tlsEngineName is the engine a TLS section uses: its own, else the
// [gateway] engine.
func tlsEngineName(cfg *config.Gateway, engine string) string {
	if engine == "" {
		return cfg.Engine
	}
	return engine
}

// TLSConfig maps the TLS sections of cfg to package tls's configuration.
// Engines are resolved: a section that names none gets cfg's.
func TLSConfig(cfg *config.Gateway) tls.Config {
	var tc tls.Config
	for i := range cfg.TLS {
		l := &cfg.TLS[i]
		lc := tls.ListenerConfig{
			Name: l.Name, Listen: l.Listen, DualStack: l.DualStack, Engine: tlsEngineName(cfg, l.Engine),
			MinVersion: l.MinVersion, MaxVersion: l.MaxVersion, ALPN: slices.Clone(l.ALPN),
			ClientAuth: l.ClientAuth, ClientCA: l.ClientCA,
			SessionTickets: l.SessionTickets, TicketRotation: l.TicketRotation,
			HandshakeTimeout: l.HandshakeTimeout, IdleTimeout: l.IdleTimeout, HeaderTimeout: l.HeaderTimeout,
			MaxConns: l.MaxConns, MaxConnsPerSource: l.MaxConnsPerSource, Backend: l.Backend, ProxyProtocol: l.ProxyProtocol, ServeDotfiles: l.ServeDotfiles,
		}
		for _, c := range l.Certs {
			lc.Certs = append(lc.Certs, tls.Cert{CertFile: c.Cert, KeyFile: c.Key})
		}
		tc.Listeners = append(tc.Listeners, lc)
	}
	for i := range cfg.TLSOrigins {
		o := &cfg.TLSOrigins[i]
		oc := tls.OriginConfig{
			Name: o.Name, Listen: o.Listen, DualStack: o.DualStack, Backend: o.Backend, ServerName: o.ServerName, CA: o.CA,
			Engine: tlsEngineName(cfg, o.Engine), MinVersion: o.MinVersion, MaxVersion: o.MaxVersion,
			ALPN:             slices.Clone(o.ALPN),
			HandshakeTimeout: o.HandshakeTimeout, IdleTimeout: o.IdleTimeout, MaxConns: o.MaxConns,
			MaxConnsPerSource: o.MaxConnsPerSource,
		}
		if o.Cert != nil {
			oc.Cert = &tls.Cert{CertFile: o.Cert.Cert, KeyFile: o.Cert.Key}
		}
		tc.Origins = append(tc.Origins, oc)
	}
	return tc
}

// tlsError places an error of the TLS service in cfg: one listener's or
// origin's (tls.EndpointError) becomes a config.Error at the line of the
// key it names ("FILE:LINE:COL: tls[1].cert[1].key: ..."), or of its
// table; others are only prefixed.
func tlsError(cfg *config.Gateway, err error) error {
	var ee *tls.EndpointError
	if !errors.As(err, &ee) {
		return fmt.Errorf("gateway: %s: %w", cfg.File, err)
	}
	table := ""
	if ee.Kind == "listener" {
		if i := slices.IndexFunc(cfg.TLS, func(l config.TLSListener) bool { return l.Name == ee.Name }); i >= 0 {
			table = fmt.Sprintf("tls[%d]", i+1)
		}
	} else if i := slices.IndexFunc(cfg.TLSOrigins, func(o config.TLSOrigin) bool { return o.Name == ee.Name }); i >= 0 {
		table = fmt.Sprintf("tls_origin[%d]", i+1)
	}
	if table == "" {
		return fmt.Errorf("gateway: %s: %w", cfg.File, err)
	}
	field := table
	if ee.Field != "" {
		field += "." + ee.Field
	}
	return &config.Error{Pos: cfg.FieldPos(field), Field: field, Msg: ee.Detail()}
}

// tlsState is the gateway's TLS service and the engines opened for it that
// the ESP data plane does not use.
type tlsState struct {
	mu sync.Mutex // guards svc and engines; svc is written under Gateway.mu too
	// svc is nil until a configuration has TLS sections.
	svc     *tls.Service
	engines map[string]cryptodev.Engine
	// ring is the session ticket key ring an Apply gave, issuing key
	// first; nil while none was given (each listener rotates its own).
	// Written under Gateway.mu.
	ring [][32]byte
}

// startTLSOnly starts a TLS-only gateway: the TLS service, its engines,
// and an empty SAD so that the SA and tunnel views answer (with nothing).
// No TUN device, socket, state directory or data plane.
func (g *Gateway) startTLSOnly(ctx context.Context, cfg *config.Gateway) error {
	g.store = sad.NewStore(func(_ uint64, sas []*sad.SA) {
		for _, s := range sas {
			s.End()
		}
	})
	if err := g.startTLS(cfg); err != nil {
		g.closeTLS()
		g.store.Close()
		return err
	}
	_, g.cancel = context.WithCancel(ctx)
	g.log.Info("gateway up (TLS only)", "listeners", len(cfg.TLS), "origins", len(cfg.TLSOrigins), "engines", cfg.TLSEngines())
	return nil
}

// tlsEngine is the service's tls.Options.Engine: the gateway's engine of
// that name, opened at Start for the data plane or for TLS, or opened now
// for a listener a reload adds. It may be called from the service's
// goroutines; Gateway.engines is only written before the service starts.
func (g *Gateway) tlsEngine(name string) (cryptodev.Engine, error) {
	if e := g.engines[name]; e != nil {
		return e, nil
	}
	g.tls.mu.Lock()
	defer g.tls.mu.Unlock()
	if e := g.tls.engines[name]; e != nil {
		return e, nil
	}
	e, err := cryptodev.Open(name)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.tls.engines == nil {
		g.tls.engines = map[string]cryptodev.Engine{}
	}
	g.tls.engines[name] = e
	g.log.Info("crypto engine", "name", e.Name(), "runs", cryptodev.Describe(e), "for", "tls")
	return e, nil
}

// startTLS opens the engines the TLS sections of cfg name and starts the
// service, if cfg has TLS sections. On error the engines it opened stay in
// g.tls.engines for closeTLS.
func (g *Gateway) startTLS(cfg *config.Gateway) error {
	if len(cfg.TLS) == 0 && len(cfg.TLSOrigins) == 0 {
		return nil
	}
	for _, name := range cfg.TLSEngines() {
		if _, err := g.tlsEngine(name); err != nil {
			return err
		}
	}
	svc, err := tls.Start(TLSConfig(cfg), tls.Options{Engine: g.tlsEngine, Log: g.Logger("tls"), TicketKeys: g.tls.ring})
	if err != nil {
		return tlsError(cfg, err)
	}
	g.tls.mu.Lock()
	g.tls.svc = svc
	g.tls.mu.Unlock()
	g.Logger("tls").Info("TLS service up", "listeners", len(cfg.TLS), "origins", len(cfg.TLSOrigins))
	return nil
}

// reloadTLS applies the TLS sections of next: the service reloads its
// certificates and keys and adds, removes and changes listeners (or starts,
// when the gateway had none). ring, if not nil, becomes the session ticket
// key ring first, so that listeners added now use it too. Nothing changes
// on error, the ring included. g.mu is held: the service cannot change
// under it.
func (g *Gateway) reloadTLS(next *config.Gateway, ring [][32]byte, note func(string, ...any)) (err error) {
	if ring != nil {
		was := g.tls.ring
		g.tls.ring = slices.Clone(ring)
		if svc := g.tls.svc; svc != nil {
			svc.SetTicketKeys(g.tls.ring)
		}
		defer func() {
			if err != nil {
				g.tls.ring = was
				if svc := g.tls.svc; svc != nil {
					svc.SetTicketKeys(was)
				}
			}
		}()
		if !slices.Equal(was, ring) {
			note("tls ticket keys set", "keys", len(ring))
		}
	}
	if g.tls.svc == nil {
		if err := g.startTLS(next); err != nil {
			return err
		}
		for _, l := range next.TLS {
			note("tls listener added", "name", l.Name, "listen", l.Listen)
		}
		for _, o := range next.TLSOrigins {
			note("tls origin added", "name", o.Name, "listen", o.Listen)
		}
		return nil
	}
	changes, err := g.tls.svc.Reload(TLSConfig(next))
	if err != nil {
		return tlsError(next, err)
	}
	for _, c := range changes {
		note(c)
	}
	return nil
}

// closeTLS stops the service, then closes the engines opened for it alone.
func (g *Gateway) closeTLS() error {
	var errs []error
	if svc := g.tlsService(); svc != nil {
		errs = append(errs, svc.Close())
	}
	g.tls.mu.Lock()
	defer g.tls.mu.Unlock()
	names := slices.Collect(maps.Keys(g.tls.engines))
	sort.Strings(names)
	for _, n := range names {
		errs = append(errs, g.tls.engines[n].Close())
	}
	g.tls.engines = nil
	return errors.Join(errs...)
}

// TLS reads the counters of every TLS listener and origin, in
// configuration order; nil without any.
func (g *Gateway) TLS() []TLSInfo {
	svc := g.tlsService()
	if svc == nil {
		return nil
	}
	return svc.Stats()
}

// tlsService returns the service, which a reload may start.
func (g *Gateway) tlsService() *tls.Service {
	g.tls.mu.Lock()
	defer g.tls.mu.Unlock()
	return g.tls.svc
}
