package cli_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cli"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/pcap"
)

// run runs the command line in-process.
func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = cli.Run(context.Background(), args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

var (
	outer4a, outer4b = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	outer6a, outer6b = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	inner4a, inner4b = netip.MustParseAddr("10.1.0.10"), netip.MustParseAddr("10.2.0.20")
	inner6a, inner6b = netip.MustParseAddr("2001:db8:1::10"), netip.MustParseAddr("2001:db8:2::20")
	macA             = []byte{0x02, 0xaa, 0, 0, 0, 1}
	macB             = []byte{0x02, 0xbb, 0, 0, 0, 2}
	base             = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
)

// udpPacket builds an IPv4 or IPv6 UDP packet from src to dst with n
// payload bytes that depend on tag.
func udpPacket(src, dst netip.Addr, sport, dport uint16, n, tag int) []byte {
	hl := packet.IPv4MinHeader
	if src.Is6() {
		hl = packet.IPv6Header
	}
	b := make([]byte, hl+8+n)
	for i := range n {
		b[hl+8+i] = byte(tag*13 + i)
	}
	if src.Is6() {
		packet.IPv6(b).Encode(&packet.IPv6Fields{PayloadLength: uint16(8 + n), NextHeader: packet.ProtoUDP, HopLimit: 64, Src: src.As16(), Dst: dst.As16()})
		packet.UDP(b[hl:]).Encode(sport, dport, uint16(8+n))
		packet.UDP(b[hl:]).SetChecksumIPv6(b[8:24], b[24:40])
		return b
	}
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(len(b)), ID: uint16(tag), TTL: 64, Protocol: packet.ProtoUDP, Src: src.As4(), Dst: dst.As4()})
	packet.UDP(b[hl:]).Encode(sport, dport, uint16(8+n))
	return b
}

// linkKind is one way of framing IP packets in a capture.
type linkKind struct {
	name  string
	ng    bool                        // pcapng (nanosecond timestamps) instead of pcap (microseconds)
	link  func(v6 bool) pcap.LinkType // the capture's link type for packets of a family
	frame func(ip []byte) []byte      // the frame around an IP packet
	hdr   func(v6 bool) []byte        // the Ethernet header output frames should have, or nil for raw IP output
}

func fixed(lt pcap.LinkType) func(bool) pcap.LinkType { return func(bool) pcap.LinkType { return lt } }

func etherType(v6 bool) []byte {
	if v6 {
		return []byte{0x86, 0xdd}
	}
	return []byte{0x08, 0x00}
}

// ethHeader is dst MAC, src MAC, the tags, and the EtherType for v6.
func ethHeader(v6 bool, tags ...uint16) []byte {
	h := append(append([]byte{}, macB...), macA...)
	for i, tag := range tags {
		h = binary.BigEndian.AppendUint16(h, tag)
		h = binary.BigEndian.AppendUint16(h, uint16(100+i))
	}
	return append(h, etherType(v6)...)
}

func ethKind(name string, ng bool, tags ...uint16) linkKind {
	return linkKind{
		name: name, ng: ng, link: fixed(pcap.LinkEthernet),
		frame: func(ip []byte) []byte {
			f := append(ethHeader(ip[0]>>4 == 6, tags...), ip...)
			for len(f) < 60 {
				f = append(f, 0) // Ethernet padding: not part of the IP packet
			}
			return f
		},
		hdr: func(v6 bool) []byte { return ethHeader(v6, tags...) },
	}
}

func rawKind(name string, ng bool, link func(bool) pcap.LinkType) linkKind {
	return linkKind{name: name, ng: ng, link: link, frame: func(ip []byte) []byte { return bytes.Clone(ip) }}
}

var linkKinds = []linkKind{
	ethKind("ethernet", false),
	rawKind("raw", false, fixed(pcap.LinkRaw)),
	ethKind("vlan", false, pcap.EtherTypeVLAN),
	{name: "sll", link: fixed(pcap.LinkLinuxSLL), frame: func(ip []byte) []byte {
		h := []byte{0, 0, 0, 1, 0, 6, 2, 0xaa, 0, 0, 0, 1, 0, 0}
		return append(append(h, etherType(ip[0]>>4 == 6)...), ip...)
	}},
	ethKind("pcapng-ethernet", true),
	{name: "pcapng-sll2", ng: true, link: fixed(pcap.LinkLinuxSLL2), frame: func(ip []byte) []byte {
		h := append(etherType(ip[0]>>4 == 6), 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0xaa, 0, 0, 0, 1, 0, 0)
		return append(h, ip...)
	}},
	rawKind("dlt12", false, fixed(pcap.LinkRawDLT12)),
	ethKind("qinq", false, pcap.EtherTypeQinQ, pcap.EtherTypeVLAN),
	rawKind("pcapng-iptype", true, func(v6 bool) pcap.LinkType {
		if v6 {
			return pcap.LinkIPv6
		}
		return pcap.LinkIPv4
	}),
}

type packetWriter interface {
	WritePacket(time.Time, []byte) error
	Flush() error
}

