package gateway

import (
	"net/netip"

	"github.com/sluicegw/sluice/ike"
)

// onChildAddress is ike.Config.OnChildAddress: MOBIKE (RFC 4555) moved
// the IKE child c to the outer addresses local and remote, and the peer
// proved it receives there; or the peer, behind a NAT, now sends its
// authenticated IKE messages from there (RFC 7296 section 2.23). The
// tunnel's outbound SA of c (found by its SPI) seals towards them from
// now on (esp.SA.SetOuter), without a new SA: the sequence numbers, keys
// and replay state carry on, and inbound ESP is matched by SPI whatever
// its source. The tunnel keeps the addresses it was made with
// (sad.Tunnel's are fixed); the next pair of the child (a rekey) comes
// with the new ones.
func (g *Gateway) onChildAddress(c *ike.ChildSA, local, remote netip.AddrPort) {
	log := g.Logger("ike")
	if !c.Encap {
		local, remote = netip.AddrPortFrom(local.Addr(), 0), netip.AddrPortFrom(remote.Addr(), 0)
	}
	for _, t := range g.store.Load().Tunnels() {
		out := t.Out()
		if out == nil || out.SA.SPI() != c.OutSPI {
			continue
		}
		if err := out.SA.SetOuter(local, remote); err != nil {
			log.Error("IKE child SA not moved", "child", t.Name, "out_spi", ike.ESPSPI(c.OutSPI), "remote", remote, "err", err)
			return
		}
		log.Info("IKE child SA moved", "child", t.Name, "out_spi", ike.ESPSPI(c.OutSPI), "local", local, "remote", remote)
		return
	}
	log.Warn("IKE child SA moved but its outbound SA is not installed", "connection", c.Name,
		"out_spi", ike.ESPSPI(c.OutSPI), "remote", remote)
}
