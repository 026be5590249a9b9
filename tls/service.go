package tls

import (
	"context"
	"crypto/rand"
	gotls "crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// engineRef is an engine the Service uses and its handshake signing queue.
type engineRef struct {
	eng   cryptodev.Engine
	q     *signQueue
	owned bool // opened by the Service (Options.Engine was nil): closed by Close
}

// epState is everything a new connection of an endpoint uses, swapped as
// one by Reload. It is immutable once published, except for the ticket
// keys of tls (set under endpoint.tickMu) and the store's reference count.
type epState struct {
	lc     *ListenerConfig // a listener's, or nil
	oc     *OriginConfig   // an origin's, or nil
	eng    *engineRef
	store  *certStore // a listener's certificates, an origin's client certificate (or nil)
	tls    *gotls.Config
	caSum  []byte
	static *staticServer // a static: backend
	tcp    string        // a tcp:// backend's address
}

func (st *epState) engineName() string { return st.eng.eng.Name() }

// endpoint is one listener or origin: its socket, its accept loop, its
// open connections and its counters. The accept loop and the connection
// goroutines read state; Reload replaces it.
type endpoint struct {
	svc    *Service
	kind   string // "terminate" or "originate"
	name   string
	listen string
	dual   bool // listen on [::] binds IPv4 too
	ln     net.Listener
	ctr    counters

	state  atomic.Pointer[epState]
	tickMu sync.Mutex // serialises ticket keys and state swaps
	keys   [][32]byte // the session ticket keys, newest first
	kick   chan struct{}
	quit   chan struct{} // closed when the endpoint stops accepting
	stop   sync.Once

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections (client side)

	srcMu   sync.Mutex
	sources map[netip.Addr]int // open connections by source (sourceOf)

	warnMu      sync.Mutex // backendFailed's rate limit
	warnLast    time.Time
	warnSkipped int
}

// acquire returns the current state with a reference on its certificates,
// which the caller releases when its handshake is over.
func (e *endpoint) acquire() *epState {
	for {
		st := e.state.Load()
		if st.store.tryAcquire() {
			return st
		}
		// Retired between the load and the acquire: Reload has already
		// published the next state.
	}
}

// newEndpoint opens the endpoint's socket; start runs it.
func newEndpoint(s *Service, kind, name, listen string, dual bool) (*endpoint, error) {
	ln, err := listenTCP(listen, dual)
	if err != nil {
		return nil, &EndpointError{Kind: kindWord(kind), Name: name, Field: "listen", Err: err}
	}
	return &endpoint{svc: s, kind: kind, name: name, listen: listen, dual: dual, ln: ln,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), conns: make(map[net.Conn]struct{}),
		sources: make(map[netip.Addr]int)}, nil
}

// listenTCP opens a listening socket on one address family, as nginx
// does: an IPv4 address (or an empty host, IPv4's every address) binds
// IPv4 only, an IPv6 address IPv6 only (IPV6_V6ONLY); "[::]" binds both
// families only when dual is set. Go's "tcp" would bind "0.0.0.0" and ""
// to both, exposing a service on IPv6 that the operator named by an
// IPv4 address. A host name is resolved by the net package.
func listenTCP(listen string, dual bool) (net.Listener, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	network := "tcp"
	if host == "" {
		network, host = "tcp4", "0.0.0.0"
	} else if a, err := netip.ParseAddr(host); err == nil {
		switch {
		case a.Is4() || a.Is4In6():
			network, host = "tcp4", a.Unmap().String()
		case dual && a.IsUnspecified():
			network = "tcp"
		default:
			network = "tcp6"
		}
	}
	// No TCP keepalives (Go turns them on for accepted connections by
	// default, four setsockopt calls each): as with nginx, idle and
	// handshake timeouts end connections whose peer has gone.
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), network, net.JoinHostPort(host, port))
}

// start publishes st and starts the accept loop and, for a listener with
// session tickets, the ticket key rotation.
func (e *endpoint) start(st *epState) {
	e.publish(st)
	e.svc.wg.Add(1)
	go e.acceptLoop()
	if e.kind == "terminate" {
		e.svc.wg.Add(1)
		go e.rotateTickets()
	}
}

// publish makes st the state for new connections, with the current ticket
// keys, and returns the state it replaced.
func (e *endpoint) publish(st *epState) *epState {
	e.tickMu.Lock()
	defer e.tickMu.Unlock()
	if st.lc != nil && st.lc.SessionTickets {
		st.tls.SetSessionTicketKeys(e.ticketKeysLocked())
	}
	return e.state.Swap(st)
}

