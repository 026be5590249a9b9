package eap

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
)

// Config configures a server session. It is read, not changed, and may
// be shared by sessions.
type Config struct {
	// Methods are the methods offered, in order of preference: the first
	// is proposed, a Nak may choose another of them.
	Methods []Type
	// Identity, if set, is the peer's EAP identity, and the session skips
	// EAP-Identity (swanctl's eap_id other than %any).
	Identity string
	// Password returns the password (UTF-8) of an EAP-MSCHAPv2 user, or
	// false if there is none. It is called on the session's goroutine.
	Password func(identity string) ([]byte, bool)
	// TLS is the EAP-TLS server's configuration: Certificates (ours) and
	// ClientCAs (what a peer's certificate must chain to). The session
	// clones it and requires and verifies a client certificate.
	TLS *tls.Config
	// FragmentSize is the largest TLS data in one EAP-TLS Request
	// (default 1024, as strongSwan's eap-tls).
	FragmentSize int
	// MaxRounds bounds the Responses one session accepts (default 50).
	MaxRounds int
	// Name is the authenticator name in an EAP-MSCHAPv2 Challenge
	// (default "sluice").
	Name string
	// Rand is the source of challenges (default crypto/rand).
	Rand io.Reader
	// Fingerprint is for the owner: text that changes when the
	// credentials behind the configuration do (the gateway's reload
	// compares it; Password cannot be compared). The package ignores it.
	Fingerprint string
}

const (
	defaultFragmentSize = 1024
	defaultMaxRounds    = 50
)

func (c *Config) rand() io.Reader {
	if c.Rand != nil {
		return c.Rand
	}
	return rand.Reader
}

func (c *Config) name() string {
	if c.Name != "" {
		return c.Name
	}
	return "sluice"
}

func (c *Config) fragmentSize() int {
	if c.FragmentSize > 0 {
		return c.FragmentSize
	}
	return defaultFragmentSize
}

func (c *Config) maxRounds() int {
	if c.MaxRounds > 0 {
		return c.MaxRounds
	}
	return defaultMaxRounds
}

func readFull(r io.Reader, b []byte) (int, error) { return io.ReadFull(r, b) }

// status is a method's answer to one Response.
type status int

const (
	more      status = iota // send the returned type data as the next Request
	succeeded               // send Success
	failed                  // send Failure
)

// method is the server side of one EAP method. start returns the type
// data of its first Request; process takes the type data of a Response
// and returns the next Request's type data (with more), or the end.
type method interface {
	start() ([]byte, error)
	process(data []byte) ([]byte, status, error)
	key() []byte
	identity() string
	close()
}

// State is where a session stands.
type State int

// Session states.
const (
	Running State = iota
	Succeeded
	Failed
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Server is the server side of one EAP conversation. It is not safe for
// concurrent use; its owner (an IKE SA) serialises the calls. Process may
// take milliseconds (EAP-TLS signs and verifies): call it off any lock
// that other work waits on.
type Server struct {
	cfg      *Config
	state    State
	id       uint8 // identifier of the last Request
	typ      Type  // type of the last Request
	started  bool
	rounds   int
	identity string
	m        method
	tried    []Type // methods proposed so far
	err      error
}

// Check reports whether c can run sessions: it offers a method, only
// methods this package implements, and has what each needs.
func (c *Config) Check() error {
	if len(c.Methods) == 0 {
		return errors.New("eap: no method configured")
	}
	for _, t := range c.Methods {
		switch t {
		case TypeMSCHAPv2:
			if c.Password == nil {
				return errors.New("eap: EAP-MSCHAPv2 needs Config.Password")
			}
		case TypeTLS:
			if c.TLS == nil || len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
				return errors.New("eap: EAP-TLS needs Config.TLS with a certificate")
			}
		default:
			return fmt.Errorf("eap: method %s not supported", t)
		}
	}
	return nil
}

// NewServer returns a session for cfg. It fails if cfg does not Check.
func NewServer(cfg *Config) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg}
	var idb [1]byte
	if _, err := readFull(cfg.rand(), idb[:]); err != nil {
		return nil, fmt.Errorf("eap: identifier: %w", err)
	}
	s.id = idb[0]
	return s, nil
}

// Start returns the first Request: EAP-Identity, or, when Config.Identity
// is set, the first method's first Request. It may be called once.
func (s *Server) Start() ([]byte, error) {
	if s.started {
		return nil, errors.New("eap: Start called twice")
	}
	s.started = true
	if s.cfg.Identity == "" {
		return s.request(TypeIdentity, nil), nil
	}
	s.identity = s.cfg.Identity
	return s.startMethod(s.cfg.Methods[0])
}

// request builds the next Request with a fresh identifier.
func (s *Server) request(t Type, data []byte) []byte {
	s.id++
	s.typ = t
	return Packet{Code: CodeRequest, Identifier: s.id, Type: t, Data: data}.Marshal()
}

// fail ends the session: it returns the Failure packet and err.
func (s *Server) fail(err error) ([]byte, error) {
	s.state = Failed
	s.err = err
	if s.m != nil {
		s.m.close()
	}
	s.id++
	return Packet{Code: CodeFailure, Identifier: s.id}.Marshal(), err
}

