package ikebench

// The two responders, as a user runs them: `sluice run` with a road
// warrior connection (its defaults but for the one proposal), and charon
// with kernel-libipsec and its default thread pool (INTEROP.md).

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/internal/lab"
)

// upWait bounds a responder's start.
const upWait = 30 * time.Second

// sluiceResp is a running `sluice run`.
type sluiceResp struct {
	proc *lab.Process
	sock string
	log  string
}

func (s *sluiceResp) pid() int { return s.proc.Pid() }

// stop kills the gateway: it has been measured, and an orderly end of
// thousands of IKE SAs is not what the bench is about.
func (s *sluiceResp) stop() error { s.proc.Kill(); return nil }
func (s *sluiceResp) logs() string {
	return "\n--- sluice:\n" + lab.Tail(s.proc.Output(), 15)
}

// installed counts the inbound SAs of road warriors' tunnels in the SAD.
func (s *sluiceResp) installed(ctx context.Context) (int, error) {
	st, err := lab.ControlStats(ctx, s.sock)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sa := range st.SAs {
		if sa.Direction == "in" && strings.HasPrefix(sa.Tunnel, "rw/") {
			n++
		}
	}
	return n, nil
}

// startSluice writes the gateway's configuration and starts it in its
// namespace.
func (b *bed) startSluice(ctx context.Context, creds *credentials) (*sluiceResp, error) {
	kind := creds.kind
	if b.o.GatewayArgv == nil {
		return nil, fmt.Errorf("no way to start a sluice gateway (GatewayArgv is not set)")
	}
	ns := b.ns[Sluice]
	addr := nth(sluiceNet, 1)
	c := config.FileConnection{
		Name: "rw", LocalAddrs: []string{addr.String()}, Proposals: ikeSuite,
		Local:  config.FileAuth{Auth: config.AuthPSK, ID: gwID},
		Remote: config.FileAuth{Auth: config.AuthPSK},
		Children: []config.FileChild{{Name: "rw", LocalTS: []string{site.String()}, RemoteTS: []string{inner.String()},
			ESPProposals: espSuite}},
	}
	secrets := []config.FileSecret{{Type: config.SecretIKE, IDs: []string{gwID}, Secret: "0x" + hex.EncodeToString(creds.psk)}}
	if kind != AuthPSK {
		cert, key, ca, err := creds.writeSluice(filepath.Join(b.dir, "sluice-"+kind))
		if err != nil {
			return nil, err
		}
		c.Local = config.FileAuth{Auth: config.AuthPubkey, ID: gwID, Certs: []string{cert}}
		c.Remote = config.FileAuth{Auth: config.AuthPubkey, CACerts: []string{ca}}
		secrets = []config.FileSecret{{Type: config.SecretPrivate, File: key}}
	}
	f := &config.File{
		Gateway:     config.FileGateway{StateDir: filepath.Join(b.dir, "state-"+kind)},
		TUN:         &config.FileTUN{Name: "ikeb0", Addresses: []string{netip.PrefixFrom(nth(site, 1), 24).String()}},
		UDP:         &config.FileUDP{Listen: netip.AddrPortFrom(addr, respNATTPort).String()},
		Connections: []config.FileConnection{c},
		Secrets:     secrets,
	}
	if kind != AuthPSK {
		// Our private key needs an engine that holds one: a build with
		// the ipsecmb tag defaults to ipsecmb, which holds none (sluice
		// check says so); soft is what the default build takes anyway.
		f.Gateway.Engine = "soft"
	}
	text, err := f.Encode()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(b.dir, "sluice-"+kind+".toml")
	if err := os.WriteFile(cfg, append([]byte("# sluice bench ike: the responder\n\n"), text...), 0o600); err != nil {
		return nil, err
	}
	s := &sluiceResp{sock: filepath.Join(b.dir, "sluice-"+kind+".sock"), log: filepath.Join(b.dir, "sluice-"+kind+".log")}
	argv, err := b.o.GatewayArgv("run", "-c", cfg, "--socket", s.sock)
	if err != nil {
		return nil, err
	}
	if s.proc, err = b.lab.Start(ns, "sluice gateway", argv, &lab.ProcOptions{LogFile: s.log}); err != nil {
		return nil, err
	}
	if err := lab.WaitControl(ctx, s.sock, upWait, s.proc); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// charonResp is a running charon.
type charonResp struct {
	ch *lab.Charon
}

func (c *charonResp) pid() int { return c.ch.Process().Pid() }

// stop kills charon, as sluiceResp.stop kills sluice: with thousands of
// IKE SAs charon takes longer than the lab's 5 s to end on SIGTERM.
func (c *charonResp) stop() error { c.ch.Kill(); return nil }
func (c *charonResp) logs() string {
	t, _ := c.ch.LogTail(15)
	return "\n--- charon:\n" + t
}

// installed counts the INSTALLED children swanctl --list-sas shows.
func (c *charonResp) installed(ctx context.Context) (int, error) {
	out, err := c.ch.Swanctl(ctx, "--list-sas")
	if err != nil {
		return 0, err
	}
	return strings.Count(out, ", INSTALLED, "), nil
}

// charonConf is charon's strongswan.conf: the plugins kernel-libipsec
// needs (INTEROP.md), vici, a log file at charon's default level; its
// thread pool and everything else as Debian ships them.
const charonConf = `# sluice bench ike: charon as the responder
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
    }
  }
}
`

// swanctlConf is the road warrior connection, as sluice's: one proposal,
// any remote identity, ESP in UDP (kernel-libipsec does nothing else).
const swanctlConf = `connections {
  rw {
    version = 2
    local_addrs = %s
    encap = yes
    proposals = %s
    local {
      %s
    }
    remote {
      %s
    }
    children {
      rw {
        mode = tunnel
        local_ts = %s
        remote_ts = %s
        esp_proposals = %s
      }
    }
  }
}
secrets {
  ike-rw {
    secret = 0x%s
  }
}
`

// startCharon writes charon's files and starts it in its namespace, with
// an address of the site on lo (kernel-libipsec installs a child's
// policies only then).
func (b *bed) startCharon(ctx context.Context, creds *credentials) (*charonResp, error) {
	kind := creds.kind
	ns := b.ns[Charon]
	dir := filepath.Join(b.dir, "charon-"+kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if has, _ := ns.HasLink("lo"); has {
		ns.LinkUp("lo")
	}
	if err := ns.AddAddr("lo", netip.PrefixFrom(nth(site, 1), 32)); err != nil && !strings.Contains(err.Error(), "exists") {
		return nil, err
	}
	ch := b.lab.NewCharon(ns, dir)
	if err := os.WriteFile(ch.Conf(), fmt.Appendf(nil, charonConf, ch.Vici(), ch.Log()), 0o600); err != nil {
		return nil, err
	}
	sw := filepath.Join(dir, "swanctl.conf")
	auth := "auth = psk\n      id = " + gwID
	remote := "auth = psk"
	if kind != AuthPSK {
		_, cert, err := ch.WriteCredentials(creds.ca.Cert, creds.gwCert, creds.gwKey)
		if err != nil {
			return nil, err
		}
		auth = "auth = pubkey\n      certs = " + cert + "\n      id = " + gwID
		remote = "auth = pubkey\n      cacerts = ca.pem"
	}
	text := fmt.Sprintf(swanctlConf, nth(charonNet, 1), ikeSuite, auth, remote, site, inner, espSuite, hex.EncodeToString(creds.psk))
	if err := os.WriteFile(sw, []byte(text), 0o600); err != nil {
		return nil, err
	}
	if err := ch.Start(ctx); err != nil {
		return nil, err
	}
	c := &charonResp{ch: ch}
	if err := ch.Load(ctx, sw, 1); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// perfRecord starts perf record -g on pid into b.o.Profile and returns
// what stops it.
func (b *bed) perfRecord(pid int) (func() error, error) {
	cmd := exec.Command("perf", "record", "-g", "-o", b.o.Profile, "-p", fmt.Sprint(pid))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	return func() error {
		cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%w: %s", err, lab.Tail(out.String(), 5))
		}
		return nil
	}, nil
}
