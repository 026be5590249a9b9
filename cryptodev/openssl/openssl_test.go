//go:build openssl

package openssl_test

import (
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/openssl"
)

func open(t *testing.T) cryptodev.Engine {
	e, err := openssl.New()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConformance runs the engine conformance suite against openssl.
func TestConformance(t *testing.T) { enginetest.Run(t, open) }

// TestAsym runs the asymmetric conformance suite.
func TestAsym(t *testing.T) { enginetest.RunAsym(t, open(t)) }
