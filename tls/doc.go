// Package tls terminates and originates TLS for a sluice gateway, on Go's
// crypto/tls, with every private key held by a crypto engine (package
// cryptodev) and every handshake signature made through it.
//
// # Keys and the handshake queue
//
// A private key is read from its PEM file, imported into the configured
// engine with cryptodev.AsymEngine.NewPrivateKey, and the file's bytes and
// the parsed key are wiped: the package keeps only the engine's key handle.
// crypto/tls signs through a crypto.Signer that a GetCertificate callback
// hands each handshake, bound to the handshake's context
// (ClientHelloInfo.Context): its Sign puts a request on the engine's
// bounded handshake signing queue, which nothing but handshakes uses, and
// waits for the signature or for the handshake to time out or its
// connection to close, whichever is first. Lanes take whatever requests
// wait, up to 64, into one cryptodev.Batch on a queue of their own (see
// signq.go): as many lanes as GOMAXPROCS for a synchronous engine (soft,
// openssl), so signing uses every core; one lane for an asynchronous one
// (sched), splitting what it collected into a batch per signing core
// (one op per batch for RSA, whose signatures take milliseconds) and
// submitting them together. sched runs signatures only on its asymmetric
// workers: all cores but one, each a thread at a low priority (nice
// 10), so the runtime keeps a P and the kernel a core for the connections
// already open. That is the choice between the two: soft makes the most
// handshakes per second, sched keeps open connections' requests at their
// idle latency during a storm of expensive handshakes (BENCHMARKS.md
// section j; issue 21).
// A full queue fails the handshake, counted under "sign". A Reload's
// replaced keys are destroyed in their engine only once no handshake that
// began before it can still sign with them.
//
// # What crypto/tls keeps to itself, and what that costs
//
// crypto/tls lets an engine take only the private-key operation
// (crypto.Signer; and crypto.Decrypter, which TLS 1.3 and ECDHE suites
// never use). Everything else stays in crypto/tls: the key exchange
// (X25519 or ECDHE, computed by crypto/ecdh inside the handshake), the key
// schedule, and the whole record layer: every byte of every connection is
// encrypted and decrypted by crypto/tls with its own AES-GCM or
// ChaCha20-Poly1305, on the goroutine that reads or writes the connection,
// one record at a time. There is no hook to hand records to an engine in
// batches, and this machine's kernel has no kTLS (CONFIG_TLS is not set),
// so neither the engine nor the kernel can take the bulk crypto.
//
// The cost, from BASELINES.md (nginx 1.22 + OpenSSL 3.0 against a minimal
// Go crypto/tls server, per server CPU, loopback): an RSA-2048 full TLS 1.3
// handshake takes 876 µs in Go against nginx's 447 µs, 711 µs of it the
// signature that an engine can take (OpenSSL signs in 218 µs); an ECDSA
// P-256 handshake is already cheaper in Go (172 µs against 214 µs), so
// there an engine can only move the 21.6 µs signature elsewhere. The
// record layer is what remains in crypto/tls: 1 MB responses at 1492 MiB
// per CPU-second against nginx's 1532, and 1 KB keep-alive responses at
// 21 µs against 14 µs, of which the HTTP server, not the record layer, is
// the larger part (see the static: backend in static.go). Resumed
// handshakes sign nothing: 154 µs in Go against 180 µs.
//
// # Listeners, origins, backends
//
// A listener (ListenerConfig) terminates TLS: SNI picks the first
// certificate whose leaf covers the server name (DNS SANs, wildcards for
// one label), else the first; ALPN, TLS 1.2 and 1.3, client certificates,
// session tickets under random keys rotated every TicketRotation (the two
// previous keys still decrypt), a handshake timeout, connection limits in
// all and per source (an IPv4 address or an IPv6 /64; beyond either a
// connection is reset at once and counted) and an idle timeout. Listen
// addresses bind one family (listenTCP): "[::]" takes IPv4 too only with
// DualStack. Its backend is tcp://HOST:PORT, the plaintext stream spliced
// both ways with optional PROXY protocol v2 (AppendProxyV2, ParseProxyV2),
// or static:DIR, the built-in HTTP/1.1 file server. An origin
// (OriginConfig) accepts plaintext TCP and carries each connection over
// TLS to its backend, verifying the backend's certificate.
//
// # The static: backend
//
// The file server is a hand-written HTTP/1.1 loop, not net/http, because
// the targets are per request CPU against nginx (14 µs for a 1 KB
// keep-alive response; a minimal net/http server takes 21 µs on this
// machine): net/http allocates a Request, a Header map and a response
// writer per request and layers its own buffered reader and writer over
// the tls.Conn. Here a connection reuses one read buffer (the head is
// parsed in place and bounded at 8 KiB) and one write buffer; small files
// are cached with their header lines, revalidated against size and mtime
// at most once a second, so a cached 1 KB response is one copy and one
// Write, one TLS record, with no allocation (TestStaticNoAllocs). The
// cache is bounded in bytes and evicts by CLOCK; missing names are not
// cached. Names with a component starting with '.' get 404 (counted)
// unless ServeDotfiles, except under /.well-known/. It
// serves GET and HEAD with Content-Length and keep-alive, answers 400,
// 404, 405 and 431, never leaves its directory (".." is refused, and an
// os.Root refuses symlinks that lead out), and closes a connection whose
// request head takes longer than HeaderTimeout (slowloris). Request
// bodies, ranges and conditional requests are not supported.
//
// Per-connection events are counted (Stats), never logged; the Service's
// logger (Options.Log) hears only of starts, reloads and errors.
//
// # Concurrency
//
// A Service's methods are safe for concurrent use. Each accepted
// connection has one goroutine (two while a tcp:// or origin stream is
// spliced); the state it starts from (configuration, certificates, CA
// pools) is an immutable snapshot that Reload replaces for later
// connections, so open connections are never touched by a reload. Close
// closes every socket and connection and returns once every goroutine the
// Service started has ended.
package tls
