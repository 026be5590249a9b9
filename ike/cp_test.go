package ike

import (
	"bytes"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// TestCPKnownBytes decodes a CFG_REPLY laid out by hand from RFC 7296
// sections 3.15 (CP header: type, three reserved octets) and 3.15.1 (R
// bit, 15-bit type, 16-bit length, value), and encodes it back.
func TestCPKnownBytes(t *testing.T) {
	body := []byte{
		2, 0, 0, 0, // CFG_REPLY
		0, 1, 0, 4, 10, 3, 0, 7, // INTERNAL_IP4_ADDRESS 10.3.0.7
		0x80, 3, 0, 4, 10, 3, 0, 53, // INTERNAL_IP4_DNS 10.3.0.53, R bit set
		0, 8, 0, 17, 0xfd, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 64, // INTERNAL_IP6_ADDRESS fd00:3::9/64
		0x50, 0x00, 0, 2, 0xab, 0xcd, // a private-use attribute (not known here)
		0, 14, 0, 0, // SUPPORTED_ATTRIBUTES, empty
	}
	cp, err := decodeCP(body)
	if err != nil {
		t.Fatal(err)
	}
	if cp.CfgType != CfgReply || len(cp.Attrs) != 5 {
		t.Fatalf("decoded %+v", cp)
	}
	if a, ok := cp.Attrs[0].Addr(); !ok || a != netip.MustParseAddr("10.3.0.7") {
		t.Fatalf("INTERNAL_IP4_ADDRESS %v %v", a, ok)
	}
	if cp.Attrs[1].Type != AttrInternalIP4DNS {
		t.Fatalf("R bit not masked: type %v", cp.Attrs[1].Type)
	}
	if p, ok := cp.Attrs[2].Prefix(); !ok || p != netip.MustParsePrefix("fd00:3::9/64") {
		t.Fatalf("INTERNAL_IP6_ADDRESS %v %v", p, ok)
	}
	if cp.Attrs[3].Type != 0x5000 || !bytes.Equal(cp.Attrs[3].Value, []byte{0xab, 0xcd}) {
		t.Fatalf("unknown attribute not kept: %+v", cp.Attrs[3])
	}
	vips, dns := cp.assigned()
	if !reflect.DeepEqual(vips, []netip.Addr{netip.MustParseAddr("10.3.0.7"), netip.MustParseAddr("fd00:3::9")}) ||
		!reflect.DeepEqual(dns, []netip.Addr{netip.MustParseAddr("10.3.0.53")}) {
		t.Fatalf("assigned %v, DNS %v", vips, dns)
	}
	b, err := cp.appendBody(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), body...)
	want[12] = 0 // the R bit is not sent back
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", b, want)
	}
}

// TestCPLengthsChecked: every attribute section 3.15.1 gives a length
// must have it; others take any length; a cut attribute is an error.
func TestCPLengthsChecked(t *testing.T) {
	for _, c := range []struct {
		attr []byte
		err  string
	}{
		{[]byte{0, 1, 0, 3, 10, 3, 0}, "INTERNAL_IP4_ADDRESS attribute of 3 bytes"},
		{[]byte{0, 2, 0, 5, 255, 255, 255, 0, 0}, "INTERNAL_IP4_NETMASK attribute of 5 bytes"},
		{[]byte{0, 3, 0, 2, 1, 2}, "INTERNAL_IP4_DNS attribute of 2 bytes"},
		{append([]byte{0, 8, 0, 16}, make([]byte, 16)...), "INTERNAL_IP6_ADDRESS attribute of 16 bytes"},
		{append(append([]byte{0, 8, 0, 17}, make([]byte, 16)...), 129), "prefix length 129"},
		{append([]byte{0, 10, 0, 4}, make([]byte, 4)...), "INTERNAL_IP6_DNS attribute of 4 bytes"},
		{[]byte{0, 13, 0, 4, 10, 0, 0, 0}, "INTERNAL_IP4_SUBNET attribute of 4 bytes"},
		{[]byte{0, 14, 0, 3, 0, 1, 0}, "SUPPORTED_ATTRIBUTES attribute of 3 bytes"},
		{[]byte{0, 1, 0, 4, 10, 3}, "cut short"},
		{[]byte{0, 1, 0}, "cut short"},
	} {
		_, err := decodeCP(append([]byte{CfgRequest, 0, 0, 0}, c.attr...))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%x: error %v, want %q", c.attr, err, c.err)
		}
	}
	for _, ok := range [][]byte{
		{0, 1, 0, 0},                               // INTERNAL_IP4_ADDRESS, empty: a request
		{0, 7, 0, 3, 'a', 'b', 'c'},                // APPLICATION_VERSION, any length
		{0x7f, 0xff, 0, 1, 0},                      // unknown, any length
		{0, 13, 0, 8, 10, 0, 0, 0, 255, 255, 0, 0}, // INTERNAL_IP4_SUBNET
	} {
		if _, err := decodeCP(append([]byte{CfgRequest, 0, 0, 0}, ok...)); err != nil {
			t.Errorf("%x: %v", ok, err)
		}
	}
	if _, err := decodeCP([]byte{1, 0, 0}); err == nil {
		t.Error("a CP payload of 3 bytes decoded")
	}
}

