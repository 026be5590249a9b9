package failover

// The test bed of one run: lab.HATopology (a wan router, gateways a and b
// behind the virtual addresses 192.0.2.10 on the wan and 10.1.0.1 on the
// lan, a host behind the lan router, the peer and a host behind it), the
// gateway daemons and the peer, configured as a user would.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/internal/lab"
)

// The static tunnel between the gateways and the peer: its SPIs, suite
// and TUN device.
const (
	spiGP     = 0x3001 // gateway -> peer
	spiPG     = 0x4001 // peer -> gateway
	espSuite  = "aes128gcm16"
	ikeSuite  = "aes128-sha256-x25519"
	tunName   = "sluice0"
	upWait    = 20 * time.Second
	gwID      = "gw@bench.sluice"
	peerID    = "peer@bench.sluice"
	childName = "net"
)

// daemon is one `sluice run` in a namespace: its files and the process
// last started.
type daemon struct {
	name  string
	ns    *lab.Netns
	cfg   string // configuration file
	sock  string // control socket
	log   string // log file of the first start; later starts add .N
	proc  *lab.Process
	start int
}

// bed is the network of one run and what runs in it.
type bed struct {
	ctx  context.Context
	o    *Options
	lab  *lab.Lab
	dir  string
	topo *lab.HATopology
	gw   [2]*daemon // a, b
	peer *daemon
	ch   *lab.Charon // strongSwan in gateway a
}

// newBed builds the topology in a new lab; the caller closes b.lab.
func newBed(ctx context.Context, o *Options) (*bed, error) {
	l := lab.New(&lab.Options{Log: o.Log})
	b := &bed{ctx: ctx, o: o, lab: l}
	var err error
	if b.dir, err = l.Dir(); err != nil {
		return b, err
	}
	if b.topo, err = l.NewHATopology(ctx); err != nil {
		return b, err
	}
	mk := func(name string, ns *lab.Netns) *daemon {
		return &daemon{name: name, ns: ns, cfg: filepath.Join(b.dir, "gateway-"+name+".toml"),
			sock: filepath.Join(b.dir, name+".sock"), log: filepath.Join(b.dir, "gateway-"+name+".log")}
	}
	b.gw = [2]*daemon{mk("a", b.topo.A.NS), mk("b", b.topo.B.NS)}
	b.peer = mk("peer", b.topo.Peer)
	return b, nil
}

// hexKey returns n random bytes in hex.
func hexKey(n int) string {
	k := make([]byte, n)
	rand.Read(k)
	return hex.EncodeToString(k)
}

// staticConfigs returns the gateways' configuration (both members run the
// same; run gives each its own state directory) and the peer's: one
// static tunnel, ESP in UDP, aes128gcm16 keyed from crypto/rand; the
// gateways' local address is the wan virtual address.
func (b *bed) staticConfigs() (gw, peer *config.File) {
	t := b.topo
	gwAddr, peerAddr := t.WANVIP.Addr(), t.PeerWAN.Addr()
	var sas []config.FileSA
	for _, s := range []struct {
		name     string
		spi      uint32
		src, dst netip.Addr
	}{{"gw-to-peer", spiGP, gwAddr, peerAddr}, {"peer-to-gw", spiPG, peerAddr, gwAddr}} {
		// aes128gcm16: a 16-byte key and a 4-byte salt.
		sas = append(sas, config.FileSA{Name: s.name, SPI: s.spi, Src: s.src.String(), Dst: s.dst.String(), Mode: "tunnel", Encap: "udp",
			ESP: espSuite, EncKey: hexKey(20), ReplayWindow: new(1024)})
	}
	site := func(tun, name string, local, peer netip.Addr, remote netip.Prefix, out, in string) *config.File {
		return &config.File{
			Gateway: config.FileGateway{LogLevel: "info"},
			TUN:     &config.FileTUN{Name: tunName, Addresses: []string{tun}},
			UDP:     &config.FileUDP{Listen: netip.AddrPortFrom(local, 4500).String()},
			Tunnels: []config.FileTunnel{{Name: name, Local: local.String(), Peer: peer.String(), Encap: "udp", PeerPort: 4500,
				Remote: []string{remote.String()}, Out: out, In: []string{in}}},
			SAs: sas,
		}
	}
	gw = site("10.255.0.1/32", "to-peer", gwAddr, peerAddr, t.RemoteNet, "gw-to-peer", "peer-to-gw")
	peer = site("10.2.0.1/24", "to-site", peerAddr, gwAddr, t.LocalNet, "peer-to-gw", "gw-to-peer")
	return gw, peer
}

