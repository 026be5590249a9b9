// Package openssl is a synchronous cryptodev engine on OpenSSL's libcrypto 3
// through cgo. It is built only with the build tag openssl (it needs
// libssl-dev, or any libcrypto 3 with its headers):
//
//	go build -tags openssl ./cmd/sluice
//
// Without the tag the package is empty and the default build stays pure Go.
//
// The engine registers as "openssl", below soft, so it runs only when a
// configuration or flag names it. It implements the ESP suites (AES-GCM,
// ChaCha20-Poly1305, AES-CBC and NULL with HMAC-SHA-2) and, through
// cryptodev.AsymEngine, RSA (PKCS #1 v1.5 and PSS), ECDSA P-256 and P-384,
// Ed25519, X25519 and ECDH P-256, with the same contracts as the soft engine:
// a faster signer for TLS and IKE, and libcrypto's AEADs for comparison.
//
// Cost model. The symmetric ops of a batch run in one cgo call: the Go half
// checks every length and writes one descriptor per op into the queue's
// descriptor array, and C runs them all. The asymmetric ops of a batch run
// one cgo call each: a signature takes tens of microseconds to milliseconds,
// against well under one for the call.
//
// Concurrency. A Key is safe for concurrent use by any number of queues: its
// libcrypto contexts (which are not) live in a few slots per key, and each
// op claims one with an atomic exchange; a run of ops on the same key keeps
// its slot. A Queue is used by one goroutine at a time, as cryptodev.Queue
// says, so the engine works under an engine that runs queues on worker
// goroutines.
package openssl
