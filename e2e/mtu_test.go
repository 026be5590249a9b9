package e2e_test

// Path MTU through the tunnel (issue 16, defect 3). TCP must complete
// through every suite and both outer families, from a process on the
// gateway and from a host behind it, which it does only if the sender
// learns the tunnel's MTU: from the TUN device's MTU (a local sender's
// MSS; the kernel's own ICMP to a forwarded one), or from the ICMP error
// sluice sends when a packet is larger than its tunnel takes.
//
//	 host (netns "lan")       site A (netns)                            site B (netns)
//	 eth0 10.1.1.2/24  ====== lan0 10.1.1.1/24      wan0 ======== wan0   sluice0 10.2.0.1/24
//	      fd00:1:1::2/64           fd00:1:1::1/64   (wan4 or wan6)            fd00:2::1/64
//	 default via lan0         sluice0 10.1.0.1/24, fd00:1::1/64, forwarding

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// The host behind site A.
var (
	lanGW   = [2]netip.Prefix{netip.MustParsePrefix("10.1.1.1/24"), netip.MustParsePrefix("fd00:1:1::1/64")}
	lanHost = [2]netip.Prefix{netip.MustParsePrefix("10.1.1.2/24"), netip.MustParsePrefix("fd00:1:1::2/64")}
	// What A's tunnel carries from its side: its TUN subnet and its LAN.
	siteA = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00:1::/32")}
)

// mtuTransfer is what each TCP connection carries each way.
const (
	mtuTransfer     = 1 << 20
	mtuTransferWait = 15 * time.Second
)

// mtuBed is a test bed with a host behind site A.
type mtuBed struct {
	*testbed
	lan *lab.Netns
}

