package e2e_test

// A sluice gateway opposite strongSwan's userspace data plane
// (kernel-libipsec), with the SAs strongSwan negotiated. sluice has no IKE
// yet, so the SAs come from a real IKEv2 negotiation between two charons,
// and sluice then takes the responder's place:
//
//  1. Namespaces "ss" (strongSwan, site 10.1.0.0/24) and "gw" (the
//     responder's, later sluice's, site 10.2.0.0/24), joined by a veth
//     (192.0.2.1 - 192.0.2.2). Each charon runs in its namespace with its
//     own strongswan.conf (STRONGSWAN_CONF) and a private /run (unshare -m
//     and a tmpfs), driven by swanctl over its own vici socket.
//  2. The charon in "ss" initiates IKEv2 (PSK) with the one in "gw"; the
//     CHILD_SA is ESP in UDP 4500, tunnel mode, with the suite under test.
//  3. The initiator's log (chd = 4) holds the ESP keys of both directions
//     and its SPIs; the test reads them from there.
//  4. The responder charon is stopped without telling the initiator (a
//     blackhole route eats its DELETE), and a sluice gateway starts in
//     "gw" with exactly those SAs, on 192.0.2.2:4500.
//  5. ping both ways and iperf3 TCP both ways through strongSwan <-> sluice.
//
// e2e/strongswan/README.md says the same for people who run it by hand.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// charonPath is Debian's charon daemon (strongswan-charon).
const charonPath = "/usr/lib/ipsec/charon"

// The network of the interop test.
var (
	ssWAN   = [2]netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}
	ssInner = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.1/24"), netip.MustParsePrefix("10.2.0.1/24")}
)

// TestStrongSwanInterop puts a sluice gateway opposite strongSwan 5.9.8's
// kernel-libipsec data plane, with the SAs strongSwan negotiated, for each
// ESP suite both support, and sends ping and TCP through it both ways.
func TestStrongSwanInterop(t *testing.T) {
	for _, alg := range []string{"aes128gcm16", "aes256gcm16", "chacha20poly1305", "aes128-sha256", "aes256-sha256"} {
		t.Run(alg, func(t *testing.T) {
			lab.Require(t)
			requireTool(t, "swanctl", "unshare", "ping", "iperf3", "ss")
			if _, err := os.Stat(charonPath); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s: %v (CI=true: not skipping; .ci/run installs strongswan-charon)", charonPath, err)
				}
				t.Skipf("strongSwan's charon is not installed: %v", err)
			}
			strongSwanInterop(t, alg)
		})
	}
}

// charon is one strongSwan daemon in a namespace.
type charon struct {
	name string
	ns   *lab.Netns
	conf string // strongswan.conf
	vici string // socket path
	log  string // filelog path
	proc *lab.Process
}

