package tls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// Cert names one certificate chain and its private key, both PEM files.
// The key is loaded into the listener's crypto engine and the file's bytes
// are dropped; the TLS code only ever holds the engine's crypto.Signer.
type Cert struct {
	CertFile string // PEM: the leaf first, then intermediates
	KeyFile  string // PEM: PKCS #8, PKCS #1 (RSA) or SEC 1 (EC)
}

// Client certificate policies of a listener (mTLS).
const (
	ClientAuthNone     = "none"     // no client certificate asked for
	ClientAuthOptional = "optional" // asked for; verified against ClientCA when given
	ClientAuthRequire  = "require"  // required and verified against ClientCA
)

// ListenerConfig is one TLS termination listener: TLS from clients on
// Listen, the plaintext stream to Backend.
type ListenerConfig struct {
	Name string // unique among listeners and origins
	// Listen is "host:port". An IPv4 address, or an empty host (IPv4's
	// every address), binds IPv4 only; an IPv6 address binds IPv6 only,
	// and "[::]" IPv4 too only with DualStack.
	Listen    string
	DualStack bool
	// Certs are served by SNI: a ClientHello's server name picks the first
	// certificate whose leaf covers it (DNS SANs, wildcards included);
	// without a match, or without SNI, Certs[0].
	Certs []Cert
	// Engine holds the private keys ("soft", "sched", "openssl", ...); ""
	// means the registry's choice.
	Engine     string
	MinVersion uint16 // crypto/tls VersionTLS12 or VersionTLS13
	MaxVersion uint16
	ALPN       []string // offered protocols, in preference order; nil = none
	ClientAuth string   // ClientAuthNone (""), ClientAuthOptional, ClientAuthRequire
	ClientCA   string   // PEM bundle verifying client certificates
	// SessionTickets enables resumption by tickets; their keys are random,
	// rotated every TicketRotation (0 = DefaultTicketRotation), and the
	// previous keys still decrypt for two more periods.
	SessionTickets   bool
	TicketRotation   time.Duration
	HandshakeTimeout time.Duration // 0 = DefaultHandshakeTimeout
	IdleTimeout      time.Duration // 0 = DefaultIdleTimeout
	MaxConns         int           // 0 = DefaultMaxConns
	// MaxConnsPerSource bounds the connections open from one source (an
	// IPv4 address, or an IPv6 /64: one host commonly holds a whole /64);
	// more are refused and counted (Stats.RefusedPerSource). 0 =
	// DefaultMaxConnsPerSource(MaxConns).
	MaxConnsPerSource int
	// HeaderTimeout bounds, for a static: backend, the time from a
	// request's first byte to the end of its head (against slowloris);
	// 0 = DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// ServeDotfiles lets a static: backend serve names with a path
	// component starting with '.' (".git/config", ".htpasswd", ".env").
	// By default they are answered 404 and counted (Stats.DotfilesRefused),
	// except under "/.well-known/" (RFC 8615), which is served.
	ServeDotfiles bool
	// Backend is "tcp://HOST:PORT" (forward the plaintext stream) or
	// "static:DIR" (the built-in HTTP/1.1 file server).
	Backend string
	// ProxyProtocol sends a PROXY protocol v2 header to a tcp:// backend
	// before the stream, naming the client's address.
	ProxyProtocol bool
}

// OriginConfig is one TLS origination listener: plaintext TCP from clients
// on Listen, carried over TLS to Backend, whose certificate is verified.
type OriginConfig struct {
	Name      string
	Listen    string // "host:port", bound as ListenerConfig.Listen
	DualStack bool
	Backend   string // "tls://HOST:PORT"
	// ServerName is the name sent as SNI and verified in the backend's
	// certificate; "" = HOST of Backend.
	ServerName string
	CA         string // PEM bundle to verify the backend; "" = system roots
	// Cert is an optional client certificate for backends that ask for one
	// (mTLS); its key is held by Engine like a listener's.
	Cert             *Cert
	Engine           string
	MinVersion       uint16
	MaxVersion       uint16
	ALPN             []string
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration
	MaxConns         int
	// MaxConnsPerSource is ListenerConfig's.
	MaxConnsPerSource int
}

// Config is every TLS listener and origin of a gateway.
type Config struct {
	Listeners []ListenerConfig
	Origins   []OriginConfig
}

// Defaults.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultMaxConns         = 10000
	DefaultTicketRotation   = time.Hour
)