// newMTUBed builds the test bed over the outer addresses wan and the LAN
// behind A, which A forwards for.
func newMTUBed(t *testing.T, wan [2]netip.Prefix) *mtuBed {
	t.Helper()
	tb := newTestbed(t, wan)
	b := &mtuBed{testbed: tb}
	a := tb.sites[0]
	var err error
	if b.lan, err = tb.lab.NewNetns(tb.ctx, "lan"); err != nil {
		t.Fatal(err)
	}
	if err := tb.lab.Veth(a.ns, "lan0", b.lan, "eth0"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := a.ns.AddAddr("lan0", lanGW[i]); err != nil {
			t.Fatal(err)
		}
		if err := b.lan.AddAddr("eth0", lanHost[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, via := range lanGW {
		def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if via.Addr().Is6() {
			def = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		if err := b.lan.AddRoute(def, "eth0", via.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := a.ns.Exec(tb.ctx, "sysctl", "-qw", kv); err != nil {
			t.Fatalf("sysctl %s in A: %v: %s", kv, err, out)
		}
	}
	return b
}

// restart stops whatever runs at both sites and starts them on texts: B
// first, so that A, which initiates, finds it.
func (b *mtuBed) restart(texts [2]string) {
	b.t.Helper()
	for _, s := range b.sites {
		if s.proc != nil {
			s.stop()
			s.proc = nil
		}
	}
	for _, i := range []int{1, 0} {
		b.sites[i].writeConfigText(texts[i])
		b.sites[i].run()
	}
}

// tcpBothWays connects from client to server (a listener in B) and sends
// mtuTransfer bytes each way, the server's after the client's; it fails
// the test unless all arrive within mtuTransferWait.
func (b *mtuBed) tcpBothWays(what string, client *lab.Netns, src, server netip.Addr) {
	t := b.t
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, mtuTransferWait)
	defer cancel()
	ln, err := b.sites[1].ns.Listen("tcp", netip.AddrPortFrom(server, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline, _ := ctx.Deadline()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		n, err := io.Copy(io.Discard, c)
		if err == nil && n != mtuTransfer {
			err = fmt.Errorf("server received %d bytes, want %d", n, mtuTransfer)
		}
		if err == nil {
			_, err = c.Write(make([]byte, mtuTransfer))
		}
		srvErr <- err
	}()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	var c net.Conn
	err = client.Do(func() (err error) {
		c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	start := time.Now()
	_, err = c.Write(make([]byte, mtuTransfer))
	if err == nil {
		err = c.(*net.TCPConn).CloseWrite()
	}
	var n int64
	if err == nil {
		n, err = io.Copy(io.Discard, c)
	}
	if err == nil && n != mtuTransfer {
		err = fmt.Errorf("client received %d bytes, want %d", n, mtuTransfer)
	}
	if err != nil {
		ln.Close()
		c.Close()
		t.Fatalf("%s: TCP %d bytes each way: %v (server: %v)", what, mtuTransfer, err, <-srvErr)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("%s: server: %v", what, err)
	}
	t.Logf("%s: %d bytes each way in %v", what, mtuTransfer, time.Since(start).Round(time.Millisecond))
}

// checkTUNMTU fails the test unless both sites' TUN devices have MTU want.
func (b *mtuBed) checkTUNMTU(want int) {
	b.t.Helper()
	for _, s := range b.sites {
		got, err := s.ns.LinkMTU(tunName)
		if err != nil {
			b.t.Fatal(err)
		}
		if got != want {
			b.t.Errorf("gateway %s: TUN MTU %d, want %d (the underlay's 1500 less the ESP overhead)", s.name, got, want)
		}
	}
}

// ikeConfigs are sites A and B keyed over IKEv2 with one ESP proposal,
// ESP in UDP; A's child covers its LAN.
func (b *mtuBed) ikeConfigs(wan [2]netip.Prefix, suite string) [2]string {
	cfgs := ikePairConfigs(suite, true)
	for i, c := range cfgs {
		j := 1 - i
		c.StateDir = filepath.Join(b.dir, "state-"+b.sites[i].name)
		c.UDP = netip.AddrPortFrom(wan[i].Addr(), 4500)
		cc := &c.Connections[0]
		cc.Local, cc.Remote = wan[i].Addr(), wan[j].Addr()
		if i == 0 {
			cc.LocalTS = []netip.Prefix{siteA[0]}
		} else {
			cc.RemoteTS = []netip.Prefix{siteA[0]}
		}
	}
	return [2]string{cfgs[0].render(), cfgs[1].render()}
}

// TestMTUEverySuite: with IKE (static keys for null-sha256, which IKE does
// not negotiate), for every suite over IPv4 and IPv6 outer addresses, the
// TUN devices' MTU is the underlay's less the suite's ESP overhead, and
// TCP completes both ways from site A itself and from the host behind it.
// Before the fix the TUN MTU was 1420 whatever the suite, and TCP stalled
// wherever the tunnel took less.
func TestMTUEverySuite(t *testing.T) {
	lab.Require(t)
	for _, fam := range []struct {
		name string
		wan  [2]netip.Prefix
		// want is each suite's TUN MTU: 1500 less the outer IP and UDP
		// headers, the ESP header, IV and ICV, with the padded payload
		// and its 2-byte trailer a multiple of the block size.
		want map[string]int
	}{
		{"outer4", wan4, map[string]int{"aes128gcm16": 1438, "aes256gcm16": 1438, "chacha20poly1305": 1438,
			"aes128-sha256": 1422, "aes256-sha256": 1422, "aes256-sha384": 1422, "aes256-sha512": 1406, "null-sha256": 1446}},
		{"outer6", wan6, map[string]int{"aes128gcm16": 1418, "aes256gcm16": 1418, "chacha20poly1305": 1418,
			"aes128-sha256": 1406, "aes256-sha256": 1406, "aes256-sha384": 1390, "aes256-sha512": 1390, "null-sha256": 1426}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			b := newMTUBed(t, fam.wan)
			a := b.sites[0]
			for _, suite := range []string{"aes128gcm16", "aes256gcm16", "chacha20poly1305", "aes128-sha256",
				"aes256-sha256", "aes256-sha384", "aes256-sha512", "null-sha256"} {
				if suite == "null-sha256" {
					cfgs := pairConfigs(t, pairOptions{wan: fam.wan, alg: suite})
					cfgs[0].Tunnels[0].Remote = []netip.Prefix{inner4[1].Masked()}
					cfgs[1].Tunnels[0].Remote = []netip.Prefix{siteA[0]}
					for i, c := range cfgs {
						c.TUN = []netip.Prefix{inner4[i]}
						c.StateDir = filepath.Join(b.dir, "state-"+b.sites[i].name)
					}
					b.restart([2]string{cfgs[0].render(), cfgs[1].render()})
				} else {
					b.restart(b.ikeConfigs(fam.wan, suite))
					a.waitChild(b.ctx, "net-b", 20*time.Second, nil)
				}
				b.checkTUNMTU(fam.want[suite])
				server := inner4[1].Addr()
				b.tcpBothWays(fam.name+" "+suite+" from A", a.ns, inner4[0].Addr(), server)
				b.tcpBothWays(fam.name+" "+suite+" from the host behind A", b.lan, lanHost[0].Addr(), server)
			}
		})
	}
}

// TestMTUSluiceICMP: a tunnel whose MTU (mtu = 1300) is below its TUN
// device's leaves the sender's path MTU to sluice's ICMP "fragmentation
// needed" and ICMPv6 "packet too big". TCP over IPv4 and IPv6, from site A
// itself and from the host behind it, completes only if the kernel accepts
// those errors: sent from the TUN's own address, as before the fix, they
// are martians (a local address arriving from outside) and TCP stalls.
func TestMTUSluiceICMP(t *testing.T) {
	lab.Require(t)
	b := newMTUBed(t, wan4)
	a := b.sites[0]
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	cfgs[0].Tunnels[0].Remote = []netip.Prefix{inner4[1].Masked(), inner6[1].Masked()}
	cfgs[1].Tunnels[0].Remote = siteA[:]
	var texts [2]string
	for i, c := range cfgs {
		c.StateDir = filepath.Join(b.dir, "state-"+b.sites[i].name)
		c.Tunnels[0].MTU = 1300
		texts[i] = c.render()
	}
	b.restart(texts)
	b.checkTUNMTU(1438)
	if ts := a.tunnels(); len(ts) != 1 || ts[0].MTU != 1300 {
		t.Fatalf("A's tunnels: %+v, want one of MTU 1300", ts)
	}
	before := drops(a.stats())
	for i, fam := range []string{"IPv4", "IPv6"} {
		server := []netip.Prefix{inner4[1], inner6[1]}[i].Addr()
		b.tcpBothWays(fam+" from A", a.ns, []netip.Prefix{inner4[0], inner6[0]}[i].Addr(), server)
		b.tcpBothWays(fam+" from the host behind A", b.lan, lanHost[i].Addr(), server)
	}
	// The path was learnt from sluice's errors, not around them.
	if got := dropsSince(drops(a.stats()), before); got["too_big"] == 0 {
		t.Errorf("A sent no ICMP error (drops %v): the test did not exercise them", got)
	}
}

// TestMTUReload: a reload that changes a tunnel's suite for one with more
// overhead lowers the TUN devices' MTU with it, and TCP goes on completing
// from site A and from the host behind it.
func TestMTUReload(t *testing.T) {
	lab.Require(t)
	b := newMTUBed(t, wan4)
	a := b.sites[0]
	render := func(alg string) [2]string {
		cfgs := pairConfigs(t, pairOptions{wan: wan4, alg: alg})
		cfgs[0].Tunnels[0].Remote = []netip.Prefix{inner4[1].Masked()}
		cfgs[1].Tunnels[0].Remote = []netip.Prefix{siteA[0]}
		for i, c := range cfgs {
			c.TUN = []netip.Prefix{inner4[i]}
			c.StateDir = filepath.Join(b.dir, "state-"+b.sites[i].name)
		}
		return [2]string{cfgs[0].render(), cfgs[1].render()}
	}
	b.restart(render("aes128gcm16"))
	b.checkTUNMTU(1438)
	texts := render("aes256-sha512")
	for i, s := range b.sites {
		s.writeConfigText(texts[i])
		s.mustReload()
	}
	b.checkTUNMTU(1406)
	server := inner4[1].Addr()
	b.tcpBothWays("after the reload, from A", a.ns, inner4[0].Addr(), server)
	b.tcpBothWays("after the reload, from the host behind A", b.lan, lanHost[0].Addr(), server)
}

// TestStrongSwanMTU: opposite strongSwan (kernel-libipsec, whose TUN MTU is
// 1400), sluice's TUN MTU for aes256-sha512 in UDP over IPv4 is what the
// overhead leaves, and TCP goes through both ways.
func TestStrongSwanMTU(t *testing.T) {
	requireCharon(t)
	b := newSSBed(t, ssOptions{esp: "aes256-sha512", auth: "psk"})
	b.establish()
	if got, err := b.gw.ns.LinkMTU(tunName); err != nil || got != 1406 {
		t.Errorf("sluice's TUN MTU %d (%v), want 1406", got, err)
	}
	b.traffic("aes256-sha512", true)
}
