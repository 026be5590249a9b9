package e2e_test

// Traffic selectors on the data path (issue 16): every packet a tunnel
// decrypts must come from the peer's selectors and go to ours (RFC 4301
// section 5.2), and what a tunnel seals must be inside what the peer
// agreed to (RFC 7296 section 2.9).
//
//  1. Static tunnels (TestStaticTunnelSpoofedSource): site B, a second
//     sluice, sends from inner sources outside A's tunnel prefixes
//     (another subnet, A's own, anywhere, IPv6 too); A drops them as
//     policy_mismatch and its TUN device receives none of them.
//  2. IKE children against strongSwan (TestStrongSwanSelectors):
//     strongSwan narrows what sluice proposes (to a smaller prefix, or to
//     ICMP only); sluice lists, routes and seals only what was agreed.

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// tunRx reads the packets the kernel received from the TUN device in ns:
// what the gateway wrote towards its LAN.
func tunRx(t *testing.T, ctx context.Context, ns *lab.Netns) uint64 {
	t.Helper()
	out, err := ns.Exec(ctx, "cat", "/sys/class/net/"+tunName+"/statistics/rx_packets")
	if err != nil {
		t.Fatalf("TUN rx_packets in %s: %v: %s", ns, err, out)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStaticTunnelSpoofedSource: a [[tunnel]] takes from its peer only
// packets whose inner source is in its remote prefixes, as WireGuard's
// AllowedIPs; the rest are counted as policy_mismatch and never reach the
// LAN.
func TestStaticTunnelSpoofedSource(t *testing.T) {
	requireTool(t, "ping")
	tb := startPair(t, wan4, pairConfigs(t, pairOptions{wan: wan4}))
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	a4, a6 := inner4[0].Addr(), inner6[0].Addr()
	waitPing(t, ctx, b.ns, a4)
	waitPing(t, ctx, b.ns, a6)

	// B owns the spoofed sources (on lo), and routes A's subnets into
	// its tunnel, which seals whatever it is given.
	spoofs := []struct{ src, dst netip.Addr }{
		{netip.MustParseAddr("10.3.0.5"), a4},  // a third site's subnet
		{netip.MustParseAddr("10.1.0.77"), a4}, // A's own LAN
		{netip.MustParseAddr("8.8.8.8"), a4},   // anywhere
		{netip.MustParseAddr("fd00:3::5"), a6}, // IPv6, outside fd00:2::/64
	}
	for _, s := range spoofs {
		if err := b.ns.AddAddr("lo", netip.PrefixFrom(s.src, s.src.BitLen())); err != nil {
			t.Fatal(err)
		}
	}
	const count = 5
	before, rx := drops(a.stats()), tunRx(t, ctx, a.ns)
	for _, s := range spoofs {
		r, err := pingSummary(ctx, b.ns, s.dst, count, 10*time.Millisecond, "-W", "0.5", "-I", s.src.String())
		if err != nil {
			t.Fatal(err)
		}
		if r.Received != 0 {
			t.Errorf("A answered %d of %d pings from the spoofed source %s", r.Received, r.Sent, s.src)
		}
	}
	want := uint64(count * len(spoofs))
	err := lab.WaitFor(ctx, "A's policy_mismatch drops", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		d := dropsSince(drops(a.stats()), before)
		return d["policy_mismatch"] == want, fmt.Errorf("drops since the spoofing began: %v", d)
	})
	if err != nil {
		t.Errorf("want %d packets dropped as policy_mismatch: %v", want, err)
	}
	if n := tunRx(t, ctx, a.ns) - rx; n != 0 {
		t.Errorf("A wrote %d spoofed packets to its LAN (TUN rx_packets), want 0", n)
	}
	// The tunnel still carries its own traffic.
	mustPing(t, ctx, "after the spoofing, B->A", b.ns, a4, 10, 10*time.Millisecond)
	mustPing(t, ctx, "after the spoofing, B->A IPv6", b.ns, a6, 10, 10*time.Millisecond)
}

// sealedOut adds up the packets of sluice's outbound SAs.
func sealedOut(s *site) uint64 {
	var n uint64
	for _, sa := range s.sas() {
		if sa.Direction == "out" {
			n += sa.Packets
		}
	}
	return n
}

// waitDrops waits until the drops of each reason in want grew by at least
// that much since before (a packet the kernel sends into the TUN device on
// its own, such as an IPv6 router solicitation, may add a no_route).
func waitDrops(t *testing.T, s *site, before map[string]uint64, want map[string]uint64) {
	t.Helper()
	err := lab.WaitFor(s.tb.ctx, "gateway "+s.name+"'s drops", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		d := dropsSince(drops(s.stats()), before)
		for k, v := range want {
			if d[k] < v {
				return false, fmt.Errorf("drops since: %v, want at least %v", d, want)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestStrongSwanSelectors: when strongSwan narrows the traffic selectors
// of sluice's child (RFC 7296 section 2.9), sluice lists what was agreed,
// routes only that, and seals nothing outside it: a destination outside
// the agreed prefix has no route (no_route), a protocol outside it is
// ts_mismatch; strongSwan, which enforces them, never sees such ESP.
func TestStrongSwanSelectors(t *testing.T) {
	requireCharon(t)
	t.Run("initiator-narrowed-prefix", func(t *testing.T) {
		// sluice proposes 10.1.0.0/16 for strongSwan's side; strongSwan
		// has 10.1.0.0/24 and answers with it.
		b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", sluiceInitiates: true,
			gwRemoteTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
		ch := b.establish()
		if strings.Join(ch.RemoteTS, ",") != "10.1.0.0/24" || strings.Join(ch.LocalTS, ",") != "10.2.0.0/24" {
			t.Errorf("sluice lists TS %v === %v, want the negotiated 10.2.0.0/24 === 10.1.0.0/24", ch.LocalTS, ch.RemoteTS)
		}
		waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
		before, sealed := drops(b.gw.stats()), sealedOut(b.gw)
		r, err := pingSummary(b.ctx, b.gw.ns, netip.MustParseAddr("10.1.7.1"), 10, 10*time.Millisecond, "-W", "0.5")
		if err != nil {
			t.Fatal(err)
		}
		if r.Received != 0 {
			t.Errorf("%d answers from outside the agreed selectors", r.Received)
		}
		waitDrops(t, b.gw, before, map[string]uint64{"no_route": 10})
		if n := sealedOut(b.gw) - sealed; n != 0 {
			t.Errorf("sluice sealed %d packets for 10.1.7.1, outside the agreed 10.1.0.0/24", n)
		}
		mustPing(t, b.ctx, "inside the narrowed selectors", b.gw.ns, ssInner[0].Addr(), 10, 10*time.Millisecond)
	})
	t.Run("responder-narrowed-icmp", func(t *testing.T) {
		// strongSwan proposes ICMP only, from a /25 of sluice's /24.
		b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", ssLocalTS: "10.1.0.0/25[icmp]", ssRemoteTS: "10.2.0.0/24[icmp]"})
		ch := b.establish()
		if strings.Join(ch.RemoteTS, ",") != "10.1.0.0/25[1/0-65535]" || strings.Join(ch.LocalTS, ",") != "10.2.0.0/24[1/0-65535]" {
			t.Errorf("sluice lists TS %v === %v, want the negotiated ICMP-only 10.2.0.0/24 === 10.1.0.0/25", ch.LocalTS, ch.RemoteTS)
		}
		waitPing(t, b.ctx, b.gw.ns, ssInner[0].Addr())
		waitPing(t, b.ctx, b.ssNS, ssInner[1].Addr())
		before, sealed := drops(b.gw.stats()), sealedOut(b.gw)
		// UDP, which strongSwan did not agree to.
		c, err := b.gw.ns.Dial(b.ctx, "udp", netip.AddrPortFrom(ssInner[0].Addr(), 9).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range 5 {
			if _, err := c.Write([]byte("outside the selectors")); err != nil {
				t.Fatal(err)
			}
		}
		// ICMP to the half of the /24 strongSwan did not agree to.
		if _, err := pingSummary(b.ctx, b.gw.ns, netip.MustParseAddr("10.1.0.200"), 5, 10*time.Millisecond, "-W", "0.5"); err != nil {
			t.Fatal(err)
		}
		waitDrops(t, b.gw, before, map[string]uint64{"ts_mismatch": 5, "no_route": 5})
		if n := sealedOut(b.gw) - sealed; n != 0 {
			t.Errorf("sluice sealed %d packets outside the agreed selectors", n)
		}
		mustPing(t, b.ctx, "ICMP inside the narrowed selectors", b.gw.ns, ssInner[0].Addr(), 10, 10*time.Millisecond)
	})
}

// scapySpoof seals ICMP echo requests with Scapy under an AES-GCM SA, as
// charon would, and sends them in UDP 4500 from charon's namespace:
// argv is SPI KEY+SALT(hex) FIRST-SEQ OUTER-SRC OUTER-DST INNER-DST
// INNER-SRC...; one packet per inner source, in order. INTEROP.md: the
// NAT-T UDP length Scapy leaves is rebuilt.
const scapySpoof = `
import sys
from scapy.all import IP, UDP, ICMP, Raw, send
from scapy.layers.ipsec import SecurityAssociation, ESP
spi, key, seq = int(sys.argv[1], 16), bytes.fromhex(sys.argv[2]), int(sys.argv[3])
osrc, odst, idst = sys.argv[4], sys.argv[5], sys.argv[6]
sa = SecurityAssociation(ESP, spi=spi, crypt_algo='AES-GCM', crypt_key=key, nat_t_header=UDP(sport=4500, dport=4500))
for i, isrc in enumerate(sys.argv[7:]):
    p = sa.encrypt(IP(src=osrc, dst=odst) / IP(src=isrc, dst=idst) / ICMP(id=0x5e1, seq=i) / Raw(b'spoofed inner source'), seq_num=seq + i)
    del p[IP].len, p[IP].chksum, p[UDP].len, p[UDP].chksum
    send(IP(bytes(p)), verbose=False)
`

// TestStrongSwanSpoofedSource: ESP that decrypts under the Child SA sluice
// negotiated with strongSwan (10.1.0.0/24 === 10.2.0.0/24) but carries an
// inner source outside strongSwan's selectors (a third subnet, sluice's
// own LAN, anywhere) is dropped as policy_mismatch and never reaches
// sluice's LAN; one from inside them, sealed the same way, does. The
// packets are Scapy's, under the keys charon logged (strongSwan itself
// sends only inside its policy).
func TestStrongSwanSpoofedSource(t *testing.T) {
	requireCharon(t)
	requireTool(t, "/usr/bin/python3")
	b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk"})
	ch := b.establish()
	waitPing(t, b.ctx, b.ssNS, ssInner[1].Addr())
	k, err := b.ch.ChildKeys(ch.InSPI)
	if err != nil {
		t.Fatal(err)
	}
	// charon initiated: it sends with the initiator's key.
	if len(k.EncI) != 20 {
		t.Fatalf("charon's key for SPI %08x is %d bytes, want 20 (AES-128 and salt)", ch.InSPI, len(k.EncI))
	}
	spoofed := []string{"10.3.0.5", "10.2.0.77", "8.8.8.8"}
	before, rx := drops(b.gw.stats()), tunRx(t, b.ctx, b.gw.ns)
	// Past what charon sent so far (a few pings): sluice's replay window
	// takes them.
	args := []string{"-c", scapySpoof, fmt.Sprintf("%08x", ch.InSPI), hex.EncodeToString(k.EncI), "1000000",
		b.ssAddr.String(), b.gwAddr.String(), ssInner[1].Addr().String()}
	args = append(append(args, spoofed...), ssInner[0].Addr().String())
	if out, err := b.ssNS.Exec(b.ctx, "/usr/bin/python3", args...); err != nil {
		t.Fatalf("scapy: %v: %s", err, out)
	}
	waitDrops(t, b.gw, before, map[string]uint64{"policy_mismatch": uint64(len(spoofed))})
	// The one from inside the selectors is the positive control: Scapy's
	// ESP is good, and the kernel got exactly that one.
	err = lab.WaitFor(b.ctx, "the in-selector packet on sluice's LAN", 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		n := tunRx(t, b.ctx, b.gw.ns) - rx
		return n == 1, fmt.Errorf("TUN rx_packets grew by %d, want 1", n)
	})
	if err != nil {
		t.Error(err)
	}
	if d := dropsSince(drops(b.gw.stats()), before); d["policy_mismatch"] != uint64(len(spoofed)) {
		t.Errorf("drops %v, want policy_mismatch %d", d, len(spoofed))
	}
}
