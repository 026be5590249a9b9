package dataplane_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/pipe"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/sad"
)

// What the UDP link takes out of the ESP stream before a lane sees it (IKE
// datagrams with the non-ESP marker, NAT-keepalives; RFC 3948 sections 2.2
// and 2.3) is counted in the data plane's receiver drops, so `sluice stats`
// and the metrics show it, when nothing on the gateway handles IKE.
func TestLinkDropsCounted(t *testing.T) {
	l, err := udp.Open(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, plain := pipe.New(64)
	eng := soft.New()
	store := sad.NewStore(nil)
	dp, err := dataplane.New(dataplane.Config{Engines: map[string]cryptodev.Engine{eng.Name(): eng}, Default: eng.Name(),
		Plain: []dataplane.Link{plain}, Net: []dataplane.Link{l}, Store: store, Pool: packet.NewPool(256, 2048, 128)})
	if err != nil {
		t.Fatal(err)
	}
	dp.Start(context.Background())
	t.Cleanup(func() { dp.Close(); store.Close() })

	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(l.(*udp.Conn).LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ike := append([]byte{0, 0, 0, 0}, make([]byte, 28)...) // non-ESP marker, then an IKE header
	for _, p := range [][]byte{ike, ike, {0xff}} {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]uint64
	waitFor(t, func() bool {
		got = dp.Stats().Drops()
		return got["ike"] == 2 && got["keepalive"] == 1
	})
	if len(got) != 2 {
		t.Errorf("receiver drops %v, want only ike and keepalive", got)
	}
}
