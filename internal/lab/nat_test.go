package lab

import (
	"net/netip"
	"testing"
)

// TestParseConntrack reads /proc/net/nf_conntrack lines as kernel 6.x
// writes them: a masqueraded flow that saw answers, an unreplied one, and
// lines of other protocols, which are skipped.
func TestParseConntrack(t *testing.T) {
	text := `ipv4     2 udp      17 17 src=192.0.2.2 dst=198.51.100.2 sport=4500 dport=4500 src=198.51.100.2 dst=198.51.100.1 sport=4500 dport=1024 [ASSURED] mark=0 zone=0 use=2
ipv4     2 udp      17 29 src=198.51.100.2 dst=198.51.100.1 sport=4500 dport=4500 [UNREPLIED] src=198.51.100.1 dst=198.51.100.2 sport=4500 dport=4500 mark=0 zone=0 use=2
ipv4     2 tcp      6 299 ESTABLISHED src=192.0.2.2 dst=198.51.100.2 sport=40000 dport=22 src=198.51.100.2 dst=198.51.100.1 sport=22 dport=40000 [ASSURED] mark=0 zone=0 use=2
ipv4     2 icmp     1 29 src=10.2.0.1 dst=10.1.0.1 type=8 code=0 id=7 src=10.1.0.1 dst=10.2.0.1 type=0 code=0 id=7 mark=0 zone=0 use=2
`
	flows, err := parseConntrack(text)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := []UDPFlow{
		{Src: ap("192.0.2.2:4500"), Dst: ap("198.51.100.2:4500"), ReplySrc: ap("198.51.100.2:4500"), ReplyDst: ap("198.51.100.1:1024"), Timeout: 17, Replied: true},
		{Src: ap("198.51.100.2:4500"), Dst: ap("198.51.100.1:4500"), ReplySrc: ap("198.51.100.1:4500"), ReplyDst: ap("198.51.100.2:4500"), Timeout: 29},
	}
	if len(flows) != len(want) {
		t.Fatalf("%d flows, want %d: %+v", len(flows), len(want), flows)
	}
	for i := range want {
		if flows[i] != want[i] {
			t.Errorf("flow %d: %+v, want %+v", i, flows[i], want[i])
		}
	}
	if _, err := parseConntrack("ipv4 2 udp 17 x src=1.2.3.4 dst=1.2.3.5 sport=1 dport=2 src=1.2.3.5 dst=1.2.3.4 sport=2 dport=1\n"); err == nil {
		t.Error("a bad timeout parsed")
	}
	if _, err := parseConntrack("ipv4 2 udp 17 3 src=1.2.3.4 dst=1.2.3.5 sport=1 dport=2\n"); err == nil {
		t.Error("a line with one tuple parsed")
	}
}
