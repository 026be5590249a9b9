package xdp

import (
	"encoding/binary"
	"testing"
)

// xdpFeatures reads NETDEV_A_DEV_XDP_FEATURES from a reply and nothing
// from one without it or cut short.
func TestXDPFeaturesParse(t *testing.T) {
	attr := func(typ uint16, v []byte) []byte {
		b := make([]byte, 4, 4+len(v)+3)
		binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	u64 := binary.NativeEndian.AppendUint64(nil, xdpActXSKZeroCopy|1)
	msg := append([]byte{netdevCmdDevGet, 1, 0, 0}, attr(netdevAttrIfindex, []byte{2, 0, 0, 0})...)
	msg = append(msg, attr(netdevAttrXDPFeatures, u64)...)
	if f, ok := xdpFeatures(msg); !ok || f != xdpActXSKZeroCopy|1 {
		t.Errorf("xdpFeatures = %#x, %v; want %#x", f, ok, xdpActXSKZeroCopy|1)
	}
	for _, bad := range [][]byte{nil, msg[:3], msg[:12], msg[:len(msg)-4], append([]byte{1, 1, 0, 0}, attr(netdevAttrXDPFeatures, u64[:4])...)} {
		if f, ok := xdpFeatures(bad); ok {
			t.Errorf("xdpFeatures(% x) = %#x, true; want nothing", bad, f)
		}
	}
}
