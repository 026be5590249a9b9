// Package tls terminates and originates TLS for a sluice gateway, on Go's
// crypto/tls, with every private key held by a crypto engine (package
// cryptodev) and every handshake signature made through it.
//
// (The package is a skeleton while its first implementation is written.)
package tls
