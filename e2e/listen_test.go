package e2e_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestUnspecifiedListen runs the tunnel with [udp] and [rawesp] bound to
// the unspecified address instead of the tunnel's local address: the
// gateway must then send from the tunnel's local address (IP_PKTINFO,
// IPV6_PKTINFO) and receive what arrives on any. The configuration
// documents that :: takes both families, for [udp] (a dual-stack socket)
// and for [rawesp] (a socket for each family), so IPv4 tunnels must work
// on :: too.
func TestUnspecifiedListen(t *testing.T) {
	for _, c := range []struct {
		encap, listen string
		wan           [2]netip.Prefix
		bug           string // a known bug, if this case shows one
	}{
		{encap: "udp", listen: "0.0.0.0:4500", wan: wan4},
		{encap: "udp", listen: "[::]:4500", wan: wan6},
		{encap: "udp", listen: "[::]:4500", wan: wan4},
		{encap: "none", listen: "0.0.0.0", wan: wan4},
		{encap: "none", listen: "::", wan: wan6},
		{encap: "none", listen: "::", wan: wan4}, // a second, IPv4 raw socket serves it
	} {
		outer := "ipv4"
		if c.wan == wan6 {
			outer = "ipv6"
		}
		t.Run(fmt.Sprintf("encap=%s/listen=%s/outer=%s", c.encap, c.listen, outer), func(t *testing.T) {
			requireTool(t, "ping")
			cfgs := pairConfigs(t, pairOptions{wan: c.wan, encap: c.encap})
			for _, g := range cfgs {
				if c.encap == "udp" {
					g.UDP = netip.MustParseAddrPort(c.listen)
				} else {
					g.RawESP = netip.MustParseAddr(c.listen)
				}
			}
			tb := startPair(t, c.wan, cfgs)
			a, b := tb.sites[0], tb.sites[1]
			waitPing(t, tb.ctx, a.ns, inner4[1].Addr())
			mustPing(t, tb.ctx, fmt.Sprintf("encap=%s listen=%s outer=%s A->B", c.encap, c.listen, outer), a.ns, inner4[1].Addr(), 50, 10*time.Millisecond)
			mustPing(t, tb.ctx, fmt.Sprintf("encap=%s listen=%s outer=%s B->A", c.encap, c.listen, outer), b.ns, inner6[0].Addr(), 50, 10*time.Millisecond)
		})
	}
}
