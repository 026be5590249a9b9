package spd_test

import (
	"testing"

	"github.com/sluicegw/sluice/spd"
)

// FuzzExtractFlowKey feeds arbitrary bytes to ExtractFlowKey: it must not
// panic, must leave a zero key when it rejects a packet, must produce a key
// of the packet's family with OPAQUE ports for protocols without ports when
// it accepts one, and must not look past the IP length fields. The seed
// corpus holds the packets of TestExtractFlowKey.
//
//	go test -run XXX -fuzz FuzzExtractFlowKey -fuzztime 60s ./spd/
func FuzzExtractFlowKey(f *testing.F) {
	for _, c := range flowCases() {
		f.Add(c.pkt)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		var k spd.FlowKey
		ok := spd.ExtractFlowKey(pkt, &k)
		if !ok {
			if k != (spd.FlowKey{}) {
				t.Fatalf("rejected, but left %+v", k)
			}
			return
		}
		v4 := pkt[0]>>4 == 4
		if !k.Src.IsValid() || !k.Dst.IsValid() || k.Src.Is4() != v4 || k.Dst.Is4() != v4 {
			t.Fatalf("IPv%d packet gave addresses %v, %v", pkt[0]>>4, k.Src, k.Dst)
		}
		if k.Proto != 6 && k.Proto != 17 && k.Proto != 132 && (k.SPort != 0 || k.DPort != 0) {
			t.Fatalf("protocol %d has ports %d, %d", k.Proto, k.SPort, k.DPort)
		}
		if !(&spd.Policy{}).Matches(&k) {
			t.Fatalf("%+v does not match the ANY selector", k)
		}
		var k2 spd.FlowKey
		if !spd.ExtractFlowKey(append(pkt[:len(pkt):len(pkt)], 0xde, 0xad, 0xbe, 0xef), &k2) || k2 != k {
			t.Fatalf("trailing bytes changed the key from %+v to %+v", k, k2)
		}
	})
}
