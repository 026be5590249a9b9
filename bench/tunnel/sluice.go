package tunnel

// sluice as a system under test: two `sluice run` daemons, one in each
// namespace, with N tunnels between them, configured as a user would
// (see examples/gateway-a.toml): only what the bench varies is set.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// sluiceTUN is the gateways' TUN device.
const sluiceTUN = "sluice0"

// upWait bounds the wait for a daemon to come up, and for the first
// packet through a tunnel.
const upWait = 20 * time.Second

// innerA and innerB are the inner prefixes of tunnel k: 10.1.k.0/24 at
// site A, 10.2.k.0/24 at site B; the gateway (or wireguard-go's device)
// holds the .1 of each.
func innerA(k int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(k), 1}), 24)
}
func innerB(k int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 2, byte(k), 1}), 24)
}

// MaxTunnels is the most tunnels a cell may have (one /24 of 10.1.0.0/16
// and of 10.2.0.0/16 each).
const MaxTunnels = 256

// tunnelPaths are the paths through n tunnels: from 10.1.k.1 to 10.2.k.1.
func tunnelPaths(n int) []Path {
	ps := make([]Path, n)
	for k := range ps {
		ps[k] = Path{Src: innerA(k).Addr(), Dst: innerB(k).Addr()}
	}
	return ps
}

// SluiceConfigs returns the two gateways' configuration files for a cell:
// cell.Tunnels tunnels between 192.0.2.1 and 192.0.2.2, ESP in UDP 4500,
// tunnel k carrying 10.1.k.0/24 <-> 10.2.k.0/24 with its own two SAs keyed
// from crypto/rand, the engine and algorithm of the cell, and workers only
// when the cell sets them. stateDirs are the gateways' state directories.
func SluiceConfigs(cell Cell, stateDirs [2]string) ([2][]byte, error) {
	alg, err := cryptodev.ParseAlg(cell.Alg)
	if err != nil || alg.IsAsymmetric() {
		return [2][]byte{}, fmt.Errorf("bench: %q is not an ESP algorithm", cell.Alg)
	}
	key := func(n int) string {
		if n == 0 {
			return ""
		}
		b := make([]byte, n)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	sa := func(name string, spi uint32, src, dst netip.Addr) config.FileSA {
		return config.FileSA{Name: name, SPI: spi, Src: src.String(), Dst: dst.String(), Mode: "tunnel", Encap: "udp",
			ESP: alg.String(), EncKey: key(alg.EncKeyLen()), AuthKey: key(alg.Info().AuthKeyLen)}
	}
	var sas []config.FileSA
	for k := range cell.Tunnels {
		sas = append(sas,
			sa(fmt.Sprintf("a-to-b-%d", k), 0x10000+uint32(k), wan[0].Addr(), wan[1].Addr()),
			sa(fmt.Sprintf("b-to-a-%d", k), 0x20000+uint32(k), wan[1].Addr(), wan[0].Addr()))
	}
	names := [2]string{"a", "b"}
	inner := [2]func(int) netip.Prefix{innerA, innerB}
	var out [2][]byte
	for i := range 2 {
		j := 1 - i
		f := &config.File{
			Gateway: config.FileGateway{Engine: cell.Engine, LogLevel: "warn", StateDir: stateDirs[i], Workers: cell.Workers},
			TUN:     &config.FileTUN{Name: sluiceTUN},
			UDP:     &config.FileUDP{Listen: netip.AddrPortFrom(wan[i].Addr(), 4500).String(), Link: fileLink(cell.Link)},
			SAs:     sas,
		}
		for k := range cell.Tunnels {
			f.TUN.Addresses = append(f.TUN.Addresses, inner[i](k).String())
			f.Tunnels = append(f.Tunnels, config.FileTunnel{
				Name: fmt.Sprintf("to-%s-%d", names[j], k), Local: wan[i].Addr().String(), Peer: wan[j].Addr().String(),
				Encap: "udp", PeerPort: 4500, Remote: []string{inner[j](k).Masked().String()},
				Out: fmt.Sprintf("%s-to-%s-%d", names[i], names[j], k), In: []string{fmt.Sprintf("%s-to-%s-%d", names[j], names[i], k)},
			})
		}
		b, err := f.Encode()
		if err != nil {
			return [2][]byte{}, fmt.Errorf("bench: %w", err)
		}
		head := fmt.Sprintf("# sluice bench tunnel, site %s: %d tunnel(s), fresh keys\n\n", strings.ToUpper(names[i]), cell.Tunnels)
		out[i] = append([]byte(head), b...)
	}
	return out, nil
}

// fileLink is a cell's link as the configuration file writes it: left
// out for the default.
func fileLink(l string) string {
	if l == LinkAuto {
		return ""
	}
	return l
}

// linkGot describes the ESP links two gateways reported (Cell.LinkGot).
func linkGot(ls [2]*gateway.ESPLinkInfo) string {
	desc := func(l *gateway.ESPLinkInfo) string {
		switch {
		case l == nil:
			return "?"
		case l.Kind == LinkXDP && l.Mode != "":
			return l.Kind + " " + l.Mode
		}
		return l.Kind
	}
	a, b := desc(ls[0]), desc(ls[1])
	if a == b {
		return a
	}
	return "A " + a + "; B " + b
}

// startSluice writes the configurations, starts a `sluice run` daemon in
// each namespace and waits until both have their TUN device and answer on
// their control socket. It returns the daemons' pids and the ESP links
// they report.
func startSluice(ctx context.Context, t *topology, cell Cell, argv func(args ...string) ([]string, error)) (pids []int, links [2]*gateway.ESPLinkInfo, err error) {
	if argv == nil {
		return nil, links, fmt.Errorf("bench: no way to start a sluice gateway (GatewayArgv is not set)")
	}
	dir, err := t.lab.Dir()
	if err != nil {
		return nil, links, err
	}
	var states [2]string
	for i, n := range []string{"state-a", "state-b"} {
		states[i] = filepath.Join(dir, n)
		if err := os.Mkdir(states[i], 0o700); err != nil {
			return nil, links, err
		}
	}
	texts, err := SluiceConfigs(cell, states)
	if err != nil {
		return nil, links, err
	}
	for i, name := range []string{"a", "b"} {
		file := filepath.Join(dir, "gateway-"+name+".toml")
		if err := os.WriteFile(file, texts[i], 0o600); err != nil {
			return nil, links, err
		}
		if _, err := config.ParseGateway(file, texts[i]); err != nil {
			return nil, links, fmt.Errorf("bench: the generated configuration of gateway %s: %w", name, err)
		}
		sock := filepath.Join(dir, "gateway-"+name+".sock")
		args, err := argv("run", "-c", file, "--socket", sock)
		if err != nil {
			return nil, links, err
		}
		ns := t.ns[i]
		p, err := t.lab.Start(ns, "sluice gateway "+name, args, &lab.ProcOptions{LogFile: filepath.Join(dir, "gateway-"+name+".log")})
		if err != nil {
			return nil, links, err
		}
		if err := ns.WaitLink(ctx, sluiceTUN, upWait, p); err != nil {
			return nil, links, err
		}
		if err := lab.WaitControl(ctx, sock, upWait, p); err != nil {
			return nil, links, err
		}
		st, err := lab.ControlStats(ctx, sock)
		if err != nil {
			return nil, links, err
		}
		links[i] = st.ESPLink
		pids = append(pids, p.Pid())
	}
	return pids, links, nil
}
