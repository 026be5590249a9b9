package eap

// EAP-TLS as a server (RFC 5216; RFC 9190 for TLS 1.3). crypto/tls runs
// the handshake in a goroutine over an in-memory connection; each EAP
// round hands it the peer's TLS data and collects what it writes until it
// waits for input again:
//
//	1. Request, Start flag                  -> peer: ClientHello
//	2. ClientHello fed to crypto/tls        -> ServerHello..Done, fragmented
//	   into Requests, each acknowledged by an empty Response
//	3. peer's flight (fragments acknowledged by empty Requests) fed
//	   -> handshake done; ChangeCipherSpec and Finished (TLS 1.2) or the
//	   commitment message, one octet 0x00 (TLS 1.3, RFC 9190 section 2.5)
//	4. the peer's empty Response            -> EAP-Success, MSK ready
//
// MSK (RFC 5216 section 2.3): TLS 1.2's PRF over the master secret with
// the label "client EAP encryption" and the client and server randoms,
// first 64 of 128 octets. crypto/tls exports keying material in TLS 1.2
// only with the extended master secret (RFC 7627), which strongSwan 5.9.8
// does not send, so the master secret comes from the key log and the PRF
// is computed here. TLS 1.3 (RFC 9190 section 2.3): the exporter with
// the label "EXPORTER_EAP_TLS_Key_Material" and context 0x0D.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"time"
)

// EAP-TLS flags (RFC 5216 section 3.1).
const (
	tlsFlagLength = 0x80
	tlsFlagMore   = 0x40
	tlsFlagStart  = 0x20
)

// maxTLSMessage bounds a reassembled TLS message from the peer (RFC 5216
// section 2.1.5 leaves the limit to the implementation; strongSwan's is
// 72 KiB, a chain of a few certificates fits well below 64 KiB).
const maxTLSMessage = 64 << 10

type tlsServer struct {
	cfg  *Config
	eng  *tlsEngine
	frag int

	in      []byte // reassembly of the peer's fragments
	inTotal int    // the L field of the first fragment, or -1

	out    []byte // our TLS data being sent
	outOff int

	serverRandom []byte
	keyLog       bytes.Buffer
	msk          []byte
	certs        []*x509.Certificate
	chains       [][]*x509.Certificate // as crypto/tls verified them against the CAs
	finished     bool                  // handshake done, our last flight queued
}

func newTLSServer(cfg *Config) (*tlsServer, error) {
	if cfg.TLS == nil {
		return nil, errors.New("eap: EAP-TLS needs Config.TLS")
	}
	t := &tlsServer{cfg: cfg, frag: cfg.fragmentSize(), inTotal: -1}
	c := cfg.TLS.Clone()
	// The chain is verified here rather than by crypto/tls
	// (RequireAndVerifyClientCert does the same checks) so that the
	// certificate a refused peer presented is known: its owner logs
	// the identity that was tried.
	c.ClientAuth = tls.RequireAnyClientCert
	c.VerifyPeerCertificate = t.verifyPeer
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	c.SessionTicketsDisabled = true
	c.KeyLogWriter = &t.keyLog
	if c.Rand == nil {
		c.Rand = cfg.Rand
	}
	t.eng = newTLSEngine(func(conn net.Conn) *tls.Conn { return tls.Server(conn, c) }, commit)
	return t, nil
}

// commit sends the commitment message of RFC 9190 section 2.5 after a
// TLS 1.3 handshake: no more handshake messages follow.
func commit(c *tls.Conn) error {
	if c.ConnectionState().Version != tls.VersionTLS13 {
		return nil
	}
	_, err := c.Write([]byte{0})
	return err
}

func (t *tlsServer) start() ([]byte, error) { return []byte{tlsFlagStart}, nil }

