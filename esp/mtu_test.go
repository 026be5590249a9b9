package esp_test

import (
	"fmt"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// TestTunnelMTU: for every suite, outer family and encapsulation, an inner
// packet of TunnelMTU bytes seals into an outer packet of at most the
// underlay MTU, and one byte more does not: the bound is exact.
func TestTunnelMTU(t *testing.T) {
	h := newHarness(t)
	for _, alg := range cryptodev.Algs() {
		for _, encap := range []esp.Encap{esp.EncapNone, esp.EncapUDP} {
			for _, outer6 := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/outer6=%v", alg, encap, outer6), func(t *testing.T) {
					h.t = t
					out, _ := saPair(t, pairOpts{alg: alg, mode: esp.Tunnel, encap: encap, outer6: outer6})
					for _, underlay := range []int{1500, 1400, 9000 - 1} {
						mtu := esp.TunnelMTU(alg, outer6, encap == esp.EncapUDP, underlay)
						for _, n := range []int{mtu, mtu + 1} {
							if n-28 > 2048 { // the harness's buffers; the arithmetic is the same
								continue
							}
							ct, r := h.seal(out, ipPacket(false, n-28))
							if r != esp.ReasonNone {
								t.Fatalf("seal %d: %v", n, r)
							}
							if fits := len(ct) <= underlay; fits != (n == mtu) {
								t.Fatalf("underlay %d: TunnelMTU %d, but an inner packet of %d bytes is %d bytes sealed", underlay, mtu, n, len(ct))
							}
						}
					}
				})
			}
		}
	}
}

// TestTunnelMTUValues pins the numbers the gateway's TUN devices get on
// an Ethernet underlay, as Linux computes them for the same xfrm states.
func TestTunnelMTUValues(t *testing.T) {
	for _, c := range []struct {
		alg         string
		outer6, udp bool
		want        int
	}{
		{"aes128gcm16", false, true, 1438},
		{"aes128gcm16", true, true, 1418},
		{"aes128gcm16", false, false, 1446},
		{"chacha20poly1305", false, true, 1438},
		{"aes128-sha256", false, true, 1422},
		{"aes256-sha512", false, true, 1406},
		{"aes256-sha512", true, true, 1390},
		{"aes256-sha384", false, false, 1422},
		{"null-sha256", false, true, 1446},
	} {
		alg, err := cryptodev.ParseAlg(c.alg)
		if err != nil {
			t.Fatal(err)
		}
		if got := esp.TunnelMTU(alg, c.outer6, c.udp, 1500); got != c.want {
			t.Errorf("TunnelMTU(%s, outer6=%v, udp=%v, 1500) = %d, want %d", c.alg, c.outer6, c.udp, got, c.want)
		}
	}
	if got := esp.TunnelMTU(cryptodev.AES256CBCSHA512, true, true, 60); got != 0 {
		t.Errorf("TunnelMTU over a 60-byte underlay = %d, want 0", got)
	}
}
