package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// The measured loops must allocate nothing per op or packet in steady
// state (DESIGN.md decision 10): otherwise the harness would measure the
// garbage collector. Each test builds the loops a run would use and counts
// the allocations of one step (one batch), after a few steps of warm-up so
// that every batch has been through the engine once.

const (
	warmSteps  = 2 * DefaultInFlight
	allocSteps = 50
)

// poolMisses reports whether engine may allocate on alg through no fault
// of the harness: the soft engine keeps the CBC and HMAC state of a chained
// suite in a sync.Pool per key, and when sched runs one key's ops on
// several Ps a Get can miss an item left in another P's private slot and
// make a new one (about one per batch, seen here).
func poolMisses(engine string, alg cryptodev.Alg) bool {
	return engine == "sched" && !alg.Info().AEAD
}

func checkNoAllocs(t *testing.T, loops []loop, known bool) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, l := range loops {
		for range warmSteps {
			if _, _, err := l.step(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		allocs := testing.AllocsPerRun(allocSteps, func() {
			if _, _, e := l.step(); e != nil && err == nil {
				err = e
			}
		})
		l.drain()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case allocs != 0 && known:
			t.Skipf("%T: %v allocations per step, in the soft engine's per-key sync.Pool (see poolMisses)", l, allocs)
		case allocs != 0:
			t.Errorf("%T: %v allocations per step, want 0", l, allocs)
		}
	}
}

func TestCryptoLoopsDoNotAllocate(t *testing.T) {
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.ChaCha20Poly1305, cryptodev.AES128CBCSHA256, cryptodev.NullSHA256} {
		for _, engine := range []string{Raw, "soft", "sched"} {
			t.Run(fmt.Sprintf("%s/%v", engine, alg), func(t *testing.T) {
				s := CryptoSpec{Engine: engine, Alg: alg, Size: 1420, Threads: 2, Batch: 32, Duration: time.Second}
				if err := s.check(); err != nil {
					t.Fatal(err)
				}
				loops, cleanup, _, err := cryptoLoops(&s)
				if err != nil {
					t.Fatal(err)
				}
				defer cleanup()
				checkNoAllocs(t, loops, poolMisses(engine, alg))
			})
		}
	}
}

func TestESPLoopsDoNotAllocate(t *testing.T) {
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES128CBCSHA256} {
		for _, dir := range []esp.Direction{esp.Outbound, esp.Inbound} {
			for _, engine := range []string{Raw, "soft", "sched"} {
				for _, size := range []Size{1420, IMIX} {
					t.Run(fmt.Sprintf("%s/%v/%s/%v", engine, alg, DirName(dir), size), func(t *testing.T) {
						s := ESPSpec{Engine: engine, Alg: alg, Size: size, Tunnels: 10, Workers: 2, Dir: dir, Batch: 32, Duration: time.Second}
						if err := s.check(); err != nil {
							t.Fatal(err)
						}
						loops, cleanup, err := espLoops(&s)
						if err != nil {
							t.Fatal(err)
						}
						defer cleanup()
						checkNoAllocs(t, loops, poolMisses(engine, alg))
					})
				}
			}
		}
	}
}
