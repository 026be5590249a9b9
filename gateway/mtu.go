package gateway

// The plaintext MTUs: of each tunnel, and of the TUN device the tunnels
// share. A packet larger than its tunnel takes is dropped with an ICMP
// error to its sender (package dataplane), so the sender must learn the
// tunnel's MTU before it sends: the TUN device's MTU is the smallest any
// of its tunnels takes, which a local sender's TCP takes its MSS from and
// the kernel answers a forwarded packet with itself (as wireguard-go and
// strongSwan's libipsec do with theirs). An IKE child's suite is known
// only once negotiated, and whether NAT puts its ESP in UDP too; the TUN
// device is made before that, so its MTU is the worst case of the
// proposals each child may negotiate, with the UDP header and the
// connection's outer family. A tunnel whose MTU is still smaller (a
// configured tunnel mtu, one added by reload) is covered by the data
// plane's ICMP errors.

import (
	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ike"
)

// defaultTUNMTU is the TUN device's MTU when no tunnel tells better (a
// gateway with only policies or TLS).
const defaultTUNMTU = UnderlayMTU - 80

// saMTU is the plaintext MTU of a tunnel whose outbound SA is sa, over an
// outer family of IPv6 if outer6.
func saMTU(sa *config.SA, outer6 bool) int {
	return esp.TunnelMTU(sa.Alg, outer6, sa.Encap == config.EncapUDP, UnderlayMTU)
}

// staticTunnelMTU is a [[tunnel]]'s plaintext MTU: its mtu, else the
// TUN's if set, else what its outbound SA leaves of the underlay MTU.
func staticTunnelMTU(cfg *config.Gateway, t *config.Tunnel) int {
	switch {
	case t.MTU > 0:
		return t.MTU
	case cfg.TUN.MTU > 0:
		return cfg.TUN.MTU
	}
	if sa := cfg.SA(t.Out); sa != nil {
		return saMTU(sa, t.Peer.Is6())
	}
	return defaultTUNMTU
}

// childMTU is the smallest plaintext MTU a child of connection c may be
// negotiated with: the worst suite of its ESP proposals, in UDP (NAT
// detection may ask for it), over c's outer family (IPv6 when c does not
// say). It returns 0 when no proposal names a suite sluice runs.
func childMTU(c *config.Connection, ch *config.Child) int {
	outer6 := c.Local.Is6() || (!c.Local.IsValid() && !c.Remote.Is4())
	mtu := 0
	for _, p := range ch.ESP {
		var encrs []ike.Transform
		integs := []uint16{0}
		for _, t := range p.Transforms {
			switch t.Type {
			case ike.TransformEncr:
				encrs = append(encrs, t)
			case ike.TransformInteg:
				integs = append(integs, t.ID)
			}
		}
		for _, e := range encrs {
			for _, integ := range integs {
				s := ike.Suite{Protocol: ike.ProtoESP, Encr: e.ID, KeyLen: e.KeyLen, Integ: integ}
				alg, err := cryptodev.ParseAlg(s.ESPName())
				if err != nil || alg.IsAsymmetric() {
					continue // not a suite: AES-CBC without integrity, an unknown key size
				}
				if m := esp.TunnelMTU(alg, outer6, true, UnderlayMTU); mtu == 0 || m < mtu {
					mtu = m
				}
			}
		}
	}
	return mtu
}

// tunnelMTU is the TUN device's MTU: configured, or the smallest of the
// static tunnels' and of what IKE children may be negotiated with.
func tunnelMTU(cfg *config.Gateway) int {
	if cfg.TUN.MTU > 0 {
		return cfg.TUN.MTU
	}
	mtu := 0
	least := func(m int) {
		if m > 0 && (mtu == 0 || m < mtu) {
			mtu = m
		}
	}
	for i := range cfg.Tunnels {
		t := &cfg.Tunnels[i]
		if sa := cfg.SA(t.Out); sa != nil {
			least(saMTU(sa, t.Peer.Is6()))
		}
	}
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		for j := range c.Children {
			least(childMTU(c, &c.Children[j]))
		}
	}
	if mtu == 0 {
		return defaultTUNMTU
	}
	return mtu
}