// DefaultMaxConnsPerSource is the per-source limit of a listener or
// origin that sets none: a tenth of maxConns, so that it takes ten sources
// to fill the listener, but at least 100 (clients behind one NAT or proxy
// share an address; a browser opens six connections a host), and at most
// maxConns.
func DefaultMaxConnsPerSource(maxConns int) int {
	return min(maxConns, max(maxConns/10, 100))
}

// EndpointError is what Start or Reload found wrong with one listener or
// origin of a Config. Field names the setting in the words of the
// gateway's configuration file, for the caller to point at its line:
// "listen", "backend", "engine", "client_ca", "cert[N].cert" and
// "cert[N].key" (N counts from 1) of a listener; "listen", "engine",
// "ca", "cert" and "key" of an origin; "" when no one setting is wrong.
type EndpointError struct {
	Kind  string // "listener" or "origin"
	Name  string
	Field string
	Err   error
}

// Error returns "tls: KIND "NAME": FIELD: DETAIL".
func (e *EndpointError) Error() string {
	msg := e.Detail()
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("tls: %s %q: %s", e.Kind, e.Name, msg)
}

// Detail is the error without the endpoint and field, and without a
// "tls: " prefix.
func (e *EndpointError) Detail() string {
	return strings.TrimPrefix(e.Err.Error(), "tls: ")
}

func (e *EndpointError) Unwrap() error { return e.Err }

// Options are what a Service takes from the gateway around it.
type Options struct {
	// Engine opens (or returns the already open) crypto engine of a name;
	// "" is the registry's choice. The Service does not close engines.
	// It is called from Start and Reload, once per name the Service has
	// not used before. nil means cryptodev.Open, and then the Service
	// closes the engines it opened on Close.
	Engine func(name string) (cryptodev.Engine, error)
	Log    *slog.Logger // nil = discard
	// TicketKeys, if not nil, are the session ticket keys of every
	// listener with session tickets, as Service.SetTicketKeys sets them,
	// from the first listener on.
	TicketKeys [][32]byte
}