// writeCapture writes frames to path in kind's format, the ith at
// times[i]. v6 chooses the link type of family-specific kinds.
func writeCapture(t *testing.T, path string, k linkKind, v6 bool, frames [][]byte, times []time.Time) {
	t.Helper()
	var buf bytes.Buffer
	var w packetWriter
	var err error
	if k.ng {
		w, err = pcap.NewNgWriter(&buf, k.link(v6))
	} else {
		w, err = pcap.NewWriter(&buf, k.link(v6), false)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WritePacket(times[i], f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// capRec is a record read back from a capture.
type capRec struct {
	t    time.Time
	data []byte
}

func readCapture(t *testing.T, path string) (pcap.LinkType, time.Duration, []capRec) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := pcap.NewReader(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []capRec
	for {
		var p pcap.Packet
		err := rd.Next(&p)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, capRec{p.Time, bytes.Clone(p.Data)})
	}
	if rd.Format() != pcap.FormatPcap {
		t.Fatalf("%s: output format %v, want pcap", path, rd.Format())
	}
	return rd.LinkType(), rd.Resolution(), out
}

// saSpec describes one [[sa]] table.
type saSpec struct {
	spi          uint32
	alg          cryptodev.Alg
	mode, encap  string
	src, dst     netip.Addr
	sport, dport uint16
	esn          bool
	seq          uint64
	window       int
}

// keyHex is deterministic key material of n bytes.
func keyHex(n int, seed uint32) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(seed)*7 + i*29 + 3)
	}
	return hex.EncodeToString(b)
}

func (s saSpec) toml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[[sa]]\nspi = 0x%x\nesp = %q\n", s.spi, s.alg)
	if s.mode != "" {
		fmt.Fprintf(&b, "mode = %q\n", s.mode)
	}
	if s.encap != "" {
		fmt.Fprintf(&b, "encap = %q\n", s.encap)
	}
	if s.sport != 0 {
		fmt.Fprintf(&b, "sport = %d\ndport = %d\n", s.sport, s.dport)
	}
	if s.src.IsValid() {
		fmt.Fprintf(&b, "src = %q\n", s.src)
	}
	if s.dst.IsValid() {
		fmt.Fprintf(&b, "dst = %q\n", s.dst)
	}
	fmt.Fprintf(&b, "enc_key = %q\n", keyHex(s.alg.EncKeyLen(), s.spi))
	if n := s.alg.Info().AuthKeyLen; n > 0 {
		fmt.Fprintf(&b, "auth_key = %q\n", keyHex(n, s.spi+1))
	}
	fmt.Fprintf(&b, "esn = %v\nseq = %d\n", s.esn, s.seq)
	if s.window != 0 {
		fmt.Fprintf(&b, "replay_window = %d\n", s.window)
	}
	return b.String()
}

