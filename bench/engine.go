package bench

import (
	"crypto"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/sched"
)

// Raw is the pseudo-engine that calls Go's crypto directly: the baseline
// every engine is measured against in the same run.
const Raw = "raw"

// DefaultInFlight is how many batches each submitter keeps in flight on an
// asynchronous engine: submit, go on, collect. A synchronous engine
// completes each batch in Submit, so it has one.
const DefaultInFlight = 4

// EngineNames lists what an engine flag may name: raw, the baselines
// linked in (see baselines) and every registered engine.
func EngineNames() []string {
	names := []string{Raw}
	for _, b := range baselines {
		names = append(names, b.name)
	}
	return append(names, cryptodev.Engines()...)
}

// A baseline is a pseudo-engine like Raw: a library's own loop, run beside
// the engines on the same algorithm, size and batch. Build-tagged files
// add them (engine_ipsecmb.go: the intel-ipsec-mb C loop).
type baseline struct {
	name string
	// symLoop returns one thread's loop sealing batch ops of size bytes
	// (the data of each is n bytes) with the key material encKey, laid out
	// in slots of slotLen bytes as the engine loops lay theirs out.
	symLoop func(alg cryptodev.Alg, encKey []byte, n, size, batch, slotLen int) (loop, func(), error)
}

var baselines []baseline

func findBaseline(name string) *baseline {
	for i := range baselines {
		if baselines[i].name == name {
			return &baselines[i]
		}
	}
	return nil
}

// CheckEngine returns an error naming the valid engines if name is not one:
// raw, a registered engine, or sched over one ("sched:ipsecmb").
func CheckEngine(name string) error {
	if name == Raw || findBaseline(name) != nil || strings.Contains(name, ":") && cryptodev.CheckEngine(name) == nil || slices.Contains(EngineNames(), name) {
		return nil
	}
	return fmt.Errorf("bench: unknown engine %q (valid: %s, or sched:ENGINE)", name, strings.Join(EngineNames(), ", "))
}

// openEngine opens a registered engine. schedWorkers > 0 sets the worker
// count of the sched engine, over soft or over the engine "sched:ENGINE"
// names (the registry's sched has one per CPU).
func openEngine(name string, schedWorkers int) (cryptodev.Engine, error) {
	outer, inner, composite := strings.Cut(name, ":")
	if outer != sched.Name || schedWorkers <= 0 {
		return cryptodev.Open(name)
	}
	if !composite {
		return sched.New(sched.Options{Workers: schedWorkers})
	}
	ie, err := cryptodev.Open(inner)
	if err != nil {
		return nil, err
	}
	pe, ok := ie.(cryptodev.ProcessorEngine)
	if !ok {
		ie.Close()
		return nil, fmt.Errorf("bench: engine %s cannot run under sched", inner)
	}
	e, err := sched.New(sched.Options{Workers: schedWorkers, Inner: pe})
	if err != nil {
		ie.Close()
	}
	return e, err
}

// inFlight is the number of batches a submitter keeps in flight on e.
func inFlight(e cryptodev.Engine, want int) int {
	if !e.Async() {
		return 1
	}
	if want <= 0 {
		return DefaultInFlight
	}
	return want
}

// Private keys are slow to make (RSA-4096 takes seconds), so each type is
// made once per process and shared by every run.
var (
	privMu   sync.Mutex
	privKeys = map[cryptodev.Alg]crypto.PrivateKey{}
)

func privateKey(alg cryptodev.Alg) (crypto.PrivateKey, error) {
	privMu.Lock()
	defer privMu.Unlock()
	if k, ok := privKeys[alg]; ok {
		return k, nil
	}
	k, err := cryptodev.GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	privKeys[alg] = k
	return k, nil
}

// importPrivateKey imports priv into e, which must implement
// cryptodev.AsymEngine (sched does, through its inner engine).
func importPrivateKey(e cryptodev.Engine, priv crypto.PrivateKey) (*cryptodev.Key, error) {
	if ae, ok := e.(cryptodev.AsymEngine); ok {
		return ae.NewPrivateKey(priv)
	}
	return nil, fmt.Errorf("%w: engine %s does not implement cryptodev.AsymEngine", cryptodev.ErrUnsupported, e.Name())
}