// Stats are one listener's or origin's counters since it started.
type Stats struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`   // "terminate" or "originate"
	Listen string `json:"listen"` // the bound address

	Open     uint64 `json:"open"`     // connections open now
	Accepted uint64 `json:"accepted"` // connections accepted
	Refused  uint64 `json:"refused"`  // connections refused at MaxConns
	// RefusedPerSource counts connections refused because their source
	// had MaxConnsPerSource open (not in Refused).
	RefusedPerSource uint64 `json:"refused_per_source"`
	// Handshakes completed; Resumed of them by a session ticket.
	Handshakes uint64 `json:"handshakes"`
	Resumed    uint64 `json:"resumed"`
	// HandshakeFailures by reason: "timeout", "protocol" (garbage or
	// truncated hello, alert), "version", "no_cert", "client_cert",
	// "sign" (the engine refused or failed), "closed" (the peer went away
	// mid-handshake). Origins add "server_cert" (the backend's
	// certificate did not verify). Every reason of FailureReasons is
	// present, zero or not; the map is the caller's. Each failure is a
	// debug line with its reason.
	HandshakeFailures map[string]uint64 `json:"handshake_failures"`
	// BackendFailures counts connections whose backend could not be
	// reached: refused, not resolved, unreachable, timed out, or a PROXY
	// header not written. They are not handshake failures: a listener
	// dials its tcp:// backend after a completed handshake (counted in
	// Handshakes), an origin before its handshake. Each is a WARN line
	// naming the listener or origin and the backend's address (at most
	// one a second an endpoint).
	BackendFailures uint64 `json:"backend_failures"`
	BytesIn         uint64 `json:"bytes_in"`    // plaintext bytes from clients to backends
	BytesOut        uint64 `json:"bytes_out"`   // plaintext bytes from backends to clients
	IdleClosed      uint64 `json:"idle_closed"` // connections closed by the idle timeout
	// The static: backend: requests answered with a file, and connections
	// closed by HeaderTimeout in the middle of a request head (also in
	// IdleClosed).
	Requests       uint64 `json:"requests"`
	HeaderTimeouts uint64 `json:"header_timeouts"`
	// DotfilesRefused counts requests of the static: backend for a name
	// with a component starting with '.', answered 404
	// (ListenerConfig.ServeDotfiles).
	DotfilesRefused uint64 `json:"dotfiles_refused"`

	// The handshake signing queue of the listener's engine.
	SignQueueDepth uint64 `json:"sign_queue_depth"` // Sign requests waiting now
	SignOps        uint64 `json:"sign_ops"`         // signatures made
	SignBatches    uint64 `json:"sign_batches"`     // batches submitted; SignOps/SignBatches is the mean batch
	SignMaxBatch   uint64 `json:"sign_max_batch"`   // largest batch
}

// Service runs a gateway's TLS listeners and origins. Its methods are
// safe for concurrent use; Reload and Close are serialised.
type Service struct {
	opts Options
	log  *slog.Logger
	ctx  context.Context // cancelled by Close
	stop context.CancelFunc

	mu      sync.Mutex // serialises Reload and Close, guards the fields below
	closed  bool
	engines map[string]*engineRef
	statics map[string]*staticServer // by directory
	eps     []*endpoint              // in configuration order
	retired []*endpoint              // removed by Reload, connections may still be open

	// ring, when set, is the ticket key ring every listener uses in
	// place of its own rotation (SetTicketKeys).
	ring atomic.Pointer[[][32]byte]

	wg sync.WaitGroup // every goroutine of the Service
}

// Start opens every listener and origin of cfg, loading their keys into
// their engines. On error nothing is left open.
func Start(cfg Config, opts Options) (*Service, error) {
	s := &Service{opts: opts, log: opts.Log, engines: make(map[string]*engineRef), statics: make(map[string]*staticServer)}
	if opts.TicketKeys != nil {
		ring := slices.Clone(opts.TicketKeys)
		s.ring.Store(&ring)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if _, err := s.Reload(cfg); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Reload applies cfg: certificates, keys and CAs are loaded anew from their
// files (new handshakes use them, open connections keep going), listeners
// and origins added or removed, and changed settings applied to new
// connections. It returns one line per change. On error nothing changes.
//
// The keys a reload replaces are destroyed in their engine once the last
// handshake that may sign with them has ended.
func (s *Service) Reload(cfg Config) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("tls: service closed")
	}
	p, err := s.prepareLocked(cfg)
	if err != nil {
		p.abort()
		return nil, err
	}
	lines := s.commitLocked(p)
	for _, l := range lines {
		// The line names its listener or origin: the message stays one
		// string a log search can match.
		s.log.Info("tls: configuration applied", "change", strings.TrimPrefix(l, "tls: "))
	}
	return lines, nil
}

// SetTicketKeys makes keys the session ticket keys of every listener with
// session tickets, now and those a Reload adds: the first encrypts new
// tickets, all of them decrypt. A fleet shares one ring so that a client
// resumes on whichever gateway it reaches; the listeners' own rotation
// (TicketRotation) stops while a ring is set. nil goes back to each
// listener's own keys.
func (s *Service) SetTicketKeys(keys [][32]byte) {
	if keys == nil {
		s.ring.Store(nil)
	} else {
		ring := slices.Clone(keys)
		s.ring.Store(&ring)
	}
	// Reload holds s.mu while it adds endpoints: one added before this
	// is in eps; one added after publishes with the ring stored above.
	s.mu.Lock()
	eps := slices.Clone(s.eps)
	s.mu.Unlock()
	for _, e := range eps {
		e.setTicketKeys()
	}
}

// Stats returns the counters of every listener and origin, in configuration
// order. Listen is the address the socket is bound to (its port resolved
// when the configuration said 0).
func (s *Service) Stats() []Stats {
	s.mu.Lock()
	eps := slices.Clone(s.eps)
	s.mu.Unlock()
	out := make([]Stats, 0, len(eps))
	for _, e := range eps {
		st := Stats{Name: e.name, Kind: e.kind, Listen: e.ln.Addr().String()}
		e.ctr.fill(&st)
		q := e.state.Load().eng.q
		st.SignQueueDepth = uint64(max(0, q.depth.Load()))
		st.SignOps = q.ops.Load()
		st.SignBatches = q.batches.Load()
		st.SignMaxBatch = q.maxBatch.Load()
		out = append(out, st)
	}
	return out
}

// Close stops accepting, closes every open connection and waits for their
// goroutines. It is idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop()
	all := append(slices.Clone(s.eps), s.retired...)
	for _, e := range all {
		e.stopAccepting()
	}
	for _, e := range all {
		e.closeConns()
	}
	s.wg.Wait()
	// The signing lanes end before any key is destroyed: a lane may still
	// be signing for a handshake that gave up waiting.
	done := map[*engineRef]bool{}
	for _, r := range s.engines {
		if !done[r] {
			done[r] = true
			r.q.close()
		}
	}
	for _, e := range s.eps {
		e.state.Load().store.release()
	}
	s.eps, s.retired = nil, nil
	for _, ss := range s.statics {
		ss.root.Close()
	}
	for r := range done {
		if r.owned {
			r.eng.Close()
		}
	}
	return nil
}