// TestCPRequestReply builds an initiator's CFG_REQUEST for swanctl's
// vips and the responder's CFG_REPLY, and reads each as the other side
// does.
func TestCPRequestReply(t *testing.T) {
	req := vipRequest([]netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(), netip.MustParseAddr("10.3.0.9")})
	b, err := req.appendBody(nil)
	if err != nil {
		t.Fatal(err)
	}
	// INTERNAL_IP4_ADDRESS(), INTERNAL_IP6_ADDRESS(), INTERNAL_IP4_ADDRESS(10.3.0.9),
	// INTERNAL_IP4_DNS(), INTERNAL_IP6_DNS(): what strongSwan sends for the same vips.
	want := []byte{1, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 1, 0, 4, 10, 3, 0, 9, 0, 3, 0, 0, 0, 10, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("CFG_REQUEST\n%x\nwant\n%x", b, want)
	}
	got, err := decodeCP(b)
	if err != nil {
		t.Fatal(err)
	}
	ask := got.requested()
	wantAsk := []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(), netip.MustParseAddr("10.3.0.9")}
	if !reflect.DeepEqual(ask.Addrs, wantAsk) || ask.Netmask {
		t.Fatalf("asked %+v", ask)
	}

	vips := []netip.Addr{netip.MustParseAddr("10.3.0.1"), netip.MustParseAddr("fd00:3::1")}
	dns := []netip.Addr{netip.MustParseAddr("10.3.0.53"), netip.MustParseAddr("fd00:3::53")}
	rep := vipReply(vips, dns, true)
	b, err = rep.appendBody(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeCP(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.CfgType != CfgReply {
		t.Fatalf("type %d", back.CfgType)
	}
	gotVIPs, gotDNS := back.assigned()
	if !reflect.DeepEqual(gotVIPs, vips) || !reflect.DeepEqual(gotDNS, dns) {
		t.Fatalf("assigned %v, DNS %v", gotVIPs, gotDNS)
	}
	if p, ok := back.Attrs[2].Prefix(); !ok || p != netip.MustParsePrefix("fd00:3::1/128") {
		t.Fatalf("IPv6 attribute %v %v", p, ok)
	}
	if back.Attrs[1].Type != AttrInternalIP4Netmask {
		t.Fatalf("no netmask after the IPv4 address: %v", back.Attrs[1].Type)
	}
}

// TestCPPrefix reads INTERNAL_IP4_SUBNET's netmask as a prefix length and
// refuses one that is not a prefix.
func TestCPPrefix(t *testing.T) {
	a := ConfigAttr{Type: AttrInternalIP4Subnet, Value: []byte{10, 2, 0, 0, 255, 255, 0, 0}}
	if p, ok := a.Prefix(); !ok || p != netip.MustParsePrefix("10.2.0.0/16") {
		t.Fatalf("%v %v", p, ok)
	}
	a.Value = []byte{10, 2, 0, 0, 255, 0, 255, 0}
	if p, ok := a.Prefix(); ok {
		t.Fatalf("netmask 255.0.255.0 read as %v", p)
	}
	a.Value = []byte{10, 2, 0, 1, 255, 255, 255, 255}
	if p, ok := a.Prefix(); !ok || p.Bits() != 32 {
		t.Fatalf("%v %v", p, ok)
	}
	if _, ok := (ConfigAttr{Type: AttrInternalIP4DNS, Value: []byte{1, 2, 3, 4}}).Prefix(); ok {
		t.Fatal("a DNS attribute has a prefix")
	}
}