func strongSwanInterop(t *testing.T, alg string) {
	ctx := testContext(t, defaultSetup)
	l := lab.New(nil)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("removing the test bed: %v", err)
		}
	})
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ssNS, err := l.NewNetns(ctx, "ss")
	if err != nil {
		t.Fatal(err)
	}
	gwNS, err := l.NewNetns(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(ssNS, wanIf, gwNS, wanIf); err != nil {
		t.Fatal(err)
	}
	for i, ns := range []*lab.Netns{ssNS, gwNS} {
		if err := ns.AddAddr(wanIf, ssWAN[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Each charon needs an address in its local traffic selector: it
	// installs the route into its TUN device with it as the source, and
	// refuses the CHILD_SA without one. strongSwan's is its site address;
	// the responder's goes again before sluice takes over.
	if err := ssNS.AddAddr("lo", netip.PrefixFrom(ssInner[0].Addr(), 32)); err != nil {
		t.Fatal(err)
	}
	if err := gwNS.AddAddr("lo", netip.PrefixFrom(ssInner[1].Addr(), 32)); err != nil {
		t.Fatal(err)
	}

	// 1. Two charons.
	ini := &charon{name: "initiator", ns: ssNS}
	resp := &charon{name: "responder", ns: gwNS}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []*charon{ini, resp} {
				if data, err := os.ReadFile(c.log); err == nil {
					t.Logf("strongSwan %s log (%s):\n%s", c.name, c.log, tail(string(data), 80))
				}
			}
		}
	})
	psk := randomHex(16)
	ids := [2]string{"strongswan@e2e.sluice", "sluice@e2e.sluice"}
	for i, c := range []*charon{ini, resp} {
		j := 1 - i
		c.conf = filepath.Join(dir, c.name+".strongswan.conf")
		c.vici = filepath.Join(dir, c.name+".vici")
		c.log = filepath.Join(dir, c.name+".charon.log")
		renderTemplate(t, "strongswan/strongswan.conf.tmpl", c.conf, map[string]string{"Vici": c.vici, "Log": c.log})
		renderTemplate(t, "strongswan/swanctl.conf.tmpl", filepath.Join(dir, c.name+".swanctl.conf"), map[string]string{
			"Local": ssWAN[i].Addr().String(), "Remote": ssWAN[j].Addr().String(),
			"LocalTS": ssInner[i].Masked().String(), "RemoteTS": ssInner[j].Masked().String(),
			"LocalID": ids[i], "RemoteID": ids[j], "ESP": alg, "PSK": psk,
		})
		c.start(t, ctx, l)
	}
	for _, c := range []*charon{ini, resp} {
		if out, err := c.swanctl(ctx, "--load-all", "--file", filepath.Join(dir, c.name+".swanctl.conf")); err != nil {
			t.Fatalf("strongSwan %s: %v", c.name, err)
		} else if !strings.Contains(out, "successfully loaded 1 connections") {
			t.Fatalf("strongSwan %s: swanctl --load-all: %s", c.name, out)
		}
	}

	// 2. IKEv2.
	start := time.Now()
	if out, err := ini.swanctl(ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
		t.Fatalf("strongSwan initiator: %v\n%s", err, out)
	}
	t.Logf("strongSwan: IKE_SA and CHILD_SA established in %v", time.Since(start).Round(time.Millisecond))

	// 3. The keys.
	keys, err := readCharonKeys(ini.log)
	if err != nil {
		t.Fatalf("strongSwan initiator log %s: %v", ini.log, err)
	}
	t.Logf("strongSwan negotiated %s; SPIs 0x%08x (initiator in) and 0x%08x (initiator out)", keys.proposal, keys.spiIn, keys.spiOut)

	// 4. The responder goes without a word to the initiator: its DELETE
	// meets a blackhole route.
	route := func(op string) {
		ipCmd(t, ctx, "-n", gwNS.Name(), "route", op, "blackhole", ssWAN[0].Addr().String()+"/32")
	}
	route("add")
	if err := resp.proc.Stop(); err != nil {
		t.Fatalf("stopping the strongSwan responder: %v", err)
	}
	route("del")
	ipCmd(t, ctx, "-n", gwNS.Name(), "addr", "del", netip.PrefixFrom(ssInner[1].Addr(), 32).String(), "dev", "lo")

	gw := &site{tb: &testbed{t: t, ctx: ctx, lab: l, dir: dir}, name: "gw", ns: gwNS, wan: ssWAN[1].Addr(),
		cfgPath: filepath.Join(dir, "gateway-gw.toml"), sock: filepath.Join(dir, "gw.sock"), logPath: filepath.Join(dir, "gateway-gw.log")}
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(gw.logPath); err == nil {
				t.Logf("sluice log:\n%s", tail(string(data), 40))
			}
		}
	})
	ssAddr, gwAddr := ssWAN[0].Addr(), ssWAN[1].Addr()
	cfg := &gwConfig{
		TUN: []netip.Prefix{ssInner[1]},
		UDP: netip.AddrPortFrom(gwAddr, 4500),
		Tunnels: []tunnelConfig{{Name: "to-strongswan", Local: gwAddr, Peer: ssAddr, Encap: "udp",
			Remote: []netip.Prefix{ssInner[0].Masked()}, Out: "gw-to-ss", In: []string{"ss-to-gw"}}},
		SAs: []saConfig{
			{Name: "ss-to-gw", SPI: keys.spiOut, Src: ssAddr, Dst: gwAddr, Encap: "udp", Alg: alg,
				EncKey: hex.EncodeToString(keys.encI), AuthKey: hex.EncodeToString(keys.integI), ReplayWindow: 64},
			{Name: "gw-to-ss", SPI: keys.spiIn, Src: gwAddr, Dst: ssAddr, Encap: "udp", Alg: alg,
				EncKey: hex.EncodeToString(keys.encR), AuthKey: hex.EncodeToString(keys.integR), ReplayWindow: 64},
		},
	}
	gw.start(cfg)

	// 5. Traffic both ways.
	ssIn, gwIn := ssInner[0].Addr(), ssInner[1].Addr()
	waitPing(t, ctx, ssNS, gwIn)
	waitPing(t, ctx, gwNS, ssIn)
	mustPing(t, ctx, "strongSwan "+alg+" strongSwan->sluice", ssNS, gwIn, 50, 10*time.Millisecond)
	mustPing(t, ctx, "strongSwan "+alg+" sluice->strongSwan", gwNS, ssIn, 50, 10*time.Millisecond)
	tb := gw.tb
	kss := readKernelCounters(ctx, ssNS)
	mustIperf(t, tb, "strongSwan "+alg+" strongSwan->sluice", gwNS, gwIn, ssNS, iperfOptions{Seconds: 2, Bind: ssIn})
	mustIperf(t, tb, "strongSwan "+alg+" sluice->strongSwan", ssNS, ssIn, gwNS, iperfOptions{Seconds: 2})
	t.Logf("kernel drops in strongSwan's namespace during iperf3: %v", readKernelCounters(ctx, ssNS).since(kss))

	// strongSwan still has its CHILD_SA, with the counters of what it
	// sealed for and opened from sluice.
	if out, err := ini.swanctl(ctx, "--list-sas"); err != nil {
		t.Error(err)
	} else {
		t.Logf("strongSwan initiator, swanctl --list-sas:\n%s", strings.TrimSpace(out))
		for _, spi := range []uint32{keys.spiIn, keys.spiOut} {
			if !strings.Contains(out, fmt.Sprintf("%08x", spi)) {
				t.Errorf("strongSwan no longer lists SPI %08x", spi)
			}
		}
	}

	// sluice opened everything strongSwan sent it.
	sas := gw.sas()
	in, out := mustSA(t, sas, keys.spiOut, "in"), mustSA(t, sas, keys.spiIn, "out")
	t.Logf("sluice: SA 0x%08x opened %d packets (drops %v); SA 0x%08x sealed %d; data plane drops %v",
		in.SPI, in.Packets, in.Drops, out.SPI, out.Packets, drops(gw.stats()))
	for _, bad := range []string{"auth_failed", "replay", "bad_padding", "bad_inner"} {
		if in.Drops[bad] > 0 {
			t.Errorf("sluice dropped %d packets from strongSwan for %s", in.Drops[bad], bad)
		}
	}
}

