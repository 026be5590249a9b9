package soft_test

import (
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/enginetest"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

// TestConformance runs the engine conformance suite against soft.
func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) cryptodev.Engine { return soft.New() })
}