func (t *tlsServer) process(data []byte) ([]byte, status, error) {
	if len(data) < 1 {
		return nil, failed, errors.New("eap: EAP-TLS Response without flags")
	}
	flags, body := data[0], data[1:]
	if flags&tlsFlagLength != 0 {
		if len(body) < 4 {
			return nil, failed, errors.New("eap: EAP-TLS Response with L flag and no length")
		}
		n := int(binary.BigEndian.Uint32(body))
		body = body[4:]
		switch {
		case n > maxTLSMessage:
			return nil, failed, fmt.Errorf("eap: EAP-TLS message of %d octets, more than %d", n, maxTLSMessage)
		case t.inTotal >= 0 && n != t.inTotal:
			return nil, failed, fmt.Errorf("eap: EAP-TLS length changed from %d to %d", t.inTotal, n)
		case len(t.in) == 0:
			t.inTotal = n
		}
	}
	if t.outOff < len(t.out) {
		// Sending a fragmented flight: the peer acknowledges each part.
		if len(body) != 0 || flags != 0 {
			return nil, failed, errors.New("eap: EAP-TLS Response with data while our fragments are pending")
		}
		return t.nextFragment(), more, nil
	}
	if len(body) == 0 && flags&tlsFlagMore == 0 && len(t.in) == 0 {
		if t.finished {
			return nil, succeeded, nil
		}
		return nil, failed, errors.New("eap: EAP-TLS empty Response while the handshake waits for data")
	}
	if len(t.in)+len(body) > maxTLSMessage {
		return nil, failed, fmt.Errorf("eap: EAP-TLS message longer than %d octets", maxTLSMessage)
	}
	t.in = append(t.in, body...)
	if flags&tlsFlagMore != 0 {
		return []byte{0}, more, nil // acknowledge, ask for the next fragment
	}
	msg := t.in
	if t.inTotal >= 0 && len(msg) != t.inTotal {
		return nil, failed, fmt.Errorf("eap: EAP-TLS message of %d octets, its L field said %d", len(msg), t.inTotal)
	}
	t.in, t.inTotal = nil, -1
	if t.finished {
		return nil, failed, errors.New("eap: EAP-TLS data after the handshake")
	}
	out, done, err := t.eng.feed(msg)
	if err != nil {
		return nil, failed, fmt.Errorf("eap: EAP-TLS handshake: %w", err)
	}
	if t.serverRandom == nil && len(out) >= 43 && out[0] == 22 && out[5] == 2 {
		// The first record of our first flight is the ServerHello:
		// record header 5, handshake header 4, version 2, random 32.
		t.serverRandom = bytes.Clone(out[11:43])
	}
	if done {
		if err := t.finish(); err != nil {
			return nil, failed, err
		}
	}
	if len(out) == 0 {
		if done {
			return nil, failed, errors.New("eap: EAP-TLS handshake ended without a final flight")
		}
		return []byte{0}, more, nil
	}
	t.out, t.outOff = out, 0
	return t.nextFragment(), more, nil
}

// nextFragment returns the type data carrying the next part of t.out.
func (t *tlsServer) nextFragment() []byte {
	rest := t.out[t.outOff:]
	first := t.outOff == 0
	if first && len(rest) <= t.frag {
		t.outOff = len(t.out)
		return append([]byte{0}, rest...)
	}
	n := min(len(rest), t.frag)
	var b []byte
	switch {
	case first:
		b = make([]byte, 5, 5+n)
		b[0] = tlsFlagLength | tlsFlagMore
		binary.BigEndian.PutUint32(b[1:], uint32(len(t.out)))
	case n < len(rest):
		b = append(make([]byte, 0, 1+n), tlsFlagMore)
	default:
		b = make([]byte, 1, 1+n)
	}
	t.outOff += n
	return append(b, rest[:n]...)
}

// verifyPeer verifies the peer's certificate chain to Config.TLS's
// ClientCAs for client authentication, as crypto/tls's
// RequireAndVerifyClientCert does, and keeps the certificates whether
// or not they verify. It runs on the handshake's goroutine, which feed
// waits for.
func (t *tlsServer) verifyPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("eap: EAP-TLS peer certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return errors.New("eap: EAP-TLS peer sent no certificate")
	}
	t.certs = certs
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: t.cfg.TLS.ClientCAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if t.cfg.TLS.Time != nil {
		opts.CurrentTime = t.cfg.TLS.Time()
	}
	chains, err := certs[0].Verify(opts)
	if err != nil {
		return fmt.Errorf("eap: EAP-TLS peer certificate: %w", err)
	}
	t.chains = chains
	if f := t.cfg.TLS.VerifyPeerCertificate; f != nil {
		return f(raw, chains)
	}
	return nil
}

// finish derives the MSK once the handshake is done.
func (t *tlsServer) finish() error {
	st := t.eng.conn.ConnectionState()
	t.finished = true
	if st.Version == tls.VersionTLS13 {
		km, err := st.ExportKeyingMaterial("EXPORTER_EAP_TLS_Key_Material", []byte{0x0d}, 128)
		if err != nil {
			return fmt.Errorf("eap: EAP-TLS key export: %w", err)
		}
		t.msk = km[:64]
		return nil
	}
	cr, ms, err := parseKeyLog(t.keyLog.Bytes())
	if err != nil {
		return err
	}
	if t.serverRandom == nil {
		return errors.New("eap: EAP-TLS server random not seen")
	}
	h := sha256.New
	if prfSHA384(st.CipherSuite) {
		h = sha512.New384
	}
	seed := append(bytes.Clone(cr), t.serverRandom...)
	t.msk = prf12(h, ms, "client EAP encryption", seed, 128)[:64]
	return nil
}

