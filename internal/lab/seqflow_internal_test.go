package lab

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestSeqFlowSendNoAllocs: the sender's burst allocates nothing per
// datagram.
func TestSeqFlowSendNoAllocs(t *testing.T) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sink, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	f := &SeqFlow{src: c, dst: sink.LocalAddr().(*net.UDPAddr).AddrPort(), start: time.Now()}
	pkt := make([]byte, 64)
	seq := uint64(0)
	allocs := testing.AllocsPerRun(50, func() {
		seq, err = f.sendBurst(pkt, seq, 20)
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("sendBurst of 20 datagrams: %v allocations, want 0", allocs)
	}
}
