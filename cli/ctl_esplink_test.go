package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/gateway"
)

// TestStatsESPLink: sluice stats names the ESP link under the tables, with
// the AF_XDP mode and both kinds of link's counters, or why auto took the
// sockets.
func TestStatsESPLink(t *testing.T) {
	for _, tc := range []struct {
		l    gateway.ESPLinkInfo
		want []string
	}{
		{gateway.ESPLinkInfo{Config: "auto", Kind: "xdp", Mode: "copy native", Interface: "wan0", Queues: 2,
			XDP: &gateway.LinkCounters{RxPackets: 1000, TxPackets: 900}, Socket: gateway.LinkCounters{RxPackets: 3, TxPackets: 2, RxDrops: 4}},
			[]string{`ESP link: xdp (copy native) on wan0, 2 queue(s), [udp] link = "auto"`, "AF_XDP   rx 1000 tx 900 packets", "sockets  rx 3 tx 2 packets; not delivered rx 4"}},
		{gateway.ESPLinkInfo{Config: "auto", Kind: "socket", Why: "AF_XDP: lo, which holds 127.0.0.1, is a loopback interface"},
			[]string{`ESP link: socket, [udp] link = "auto"; AF_XDP: lo, which holds 127.0.0.1, is a loopback interface`, "sockets  rx 0 tx 0"}},
	} {
		var b bytes.Buffer
		if err := printStats(&b, gateway.Stats{ESPLink: &tc.l}, ctlView{}); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("stats lack %q:\n%s", w, b.String())
			}
		}
		if tc.l.XDP == nil && strings.Contains(b.String(), "AF_XDP   rx") {
			t.Errorf("AF_XDP counters without AF_XDP:\n%s", b.String())
		}
	}
}