// prfSHA384 reports whether a TLS 1.2 suite's PRF uses SHA-384 (the
// *_SHA384 suites crypto/tls implements).
func prfSHA384(suite uint16) bool {
	switch suite {
	case tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:
		return true
	}
	return false
}

// parseKeyLog finds the TLS 1.2 line of the NSS key log format that
// crypto/tls writes: "CLIENT_RANDOM <client random> <master secret>".
func parseKeyLog(b []byte) (clientRandom, master []byte, err error) {
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[0]) != "CLIENT_RANDOM" {
			continue
		}
		cr, err1 := hex.DecodeString(string(f[1]))
		ms, err2 := hex.DecodeString(string(f[2]))
		if err1 != nil || err2 != nil || len(cr) != 32 || len(ms) != 48 {
			break
		}
		return cr, ms, nil
	}
	return nil, nil, errors.New("eap: EAP-TLS master secret not found")
}

// prf12 is the TLS 1.2 PRF (RFC 5246 section 5): P_hash(secret, label +
// seed) cut to n octets.
func prf12(h func() hash.Hash, secret []byte, label string, seed []byte, n int) []byte {
	ls := append([]byte(label), seed...)
	mac := hmac.New(h, secret)
	mac.Write(ls)
	a := mac.Sum(nil)
	out := make([]byte, 0, n+mac.Size())
	for len(out) < n {
		mac.Reset()
		mac.Write(a)
		mac.Write(ls)
		out = mac.Sum(out)
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(a[:0])
	}
	return out[:n]
}

func (t *tlsServer) key() []byte { return t.msk }

// identity is empty: what EAP-TLS proves is the certificate, which the
// owner matches against the identities it requires.
func (t *tlsServer) identity() string { return "" }

func (t *tlsServer) peerCertificates() []*x509.Certificate { return t.certs }

func (t *tlsServer) verifiedChains() [][]*x509.Certificate {
	if !t.finished {
		return nil
	}
	return t.chains
}

func (t *tlsServer) close() { t.eng.close() }

// tlsEngine runs a crypto/tls handshake (and the step after it) in a
// goroutine over an in-memory connection, one flight at a time: feed
// hands it the peer's data and returns what it wrote once it waits for
// more input or has finished.
type tlsEngine struct {
	pipe    *memConn
	conn    *tls.Conn
	after   func(*tls.Conn) error
	started bool
	exited  chan struct{}
}

func newTLSEngine(mk func(net.Conn) *tls.Conn, after func(*tls.Conn) error) *tlsEngine {
	p := &memConn{}
	p.cond.L = &p.mu
	return &tlsEngine{pipe: p, conn: mk(p), after: after, exited: make(chan struct{})}
}

// feed gives the engine data (it may be empty, to start a client) and
// returns what the engine wrote, and whether the handshake has ended.
func (e *tlsEngine) feed(data []byte) (out []byte, done bool, err error) {
	p := e.pipe
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, true, net.ErrClosed
	}
	p.in = append(p.in, data...)
	p.reading = false
	p.cond.Broadcast()
	if !e.started {
		e.started = true
		go e.run()
	}
	for !(p.reading && len(p.in) == 0) && !p.done {
		p.cond.Wait()
	}
	out, p.out = p.out, nil
	done, err = p.done, p.err
	p.mu.Unlock()
	return out, done, err
}

func (e *tlsEngine) run() {
	defer close(e.exited)
	err := e.conn.Handshake()
	if err == nil && e.after != nil {
		err = e.after(e.conn)
	}
	p := e.pipe
	p.mu.Lock()
	p.done, p.err = true, err
	p.cond.Broadcast()
	p.mu.Unlock()
}

// close ends the goroutine: a Read waiting for data returns io.EOF, the
// handshake fails and the goroutine exits; close waits for that.
func (e *tlsEngine) close() {
	if e.abort() {
		<-e.exited
	}
}

// abort is close without the wait; it reports whether the goroutine was
// started.
func (e *tlsEngine) abort() bool {
	p := e.pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cond.Broadcast()
	return e.started
}

// memConn is the engine's side of the in-memory connection.
type memConn struct {
	mu      sync.Mutex
	cond    sync.Cond
	in      []byte // the peer's data not read yet
	out     []byte // what the engine wrote since the last feed
	reading bool   // the engine waits in Read with nothing to read
	closed  bool
	done    bool
	err     error
}

func (c *memConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.in) == 0 {
		if c.closed {
			return 0, io.EOF
		}
		c.reading = true
		c.cond.Broadcast()
		c.cond.Wait()
	}
	c.reading = false
	n := copy(b, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *memConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.out = append(c.out, b...)
	return len(b), nil
}

func (c *memConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "eap" }
func (memAddr) String() string  { return "eap" }
