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
	type sa struct {
		name      string
		spi       uint32
		src, dst  netip.Addr
		enc, auth string
	}
	var sas []sa
	for k := range cell.Tunnels {
		sas = append(sas,
			sa{fmt.Sprintf("a-to-b-%d", k), 0x10000 + uint32(k), wan[0].Addr(), wan[1].Addr(), key(alg.EncKeyLen()), key(alg.Info().AuthKeyLen)},
			sa{fmt.Sprintf("b-to-a-%d", k), 0x20000 + uint32(k), wan[1].Addr(), wan[0].Addr(), key(alg.EncKeyLen()), key(alg.Info().AuthKeyLen)})
	}
	names := [2]string{"a", "b"}
	inner := [2]func(int) netip.Prefix{innerA, innerB}
	var out [2][]byte
	for i := range 2 {
		j := 1 - i
		var b strings.Builder
		fmt.Fprintf(&b, "# sluice bench tunnel, site %s: %d tunnel(s), fresh keys\n", strings.ToUpper(names[i]), cell.Tunnels)
		fmt.Fprintf(&b, "\n[gateway]\nengine = %q\nlog_level = \"warn\"\nstate_dir = %q\n", cell.Engine, stateDirs[i])
		if cell.Workers > 0 {
			fmt.Fprintf(&b, "workers = %d\n", cell.Workers)
		}
		var addrs []string
		for k := range cell.Tunnels {
			addrs = append(addrs, fmt.Sprintf("%q", inner[i](k)))
		}
		fmt.Fprintf(&b, "\n[tun]\nname = %q\naddresses = [%s]\n", sluiceTUN, strings.Join(addrs, ", "))
		fmt.Fprintf(&b, "\n[udp]\nlisten = \"%s:4500\"\n", wan[i].Addr())
		for k := range cell.Tunnels {
			fmt.Fprintf(&b, "\n[[tunnel]]\nname = \"to-%s-%d\"\nlocal = %q\npeer = %q\nencap = \"udp\"\npeer_port = 4500\nremote = [%q]\nout = \"%s-to-%s-%d\"\nin = [\"%s-to-%s-%d\"]\n",
				names[j], k, wan[i].Addr(), wan[j].Addr(), inner[j](k).Masked(), names[i], names[j], k, names[j], names[i], k)
		}
		for _, s := range sas {
			fmt.Fprintf(&b, "\n[[sa]]\nname = %q\nspi = 0x%x\nsrc = %q\ndst = %q\nmode = \"tunnel\"\nencap = \"udp\"\nesp = %q\n",
				s.name, s.spi, s.src, s.dst, alg)
			if s.enc != "" {
				fmt.Fprintf(&b, "enc_key = %q\n", s.enc)
			}
			if s.auth != "" {
				fmt.Fprintf(&b, "auth_key = %q\n", s.auth)
			}
		}
		out[i] = []byte(b.String())
	}
	return out, nil
}

// startSluice writes the configurations, starts a `sluice run` daemon in
// each namespace and waits until both have their TUN device and answer on
// their control socket. It returns the daemons' pids.
func startSluice(ctx context.Context, t *topology, cell Cell, argv func(args ...string) ([]string, error)) ([]int, error) {
	if argv == nil {
		return nil, fmt.Errorf("bench: no way to start a sluice gateway (GatewayArgv is not set)")
	}
	dir, err := t.lab.Dir()
	if err != nil {
		return nil, err
	}
	var states [2]string
	for i, n := range []string{"state-a", "state-b"} {
		states[i] = filepath.Join(dir, n)
		if err := os.Mkdir(states[i], 0o700); err != nil {
			return nil, err
		}
	}
	texts, err := SluiceConfigs(cell, states)
	if err != nil {
		return nil, err
	}
	var pids []int
	for i, name := range []string{"a", "b"} {
		file := filepath.Join(dir, "gateway-"+name+".toml")
		if err := os.WriteFile(file, texts[i], 0o600); err != nil {
			return nil, err
		}
		if _, err := config.ParseGateway(file, texts[i]); err != nil {
			return nil, fmt.Errorf("bench: the generated configuration of gateway %s: %w", name, err)
		}
		sock := filepath.Join(dir, "gateway-"+name+".sock")
		args, err := argv("run", "-c", file, "--socket", sock)
		if err != nil {
			return nil, err
		}
		ns := t.ns[i]
		p, err := t.lab.Start(ns, "sluice gateway "+name, args, &lab.ProcOptions{LogFile: filepath.Join(dir, "gateway-"+name+".log")})
		if err != nil {
			return nil, err
		}
		if err := ns.WaitLink(ctx, sluiceTUN, upWait, p); err != nil {
			return nil, err
		}
		if err := lab.WaitControl(ctx, sock, upWait, p); err != nil {
			return nil, err
		}
		pids = append(pids, p.Pid())
	}
	return pids, nil
}
