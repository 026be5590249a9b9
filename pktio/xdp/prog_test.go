package xdp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
)

const xdpRedirect = 4 // XDP_REDIRECT

// verdicts loads the program for local:4500 with a device map standing
// in for the socket map (queue 0 redirects to lo), so that a test run
// tells a redirect (XDP_REDIRECT) from a pass (XDP_PASS).
func verdicts(t *testing.T, local []netip.Addr, rawESP bool) func(frame []byte) uint32 {
	t.Helper()
	linktest.RequireRoot(t)
	dev, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.DevMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if err := dev.Update(uint32(0), uint32(1), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	a := &attachment{}
	t.Cleanup(a.close)
	if a.addrs, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: addrKeyLen, ValueSize: 1, MaxEntries: maxAddrs}); err != nil {
		t.Fatal(err)
	}
	if err := a.setAddrs(local); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: program(dev, a.addrs, 4500, rawESP)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return func(frame []byte) uint32 {
		t.Helper()
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
}

// frame builds an Ethernet frame with an IP packet from 192.0.2.2 or
// 2001:db8::2 to dst carrying proto and payload (a UDP datagram from port
// 4500 to dport when proto is UDP).
func frame(dst netip.Addr, proto uint8, dport uint16, payload []byte) []byte {
	var l4 []byte
	if proto == packet.ProtoUDP {
		l4 = make([]byte, packet.UDPHeader+len(payload))
		packet.UDP(l4).Encode(4500, dport, uint16(len(l4)))
		copy(l4[packet.UDPHeader:], payload)
	} else {
		l4 = payload
	}
	f := make([]byte, ethLen, 128)
	if dst.Is4() {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := make([]byte, 20)
		packet.IPv4(ip).Encode(&packet.IPv4Fields{TTL: 64, Protocol: proto, Src: [4]byte{192, 0, 2, 2}, Dst: dst.As4()})
		packet.IPv4(ip).SetTotalLength(uint16(20 + len(l4)))
		packet.IPv4(ip).SetChecksum()
		f = append(f, ip...)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		ip := make([]byte, 40)
		packet.IPv6(ip).Encode(&packet.IPv6Fields{NextHeader: proto, HopLimit: 64, PayloadLength: uint16(len(l4)),
			Src: netip.MustParseAddr("2001:db8::2").As16(), Dst: dst.As16()})
		f = append(f, ip...)
	}
	return append(f, l4...)
}

// The program redirects ESP for the gateway's addresses and port only,
// and passes what the kernel must see or would not deliver: IKE,
// keepalives, other ports and addresses, fragments, IPv4 options, VLAN
// tags, IPv6 extension headers, truncated frames, and IPv6 packets to
// the IPv4-mapped form of a gateway's IPv4 address (the kernel delivers
// no such packet, RFC 4291 section 2.5.5.2).
func TestProgramVerdicts(t *testing.T) {
	gw4, gw6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	run := verdicts(t, []netip.Addr{gw4, gw6}, false)
	esp := []byte{0, 0, 1, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8}
	ike := []byte{0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	mod := func(f []byte, fn func([]byte)) []byte { fn(f); return f }
	cases := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"v4 ESP-in-UDP", frame(gw4, packet.ProtoUDP, 4500, esp), xdpRedirect},
		{"v4 IKE", frame(gw4, packet.ProtoUDP, 4500, ike), xdpPass},
		{"v4 keepalive", frame(gw4, packet.ProtoUDP, 4500, []byte{0xff}), xdpPass},
		{"v4 other port", frame(gw4, packet.ProtoUDP, 4501, esp), xdpPass},
		{"v4 other address", frame(netip.MustParseAddr("192.0.2.9"), packet.ProtoUDP, 4500, esp), xdpPass},
		{"v4 raw ESP, not asked", frame(gw4, packet.ProtoESP, 0, esp), xdpPass},
		{"v4 first fragment", mod(frame(gw4, packet.ProtoUDP, 4500, esp), func(f []byte) { f[v4Frag] |= 0x20 }), xdpPass},
		{"v4 later fragment", mod(frame(gw4, packet.ProtoUDP, 4500, esp), func(f []byte) { f[v4Frag+1] = 1 }), xdpPass},
		{"v4 options", mod(frame(gw4, packet.ProtoUDP, 4500, esp), func(f []byte) { f[v4Off] = 0x46 }), xdpPass},
		{"v4 truncated", frame(gw4, packet.ProtoUDP, 4500, esp)[:v4L4+udpHdr+2], xdpPass},
		{"VLAN", mod(frame(gw4, packet.ProtoUDP, 4500, esp), func(f []byte) { f[12], f[13] = 0x81, 0 }), xdpPass},
		{"v6 ESP-in-UDP", frame(gw6, packet.ProtoUDP, 4500, esp), xdpRedirect},
		{"v6 IKE", frame(gw6, packet.ProtoUDP, 4500, ike), xdpPass},
		{"v6 hop-by-hop", mod(frame(gw6, packet.ProtoUDP, 4500, esp), func(f []byte) { f[v6Next] = 0 }), xdpPass},
		{"v6 to v4-mapped", frame(netip.AddrFrom16(gw4.As16()), packet.ProtoUDP, 4500, esp), xdpPass},
	}
	for _, c := range cases {
		if got := run(c.frame); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	raw := verdicts(t, []netip.Addr{gw4, gw6}, true)
	if got := raw(frame(gw4, packet.ProtoESP, 0, esp)); got != xdpRedirect {
		t.Errorf("v4 raw ESP with RawESP: verdict %d, want %d", got, xdpRedirect)
	}
	if got := raw(frame(netip.AddrFrom16(gw4.As16()), packet.ProtoESP, 0, esp)); got != xdpPass {
		t.Errorf("v6 raw ESP to v4-mapped with RawESP: verdict %d, want %d", got, xdpPass)
	}
}
