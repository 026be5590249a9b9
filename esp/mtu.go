package esp

import "github.com/sluicegw/sluice/cryptodev"

// TunnelMTU is the largest inner packet that a tunnel-mode SA of alg
// carries whole in an outer packet of at most underlay bytes: underlay
// less the outer header (IPv6 if outer6, else IPv4), the UDP header of
// ESP in UDP if udp (RFC 3948), the ESP header and IV, the ICV, and the
// trailer once the payload is padded to the cipher's block size (RFC 4303
// section 2.4). It is the bound Linux computes for an xfrm state
// (esp4_get_mtu). It returns 0 when not even an empty packet fits. It does
// not allocate.
func TunnelMTU(alg cryptodev.Alg, outer6, udp bool, underlay int) int {
	info := alg.Info()
	room := underlay - 20 - HeaderLen - info.IVLen - info.ICVLen
	if outer6 {
		room -= 20
	}
	if udp {
		room -= 8
	}
	room -= room % info.BlockSize // the padded payload with its trailer
	return max(room-TrailerLen, 0)
}