// ticketKeysLocked returns the session ticket keys the endpoint uses: the
// Service's ring if one is set, else its own (made on first use).
// e.tickMu is held.
func (e *endpoint) ticketKeysLocked() [][32]byte {
	if ring := e.svc.ring.Load(); ring != nil {
		return *ring
	}
	if e.keys == nil {
		e.keys = [][32]byte{newTicketKey()}
	}
	return e.keys
}

// setTicketKeys gives the current state the keys ticketKeysLocked
// returns, after the Service's ring changed.
func (e *endpoint) setTicketKeys() {
	e.tickMu.Lock()
	defer e.tickMu.Unlock()
	if st := e.state.Load(); st != nil && st.lc != nil && st.lc.SessionTickets {
		st.tls.SetSessionTicketKeys(e.ticketKeysLocked())
	}
}

func newTicketKey() (k [32]byte) {
	rand.Read(k[:])
	return k
}

// rotateTickets makes a new session ticket key every TicketRotation; the
// two previous keys still decrypt tickets, so a ticket lives between two
// and three periods. While the Service has a ring (SetTicketKeys) the
// ring's owner rotates it and the endpoint makes no key.
func (e *endpoint) rotateTickets() {
	defer e.svc.wg.Done()
	period := func() time.Duration { return e.state.Load().lc.TicketRotation }
	cur := period()
	t := time.NewTimer(cur)
	defer t.Stop()
	for {
		select {
		case <-e.quit:
			return
		case <-e.kick:
			if p := period(); p != cur {
				cur = p
				t.Reset(cur)
			}
			continue
		case <-t.C:
		}
		e.tickMu.Lock()
		if e.svc.ring.Load() == nil {
			keys := append([][32]byte{newTicketKey()}, e.keys...)
			e.keys = keys[:min(len(keys), 3)]
			if st := e.state.Load(); st.lc.SessionTickets {
				st.tls.SetSessionTicketKeys(e.keys)
			}
		}
		e.tickMu.Unlock()
		cur = period()
		t.Reset(cur)
	}
}

// stopAccepting closes the socket; open connections go on.
func (e *endpoint) stopAccepting() {
	e.stop.Do(func() {
		close(e.quit)
		e.ln.Close()
	})
}

// closeConns closes every open connection.
func (e *endpoint) closeConns() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.conns {
		c.Close()
	}
}

// limits returns the endpoint's connection limits: in all, and per
// source.
func (e *endpoint) limits() (total, perSource int) {
	if st := e.state.Load(); st.lc != nil {
		return st.lc.MaxConns, st.lc.MaxConnsPerSource
	} else {
		return st.oc.MaxConns, st.oc.MaxConnsPerSource
	}
}

// sourceOf is what a connection's client counts against its per-source
// limit: its IPv4 address, or its IPv6 address's /64 (a host commonly
// has a whole /64 to pick addresses from).
func sourceOf(c net.Conn) netip.Addr {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	a := ta.AddrPort().Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a
}

// takeSource counts a connection from src, unless src has limit open.
func (e *endpoint) takeSource(src netip.Addr, limit int) bool {
	e.srcMu.Lock()
	defer e.srcMu.Unlock()
	if e.sources[src] >= limit {
		return false
	}
	e.sources[src]++
	return true
}

// dropSource uncounts a connection from src.
func (e *endpoint) dropSource(src netip.Addr) {
	e.srcMu.Lock()
	defer e.srcMu.Unlock()
	if n := e.sources[src] - 1; n > 0 {
		e.sources[src] = n
	} else {
		delete(e.sources, src)
	}
}

