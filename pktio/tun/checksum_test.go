package tun

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicegw/sluice/packet"
)

// checksum agrees with packet.Checksum for every length up to two
// segments, any alignment, all-ones data (the most carries) and random
// initial sums.
func TestChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3000)
	for _, fill := range []string{"random", "ones", "zeros"} {
		for i := range buf {
			switch fill {
			case "random":
				buf[i] = byte(r.Uint32())
			case "ones":
				buf[i] = 0xff
			default:
				buf[i] = 0
			}
		}
		for n := 0; n <= len(buf)-3; n++ {
			off := n % 3
			init := []uint32{0, 0xffff, r.Uint32() >> 8, 0xffffffff >> 1}[n%4]
			b := buf[off : off+n]
			if got, want := checksum(b, init), packet.Checksum(b, init); got != want {
				t.Fatalf("%s, %d bytes at %d, initial %#x: %#04x, want %#04x", fill, n, off, init, got, want)
			}
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 1400)
	for _, bc := range []struct {
		name string
		f    func([]byte, uint32) uint16
	}{{"tun", checksum}, {"packet", packet.Checksum}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				bc.f(buf, 0)
			}
		})
	}
}