func (s *Server) startMethod(t Type) ([]byte, error) {
	if s.m != nil {
		s.m.close()
		s.m = nil
	}
	s.tried = append(s.tried, t)
	var m method
	var err error
	switch t {
	case TypeMSCHAPv2:
		m, err = newMSCHAPv2(s.cfg)
	case TypeTLS:
		m, err = newTLSServer(s.cfg)
	default:
		err = fmt.Errorf("eap: method %s not supported", t)
	}
	if err != nil {
		return s.fail(err)
	}
	s.m = m
	if t, ok := m.(*tlsServer); ok {
		// A session dropped mid-handshake without Close (its IKE SA
		// timed out) still ends the handshake's goroutine.
		runtime.AddCleanup(s, func(e *tlsEngine) { e.abort() }, t.eng)
	}
	data, err := m.start()
	if err != nil {
		return s.fail(err)
	}
	return s.request(t, data), nil
}

// Process takes the peer's Response to the last Request and returns the
// packet to send next: a Request while the conversation goes on, then
// Success or Failure (see State). A non-nil error says why the session
// failed; the Failure packet is returned with it, to be sent. resp is not
// retained.
func (s *Server) Process(resp []byte) ([]byte, error) {
	if !s.started || s.state != Running {
		return nil, fmt.Errorf("eap: Process in state %s", s.state)
	}
	s.rounds++
	if s.rounds > s.cfg.maxRounds() {
		return s.fail(fmt.Errorf("eap: more than %d rounds", s.cfg.maxRounds()))
	}
	p, err := Parse(resp)
	if err != nil {
		return s.fail(err)
	}
	if p.Code != CodeResponse {
		return s.fail(fmt.Errorf("eap: peer sent %s, want Response", p.Code))
	}
	if p.Identifier != s.id {
		return s.fail(fmt.Errorf("eap: Response identifier %d, want %d", p.Identifier, s.id))
	}
	switch {
	case p.Type == TypeNak && s.typ != TypeIdentity && s.typ != TypeNak:
		return s.nak(p.Data)
	case p.Type != s.typ:
		return s.fail(fmt.Errorf("eap: Response of type %s to a %s Request", p.Type, s.typ))
	case p.Type == TypeIdentity:
		if len(p.Data) > 256 {
			return s.fail(fmt.Errorf("eap: identity of %d octets, longer than 256", len(p.Data)))
		}
		s.identity = string(p.Data)
		return s.startMethod(s.cfg.Methods[0])
	}
	data, st, err := s.m.process(p.Data)
	switch st {
	case more:
		if err != nil {
			return s.fail(err)
		}
		return s.request(s.typ, data), nil
	case succeeded:
		if err != nil {
			return s.fail(err)
		}
		s.state = Succeeded
		s.id++
		return Packet{Code: CodeSuccess, Identifier: s.id}.Marshal(), nil
	default:
		if err == nil {
			err = errors.New("eap: method failed")
		}
		return s.fail(err)
	}
}

// nak answers a Legacy Nak (RFC 3748 section 5.3.1): the peer lists the
// types it would accept; the first configured method among them that was
// not tried yet starts, or the session fails.
func (s *Server) nak(want []byte) ([]byte, error) {
	for _, t := range s.cfg.Methods {
		if slices.Contains(want, byte(t)) && !slices.Contains(s.tried, t) {
			return s.startMethod(t)
		}
	}
	return s.fail(fmt.Errorf("eap: peer refused %s and wants %v, none configured", s.typ, want))
}

// State reports whether the session runs, succeeded or failed.
func (s *Server) State() State { return s.state }

// Err is the reason the session failed, or nil.
func (s *Server) Err() error { return s.err }

// MSK is the Master Session Key after Success (64 octets for both
// methods here), or nil. The slice is the session's; do not modify it.
func (s *Server) MSK() []byte {
	if s.state != Succeeded || s.m == nil {
		return nil
	}
	return s.m.key()
}

// Method is the method that ran (or runs), or 0 before one started.
func (s *Server) Method() Type {
	if len(s.tried) == 0 {
		return 0
	}
	return s.tried[len(s.tried)-1]
}

// Identity is the identity the method authenticates: the EAP-MSCHAPv2
// user name (the one tried while the session runs or after Failure,
// proven once it Succeeded). It is "" for EAP-TLS, whose proof is the
// certificate (PeerCertificates): the owner matches it against the
// identity it requires, as nothing in the method binds the two. It is
// never the configured identity or the EAP-Identity answer (Claimed),
// which nothing proves.
func (s *Server) Identity() string {
	if s.m != nil {
		return s.m.identity()
	}
	return ""
}

// Claimed is the identity the peer is to authenticate as: the configured
// one (Config.Identity), else its answer to EAP-Identity, or "" before
// it answered. Nothing proves it: EAP-MSCHAPv2 binds its user to a
// configured identity, and for EAP-TLS the owner must match the
// certificate.
func (s *Server) Claimed() string { return s.identity }

// PeerCertificates is the certificate chain the peer presented in
// EAP-TLS, leaf first, or nil: after a refusal too (the certificate
// that was tried), so VerifiedChains, not this, says whether it
// verified.
func (s *Server) PeerCertificates() []*x509.Certificate {
	if t, ok := s.m.(*tlsServer); ok {
		return t.peerCertificates()
	}
	return nil
}

// VerifiedChains is the peer's certificate chains after a completed
// EAP-TLS handshake, as verified against the configured CAs, each
// ending in a CA, or nil (for revocation checks by the caller).
func (s *Server) VerifiedChains() [][]*x509.Certificate {
	if t, ok := s.m.(*tlsServer); ok {
		return t.verifiedChains()
	}
	return nil
}

// Close releases the method (it ends EAP-TLS's handshake goroutine). It
// may be called more than once, in any state.
func (s *Server) Close() {
	if s.m != nil {
		s.m.close()
	}
}
