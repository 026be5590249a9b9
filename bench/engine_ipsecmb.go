//go:build ipsecmb

package bench

import (
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/ipsecmb"
)

// IPsecMBLoop is the baseline row of the intel-ipsec-mb library driven by a
// loop written in C (ipsecmb.SealLoop): the software limit on this machine
// for the engine ipsecmb, as Raw is for soft.
const IPsecMBLoop = "ipsecmb-c"

func init() {
	baselines = append(baselines, baseline{name: IPsecMBLoop, symLoop: newIPsecMBLoop})
}

// sealBatches is how many batches one step seals in C: enough that the one
// cgo call per step is noise.
const sealBatches = 16

type ipsecMBLoop struct {
	l          *ipsecmb.SealLoop
	batch, siz int
}

func newIPsecMBLoop(alg cryptodev.Alg, encKey []byte, n, size, batch, slotLen int) (loop, func(), error) {
	l, err := ipsecmb.NewSealLoop(alg, encKey, n, batch, slotLen)
	if err != nil {
		return nil, nil, err
	}
	return &ipsecMBLoop{l: l, batch: batch, siz: size}, l.Close, nil
}

func (l *ipsecMBLoop) step() (ops, bytes int, err error) {
	l.l.Run(sealBatches)
	return sealBatches * l.batch, sealBatches * l.batch * l.siz, nil
}

func (l *ipsecMBLoop) drain() {}
