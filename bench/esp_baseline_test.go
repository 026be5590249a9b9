package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// countLoop is a baseline's loop that seals nothing: batch ops of siz
// bytes per step.
type countLoop struct{ batch, siz int }

func (l *countLoop) step() (ops, bytes int, err error) { return l.batch, l.batch * l.siz, nil }
func (l *countLoop) drain()                            {}

// TestESPBaselineRows: a library's own loop (ipsecmb-c where linked in)
// is a row of bench esp for encap of one size, sealing the ESP payload of
// each packet (inner packet, padding, trailer) in slots with room for the
// ICV, one loop per worker; decap and IMIX are refused as unsupported (the
// command notes and skips them). Before, RunESP refused every baseline.
func TestESPBaselineRows(t *testing.T) {
	type call struct {
		alg                    cryptodev.Alg
		keyLen, n, size, batch int
		slotLen                int
	}
	var calls []call
	baselines = append(baselines, baseline{name: "fake-c", symLoop: func(alg cryptodev.Alg, key []byte, n, size, batch, slotLen int) (loop, func(), error) {
		calls = append(calls, call{alg, len(key), n, size, batch, slotLen})
		return &countLoop{batch, size}, func() {}, nil
	}})
	t.Cleanup(func() { baselines = baselines[:len(baselines)-1] })

	ctx := context.Background()
	s := ESPSpec{Engine: "fake-c", Alg: cryptodev.AES128GCM16, Size: 64, Tunnels: 4, Workers: 2, Dir: esp.Outbound,
		Batch: 16, Duration: quick, Warmup: 5 * time.Millisecond}
	r, err := RunESP(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.PPS <= 0 || r.Engine != "fake-c" || r.BPS/r.PPS/8 != 64 {
		t.Errorf("%+v", r)
	}
	if len(calls) != 2 {
		t.Fatalf("%d loops for 2 workers", len(calls))
	}
	want := espPayloadLen(cryptodev.AES128GCM16, 64) // 64 + 2 + 2 of padding
	for _, c := range calls {
		if c.n != want || c.size != 64 || c.batch != 16 || c.keyLen != cryptodev.AES128GCM16.EncKeyLen() || c.slotLen < c.n+tagRoom {
			t.Errorf("loop made with %+v, want n %d", c, want)
		}
	}
	for _, mod := range []func(*ESPSpec){
		func(s *ESPSpec) { s.Dir = esp.Inbound },
		func(s *ESPSpec) { s.Size = IMIX },
	} {
		s := s
		mod(&s)
		if _, err := RunESP(ctx, s, nil); !errors.Is(err, cryptodev.ErrUnsupported) {
			t.Errorf("%s %v: %v, want unsupported", DirName(s.Dir), s.Size, err)
		}
	}
}