// ipCmd runs iproute2's ip with args and fails the test if it fails.
func ipCmd(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// renderTemplate renders the template file tmpl (relative to this package)
// with data into out.
func renderTemplate(t *testing.T, tmpl, out string, data any) {
	t.Helper()
	tp, err := template.ParseFiles(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tp.Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs charon in its namespace with a private /run, and waits until
// its vici socket answers.
func (c *charon) start(t *testing.T, ctx context.Context, l *lab.Lab) {
	t.Helper()
	argv := []string{"unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run && exec " + charonPath}
	p, err := l.Start(c.ns, "strongSwan "+c.name, argv, &lab.ProcOptions{Env: []string{"STRONGSWAN_CONF=" + c.conf}})
	if err != nil {
		t.Fatal(err)
	}
	c.proc = p
	err = lab.WaitFor(ctx, "strongSwan "+c.name+" to answer on "+c.vici, upWait, 50*time.Millisecond, func() (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%w: charon exited: %v: %s", lab.ErrStop, err, p.Output())
		}
		_, err := c.swanctl(ctx, "--stats")
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// swanctl runs swanctl with args against the charon's vici socket.
func (c *charon) swanctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "swanctl", append(args, "--uri", "unix://"+c.vici)...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+c.conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("swanctl %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 10))
	}
	return string(out), nil
}

// charonKeys are the ESP SAs of one CHILD_SA as the initiator logged them
// (filelog chd = 4). The initiator's keys protect what it sends, which
// goes to the responder's SPI (its "_o" SPI); the responder's keys what
// it receives ("_i").
type charonKeys struct {
	proposal       string
	spiIn, spiOut  uint32 // the initiator's inbound and outbound SPIs
	encI, encR     []byte // encryption keys (AEAD: key and salt)
	integI, integR []byte // integrity keys (CBC suites)
}

var (
	// 15[CHD] encryption initiator key => 20 bytes @ 0x7f378c03e470
	charonKeyRE = regexp.MustCompile(`^(\d+)\[CHD\] (encryption|integrity) (initiator|responder) key => (\d+) bytes`)
	// 15[CHD]   16: D3 0A BC 28                                      ...(
	charonDumpRE = regexp.MustCompile(`^(\d+)\[CHD\]\s+\d+: (.*)$`)
	// 15[IKE] CHILD_SA net{1} established with SPIs 701ddd99_i 6000c924_o and TS ...
	charonSPIRE = regexp.MustCompile(`CHILD_SA \S+ established with SPIs ([0-9a-f]{8})_i ([0-9a-f]{8})_o`)
	// 15[CFG] selected proposal: ESP:AES_GCM_16_128/NO_EXT_SEQ
	charonPropRE = regexp.MustCompile(`selected proposal: (ESP:\S+)`)
)

// readCharonKeys reads the first CHILD_SA's keys and SPIs from a charon
// log written with chd = 4.
func readCharonKeys(path string) (*charonKeys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	k := &charonKeys{}
	var (
		cur    *[]byte // the key being read
		thread string
		want   int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if cur != nil {
			if m := charonDumpRE.FindStringSubmatch(line); m != nil && m[1] == thread {
				for _, tok := range strings.Split(m[2], " ") {
					if len(*cur) == want || len(tok) != 2 {
						break
					}
					b, err := hex.DecodeString(tok)
					if err != nil {
						break
					}
					*cur = append(*cur, b[0])
				}
				if len(*cur) == want {
					cur = nil
				}
				continue
			}
			if len(*cur) != want {
				return nil, fmt.Errorf("key dump cut short after %d of %d bytes at %q", len(*cur), want, line)
			}
		}
		if m := charonKeyRE.FindStringSubmatch(line); m != nil {
			var dst *[]byte
			switch m[2] + " " + m[3] {
			case "encryption initiator":
				dst = &k.encI
			case "encryption responder":
				dst = &k.encR
			case "integrity initiator":
				dst = &k.integI
			default:
				dst = &k.integR
			}
			if len(*dst) > 0 {
				continue // a later CHILD_SA
			}
			thread, cur = m[1], dst
			want, _ = strconv.Atoi(m[4])
			continue
		}
		if m := charonPropRE.FindStringSubmatch(line); m != nil && k.proposal == "" {
			k.proposal = m[1]
		}
		if m := charonSPIRE.FindStringSubmatch(line); m != nil && k.spiIn == 0 {
			in, _ := strconv.ParseUint(m[1], 16, 32)
			out, _ := strconv.ParseUint(m[2], 16, 32)
			k.spiIn, k.spiOut = uint32(in), uint32(out)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case k.spiIn == 0 || k.spiOut == 0:
		return nil, fmt.Errorf("no \"CHILD_SA ... established with SPIs\" line")
	case len(k.encI) == 0 || len(k.encR) == 0:
		return nil, fmt.Errorf("no ESP encryption keys (is chd = 4 set in the filelog?)")
	}
	return k, nil
}