func writeSAFile(t *testing.T, path string, specs ...saSpec) {
	t.Helper()
	var b strings.Builder
	for _, s := range specs {
		b.WriteString(s.toml())
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// espInfo is what the outside of an ESP packet says.
type espInfo struct {
	v6           bool
	udp          bool
	sport, dport uint16
	spi, seq     uint32
}

func parseESP(t *testing.T, ip []byte) espInfo {
	t.Helper()
	var e espInfo
	var proto uint8
	off := 0
	switch packet.IPVersion(ip) {
	case 4:
		h := packet.IPv4(ip)
		if !h.IsValid() || !h.ChecksumValid() || int(h.TotalLength()) != len(ip) {
			t.Fatalf("bad outer IPv4 header %x", ip[:20])
		}
		proto, off = h.Protocol(), h.HeaderLength()
	case 6:
		h := packet.IPv6(ip)
		if !h.IsValid() || packet.IPv6Header+int(h.PayloadLength()) != len(ip) {
			t.Fatalf("bad outer IPv6 header")
		}
		e.v6, proto, off = true, h.NextHeader(), packet.IPv6Header
	default:
		t.Fatalf("not IP: %x", ip)
	}
	if proto == packet.ProtoUDP {
		u := packet.UDP(ip[off:])
		e.udp, e.sport, e.dport = true, u.SrcPort(), u.DstPort()
		off += 8
	} else if proto != packet.ProtoESP {
		t.Fatalf("outer protocol %d", proto)
	}
	e.spi, e.seq = binary.BigEndian.Uint32(ip[off:]), binary.BigEndian.Uint32(ip[off+4:])
	return e
}

// stripLink returns the IP packet of an output frame and checks its
// link-layer header against want (nil: raw IP output).
func stripLink(t *testing.T, lt pcap.LinkType, frame, want []byte) []byte {
	t.Helper()
	if want == nil {
		if lt != pcap.LinkRaw {
			t.Fatalf("output link type %v, want RAW", lt)
		}
		return frame
	}
	if lt != pcap.LinkEthernet {
		t.Fatalf("output link type %v, want ETHERNET", lt)
	}
	if !bytes.HasPrefix(frame, want) {
		t.Fatalf("output Ethernet header %x, want %x", frame[:len(want)], want)
	}
	return frame[len(want):]
}

func TestPcapRoundTrip(t *testing.T) {
	dir := t.TempDir()
	n := 0
	for _, alg := range cryptodev.Algs() {
		for _, mode := range []string{"tunnel", "transport"} {
			for _, outer6 := range []bool{false, true} {
				for _, inner6 := range []bool{false, true} {
					if mode == "transport" && inner6 != outer6 {
						continue
					}
					for _, encap := range []string{"none", "udp"} {
						for _, esn := range []bool{false, true} {
							n++
							in, out := linkKinds[n%len(linkKinds)], linkKinds[(n+4)%len(linkKinds)]
							name := fmt.Sprintf("%v/%s/outer6=%v/inner6=%v/%s/esn=%v/%s->%s", alg, mode, outer6, inner6, encap, esn, in.name, out.name)
							t.Run(name, func(t *testing.T) {
								roundTrip(t, filepath.Join(dir, fmt.Sprint(n)), n, alg, mode, outer6, inner6, encap, esn, in, out)
							})
						}
					}
				}
			}
		}
	}
}

// roundTrip encrypts a capture of kind in, checks the ESP packets, frames
// them as kind out, decrypts them and checks the result is the input.
func roundTrip(t *testing.T, prefix string, n int, alg cryptodev.Alg, mode string, outer6, inner6 bool, encap string, esn bool, in, out linkKind) {
	src, dst := inner4a, inner4b
	if inner6 {
		src, dst = inner6a, inner6b
	}
	sa := saSpec{spi: 0x10000 + uint32(n), alg: alg, mode: mode, encap: encap, esn: esn, src: outer4a, dst: outer4b}
	if outer6 {
		sa.src, sa.dst = outer6a, outer6b
	}
	if mode == "transport" {
		sa.src, sa.dst = src, dst // a transport SA protects traffic between the packets' own addresses
	}
	if encap == "udp" && esn {
		sa.sport, sa.dport = 4501, 4502
	}
	if esn {
		sa.seq = 1<<32 - 2 // the high 32 bits change within the capture
	}
	saFile, plain, enc, encFramed, dec := prefix+".sa.toml", prefix+"-plain.pcap", prefix+"-esp.pcap", prefix+"-esp2.pcap", prefix+"-dec.pcap"
	writeSAFile(t, saFile, sa)

	var inner, frames [][]byte
	var times []time.Time
	for i, size := range []int{0, 1, 37, 1400} {
		p := udpPacket(src, dst, 1000+uint16(i), 2000, size, n+i)
		inner = append(inner, p)
		frames = append(frames, in.frame(p))
		times = append(times, base.Add(time.Duration(n)*time.Minute+time.Duration(i)*1234567891*time.Nanosecond))
	}
	writeCapture(t, plain, in, inner6, frames, times)
	res := time.Microsecond
	if in.ng {
		res = time.Nanosecond
	}

	code, stdout, stderr := run("pcap", "encrypt", "--sa", saFile, plain, enc)
	if code != 0 || stderr != "encrypted 4, dropped 0\n" || stdout != "" {
		t.Fatalf("encrypt: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	lt, gotRes, recs := readCapture(t, enc)
	if gotRes != res || len(recs) != len(inner) {
		t.Fatalf("encrypt wrote %d packets with resolution %v, want %d and %v", len(recs), gotRes, len(inner), res)
	}
	wantV6 := outer6
	if mode == "transport" {
		wantV6 = inner6
	}
	var espFrames [][]byte
	var espTimes []time.Time
	for i, r := range recs {
		var hdr []byte
		if in.hdr != nil {
			hdr = in.hdr(wantV6)
		}
		ip := stripLink(t, lt, r.data, hdr)
		e := parseESP(t, ip)
		wantSport, wantDport := uint16(4500), uint16(4500)
		if sa.sport != 0 {
			wantSport, wantDport = sa.sport, sa.dport
		}
		if e.v6 != wantV6 || e.udp != (encap == "udp") || e.spi != sa.spi || e.seq != uint32(sa.seq+uint64(i)+1) ||
			e.udp && (e.sport != wantSport || e.dport != wantDport) {
			t.Fatalf("packet %d: outside %+v", i, e)
		}
		if !r.t.Equal(times[i].Truncate(res)) {
			t.Fatalf("packet %d: time %v, want %v", i, r.t, times[i].Truncate(res))
		}
		espFrames = append(espFrames, out.frame(ip))
		espTimes = append(espTimes, r.t)
	}

	writeCapture(t, encFramed, out, wantV6, espFrames, espTimes)
	code, stdout, stderr = run("pcap", "decrypt", "--json", "--strict", "--sa", saFile, encFramed, dec)
	if code != 0 || stderr != "decrypted 4, dropped 0\n" || stdout != `{"processed":4,"ok":4,"dropped":{}}`+"\n" {
		t.Fatalf("decrypt: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	outRes := time.Microsecond
	if out.ng {
		outRes = time.Nanosecond
	}
	lt, _, recs = readCapture(t, dec)
	if len(recs) != len(inner) {
		t.Fatalf("decrypt wrote %d packets, want %d", len(recs), len(inner))
	}
	for i, r := range recs {
		var hdr []byte
		if out.hdr != nil {
			hdr = out.hdr(inner6)
		}
		if ip := stripLink(t, lt, r.data, hdr); !bytes.Equal(ip, inner[i]) {
			t.Fatalf("packet %d: decrypted\n%x\nwant\n%x", i, ip, inner[i])
		}
		if !r.t.Equal(espTimes[i].Truncate(outRes)) {
			t.Fatalf("packet %d: time %v", i, r.t)
		}
	}
}

// TestSampleCapture decrypts the sample shipped in testdata/pcap: six ICMP
// echo requests, the second replayed and the fifth tampered with.
func TestSampleCapture(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.pcap")
	sa, in := "../testdata/pcap/sample.sa.toml", "../testdata/pcap/sample-esp.pcap"
	code, stdout, stderr := run("pcap", "decrypt", "--json", "--sa", sa, in, out)
	if code != 0 || stderr != "decrypted 5, dropped 2 (replay: 1, auth_failed: 1)\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var sum struct {
		Processed, OK int
		Dropped       map[string]int
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("%q: %v", stdout, err)
	}
	if sum.Processed != 7 || sum.OK != 5 || len(sum.Dropped) != 2 || sum.Dropped["replay"] != 1 || sum.Dropped["auth_failed"] != 1 {
		t.Fatalf("JSON summary %+v", sum)
	}
	_, _, espRecs := readCapture(t, in)
	lt, _, recs := readCapture(t, out)
	if lt != pcap.LinkEthernet || len(recs) != 5 {
		t.Fatalf("%v, %d packets", lt, len(recs))
	}
	wantTimes := []int{0, 1, 2, 4, 6} // records 1, 2, 3, 5 and 7 of the input
	for i, seq := range []int{1, 2, 3, 4, 6} {
		r := recs[i]
		if !r.t.Equal(espRecs[wantTimes[i]].t) {
			t.Errorf("echo %d: time %v, want %v", seq, r.t, espRecs[wantTimes[i]].t)
		}
		if !bytes.Equal(r.data[:12], espRecs[0].data[:12]) || binary.BigEndian.Uint16(r.data[12:]) != pcap.EtherTypeIPv4 {
			t.Errorf("echo %d: Ethernet header %x", seq, r.data[:14])
		}
		ip := packet.IPv4(r.data[14:])
		if !ip.IsValid() || !ip.ChecksumValid() || ip.Protocol() != packet.ProtoICMP || ip.Src() != netip.MustParseAddr("10.1.0.1") || ip.Dst() != netip.MustParseAddr("10.2.0.1") {
			t.Fatalf("echo %d: IP header %x", seq, r.data[14:34])
		}
		icmp := ip.Payload()
		want := fmt.Sprintf("sluice sample echo %02d", seq) + strings.Repeat(".", 11)
		if icmp[0] != 8 || packet.Checksum(icmp, 0) != 0xffff || binary.BigEndian.Uint16(icmp[4:]) != 0x534c ||
			binary.BigEndian.Uint16(icmp[6:]) != uint16(seq) || string(icmp[8:]) != want {
			t.Errorf("echo %d: ICMP %x", seq, icmp)
		}
	}

	// The plaintext sample encrypts back to something the same SA file
	// decrypts.
	enc := filepath.Join(t.TempDir(), "enc.pcap")
	if code, _, stderr := run("pcap", "encrypt", "--sa", sa, "../testdata/pcap/sample-plain.pcap", enc); code != 0 || stderr != "encrypted 6, dropped 0\n" {
		t.Fatalf("encrypt sample: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run("pcap", "decrypt", "--strict", "--sa", sa, enc, out); code != 0 || stderr != "decrypted 6, dropped 0\n" {
		t.Fatalf("decrypt encrypted sample: exit %d: %s", code, stderr)
	}
	if code, _, _ := run("pcap", "decrypt", "--strict", "--sa", sa, in, out); code != cli.ExitDropped {
		t.Fatalf("--strict with drops: exit %d, want %d", code, cli.ExitDropped)
	}
}

// sealOne encrypts inner with sa (a fresh SA file seeded at seq) and
// returns the ESP packet.
func sealOne(t *testing.T, dir string, sa saSpec, inner []byte) []byte {
	t.Helper()
	saFile, in, out := filepath.Join(dir, "seal.sa.toml"), filepath.Join(dir, "seal-in.pcap"), filepath.Join(dir, "seal-out.pcap")
	writeSAFile(t, saFile, sa)
	writeCapture(t, in, linkKinds[1], false, [][]byte{inner}, []time.Time{base})
	if code, _, stderr := run("pcap", "encrypt", "--sa", saFile, in, out); code != 0 {
		t.Fatalf("encrypt: %s", stderr)
	}
	_, _, recs := readCapture(t, out)
	return recs[0].data
}

// TestPcapDrops: every reason a packet of a capture is not decrypted is
// counted under its name, in a stable order, and --strict turns drops into
// exit status 1.
func TestPcapDrops(t *testing.T) {
	dir := t.TempDir()
	good := saSpec{spi: 0x2000, alg: cryptodev.AES128GCM16, encap: "udp", src: outer4a, dst: outer4b}
	inner := udpPacket(inner4a, inner4b, 1, 2, 50, 1)
	pkt1 := sealOne(t, dir, good, inner)
	good.seq = 1
	pkt2 := sealOne(t, dir, good, inner)
	wrongDst := bytes.Clone(pkt2)
	copy(wrongDst[16:20], []byte{192, 0, 2, 99})
	packet.IPv4(wrongDst).SetChecksum()
	unknownSPI := bytes.Clone(pkt2)
	binary.BigEndian.PutUint32(unknownSPI[28:], 0x9999)

	udp := func(port uint16, payload ...byte) []byte {
		b := udpPacket(outer4a, outer4b, port, port, len(payload), 0)
		copy(b[28:], payload)
		return b
	}
	ike := udp(4500, 0, 0, 0, 0, 1, 2, 3, 4)
	keepalive := udp(4500, 0xff)
	other := udp(53, 1, 2, 3)
	snapped := bytes.Clone(pkt2)[:40]
	arp := append(append(append([]byte{}, macB...), macA...), 0x08, 0x06)
	arp = append(arp, make([]byte, 46)...)

	eth := linkKinds[0]
	frames := [][]byte{eth.frame(pkt1), eth.frame(wrongDst), eth.frame(unknownSPI), eth.frame(ike),
		eth.frame(keepalive), eth.frame(other), arp, eth.frame(snapped), eth.frame(pkt1)}
	times := make([]time.Time, len(frames))
	for i := range times {
		times[i] = base.Add(time.Duration(i) * time.Second)
	}
	in := filepath.Join(dir, "drops.pcap")
	writeCapture(t, in, eth, false, frames, times)
	// The snapped frame: say on the wire it was longer than captured.
	b, _ := os.ReadFile(in)
	off := 24
	for i := range frames {
		capLen := int(binary.LittleEndian.Uint32(b[off+8:]))
		if i == 7 {
			binary.LittleEndian.PutUint32(b[off+12:], uint32(14+len(pkt2)))
		}
		off += 16 + capLen
	}
	os.WriteFile(in, b, 0o644)

	// The SA file: the good SA (with dst) and a second SA sharing nothing.
	saFile := filepath.Join(dir, "drops.sa.toml")
	good.seq = 0
	writeSAFile(t, saFile, good, saSpec{spi: 0x3000, alg: cryptodev.ChaCha20Poly1305, src: outer6a, dst: outer6b})
	out := filepath.Join(dir, "drops-out.pcap")
	wantLine := "decrypted 1, dropped 8 (not_ip: 1, snaplen: 1, not_esp: 1, ike: 1, keepalive: 1, unknown_spi: 2, replay: 1)\n"
	wantJSON := `{"processed":9,"ok":1,"dropped":{"not_ip":1,"snaplen":1,"not_esp":1,"ike":1,"keepalive":1,"unknown_spi":2,"replay":1}}` + "\n"
	code, stdout, stderr := run("pcap", "decrypt", "--sa", saFile, "--json", in, out)
	if code != 0 || stderr != wantLine || stdout != wantJSON {
		t.Fatalf("exit %d\nstderr %q\n  want %q\nstdout %q\n  want %q", code, stderr, wantLine, stdout, wantJSON)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run("pcap", "decrypt", "--strict", "--sa", saFile, in, out)
	if code != cli.ExitDropped || !strings.HasPrefix(stderr, wantLine) || !strings.Contains(stderr, "sluice: 8 of 9 packets dropped (--strict)") {
		t.Fatalf("--strict: exit %d, stderr %q", code, stderr)
	}
	_, _, recs := readCapture(t, out)
	if len(recs) != 1 {
		t.Fatalf("%d packets written, want 1", len(recs))
	}

	// A dst-less SA matches any destination.
	good.dst = netip.Addr{}
	writeSAFile(t, saFile, good)
	if _, _, stderr = run("pcap", "decrypt", "--sa", saFile, in, out); !strings.HasPrefix(stderr, "decrypted 2,") {
		t.Fatalf("SA without dst: %q", stderr)
	}
}

// TestPcapLargePackets: packets up to the IP maximum go through or are
// dropped as too big for ESP, never crash.
func TestPcapLargePackets(t *testing.T) {
	dir := t.TempDir()
	sa := saSpec{spi: 0x4000, alg: cryptodev.AES256GCM16, src: outer6a, dst: outer6b}
	saFile, in, enc, dec := filepath.Join(dir, "sa.toml"), filepath.Join(dir, "in.pcap"), filepath.Join(dir, "enc.pcap"), filepath.Join(dir, "dec.pcap")
	writeSAFile(t, saFile, sa)
	fits := udpPacket(inner4a, inner4b, 1, 2, 65400-28, 1) // IPv4 in IPv6: 65400 + 16 + 40 + 20 < 65535 + 40
	tooBig4 := udpPacket(inner4a, inner4b, 1, 2, 65535-28, 2)
	tooBig6 := udpPacket(inner6a, inner6b, 1, 2, 65535-8, 3)
	frames := [][]byte{fits, tooBig4, tooBig6}
	times := []time.Time{base, base, base}
	writeCapture(t, in, linkKinds[0], false, [][]byte{linkKinds[0].frame(fits), linkKinds[0].frame(tooBig4), linkKinds[0].frame(tooBig6)}, times)
	code, _, stderr := run("pcap", "encrypt", "--sa", saFile, in, enc)
	if code != 0 || stderr != "encrypted 1, dropped 2 (no_room: 2)\n" {
		t.Fatalf("encrypt: exit %d, %q", code, stderr)
	}
	if code, _, stderr = run("pcap", "decrypt", "--sa", saFile, enc, dec); code != 0 || stderr != "decrypted 1, dropped 0\n" {
		t.Fatalf("decrypt: exit %d, %q", code, stderr)
	}
	_, _, recs := readCapture(t, dec)
	if len(recs) != 1 || !bytes.Equal(recs[0].data[14:], fits) {
		t.Fatalf("large packet did not round-trip")
	}

	// Records far larger than an IP packet: trimmed to what their IP
	// header says, or dropped; the largest record a capture may hold too.
	huge := make([]byte, pcap.MaxCapLen)
	packet.IPv6(huge).Encode(&packet.IPv6Fields{PayloadLength: 0xffff, NextHeader: packet.ProtoESP, Src: outer6a.As16(), Dst: outer6b.As16()})
	binary.BigEndian.PutUint32(huge[40:], sa.spi)
	binary.BigEndian.PutUint32(huge[44:], 1) // sequence number 1
	v4 := bytes.Clone(huge[:70000])
	packet.IPv4(v4).Encode(&packet.IPv4Fields{Length: 0xffff, Protocol: packet.ProtoESP, TTL: 1, Src: outer4a.As4(), Dst: outer4b.As4()})
	writeCapture(t, in, linkKinds[1], false, [][]byte{huge, v4, frames[0]}, times)
	// The IPv6 one reaches the SA: its 65503 bytes of ciphertext (65535
	// less the ESP header, the IV and the ICV) are not a multiple of 4, so
	// esp drops it as bad_length (RFC 4303 section 2.4) before any crypto.
	code, _, stderr = run("pcap", "decrypt", "--sa", saFile, in, dec)
	if code != 0 || stderr != "decrypted 0, dropped 3 (not_esp: 1, unknown_spi: 1, bad_length: 1)\n" {
		t.Fatalf("huge records: exit %d, %q", code, stderr)
	}
}

// TestPcapBadInput: bad input is exit status 2 with a message that says
// what is wrong.
func TestPcapBadInput(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	sa := saSpec{spi: 0x5000, alg: cryptodev.AES128CBCSHA256, src: outer4a, dst: outer4b}
	writeSAFile(t, p("sa.toml"), sa)
	writeSAFile(t, p("two.toml"), sa, saSpec{spi: 0x5001, alg: cryptodev.AES128GCM16, src: outer4a, dst: outer4b})
	writeSAFile(t, p("nosrc.toml"), saSpec{spi: 0x5002, alg: cryptodev.AES128GCM16, mode: "tunnel"})
	os.WriteFile(p("bad.toml"), []byte("[[sa]]\nspi = 5\nesp = \"aes128gcm16\"\nenc_key = \"00\"\n"), 0o644)
	os.WriteFile(p("empty.toml"), []byte("# nothing\n"), 0o644)
	pkts := [][]byte{udpPacket(inner4a, inner4b, 1, 2, 10, 1), udpPacket(inner4a, inner4b, 1, 2, 20, 2), udpPacket(inner4a, inner4b, 1, 2, 30, 3)}
	times := []time.Time{base, base.Add(time.Second), base.Add(2 * time.Second)}
	writeCapture(t, p("in.pcap"), linkKinds[1], false, pkts, times)
	b, _ := os.ReadFile(p("in.pcap"))
	os.WriteFile(p("trunc.pcap"), b[:len(b)-5], 0o644)
	wifi := bytes.Clone(b)
	binary.LittleEndian.PutUint32(wifi[20:], 105)
	os.WriteFile(p("wifi.pcap"), wifi, 0o644)
	os.WriteFile(p("text.pcap"), []byte("not a capture at all, just text\n"), 0o644)

	cases := []struct {
		name string
		args []string
		want string // a regexp the stderr must match
	}{
		{"missing SA file", []string{"pcap", "decrypt", "--sa", p("nope.toml"), p("in.pcap"), p("o.pcap")}, `(?m)^sluice: open .*nope\.toml: no such file or directory$`},
		{"malformed SA file", []string{"pcap", "decrypt", "--sa", p("bad.toml"), p("in.pcap"), p("o.pcap")}, `(?m)^sluice: .*bad\.toml:2:7: sa\[1\]\.spi: SPI 5 out of range`},
		{"SA file without SAs", []string{"pcap", "decrypt", "--sa", p("empty.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: .*empty\.toml: no SAs`},
		{"missing input", []string{"pcap", "decrypt", "--sa", p("sa.toml"), p("none.pcap"), p("o.pcap")}, `^sluice: open .*none\.pcap: no such file or directory`},
		{"output directory missing", []string{"pcap", "decrypt", "--sa", p("sa.toml"), p("in.pcap"), p("no/such/dir/o.pcap")}, `^sluice: open .*o\.pcap: no such file or directory`},
		{"output is input", []string{"pcap", "decrypt", "--sa", p("sa.toml"), p("in.pcap"), p("in.pcap")}, `^sluice: .*in\.pcap: output is the input file`},
		{"not a capture", []string{"pcap", "decrypt", "--sa", p("sa.toml"), p("text.pcap"), p("o.pcap")}, `^sluice: .*text\.pcap: not a pcap or pcapng file \(magic number 0x6e6f7420\)`},
		{"unknown link type", []string{"pcap", "encrypt", "--sa", p("sa.toml"), p("wifi.pcap"), p("o.pcap")}, `^sluice: .*wifi\.pcap: unsupported link type IEEE802_11 \(supported: ETHERNET \(1\), RAW`},
		{"unknown flag", []string{"pcap", "decrypt", "--bogus", "--sa", p("sa.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: unknown flag: --bogus`},
		{"missing --sa", []string{"pcap", "decrypt", p("in.pcap"), p("o.pcap")}, `^sluice: required flag\(s\) "sa" not set`},
		{"one argument", []string{"pcap", "decrypt", "--sa", p("sa.toml"), p("in.pcap")}, `^sluice: accepts 2 arg\(s\), received 1`},
		{"bad --spi", []string{"pcap", "encrypt", "--sa", p("sa.toml"), "--spi", "x12", p("in.pcap"), p("o.pcap")}, `^sluice: invalid argument "x12" for "--spi"`},
		{"--spi on decrypt", []string{"pcap", "decrypt", "--spi", "1", "--sa", p("sa.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: unknown flag: --spi`},
		{"unknown engine", []string{"pcap", "decrypt", "--engine", "nope", "--sa", p("sa.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: cryptodev: unknown engine "nope" \(registered: .*soft`},
		{"several SAs", []string{"pcap", "encrypt", "--sa", p("two.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: .*two\.toml has 2 SAs: choose one with --spi`},
		{"no such SPI", []string{"pcap", "encrypt", "--sa", p("two.toml"), "--spi", "0x77", p("in.pcap"), p("o.pcap")}, `^sluice: .*two\.toml has no SA with SPI 119 \(0x77\)`},
		{"tunnel SA without addresses", []string{"pcap", "encrypt", "--sa", p("nosrc.toml"), p("in.pcap"), p("o.pcap")}, `^sluice: .*nosrc\.toml:1:1: SA \(spi 0x00005002\): esp: an outbound tunnel SA needs src and dst`},
		{"--json with OUT on stdout", []string{"pcap", "decrypt", "--json", "--sa", p("sa.toml"), p("in.pcap"), "-"}, `^sluice: --json writes to stdout`},
		{"unknown subcommand", []string{"pcap", "scramble"}, `^sluice: unknown command "scramble" for "sluice pcap"`},
	}
	for _, c := range cases {
		code, stdout, stderr := run(c.args...)
		if code != cli.ExitUsage || !regexp.MustCompile(c.want).MatchString(stderr) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %s", c.name, code, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("%s: stdout %q", c.name, stdout)
		}
	}
	if _, err := os.Stat(p("o.pcap")); err == nil {
		t.Errorf("an output file was created for input that was rejected up front")
	}
	if code, _, _ := run("pcap", "encrypt", "--sa", p("two.toml"), "--spi", "20481", p("in.pcap"), p("o.pcap")); code != 0 {
		t.Errorf("--spi in decimal: exit %d", code)
	}

	// A truncated last record: what came before it is written, then the
	// summary and an error naming the record.
	code, stdout, stderr := run("pcap", "encrypt", "--json", "--sa", p("sa.toml"), p("trunc.pcap"), p("t.pcap"))
	want := regexp.MustCompile(`^encrypted 2, dropped 0\nsluice: .*trunc\.pcap: record 3: truncated capture: unexpected EOF\n$`)
	if code != cli.ExitUsage || !want.MatchString(stderr) || stdout != `{"processed":2,"ok":2,"dropped":{}}`+"\n" {
		t.Fatalf("truncated: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, _, recs := readCapture(t, p("t.pcap")); len(recs) != 2 {
		t.Fatalf("truncated: %d packets written, want 2", len(recs))
	}
}

// TestPcapStdio: - reads stdin and writes stdout.
func TestPcapStdio(t *testing.T) {
	dir := t.TempDir()
	sa := saSpec{spi: 0x6000, alg: cryptodev.NullSHA256, mode: "transport"}
	writeSAFile(t, filepath.Join(dir, "sa.toml"), sa)
	pkt := udpPacket(inner6a, inner6b, 7, 8, 99, 1)
	writeCapture(t, filepath.Join(dir, "in.pcap"), linkKinds[1], true, [][]byte{pkt}, []time.Time{base})
	in, _ := os.ReadFile(filepath.Join(dir, "in.pcap"))
	var enc, dec, errb bytes.Buffer
	if code := cli.Run(context.Background(), []string{"pcap", "encrypt", "--sa", filepath.Join(dir, "sa.toml"), "-", "-"}, bytes.NewReader(in), &enc, &errb); code != 0 {
		t.Fatalf("encrypt: %s", errb.String())
	}
	if code := cli.Run(context.Background(), []string{"pcap", "decrypt", "--sa", filepath.Join(dir, "sa.toml"), "-", "-"}, &enc, &dec, &errb); code != 0 {
		t.Fatalf("decrypt: %s", errb.String())
	}
	os.WriteFile(filepath.Join(dir, "dec.pcap"), dec.Bytes(), 0o644)
	if _, _, recs := readCapture(t, filepath.Join(dir, "dec.pcap")); len(recs) != 1 || !bytes.Equal(recs[0].data, pkt) {
		t.Fatalf("stdin/stdout round trip failed: %s", errb.String())
	}
}

// asyncEngine is the soft engine behind a queue that completes batches
// late, as an asynchronous engine does: a batch is done once lag more
// were submitted after it (never, with lag 0), or when the caller waits.
// bound is the most batches it holds.
type asyncEngine struct {
	*soft.Engine
	name       string
	bound, lag int
}

func (e *asyncEngine) Name() string { return e.name }
func (e *asyncEngine) Async() bool  { return true }
func (e *asyncEngine) NewQueue() (cryptodev.Queue, error) {
	return &asyncQueue{bound: e.bound, lag: e.lag}, nil
}

type asyncQueue struct {
	bound, lag int
	q          []*cryptodev.Batch
	s          soft.Scratch
}

func (q *asyncQueue) Submit(b *cryptodev.Batch) error {
	if len(q.q) >= q.bound {
		return cryptodev.ErrQueueFull
	}
	q.q = append(q.q, b)
	return nil
}

func (q *asyncQueue) Dequeue(wait bool) *cryptodev.Batch {
	if len(q.q) == 0 || !wait && (q.lag == 0 || len(q.q) <= q.lag) {
		return nil
	}
	b := q.q[0]
	q.q = q.q[1:]
	soft.Process(b.Ops, &q.s)
	return b
}

func (q *asyncQueue) InFlight() int { return len(q.q) }
func (q *asyncQueue) Close()        {}

func init() {
	for _, e := range []asyncEngine{{name: "test-async", bound: 16, lag: 2}, {name: "test-async-lazy", bound: 16}, {name: "test-async-2", bound: 2}} {
		cryptodev.Register(e.name, -1, func() (cryptodev.Engine, error) {
			e.Engine = soft.New()
			return &e, nil
		})
	}
}

// TestPcapAsyncEngine runs several batches in flight: packets leave in
// order, the replay window sees them in order, and an engine that refuses
// batches costs queue_full drops, not a crash or reordering.
func TestPcapAsyncEngine(t *testing.T) {
	dir := t.TempDir()
	saFile, in, enc, dec := filepath.Join(dir, "sa.toml"), filepath.Join(dir, "in.pcap"), filepath.Join(dir, "enc.pcap"), filepath.Join(dir, "dec.pcap")
	writeSAFile(t, saFile, saSpec{spi: 0x7000, alg: cryptodev.AES128CBCSHA256, src: outer4a, dst: outer4b, window: 32})
	const n = 1000
	var frames [][]byte
	var times []time.Time
	for i := range n {
		frames = append(frames, udpPacket(inner4a, inner4b, 1, 2, i%200, i))
		times = append(times, base.Add(time.Duration(i)*time.Millisecond))
	}
	writeCapture(t, in, linkKinds[1], false, frames, times)
	if code, _, stderr := run("pcap", "encrypt", "--engine", "test-async", "--sa", saFile, in, enc); code != 0 || stderr != fmt.Sprintf("encrypted %d, dropped 0\n", n) {
		t.Fatalf("encrypt: exit %d, %q", code, stderr)
	}
	_, _, recs := readCapture(t, enc)
	// Replay the first packet at the end: outside the window.
	var espFrames [][]byte
	for _, r := range recs {
		espFrames = append(espFrames, r.data)
	}
	espFrames = append(espFrames, recs[0].data)
	times = append(times, base.Add(time.Hour))
	writeCapture(t, enc, linkKinds[1], false, espFrames, times)
	if code, _, stderr := run("pcap", "decrypt", "--engine", "test-async-lazy", "--sa", saFile, enc, dec); code != 0 || stderr != fmt.Sprintf("decrypted %d, dropped 1 (replay: 1)\n", n) {
		t.Fatalf("decrypt: exit %d, %q", code, stderr)
	}
	_, _, out := readCapture(t, dec)
	for i := range n {
		if !bytes.Equal(out[i].data, frames[i]) || !out[i].t.Equal(times[i]) {
			t.Fatalf("packet %d out of order or changed", i)
		}
	}

	// An engine that holds only two batches refuses the third once: that
	// batch is dropped as queue_full, and the command then keeps fewer in
	// flight.
	code, _, stderr := run("pcap", "encrypt", "--engine", "test-async-2", "--sa", saFile, in, enc)
	if code != 0 || stderr != fmt.Sprintf("encrypted %d, dropped 64 (queue_full: 64)\n", n-64) {
		t.Fatalf("bounded engine: exit %d, %q", code, stderr)
	}
}
