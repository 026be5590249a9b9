package ike

import (
	"crypto"
	"testing"
)

// SetTap makes e call f with each datagram it receives (with e's lock
// held; f must not keep pkt): the interop tests record strongSwan's
// messages as fuzz seeds with it.
func SetTap(e *Endpoint, f func(pkt []byte)) {
	e.mu.Lock()
	e.tap = f
	e.mu.Unlock()
}

// GenKey is a test key of kind "p256", "p384", "p521", "rsa" (one of two
// fixed keys from testdata, in turn) or "ed25519", for the interop tests'
// certificates.
func GenKey(t testing.TB, kind string) crypto.Signer { return genKey(t, kind) }