// refuse closes a connection at once, with a reset rather than a FIN: a
// refused client learns it without a TIME_WAIT on our side.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (e *endpoint) acceptLoop() {
	defer e.svc.wg.Done()
	var backoff time.Duration
	for {
		c, err := e.ln.Accept()
		if err != nil {
			select {
			case <-e.quit:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: wait a little, as net/http does, but
			// wake at once on quit.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-e.quit:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		total, perSource := e.limits()
		if e.ctr.open.Load() >= uint64(total) {
			refuse(c)
			e.ctr.refused.Add(1)
			continue
		}
		src := sourceOf(c)
		if !e.takeSource(src, perSource) {
			refuse(c)
			e.ctr.refusedSource.Add(1)
			continue
		}
		e.ctr.open.Add(1)
		e.ctr.accepted.Add(1)
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		e.svc.wg.Add(1)
		go e.serve(c, src)
	}
}

func (e *endpoint) serve(c net.Conn, src netip.Addr) {
	defer func() {
		c.Close()
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
		e.dropSource(src)
		e.ctr.open.Add(^uint64(0))
		e.svc.wg.Done()
	}()
	if e.kind == "terminate" {
		e.terminate(c)
	} else {
		e.originate(c)
	}
}

// terminate runs one client connection of a listener: the TLS handshake,
// then the backend.
func (e *endpoint) terminate(raw net.Conn) {
	st := e.acquire()
	// The connection's deadline bounds the handshake's I/O, and the
	// context, which is never cancelled, carries the bounds of a
	// signature's wait: a resumption signs nothing and so sets up no
	// timer and no cancellation (see handshakeCtx).
	hctx := &handshakeCtx{lim: handshakeLimits{deadline: time.Now().Add(st.lc.HandshakeTimeout), svc: e.svc.ctx}}
	raw.SetDeadline(hctx.lim.deadline)
	tc := gotls.Server(raw, st.tls)
	err := tc.HandshakeContext(hctx)
	st.store.release()
	if err == nil {
		err = raw.SetDeadline(time.Time{})
	}
	if err != nil {
		reason := classify(err, nil)
		if !time.Now().Before(hctx.lim.deadline) {
			// crypto/tls flattens a signer's error into text: a
			// signature that outlived the handshake is known by the
			// clock.
			reason = failTimeout
		}
		e.handshakeFailed(raw.RemoteAddr(), reason, err)
		return
	}
	e.ctr.handshakes.Add(1)
	if tc.ConnectionState().DidResume {
		e.ctr.resumed.Add(1)
	}
	if st.static != nil {
		st.static.serveConn(tc, st.lc.IdleTimeout, st.lc.HeaderTimeout, st.lc.ServeDotfiles, &e.ctr)
		return
	}
	d := net.Dialer{Timeout: st.lc.HandshakeTimeout}
	bc, err := d.DialContext(e.svc.ctx, "tcp", st.tcp)
	if err != nil {
		e.backendFailed(raw.RemoteAddr(), st.tcp, err)
		return
	}
	defer bc.Close()
	if !e.track(bc) {
		return
	}
	defer e.untrack(bc)
	if st.lc.ProxyProtocol {
		var buf [proxyV2MaxLen]byte
		hdr, err := AppendProxyV2(buf[:0], raw.RemoteAddr(), raw.LocalAddr())
		if err == nil {
			bc.SetWriteDeadline(time.Now().Add(st.lc.HandshakeTimeout))
			_, err = bc.Write(hdr)
			bc.SetWriteDeadline(time.Time{})
		}
		if err != nil {
			e.backendFailed(raw.RemoteAddr(), st.tcp, fmt.Errorf("PROXY header: %w", err))
			return
		}
	}
	splice(tc, bc, st.lc.IdleTimeout, &e.ctr)
}

// track adds a backend connection to the ones Close closes; false if the
// Service is closing.
func (e *endpoint) track(c net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.svc.ctx.Err() != nil {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *endpoint) untrack(c net.Conn) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// originate runs one plaintext client connection of an origin: a TLS
// connection to the backend, then the stream both ways.
func (e *endpoint) originate(raw net.Conn) {
	st := e.acquire()
	oc := st.oc
	ctx, cancel := context.WithTimeout(e.svc.ctx, oc.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	bc, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(oc.Backend, "tls://"))
	if err != nil {
		st.store.release()
		e.backendFailed(raw.RemoteAddr(), strings.TrimPrefix(oc.Backend, "tls://"), err)
		return
	}
	defer bc.Close()
	if !e.track(bc) {
		st.store.release()
		return
	}
	defer e.untrack(bc)
	tc := gotls.Client(bc, st.tls)
	err = tc.HandshakeContext(ctx)
	st.store.release()
	if err != nil {
		reason := classify(err, ctx)
		var verr *gotls.CertificateVerificationError
		if errors.As(err, &verr) {
			reason = failServerCert
		}
		e.handshakeFailed(bc.RemoteAddr(), reason, err)
		return
	}
	cancel()
	e.ctr.handshakes.Add(1)
	if tc.ConnectionState().DidResume {
		e.ctr.resumed.Add(1)
	}
	splice(raw, tc, oc.IdleTimeout, &e.ctr)
}

// buildListenerState loads a listener's certificates, keys and CA and
// makes its crypto/tls configuration.
func (s *Service) buildListenerState(lc ListenerConfig) (*epState, error) {
	ref, err := s.engine(lc.Engine)
	if err != nil {
		return nil, &EndpointError{Kind: "listener", Name: lc.Name, Field: "engine", Err: err}
	}
	st := &epState{lc: &lc, eng: ref}
	var certs []*loadedCert
	fail := func(field string, err error) (*epState, error) {
		for _, c := range certs {
			c.key.key.Destroy()
		}
		return nil, &EndpointError{Kind: "listener", Name: lc.Name, Field: field, Err: err}
	}
	for i, c := range lc.Certs {
		lcrt, which, err := loadCert(c, ref.eng, ref.q, s.log)
		if err != nil {
			return fail(fmt.Sprintf("cert[%d].%s", i+1, which), err)
		}
		certs = append(certs, lcrt)
	}
	st.store = newCertStore(certs)
	conf := &gotls.Config{
		MinVersion:             lc.MinVersion,
		MaxVersion:             lc.MaxVersion,
		NextProtos:             lc.ALPN,
		SessionTicketsDisabled: !lc.SessionTickets,
	}
	store := st.store
	conf.GetCertificate = func(hello *gotls.ClientHelloInfo) (*gotls.Certificate, error) {
		return store.pick(hello.ServerName).certificate(hello.Context(), store), nil
	}
	switch lc.ClientAuth {
	case ClientAuthOptional:
		conf.ClientAuth = gotls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		conf.ClientAuth = gotls.RequireAndVerifyClientCert
	}
	if lc.ClientCA != "" {
		pool, sum, err := loadCAs(lc.ClientCA)
		if err != nil {
			return fail("client_ca", err)
		}
		conf.ClientCAs, st.caSum = pool, sum
	}
	st.tls = conf
	switch {
	case strings.HasPrefix(lc.Backend, "static:"):
		ss, err := s.staticFor(strings.TrimPrefix(lc.Backend, "static:"))
		if err != nil {
			return fail("backend", err)
		}
		st.static = ss
	default:
		st.tcp = strings.TrimPrefix(lc.Backend, "tcp://")
	}
	return st, nil
}

// buildOriginState loads an origin's CA and client certificate.
func (s *Service) buildOriginState(oc OriginConfig) (*epState, error) {
	fail := func(field string, err error) (*epState, error) {
		return nil, &EndpointError{Kind: "origin", Name: oc.Name, Field: field, Err: err}
	}
	ref, err := s.engine(oc.Engine)
	if err != nil {
		return fail("engine", err)
	}
	st := &epState{oc: &oc, eng: ref}
	conf := &gotls.Config{
		MinVersion: oc.MinVersion,
		MaxVersion: oc.MaxVersion,
		NextProtos: oc.ALPN,
		ServerName: oc.ServerName,
		// One session cache per state: resumption to the backend.
		ClientSessionCache: gotls.NewLRUClientSessionCache(256),
	}
	if oc.CA != "" {
		pool, sum, err := loadCAs(oc.CA)
		if err != nil {
			return fail("ca", err)
		}
		conf.RootCAs, st.caSum = pool, sum
	} else {
		pool, err := x509.SystemCertPool()
		if err != nil {
			return fail("ca", fmt.Errorf("system roots: %w", err))
		}
		conf.RootCAs = pool
	}
	if oc.Cert != nil {
		c, which, err := loadCert(*oc.Cert, ref.eng, ref.q, s.log)
		if err != nil {
			return fail(which, err)
		}
		store := newCertStore([]*loadedCert{c})
		st.store = store
		conf.GetClientCertificate = func(cri *gotls.CertificateRequestInfo) (*gotls.Certificate, error) {
			return c.certificate(cri.Context(), store), nil
		}
	}
	st.tls = conf
	return st, nil
}

// engine returns the engine of a name and its signing queue, opening both
// on first use. Callers hold s.mu.
func (s *Service) engine(name string) (*engineRef, error) {
	if r, ok := s.engines[name]; ok {
		return r, nil
	}
	var (
		eng   cryptodev.Engine
		err   error
		owned bool
	)
	if s.opts.Engine != nil {
		eng, err = s.opts.Engine(name)
	} else {
		eng, err = cryptodev.Open(name)
		owned = true
	}
	if err != nil {
		return nil, fmt.Errorf("tls: engine %q: %w", name, err)
	}
	if _, ok := eng.(cryptodev.AsymEngine); !ok {
		if owned {
			eng.Close()
		}
		return nil, fmt.Errorf("tls: engine %q does not hold private keys", eng.Name())
	}
	// Another name may have opened the same engine ("" and its name).
	for _, r := range s.engines {
		if r.eng == eng {
			s.engines[name] = r
			return r, nil
		}
	}
	q, err := newSignQueue(eng)
	if err != nil {
		if owned {
			eng.Close()
		}
		return nil, err
	}
	r := &engineRef{eng: eng, q: q, owned: owned}
	s.engines[name] = r
	return r, nil
}

// staticFor returns the file server of a directory, shared by the
// listeners that serve it and kept until Close. Callers hold s.mu.
func (s *Service) staticFor(dir string) (*staticServer, error) {
	if ss := s.statics[dir]; ss != nil {
		return ss, nil
	}
	ss, err := newStaticServer(dir)
	if err != nil {
		return nil, err
	}
	s.statics[dir] = ss
	return ss, nil
}