// ikePeerConfig is the peer's configuration opposite strongSwan: an IKEv2
// connection it initiates (start_action = "start", which also restarts it
// when the gateway is found dead), PSK (hex), liveness checks every
// Options.DPDDelay, the retransmission schedule left at its default.
func (b *bed) ikePeerConfig(psk string) *config.File {
	t := b.topo
	c := config.FileConnection{
		Name: "gw", LocalAddrs: []string{t.PeerWAN.Addr().String()}, RemoteAddrs: []string{t.WANVIP.Addr().String()},
		Proposals: ikeSuite, Encap: true,
		Local:  config.FileAuth{Auth: config.AuthPSK, ID: peerID},
		Remote: config.FileAuth{Auth: config.AuthPSK, ID: gwID},
		Children: []config.FileChild{{Name: childName, LocalTS: []string{t.RemoteNet.String()}, RemoteTS: []string{t.LocalNet.String()},
			ESPProposals: espSuite, StartAction: config.StartStart}},
	}
	if b.o.DPDDelay > 0 {
		c.DPDDelay = b.o.DPDDelay.String()
	}
	return &config.File{
		Gateway:     config.FileGateway{LogLevel: "info"},
		TUN:         &config.FileTUN{Name: tunName, Addresses: []string{"10.2.0.1/24"}},
		UDP:         &config.FileUDP{Listen: netip.AddrPortFrom(t.PeerWAN.Addr(), 4500).String()},
		Connections: []config.FileConnection{c},
		Secrets:     []config.FileSecret{{Type: config.SecretIKE, IDs: []string{peerID, gwID}, Secret: "0x" + psk}},
	}
}

// writeFile writes a file whole (renamed into place).
func writeFile(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// run writes f as d's configuration, with d's own state directory, and
// starts d (see restart).
func (b *bed) run(d *daemon, f *config.File) error {
	c := *f
	c.Gateway.StateDir = filepath.Join(b.dir, "state-"+d.name)
	text, err := c.Encode()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := writeFile(d.cfg, "# sluice bench failover: "+d.name+"\n\n"+string(text)); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return b.restart(d)
}

// restart starts d on its configuration file as it is and waits until
// its TUN device exists and its control socket answers.
func (b *bed) restart(d *daemon) error {
	if b.o.GatewayArgv == nil {
		return fmt.Errorf("bench: no way to start a sluice gateway (GatewayArgv is not set)")
	}
	d.start++
	logPath := d.log
	if d.start > 1 {
		logPath = fmt.Sprintf("%s.%d", d.log, d.start)
	}
	argv, err := b.o.GatewayArgv("run", "-c", d.cfg, "--socket", d.sock)
	if err != nil {
		return err
	}
	p, err := b.lab.Start(d.ns, "sluice gateway "+d.name, argv, &lab.ProcOptions{LogFile: logPath})
	if err != nil {
		return err
	}
	d.proc = p
	if err := d.ns.WaitLink(b.ctx, tunName, upWait, p); err != nil {
		return err
	}
	return lab.WaitControl(b.ctx, d.sock, upWait, p)
}

// cli runs `sluice ARGS --socket SOCK` against d and returns its output.
func (b *bed) cli(d *daemon, args ...string) (string, error) {
	argv, err := b.o.GatewayArgv(append(args, "--socket", d.sock)...)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("sluice %s: %w: %s", strings.Join(args, " "), err, lab.Tail(strings.TrimSpace(string(out)), 3))
	}
	return string(out), nil
}

