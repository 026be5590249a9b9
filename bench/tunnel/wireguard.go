package tunnel

// wireguard-go as a system under test: one daemon in each namespace, in
// the foreground, configured through its UAPI socket (the text protocol of
// wireguard.com/xplatform), with the device address, MTU and routes set
// with netlink as wg-quick would. N tunnels are one peer with N
// allowed-IP prefixes: between two hosts with one key each there is only
// one WireGuard session, so the crypto state is shared where sluice has N
// SA pairs.

import (
	"bufio"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// WireGuardModule and WireGuardVersion pin the wireguard-go the bench
// builds when none is installed. The module has no semantic version tags;
// this pseudo-version is the commit that reports itself as
// "wireguard-go v0.0.20250522".
const (
	WireGuardModule  = "golang.zx2c4.com/wireguard"
	WireGuardVersion = "v0.0.0-20260522210424-ecfc5a8d5446"
	WireGuardName    = "wireguard-go v0.0.20250522"
)

// wgPort is the UDP port of both daemons; wgMTU their device MTU
// (wireguard-go's default and wg-quick's).
const (
	wgPort = 51820
	wgMTU  = 1420
)

// uapiDir is where wireguard-go opens its UAPI sockets. It is shared by all
// namespaces, so the two devices have distinct names.
const uapiDir = "/var/run/wireguard"

// FindWireGuard returns the wireguard-go to run: path if set, else
// wireguard-go on PATH, else the one built earlier in cacheDir, else one
// built now with `go install` into cacheDir. built says whether it was
// built now.
func FindWireGuard(ctx context.Context, path, cacheDir string) (exe string, built bool, err error) {
	if path != "" {
		return path, false, nil
	}
	if p, err := exec.LookPath("wireguard-go"); err == nil {
		return p, false, nil
	}
	if cacheDir == "" {
		return "", false, errors.New("bench: wireguard-go is not on PATH and there is no cache directory to build it in")
	}
	dir := filepath.Join(cacheDir, "wireguard-go-"+WireGuardVersion)
	exe = filepath.Join(dir, "wireguard-go")
	if _, err := os.Stat(exe); err == nil {
		return exe, false, nil
	}
	goExe, err := exec.LookPath("go")
	if err != nil {
		return "", false, errors.New("bench: wireguard-go is not on PATH, and there is no go command to build it")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.CommandContext(ctx, goExe, "install", WireGuardModule+"@"+WireGuardVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	cmd.Dir = dir // outside any module, so that go install takes the pinned version as is
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("bench: go install %s@%s: %w: %s", WireGuardModule, WireGuardVersion, err, strings.TrimSpace(string(out)))
	}
	// go install names the binary after the module's last element.
	if err := os.Rename(filepath.Join(dir, "wireguard"), exe); err != nil {
		return "", false, fmt.Errorf("bench: %w", err)
	}
	return exe, true, nil
}

// wgKey is a Curve25519 key pair.
type wgKey struct{ private, public []byte }

func newWGKey() (wgKey, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return wgKey{}, err
	}
	return wgKey{private: k.Bytes(), public: k.PublicKey().Bytes()}, nil
}

// UAPIConfig returns the UAPI "set" request that configures one side: its
// private key and port, and the one peer with its endpoint and allowed IPs.
// Keys are hex, as the protocol wants them.
func UAPIConfig(private, peerPublic []byte, port int, endpoint netip.AddrPort, allowed []netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "set=1\nprivate_key=%s\nlisten_port=%d\nreplace_peers=true\n", hex.EncodeToString(private), port)
	fmt.Fprintf(&b, "public_key=%s\nendpoint=%s\nreplace_allowed_ips=true\n", hex.EncodeToString(peerPublic), endpoint)
	for _, p := range allowed {
		fmt.Fprintf(&b, "allowed_ip=%s\n", p.Masked())
	}
	b.WriteString("\n")
	return b.String()
}

// uapi sends one request to the device's UAPI socket and returns the
// errno of its answer (0 is success).
func uapi(ctx context.Context, ifname, req string) error {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "unix", filepath.Join(uapiDir, ifname+".sock"))
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "errno="); ok {
			if n, _ := strconv.Atoi(v); n != 0 {
				return fmt.Errorf("bench: wireguard-go %s: UAPI errno %d", ifname, n)
			}
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("bench: wireguard-go %s: UAPI answer without errno", ifname)
}

// startWireGuard starts wireguard-go in both namespaces, configures both
// devices for n tunnels and returns the daemons' pids.
func startWireGuard(ctx context.Context, t *topology, exe string, n int) ([]int, error) {
	dir, err := t.lab.Dir()
	if err != nil {
		return nil, err
	}
	var keys [2]wgKey
	for i := range keys {
		if keys[i], err = newWGKey(); err != nil {
			return nil, err
		}
	}
	// Names unique on the machine: the UAPI directory is shared.
	tag := strings.TrimPrefix(t.lab.ID(), lab.Prefix)
	tag = tag[strings.LastIndexByte(tag, '-')+1:]
	inner := [2]func(int) netip.Prefix{innerA, innerB}
	var pids []int
	for i, side := range []string{"a", "b"} {
		ifname := "slwg" + tag + side
		ns := t.ns[i]
		p, err := t.lab.Start(ns, "wireguard-go "+side, []string{exe, "-f", ifname},
			&lab.ProcOptions{Env: []string{"WG_PROCESS_FOREGROUND=1", "LOG_LEVEL=error"}, LogFile: filepath.Join(dir, "wireguard-"+side+".log")})
		if err != nil {
			return nil, err
		}
		if err := ns.WaitLink(ctx, ifname, upWait, p); err != nil {
			return nil, err
		}
		var allowed []netip.Prefix
		for k := range n {
			allowed = append(allowed, inner[1-i](k))
		}
		req := UAPIConfig(keys[i].private, keys[1-i].public, wgPort, netip.AddrPortFrom(wan[1-i].Addr(), wgPort), allowed)
		err = lab.WaitFor(ctx, "wireguard-go "+side+"'s UAPI socket", upWait, 0, func() (bool, error) {
			if done, err := p.Exited(); done {
				return false, fmt.Errorf("%w: wireguard-go exited (%v): %s", lab.ErrStop, err, p.Output())
			}
			err := uapi(ctx, ifname, req)
			return err == nil, err
		})
		if err != nil {
			return nil, err
		}
		if _, err := ns.Exec(ctx, "ip", "link", "set", "dev", ifname, "mtu", strconv.Itoa(wgMTU)); err != nil {
			return nil, err
		}
		for k := range n {
			if err := ns.AddAddr(ifname, inner[i](k)); err != nil {
				return nil, err
			}
		}
		if err := ns.LinkUp(ifname); err != nil {
			return nil, err
		}
		for k := range n {
			if err := ns.AddRoute(inner[1-i](k).Masked(), ifname, netip.Addr{}); err != nil {
				return nil, err
			}
		}
		pids = append(pids, p.Pid())
	}
	return pids, nil
}