// refused sums the replay drops of d's inbound SAs (the peer's packets
// it refused as replays since it started), and returns all its drops by
// reason (data plane workers and receivers, and "sa:" + the SAs'), those
// that are not 0.
func (b *bed) refused(d *daemon) (int64, map[string]uint64, error) {
	st, err := lab.ControlStats(b.ctx, d.sock)
	if err != nil {
		return 0, nil, err
	}
	m := map[string]uint64{}
	var n uint64
	for _, sa := range st.SAs {
		if sa.Direction == "in" {
			n += sa.Drops["replay"] + sa.Drops["replay_takeover"] // both: esp.ReasonTakeover is a replay at a takeover's bound
		}
		for k, v := range sa.Drops {
			m["sa:"+k] += v
		}
	}
	for _, w := range st.Dataplane.Workers {
		for k, v := range w.Drops {
			m[k] += v
		}
	}
	for _, r := range st.Dataplane.Receivers {
		for k, v := range r.Drops {
			m[k] += v
		}
	}
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return int64(n), m, nil
}

// haCreds makes the pair's sync-channel CA, certificates and keys in the
// bed's directory (lab.WriteHACreds).
func (b *bed) haCreds() (lab.HACreds, error) { return lab.WriteHACreds(filepath.Join(b.dir, "ha")) }

// The strongSwan gateway: charon in gateway a, responder only, no
// liveness checks of its own, the same suites as the peer.
const charonConf = `# sluice bench failover: charon as the gateway
charon {
  load_modular = no
  load = random nonce openssl pem pkcs1 x509 kernel-libipsec kernel-netlink socket-default vici kdf gcm chapoly aes sha2 hmac curve25519
  plugins {
    vici {
      socket = unix://%s
    }
  }
  filelog {
    bench {
      path = %s
      default = 1
      ike = 2
      flush_line = yes
    }
  }
}
`

const swanctlConf = `connections {
  bench {
    version = 2
    local_addrs = %s
    remote_addrs = %s
    encap = yes
    dpd_delay = 0s
    mobike = no
    rekey_time = 0s
    reauth_time = 0s
    proposals = %s
    local {
      auth = psk
      id = %s
    }
    remote {
      auth = psk
      id = %s
    }
    children {
      %s {
        mode = tunnel
        local_ts = %s
        remote_ts = %s
        esp_proposals = %s
        rekey_time = 0s
        life_time = 0s
        rand_time = 0s
        dpd_action = none
        start_action = none
      }
    }
  }
}
secrets {
  ike-bench {
    id-1 = %s
    id-2 = %s
    secret = 0x%s
  }
}
`

// startCharon writes charon's files (the first time) and starts it in
// gateway a with its connection loaded.
func (b *bed) startCharon(psk string) error {
	t := b.topo
	if b.ch == nil {
		b.ch = b.lab.NewCharon(t.A.NS, b.dir)
		if err := writeFile(b.ch.Conf(), fmt.Sprintf(charonConf, b.ch.Vici(), b.ch.Log())); err != nil {
			return err
		}
		sw := fmt.Sprintf(swanctlConf, t.WANVIP.Addr(), t.PeerWAN.Addr(), ikeSuite, gwID, peerID, childName,
			t.LocalNet, t.RemoteNet, espSuite, gwID, peerID, psk)
		if err := writeFile(filepath.Join(b.dir, "swanctl.conf"), sw); err != nil {
			return err
		}
	}
	if err := b.ch.Start(b.ctx); err != nil {
		return err
	}
	return b.ch.Load(b.ctx, filepath.Join(b.dir, "swanctl.conf"), 1)
}

// logs returns the last lines of the daemons' logs, for an error.
func (b *bed) logs() string {
	var s strings.Builder
	for _, d := range []*daemon{b.gw[0], b.gw[1], b.peer} {
		if d.proc != nil {
			fmt.Fprintf(&s, "\n--- %s:\n%s", d.name, lab.Tail(d.proc.Output(), 15))
		}
	}
	if b.ch != nil {
		if t, err := b.ch.LogTail(15); err == nil {
			fmt.Fprintf(&s, "\n--- charon:\n%s", t)
		}
	}
	return s.String()
}
