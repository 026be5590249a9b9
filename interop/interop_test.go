// Package interop_test runs sluice's `sluice pcap encrypt|decrypt` against
// real peers (DESIGN.md decision 12; the peers' facts and faults are in
// INTEROP.md):
//
//  1. Scapy 2.5 encrypts, sluice decrypts.
//  2. sluice encrypts, Scapy decrypts.
//  3. tshark 4.0 decrypts sluice's output with the keys on its command line
//     and checks every ICV.
//  4. Tampered, replayed, truncated and wrong-SPI packets made from Scapy's
//     output are dropped by sluice with the right reason.
//
// Every suite sluice has, tunnel and transport, IPv4 and IPv6 (outer and
// inner), plain ESP and UDP encapsulation (RFC 3948), and ESN where the peer
// does it. Inner packets are compared byte for byte.
//
// Scapy runs through scapy_esp.py in a few batched processes (Python
// startup and the Scapy import cost more than most jobs); tshark runs once
// over all of sluice's output. Keys are fixed (derived from the suite name),
// IVs in Scapy are derived from key and sequence number, so every run sends
// the same bytes except sluice's own CBC IVs. A missing peer skips its
// tests, except under CI=true, where it fails them.
package interop_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

const (
	python       = "/usr/bin/python3" // Debian's, which sees python3-scapy (INTEROP.md)
	scapyScript  = "scapy_esp.py"
	buildTimeout = 5 * time.Minute
	cmdTimeout   = time.Minute     // one sluice or tshark run
	pyTimeout    = 3 * time.Minute // one Scapy batch
)

// ---------------------------------------------------------------------------
// Peers and the sluice binary.

var (
	tmpRoot string // removed by TestMain

	buildOnce sync.Once
	sluiceBin string
	buildErr  error

	scapyOnce sync.Once
	scapyErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(2)
	}
	tmpRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sluicePath builds cmd/sluice once per test binary and returns its path.
func sluicePath(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		bin := filepath.Join(tmpRoot, "sluice")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sluicegw/sluice/cmd/sluice")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
			return
		}
		sluiceBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return sluiceBin
}

// needPeer skips the test when a peer is missing, or fails it under
// CI=true, where a missing peer must never pass silently.
func needPeer(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and a peer is missing: %v", err)
	}
	t.Skipf("peer missing (under CI=true this fails): %v", err)
}

func needScapy(t *testing.T) {
	t.Helper()
	scapyOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, python, "-c", "import tomllib, scapy.layers.ipsec").CombinedOutput()
		if err != nil {
			scapyErr = fmt.Errorf("%s cannot import scapy.layers.ipsec (apt-get install python3-scapy python3-cryptography): %v: %s",
				python, err, bytes.TrimSpace(out))
		}
	})
	needPeer(t, scapyErr)
}

func needTshark(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		err = fmt.Errorf("tshark not on PATH (apt-get install tshark): %v", err)
	}
	needPeer(t, err)
	return p
}

// cmdResult is what a finished subprocess left.
type cmdResult struct {
	cmdline        string
	stdout, stderr []byte
	code           int
}

func (r *cmdResult) String() string {
	return fmt.Sprintf("%s: exit %d\nstdout: %s\nstderr: %s", r.cmdline, r.code, r.stdout, r.stderr)
}

// runCmd runs a command with a deadline. A non-zero exit status is a
// result, not an error; a timeout or a failure to start is an error.
func runCmd(timeout time.Duration, name string, args ...string) (*cmdResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := &cmdResult{cmdline: name + " " + strings.Join(args, " "), stdout: so.Bytes(), stderr: se.Bytes()}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s: killed after %v: %s", r.cmdline, timeout, se.Bytes())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		return r, fmt.Errorf("%s: %v", r.cmdline, err)
	}
	return r, nil
}

// forEach runs f(i) for i in [0, n) on all cores and waits.
func forEach(n int, f func(i int)) {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------
// Suites and cases.

// suite is an ESP suite as sluice names it, with its tshark 4.0 UAT names
// ("" when tshark 4.0 cannot decrypt it).
type suite struct {
	name          string
	encLen        int // enc_key bytes; AEAD: key + 4-byte salt
	authLen       int
	ivLen, icvLen int
	block         int // cipher block size, or 4
	aead          bool
	tsharkEnc     string
	tsharkAuth    string
}

const (
	tsGCM    = "AES-GCM with 16 octet ICV [RFC4106]" // key length picks AES-128/192/256
	tsCBC    = "AES-CBC [RFC3602]"
	tsSHA256 = "HMAC-SHA-256-128 [RFC4868]"
	tsSHA384 = "HMAC-SHA-384-192 [RFC4868]"
	tsSHA512 = "HMAC-SHA-512-256 [RFC4868]"
)

var suites = []suite{
	{"aes128gcm16", 20, 0, 8, 16, 4, true, tsGCM, "NULL"},
	{"aes192gcm16", 28, 0, 8, 16, 4, true, tsGCM, "NULL"},
	{"aes256gcm16", 36, 0, 8, 16, 4, true, tsGCM, "NULL"},
	{"chacha20poly1305", 36, 0, 8, 16, 4, true, "", ""},
	{"aes128-sha256", 16, 32, 16, 16, 16, false, tsCBC, tsSHA256},
	{"aes256-sha256", 32, 32, 16, 16, 16, false, tsCBC, tsSHA256},
	{"aes128-sha384", 16, 48, 16, 24, 16, false, tsCBC, tsSHA384},
	{"aes256-sha384", 32, 48, 16, 24, 16, false, tsCBC, tsSHA384},
	{"aes128-sha512", 16, 64, 16, 32, 16, false, tsCBC, tsSHA512},
	{"aes256-sha512", 32, 64, 16, 32, 16, false, tsCBC, tsSHA512},
	{"null-sha256", 0, 32, 0, 16, 4, false, "NULL", tsSHA256},
}

func suiteByName(name string) suite {
	for _, s := range suites {
		if s.name == name {
			return s
		}
	}
	panic("interop: no suite " + name)
}

// fixedKey derives n key bytes from the suite and a label: fixed, so a
// failure replays exactly, and different for every suite and use.
func fixedKey(s suite, label string, n int) []byte {
	var k []byte
	for i := 0; len(k) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("sluice interop %s %s %d", s.name, label, i)))
		k = append(k, h[:]...)
	}
	return k[:n]
}

// tcase is one SA configuration.
type tcase struct {
	s         suite
	transport bool
	ip6       bool // outer family (transport: the packets' family)
	udp       bool // RFC 3948 encapsulation
	esn       bool
	spi       uint32
}

func (c tcase) name() string {
	n := c.s.name
	if c.transport {
		n += "/transport"
	} else {
		n += "/tunnel"
	}
	if c.ip6 {
		n += "/ip6"
	} else {
		n += "/ip4"
	}
	if c.udp {
		n += "/udp"
	} else {
		n += "/esp"
	}
	if c.esn {
		n += "/esn"
	}
	return n
}

func (c tcase) src() netip.Addr {
	if c.ip6 {
		return netip.MustParseAddr("2001:db8::1")
	}
	return netip.MustParseAddr("192.0.2.1")
}

func (c tcase) dst() netip.Addr {
	if c.ip6 {
		return netip.MustParseAddr("2001:db8::2")
	}
	return netip.MustParseAddr("192.0.2.2")
}

// ports are the UDP ports of an encapsulated case: IPv6 cases come from a
// NAT-translated source port, as RFC 3948 traffic does.
func (c tcase) ports() (sport, dport uint16) {
	if c.ip6 {
		return 45001, 4500
	}
	return 4500, 4500
}

// seq is the SA file's seq: the last number sent (outbound) and the highest
// received (inbound), so packets carry seq+1, seq+2, ... ESN cases start
// just below 2^32 so that the high 32 bits change within the test.
func (c tcase) seq() uint64 {
	if c.esn {
		return 1<<32 - 8
	}
	return 0
}

func (c tcase) encKey() []byte  { return fixedKey(c.s, "enc", c.s.encLen) }
func (c tcase) authKey() []byte { return fixedKey(c.s, "auth", c.s.authLen) }

// saFile is the case's SA file.
func (c tcase) saFile() string {
	var b strings.Builder
	mode, encap := "tunnel", "none"
	if c.transport {
		mode = "transport"
	}
	if c.udp {
		encap = "udp"
	}
	fmt.Fprintf(&b, "[[sa]]\nname = %q\nspi = 0x%x\nsrc = %q\ndst = %q\nmode = %q\nencap = %q\n",
		c.name(), c.spi, c.src(), c.dst(), mode, encap)
	if c.udp {
		sp, dp := c.ports()
		fmt.Fprintf(&b, "sport = %d\ndport = %d\n", sp, dp)
	}
	fmt.Fprintf(&b, "esp = %q\nenc_key = \"0x%x\"\n", c.s.name, c.encKey())
	if c.s.authLen > 0 {
		fmt.Fprintf(&b, "auth_key = \"0x%x\"\n", c.authKey())
	}
	fmt.Fprintf(&b, "esn = %t\nreplay_window = 64\nseq = %d\n", c.esn, c.seq())
	return b.String()
}

// allCases is every suite x mode x outer family x encapsulation x ESN, each
// with its own SPI.
func allCases() []tcase {
	var cs []tcase
	spi := uint32(0x10000)
	for _, s := range suites {
		for _, transport := range []bool{false, true} {
			for _, ip6 := range []bool{false, true} {
				for _, udp := range []bool{false, true} {
					for _, esn := range []bool{false, true} {
						cs = append(cs, tcase{s: s, transport: transport, ip6: ip6, udp: udp, esn: esn, spi: spi})
						spi++
					}
				}
			}
		}
	}
	return cs
}

// scapySkip says why Scapy 2.5 cannot be the peer of a case, or "".
func scapySkip(c tcase) string {
	if c.esn && !c.s.aead {
		return "Scapy 2.5 ignores ESN in the ICV of CBC/NULL+HMAC SAs (INTEROP.md): no peer for ESN with " + c.s.name
	}
	return ""
}

// tsharkSkip says why tshark 4.0 cannot check a case, or "".
func tsharkSkip(c tcase) string {
	switch {
	case c.s.tsharkEnc == "":
		return "tshark 4.0 has no " + c.s.name
	case c.esn:
		return "tshark 4.0 has no ESN (its ICV check leaves the high bits out)"
	}
	return ""
}

// ---------------------------------------------------------------------------
// Plaintext packets.

// payloadLens covers every padding length of every block size, and big
// packets.
var payloadLens = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 61, 255, 1000, 1400}

var (
	inner4Src = netip.MustParseAddr("10.1.0.1")
	inner4Dst = netip.MustParseAddr("10.2.0.1")
	inner6Src = netip.MustParseAddr("fd00:1::1")
	inner6Dst = netip.MustParseAddr("fd00:2::1")
)

// ipPacket builds an IPv4 or IPv6 packet carrying UDP, TCP or an ICMP echo
// request (kind 0, 1, 2) with n bytes of payload, all checksums right;
// every fifth IPv4 packet has a Router Alert option.
func ipPacket(src, dst netip.Addr, kind, n, i int) []byte {
	payload := make([]byte, n)
	for j := range payload {
		payload[j] = byte(i*31 + j)
	}
	var netLayer gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	var proto layers.IPProtocol
	switch kind {
	case 0:
		proto = layers.IPProtocolUDP
	case 1:
		proto = layers.IPProtocolTCP
	default:
		proto = layers.IPProtocolICMPv4
		if src.Is6() {
			proto = layers.IPProtocolICMPv6
		}
	}
	if src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TOS: byte(i << 2), Id: uint16(1000 + i), Flags: layers.IPv4DontFragment,
			TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if i%5 == 4 { // a header with options: transport mode must keep it whole
			ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // Router Alert
		}
		netLayer, nl = ip, ip
	} else {
		ip := &layers.IPv6{Version: 6, TrafficClass: byte(i << 2), FlowLabel: uint32(i), HopLimit: 64,
			NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		netLayer, nl = ip, ip
	}
	ls := []gopacket.SerializableLayer{netLayer}
	switch proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(40000 + i), DstPort: 40999}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	case layers.IPProtocolTCP:
		tc := &layers.TCP{SrcPort: layers.TCPPort(40000 + i), DstPort: 40999, Seq: uint32(i * 1000), Ack: 1,
			ACK: true, PSH: n > 0, Window: 65535}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	case layers.IPProtocolICMPv4:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 7, Seq: uint16(i)})
	case layers.IPProtocolICMPv6:
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
		ic.SetNetworkLayerForChecksum(nl)
		ls = append(ls, ic, &layers.ICMPv6Echo{Identifier: 7, SeqNumber: uint16(i)})
	}
	ls = append(ls, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// plaintext is what a case protects: in tunnel mode inner IPv4 and IPv6
// packets alternate (so each outer family carries both); in transport mode
// the packets go between the SA's addresses. UDP, TCP and ICMP rotate.
func plaintext(c tcase, count int) [][]byte {
	pkts := make([][]byte, count)
	for i := range pkts {
		src, dst := c.src(), c.dst()
		if !c.transport {
			src, dst = inner4Src, inner4Dst
			if i%2 == 1 {
				src, dst = inner6Src, inner6Dst
			}
		}
		pkts[i] = ipPacket(src, dst, i%3, payloadLens[i%len(payloadLens)], i)
	}
	return pkts
}

// ---------------------------------------------------------------------------
// Capture files, through gopacket's pcapgo.

func writePcap(path string, lt layers.LinkType, pkts [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		f.Close()
		return err
	}
	for i, p := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(1700000000+i), 0), CaptureLength: len(p), Length: len(p)}
		if err := w.WritePacket(ci, p); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func readPcap(path string) (layers.LinkType, [][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %v", path, err)
	}
	var pkts [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return r.LinkType(), pkts, nil
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%s: packet %d: %v", path, len(pkts), err)
		}
		if ci.CaptureLength != ci.Length {
			return 0, nil, fmt.Errorf("%s: packet %d cut to %d of %d bytes", path, len(pkts), ci.CaptureLength, ci.Length)
		}
		pkts = append(pkts, data)
	}
}

func mustWritePcap(t *testing.T, path string, lt layers.LinkType, pkts [][]byte) {
	t.Helper()
	if err := writePcap(path, lt, pkts); err != nil {
		t.Fatal(err)
	}
}

func mustReadPcap(t *testing.T, path string) (layers.LinkType, [][]byte) {
	t.Helper()
	lt, pkts, err := readPcap(path)
	if err != nil {
		t.Fatal(err)
	}
	return lt, pkts
}

// comparePackets reports every packet that differs from want.
func comparePackets(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d packets, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := 0; i < len(got) && i < len(want); i++ {
		if !bytes.Equal(got[i], want[i]) {
			if bad++; bad <= 3 {
				t.Errorf("%s: packet %d differs:\n got %x\nwant %x", what, i, got[i], want[i])
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d packets differ in all", what, bad)
	}
}

// ---------------------------------------------------------------------------
// Driving sluice.

// summary is the JSON that `sluice pcap decrypt --json` prints.
type summary struct {
	Processed int            `json:"processed"`
	OK        int            `json:"ok"`
	Dropped   map[string]int `json:"dropped"`
}

// parseSummary decodes the JSON object on stdout.
func parseSummary(out []byte) (summary, error) {
	var s summary
	i := bytes.IndexByte(out, '{')
	if i < 0 {
		return s, fmt.Errorf("no JSON object on stdout: %q", out)
	}
	if err := json.NewDecoder(bytes.NewReader(out[i:])).Decode(&s); err != nil {
		return s, fmt.Errorf("JSON summary %q: %v", out, err)
	}
	if s.Dropped == nil {
		s.Dropped = map[string]int{}
	}
	return s, nil
}

func (s summary) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// sluiceEncrypt runs `sluice pcap encrypt --strict --json` and returns an
// error unless every packet was encrypted.
func sluiceEncrypt(bin, saFile string, spi uint32, in, out string) error {
	r, err := runCmd(cmdTimeout, bin, "pcap", "encrypt", "--sa", saFile, "--spi", strconv.FormatUint(uint64(spi), 10),
		"--strict", "--json", in, out)
	if err != nil {
		return err
	}
	if r.code != 0 {
		return errors.New(r.String())
	}
	s, err := parseSummary(r.stdout)
	if err != nil {
		return fmt.Errorf("%v\n%s", err, r)
	}
	if s.Processed == 0 || s.OK != s.Processed || len(s.Dropped) != 0 {
		return fmt.Errorf("summary %v: want every packet encrypted\n%s", s, r)
	}
	return nil
}

// sluiceDecrypt runs `sluice pcap decrypt --json [--strict]` and returns
// the summary and the exit status.
func sluiceDecrypt(t *testing.T, bin, saFile, in, out string, strict bool) (summary, int) {
	t.Helper()
	args := []string{"pcap", "decrypt", "--sa", saFile, "--json"}
	if strict {
		args = append(args, "--strict")
	}
	r, err := runCmd(cmdTimeout, bin, append(args, in, out)...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseSummary(r.stdout)
	if err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	return s, r.code
}

// ---------------------------------------------------------------------------
// Driving Scapy.

type scapyJob struct {
	Op  string `json:"op"`
	SA  string `json:"sa"`
	SPI uint32 `json:"spi"`
	In  string `json:"in"`
	Out string `json:"out"`
}

type scapyPacket struct {
	Index  int    `json:"index"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	SPI    uint32 `json:"spi"`
	Seq    uint64 `json:"seq"`
}

type scapyResult struct {
	Status    string         `json:"status"`
	Error     string         `json:"error"`
	Processed int            `json:"processed"`
	OK        int            `json:"ok"`
	Dropped   map[string]int `json:"dropped"`
	Packets   []scapyPacket  `json:"packets"`
}

// runScapy runs jobs in scapy_esp.py batches, one Python process per core,
// and returns their results in order.
func runScapy(t *testing.T, jobs []scapyJob) []scapyResult {
	t.Helper()
	script, err := filepath.Abs(scapyScript)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := min(runtime.GOMAXPROCS(0), 4, len(jobs))
	results := make([]scapyResult, len(jobs))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := 0; k < n; k++ {
		lo, hi := k*len(jobs)/n, (k+1)*len(jobs)/n
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = func() error {
				jf := filepath.Join(dir, fmt.Sprintf("jobs%d.json", k))
				b, _ := json.Marshal(jobs[lo:hi])
				if err := os.WriteFile(jf, b, 0o644); err != nil {
					return err
				}
				r, err := runCmd(pyTimeout, python, script, "batch", jf)
				if err != nil {
					return err
				}
				if r.code != 0 {
					return errors.New(r.String())
				}
				var rs []scapyResult
				if err := json.Unmarshal(r.stdout, &rs); err != nil || len(rs) != hi-lo {
					return fmt.Errorf("scapy batch output (%d results for %d jobs, %v):\n%s", len(rs), hi-lo, err, r)
				}
				copy(results[lo:hi], rs)
				return nil
			}()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return results
}

// ---------------------------------------------------------------------------
// Checks of sluice's ESP output.

// espInfo is what the outer headers of an ESP packet say.
type espInfo struct {
	src, dst     netip.Addr
	udp          bool
	sport, dport uint16
	spi, seq     uint32
	espLen       int // ESP header to end of the IP packet
}

// parseESP checks the outer IPv4/IPv6 (and UDP) headers of an ESP packet:
// lengths, the IPv4 header checksum and the UDP length.
func parseESP(p []byte) (espInfo, error) {
	var e espInfo
	var proto byte
	var off, end int
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		hl := int(p[0]&0xf) * 4
		end = int(binary.BigEndian.Uint16(p[2:]))
		if hl < 20 || end != len(p) || hl > end {
			return e, fmt.Errorf("IPv4 header length %d, total length %d, packet %d bytes", hl, end, len(p))
		}
		if ipChecksum(p[:hl]) != 0 {
			return e, errors.New("IPv4 header checksum is wrong")
		}
		e.src, e.dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		proto, off = p[9], hl
	case len(p) >= 40 && p[0]>>4 == 6:
		end = 40 + int(binary.BigEndian.Uint16(p[4:]))
		if end != len(p) {
			return e, fmt.Errorf("IPv6 payload length %d, packet %d bytes", end-40, len(p))
		}
		e.src, e.dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		proto, off = p[6], 40
	default:
		return e, errors.New("not an IPv4 or IPv6 packet")
	}
	switch proto {
	case 50:
	case 17:
		if end-off < 8 {
			return e, errors.New("short UDP header")
		}
		e.udp = true
		e.sport, e.dport = binary.BigEndian.Uint16(p[off:]), binary.BigEndian.Uint16(p[off+2:])
		if l := int(binary.BigEndian.Uint16(p[off+4:])); l != end-off {
			return e, fmt.Errorf("UDP length %d, want %d", l, end-off)
		}
		off += 8
	default:
		return e, fmt.Errorf("IP protocol %d is neither ESP nor UDP", proto)
	}
	if end-off < 8 {
		return e, errors.New("short ESP header")
	}
	e.spi, e.seq = binary.BigEndian.Uint32(p[off:]), binary.BigEndian.Uint32(p[off+4:])
	e.espLen = end - off
	return e, nil
}

func ipChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// checkESPOutput checks each ESP packet sluice wrote for a case: outer
// addresses, framing, SPI, consecutive sequence numbers and ESP length.
func checkESPOutput(t *testing.T, c tcase, esp, plain [][]byte) {
	t.Helper()
	if len(esp) != len(plain) {
		t.Fatalf("sluice wrote %d ESP packets for %d plaintext packets", len(esp), len(plain))
	}
	for i, p := range esp {
		e, err := parseESP(p)
		if err != nil {
			t.Errorf("ESP packet %d: %v: %x", i, err, p)
			continue
		}
		if e.src != c.src() || e.dst != c.dst() {
			t.Errorf("ESP packet %d: %v -> %v, want %v -> %v", i, e.src, e.dst, c.src(), c.dst())
		}
		sp, dp := c.ports()
		if e.udp != c.udp || (c.udp && (e.sport != sp || e.dport != dp)) {
			t.Errorf("ESP packet %d: udp=%t %d->%d, want udp=%t %d->%d", i, e.udp, e.sport, e.dport, c.udp, sp, dp)
		}
		if want := uint32(c.seq() + 1 + uint64(i)); e.spi != c.spi || e.seq != want {
			t.Errorf("ESP packet %d: spi 0x%x seq %d, want spi 0x%x seq %d", i, e.spi, e.seq, c.spi, want)
		}
		n := len(plain[i]) // protected bytes: the inner packet, or the transport payload
		if c.transport {
			n -= ipHeaderLen(plain[i])
		}
		payload := e.espLen - 8 - c.s.ivLen - c.s.icvLen
		if payload < n+2 || payload%c.s.block != 0 || payload%4 != 0 || payload-n-2 >= c.s.block {
			t.Errorf("ESP packet %d: %d bytes of payload+padding+trailer for %d bytes (block %d)", i, payload, n, c.s.block)
		}
	}
}

func ipHeaderLen(p []byte) int {
	if p[0]>>4 == 4 {
		return int(p[0]&0xf) * 4
	}
	return 40
}

// logOnFailure logs a case's SA file (keys included: they are fixed test
// keys) if the test fails.
func logOnFailure(t *testing.T, c tcase) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("SA file of %s:\n%s", c.name(), c.saFile())
		}
	})
}

// ---------------------------------------------------------------------------
// 1. Scapy encrypts, sluice decrypts.

func TestScapyEncryptsSluiceDecrypts(t *testing.T) {
	t.Parallel()
	needScapy(t)
	bin := sluicePath(t)
	dir := t.TempDir()
	cases := allCases()
	jobIdx := make([]int, len(cases))
	var jobs []scapyJob
	for i, c := range cases {
		jobIdx[i] = -1
		if scapySkip(c) != "" {
			continue
		}
		base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
		if err := os.WriteFile(base+".toml", []byte(c.saFile()), 0o644); err != nil {
			t.Fatal(err)
		}
		mustWritePcap(t, base+"-plain.pcap", layers.LinkTypeRaw, plaintext(c, len(payloadLens)))
		jobIdx[i] = len(jobs)
		jobs = append(jobs, scapyJob{Op: "encrypt", SA: base + ".toml", SPI: c.spi, In: base + "-plain.pcap", Out: base + "-esp.pcap"})
	}
	results := runScapy(t, jobs)

	for i, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			if why := scapySkip(c); why != "" {
				t.Skip(why)
			}
			t.Parallel()
			logOnFailure(t, c)
			base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
			if r := results[jobIdx[i]]; r.Status != "ok" {
				t.Fatalf("scapy encrypt: %s: %s", r.Status, r.Error)
			}
			s, code := sluiceDecrypt(t, bin, base+".toml", base+"-esp.pcap", base+"-inner.pcap", true)
			n := len(payloadLens)
			if code != 0 || s.Processed != n || s.OK != n || len(s.Dropped) != 0 {
				t.Fatalf("sluice decrypt --strict: exit %d, summary %v; want exit 0 and %d of %d ok", code, s, n, n)
			}
			lt, got := mustReadPcap(t, base+"-inner.pcap")
			if lt != layers.LinkTypeRaw {
				t.Errorf("output link type %v, want RAW (101)", lt)
			}
			_, want := mustReadPcap(t, base+"-plain.pcap")
			comparePackets(t, "sluice's decryption of Scapy's ESP", got, want)
		})
	}
}

// ---------------------------------------------------------------------------
// 2. sluice encrypts, Scapy decrypts.

func TestSluiceEncryptsScapyDecrypts(t *testing.T) {
	t.Parallel()
	needScapy(t)
	bin := sluicePath(t)
	dir := t.TempDir()
	cases := allCases()
	encErr := make([]error, len(cases))
	forEach(len(cases), func(i int) {
		c := cases[i]
		if scapySkip(c) != "" {
			return
		}
		base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
		if encErr[i] = os.WriteFile(base+".toml", []byte(c.saFile()), 0o644); encErr[i] != nil {
			return
		}
		if encErr[i] = writePcap(base+"-plain.pcap", layers.LinkTypeRaw, plaintext(c, len(payloadLens))); encErr[i] != nil {
			return
		}
		encErr[i] = sluiceEncrypt(bin, base+".toml", c.spi, base+"-plain.pcap", base+"-esp.pcap")
	})
	jobIdx := make([]int, len(cases))
	var jobs []scapyJob
	for i, c := range cases {
		jobIdx[i] = -1
		if scapySkip(c) != "" || encErr[i] != nil {
			continue
		}
		base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
		jobIdx[i] = len(jobs)
		jobs = append(jobs, scapyJob{Op: "decrypt", SA: base + ".toml", SPI: c.spi, In: base + "-esp.pcap", Out: base + "-inner.pcap"})
	}
	var results []scapyResult
	if len(jobs) > 0 {
		results = runScapy(t, jobs)
	}

	for i, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			if why := scapySkip(c); why != "" {
				t.Skip(why)
			}
			t.Parallel()
			logOnFailure(t, c)
			if encErr[i] != nil {
				t.Fatalf("sluice encrypt: %v", encErr[i])
			}
			base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
			lt, esp := mustReadPcap(t, base+"-esp.pcap")
			if lt != layers.LinkTypeRaw {
				t.Errorf("sluice's ESP output has link type %v, want RAW (101)", lt)
			}
			_, want := mustReadPcap(t, base+"-plain.pcap")
			checkESPOutput(t, c, esp, want)

			r := results[jobIdx[i]]
			if r.Status != "ok" {
				t.Fatalf("scapy decrypt: %s: %s", r.Status, r.Error)
			}
			for _, p := range r.Packets {
				if !p.OK {
					t.Errorf("Scapy rejects sluice's packet %d (seq %d): %s %s", p.Index, p.Seq, p.Reason, p.Error)
				} else if want := c.seq() + 1 + uint64(p.Index); p.Seq != want {
					t.Errorf("packet %d: Scapy read sequence number %d, want %d", p.Index, p.Seq, want)
				}
			}
			_, got := mustReadPcap(t, base+"-inner.pcap")
			comparePackets(t, "Scapy's decryption of sluice's ESP", got, want)
		})
	}
}

// ---------------------------------------------------------------------------
// 3. tshark decrypts sluice's output and checks every ICV.

// tsharkUAT is the esp_sa UAT record of a case, in tshark 4.0's syntax.
func tsharkUAT(c tcase) string {
	proto := "IPv4"
	if c.ip6 {
		proto = "IPv6"
	}
	authKey := ""
	if c.s.authLen > 0 {
		authKey = fmt.Sprintf("0x%x", c.authKey())
	}
	encKey := ""
	if c.s.encLen > 0 {
		encKey = fmt.Sprintf("0x%x", c.encKey())
	}
	return fmt.Sprintf(`uat:esp_sa:"%s","%s","%s","0x%08x","%s","%s","%s","%s"`,
		proto, c.src(), c.dst(), c.spi, c.s.tsharkEnc, encKey, c.s.tsharkAuth, authKey)
}

// tsharkFields are the fields tshark prints per packet, in this order.
var tsharkFields = []string{"esp.spi", "esp.sequence", "esp.icv_good", "esp.icv_bad",
	"ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "frame.protocols"}

// tsharkExpect is what tshark must print for packet i of a case:
// every address, outer then inner, and the protocols under ESP.
func tsharkExpect(c tcase, plain []byte) (ipSrc, ipDst, ip6Src, ip6Dst, afterESP string) {
	add := func(s *string, a netip.Addr) {
		if *s != "" {
			*s += ","
		}
		*s += a.String()
	}
	if c.ip6 {
		add(&ip6Src, c.src())
		add(&ip6Dst, c.dst())
	} else {
		add(&ipSrc, c.src())
		add(&ipDst, c.dst())
	}
	var nh byte
	if plain[0]>>4 == 4 {
		nh = plain[9]
	} else {
		nh = plain[6]
	}
	l4 := map[byte]string{6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}[nh]
	if c.transport {
		return ipSrc, ipDst, ip6Src, ip6Dst, "esp:" + l4
	}
	if plain[0]>>4 == 4 {
		add(&ipSrc, inner4Src)
		add(&ipDst, inner4Dst)
		return ipSrc, ipDst, ip6Src, ip6Dst, "esp:ip:" + l4
	}
	add(&ip6Src, inner6Src)
	add(&ip6Dst, inner6Dst)
	return ipSrc, ipDst, ip6Src, ip6Dst, "esp:ipv6:" + l4
}

func TestTsharkChecksSluice(t *testing.T) {
	t.Parallel()
	tshark := needTshark(t)
	bin := sluicePath(t)
	dir := t.TempDir()
	var cases []tcase
	for _, c := range allCases() {
		if tsharkSkip(c) == "" {
			cases = append(cases, c)
		}
	}
	encErr := make([]error, len(cases))
	forEach(len(cases), func(i int) {
		c := cases[i]
		base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
		if encErr[i] = os.WriteFile(base+".toml", []byte(c.saFile()), 0o644); encErr[i] != nil {
			return
		}
		if encErr[i] = writePcap(base+"-plain.pcap", layers.LinkTypeRaw, plaintext(c, len(payloadLens))); encErr[i] != nil {
			return
		}
		encErr[i] = sluiceEncrypt(bin, base+".toml", c.spi, base+"-plain.pcap", base+"-esp.pcap")
	})

	// One capture and one tshark run for all cases: tshark's start-up is
	// most of its cost.
	type ref struct{ c, i int }
	var all [][]byte
	var refs []ref
	args := []string{"-r", filepath.Join(dir, "all.pcap"), "-n",
		"-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	for i, c := range cases {
		if encErr[i] != nil {
			continue
		}
		_, esp, err := readPcap(filepath.Join(dir, fmt.Sprintf("c%03d-esp.pcap", i)))
		if err != nil {
			encErr[i] = err
			continue
		}
		for k, p := range esp {
			all = append(all, p)
			refs = append(refs, ref{i, k})
		}
		args = append(args, "-o", tsharkUAT(c))
	}
	mustWritePcap(t, filepath.Join(dir, "all.pcap"), layers.LinkTypeRaw, all)
	lines := make([][][]string, len(cases)) // case -> packet -> fields
	if len(all) > 0 {
		r, err := runCmd(cmdTimeout, tshark, args...)
		if err != nil {
			t.Fatal(err)
		}
		out := strings.Split(strings.TrimRight(string(r.stdout), "\n"), "\n")
		if r.code != 0 || len(out) != len(all) {
			t.Fatalf("tshark printed %d lines for %d packets:\n%s", len(out), len(all), r)
		}
		for j, line := range out {
			f := strings.Split(line, "\t")
			for len(f) < len(tsharkFields) {
				f = append(f, "")
			}
			lines[refs[j].c] = append(lines[refs[j].c], f)
		}
	}

	for _, c := range allCases() {
		if why := tsharkSkip(c); why != "" {
			t.Run(c.name(), func(t *testing.T) { t.Skip(why) })
		}
	}
	for i, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			logOnFailure(t, c)
			t.Logf("tshark -o '%s'", tsharkUAT(c))
			if encErr[i] != nil {
				t.Fatalf("sluice encrypt: %v", encErr[i])
			}
			plain := plaintext(c, len(payloadLens))
			if len(lines[i]) != len(plain) {
				t.Fatalf("tshark saw %d packets, want %d", len(lines[i]), len(plain))
			}
			for k, f := range lines[i] {
				ipSrc, ipDst, ip6Src, ip6Dst, afterESP := tsharkExpect(c, plain[k])
				want := []string{fmt.Sprintf("0x%08x", c.spi), strconv.FormatUint(c.seq()+1+uint64(k), 10), "1", "0",
					ipSrc, ipDst, ip6Src, ip6Dst}
				for j := range want {
					if f[j] != want[j] {
						t.Errorf("packet %d: %s = %q, want %q (line %q)", k, tsharkFields[j], f[j], want[j], strings.Join(f, " "))
					}
				}
				if !strings.Contains(f[8], afterESP) {
					t.Errorf("packet %d: frame.protocols = %q, want it to contain %q", k, f[8], afterESP)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 4. Bad packets made from Scapy's output are dropped with the right reason.

// editIP applies f to the IP payload of p (a copy) and fixes the IP and UDP
// lengths, the IPv4 header checksum and an IPv6 UDP checksum, so that only
// the ESP packet is wrong.
func editIP(p []byte, f func(esp []byte) []byte) []byte {
	e, err := parseESP(p)
	if err != nil {
		panic(err)
	}
	off := len(p) - e.espLen
	out := append(append([]byte(nil), p[:off]...), f(append([]byte(nil), p[off:]...))...)
	hl := ipHeaderLen(out)
	if out[0]>>4 == 4 {
		binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
		out[10], out[11] = 0, 0
		binary.BigEndian.PutUint16(out[10:], ipChecksum(out[:hl]))
	} else {
		binary.BigEndian.PutUint16(out[4:], uint16(len(out)-40))
	}
	if e.udp {
		u := out[hl:]
		binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
		u[6], u[7] = 0, 0
		if out[0]>>4 == 6 {
			var ph []byte
			ph = append(ph, out[8:40]...)
			ph = binary.BigEndian.AppendUint32(ph, uint32(len(u)))
			ph = append(ph, 0, 0, 0, 17)
			cs := ipChecksum(append(ph, u...))
			if cs == 0 {
				cs = 0xffff
			}
			binary.BigEndian.PutUint16(u[6:], cs)
		}
	}
	return out
}

// fragment turns an IP packet into the first fragment of a bigger one:
// IPv4 with More Fragments set, IPv6 with a Fragment header (RFC 8200
// section 4.5).
func fragment(p []byte) []byte {
	out := append([]byte(nil), p...)
	if out[0]>>4 == 4 {
		out[6] |= 0x20
		out[10], out[11] = 0, 0
		binary.BigEndian.PutUint16(out[10:], ipChecksum(out[:ipHeaderLen(out)]))
		return out
	}
	fh := []byte{out[6], 0, 0, 1, 0x12, 0x34, 0x56, 0x78} // offset 0, M=1
	out = append(append(append([]byte(nil), out[:40]...), fh...), out[40:]...)
	out[6] = 44
	binary.BigEndian.PutUint16(out[4:], uint16(len(out)-40))
	return out
}

// attack is one packet of the crafted capture and the verdict expected.
type attack struct {
	what   string
	pkt    []byte
	reason string // "" for a packet that must decrypt
	alt    string // another reason that is right too, or ""
	inner  int    // plaintext index of a packet that must decrypt
}

// attacks builds the crafted capture from Scapy's ESP packets esp (seq
// base+1, base+2, ...): good packets interleaved with bad copies. The
// window is 64 packets.
func attacks(c tcase, esp [][]byte) []attack {
	ok := func(i int) attack { return attack{what: fmt.Sprintf("E%d", i), pkt: esp[i], inner: i} }
	bad := func(what, reason string, p []byte) attack { return attack{what: what, pkt: p, reason: reason} }
	flip := func(at func(n int) int) func([]byte) []byte {
		return func(b []byte) []byte { b[at(len(b))] ^= 0x01; return b }
	}
	as := []attack{
		ok(0), ok(1),
		bad("E2 with a bit of its ICV flipped", "auth_failed", editIP(esp[2], flip(func(n int) int { return n - 1 }))),
		bad("E2 with a bit of its payload flipped", "auth_failed", editIP(esp[2], flip(func(n int) int { return 8 + c.s.ivLen + 1 }))),
		// A forged sequence number far ahead must fail its ICV and not move
		// the window (with ESN it infers the next epoch).
		bad("E2 with its sequence number moved 2^30 ahead", "auth_failed", editIP(esp[2], func(b []byte) []byte { b[4] ^= 0x40; return b })),
		ok(2), // failed ICVs must not have moved the window
		bad("E1 replayed", "replay", esp[1]),
		bad("E2 replayed", "replay", esp[2]),
		bad("E3 with an unknown SPI", "unknown_spi", editIP(esp[3], func(b []byte) []byte { b[0] ^= 0x80; return b })),
		ok(3),
		bad("E4 cut to less than IV+trailer+ICV", "bad_length", editIP(esp[4], func(b []byte) []byte { return b[:8+c.s.ivLen+c.s.icvLen+1] })),
		bad("E4 cut to its ESP header", "malformed", editIP(esp[4], func(b []byte) []byte { return b[:7] })),
		ok(4),
		bad("E5 cut short by the capture (IP length kept)", "malformed", esp[5][:len(esp[5])-10]),
	}
	if c.s.block > 4 {
		as = append(as, bad("E5 with a ciphertext not a whole number of blocks", "bad_length",
			editIP(esp[5], func(b []byte) []byte { return append(b[:len(b)-c.s.icvLen-1], b[len(b)-c.s.icvLen:]...) })))
	}
	as = append(as, bad("E6 as the first fragment of an IP packet", "fragment", fragment(esp[6])))
	if c.udp {
		as = append(as,
			bad("a NAT-keepalive (RFC 3948 section 2.3)", "keepalive", editIP(esp[6], func([]byte) []byte { return []byte{0xff} })),
			bad("IKE behind the non-ESP marker (RFC 3948 section 2.2)", "ike", editIP(esp[6], func(b []byte) []byte {
				return append([]byte{0, 0, 0, 0}, b[:28]...)
			})))
	}
	as = append(as,
		ok(5), ok(6),
		ok(79),                                 // the window now holds base+17 .. base+80 (E16 .. E79)
		ok(20),                                 // late but inside the window: accepted once
		bad("E20 replayed", "replay", esp[20]), // ... and only once
		tooOld(c, esp[10]),                     // behind the window
		bad("E79 replayed", "replay", esp[79]), // the newest, again
		ok(78),
	)
	return as
}

// tooOld is a packet behind the window. Without ESN it is a replay. With
// ESN, RFC 4303 Appendix A takes a number below the window for one in the
// next 2^32 epoch, whose ICV then fails; but when the packet is in the same
// batch as the one that moved the window, sluice's pre-check (before
// crypto) still sees the old window, infers the right epoch, and the
// check after crypto calls it a replay. Both are right; which one happens
// depends on the CLI's batch size.
func tooOld(c tcase, p []byte) attack {
	if c.esn {
		return attack{what: "E10 too old (ESN)", pkt: p, reason: "auth_failed", alt: "replay"}
	}
	return attack{what: "E10 too old", pkt: p, reason: "replay"}
}

func TestSluiceDropsBadPackets(t *testing.T) {
	t.Parallel()
	needScapy(t)
	bin := sluicePath(t)
	dir := t.TempDir()
	const count = 80
	cases := []tcase{
		{s: suiteByName("aes128gcm16"), spi: 0x20001},
		{s: suiteByName("aes256-sha256"), transport: true, ip6: true, spi: 0x20002},
		{s: suiteByName("chacha20poly1305"), ip6: true, udp: true, spi: 0x20003},
		{s: suiteByName("null-sha256"), transport: true, udp: true, spi: 0x20004},
		{s: suiteByName("aes256gcm16"), udp: true, esn: true, spi: 0x20005},
		{s: suiteByName("aes128-sha512"), ip6: true, spi: 0x20006},
	}
	var jobs []scapyJob
	for i, c := range cases {
		base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
		if err := os.WriteFile(base+".toml", []byte(c.saFile()), 0o644); err != nil {
			t.Fatal(err)
		}
		mustWritePcap(t, base+"-plain.pcap", layers.LinkTypeRaw, plaintext(c, count))
		jobs = append(jobs, scapyJob{Op: "encrypt", SA: base + ".toml", SPI: c.spi, In: base + "-plain.pcap", Out: base + "-esp.pcap"})
	}
	results := runScapy(t, jobs)

	for i, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			logOnFailure(t, c)
			if r := results[i]; r.Status != "ok" {
				t.Fatalf("scapy encrypt: %s: %s", r.Status, r.Error)
			}
			base := filepath.Join(dir, fmt.Sprintf("c%03d", i))
			_, esp := mustReadPcap(t, base+"-esp.pcap")
			_, plain := mustReadPcap(t, base+"-plain.pcap")
			as := attacks(c, esp)
			var in, want [][]byte
			wantSum := summary{Processed: len(as), Dropped: map[string]int{}}
			var alts []attack
			for _, a := range as {
				in = append(in, a.pkt)
				if a.reason == "" {
					wantSum.OK++
					want = append(want, plain[a.inner])
				} else {
					wantSum.Dropped[a.reason]++
				}
				if a.alt != "" {
					alts = append(alts, a)
				}
			}
			// Every summary the alternative reasons allow.
			sums := []summary{wantSum}
			for _, a := range alts {
				for _, s := range sums {
					d := map[string]int{a.alt: 1}
					for k, v := range s.Dropped {
						d[k] += v
					}
					if d[a.reason]--; d[a.reason] == 0 {
						delete(d, a.reason)
					}
					sums = append(sums, summary{Processed: s.Processed, OK: s.OK, Dropped: d})
				}
			}
			isWant := func(s summary) bool {
				for _, w := range sums {
					if s.String() == w.String() {
						return true
					}
				}
				return false
			}
			mustWritePcap(t, base+"-attack.pcap", layers.LinkTypeRaw, in)

			s, code := sluiceDecrypt(t, bin, base+".toml", base+"-attack.pcap", base+"-inner.pcap", false)
			if code != 0 {
				t.Errorf("sluice decrypt without --strict: exit %d, want 0", code)
			}
			if !isWant(s) {
				t.Errorf("summary %v\n    want %v", s, sums)
				for k, a := range as {
					v := a.reason
					if v == "" {
						v = "ok"
					} else if a.alt != "" {
						v += " or " + a.alt
					}
					t.Logf("  %2d %-55s -> %s", k, a.what, v)
				}
			}
			_, got := mustReadPcap(t, base+"-inner.pcap")
			comparePackets(t, "packets that passed", got, want)

			s2, code := sluiceDecrypt(t, bin, base+".toml", base+"-attack.pcap", base+"-inner2.pcap", true)
			if code != 1 || !isWant(s2) {
				t.Errorf("sluice decrypt --strict: exit %d, summary %v; want exit 1 (ExitDropped), the same summary", code, s2)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Capture formats: Ethernet in, Ethernet out; Scapy's link types.

// ethernet frames IP packets with fixed MAC addresses.
func ethernet(pkts [][]byte) [][]byte {
	out := make([][]byte, len(pkts))
	for i, p := range pkts {
		f := []byte{0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00}
		if p[0]>>4 == 6 {
			f[12], f[13] = 0x86, 0xdd
		}
		out[i] = append(f, p...)
	}
	return out
}

func TestCaptureFormats(t *testing.T) {
	t.Parallel()
	needScapy(t)
	bin := sluicePath(t)
	dir := t.TempDir()
	// Tunnel over IPv4 with IPv6 inside: the EtherType must change.
	c := tcase{s: suiteByName("aes128gcm16"), udp: true, spi: 0x30001}
	logOnFailure(t, c)
	sa := filepath.Join(dir, "sa.toml")
	if err := os.WriteFile(sa, []byte(c.saFile()), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := plaintext(c, len(payloadLens))
	mustWritePcap(t, filepath.Join(dir, "plain.pcap"), layers.LinkTypeRaw, plain)
	mustWritePcap(t, filepath.Join(dir, "plain-eth.pcap"), layers.LinkTypeEthernet, ethernet(plain))
	if err := sluiceEncrypt(bin, sa, c.spi, filepath.Join(dir, "plain-eth.pcap"), filepath.Join(dir, "esp-eth.pcap")); err != nil {
		t.Fatal(err)
	}
	results := runScapy(t, []scapyJob{
		{Op: "encrypt", SA: sa, SPI: c.spi, In: filepath.Join(dir, "plain.pcap"), Out: filepath.Join(dir, "scapy-esp.pcap")},
		{Op: "decrypt", SA: sa, SPI: c.spi, In: filepath.Join(dir, "esp-eth.pcap"), Out: filepath.Join(dir, "scapy-inner.pcap")},
	})
	for _, r := range results {
		if r.Status != "ok" || r.OK != len(plain) {
			t.Fatalf("scapy: %+v", r)
		}
	}

	t.Run("encrypt", func(t *testing.T) {
		lt, esp := mustReadPcap(t, filepath.Join(dir, "esp-eth.pcap"))
		if lt != layers.LinkTypeEthernet {
			t.Fatalf("Ethernet in, link type %v out; want Ethernet", lt)
		}
		eth := ethernet(plain)
		var ip [][]byte
		for i, f := range esp {
			if len(f) < 14 || !bytes.Equal(f[:12], eth[i][:12]) || !bytes.Equal(f[12:14], []byte{0x08, 0x00}) {
				t.Errorf("frame %d: Ethernet header %x, want %x0800 (the input's addresses, IPv4)", i, f[:min(14, len(f))], eth[i][:12])
				continue
			}
			ip = append(ip, f[14:])
		}
		checkESPOutput(t, c, ip, plain)
		_, got := mustReadPcap(t, filepath.Join(dir, "scapy-inner.pcap"))
		comparePackets(t, "Scapy's decryption of sluice's Ethernet ESP", got, plain)
	})
	t.Run("decrypt", func(t *testing.T) {
		_, esp := mustReadPcap(t, filepath.Join(dir, "scapy-esp.pcap"))
		mustWritePcap(t, filepath.Join(dir, "scapy-esp-eth.pcap"), layers.LinkTypeEthernet, ethernet(esp))
		s, code := sluiceDecrypt(t, bin, sa, filepath.Join(dir, "scapy-esp-eth.pcap"), filepath.Join(dir, "inner-eth.pcap"), true)
		if code != 0 || s.OK != len(plain) {
			t.Fatalf("sluice decrypt: exit %d, summary %v", code, s)
		}
		lt, got := mustReadPcap(t, filepath.Join(dir, "inner-eth.pcap"))
		if lt != layers.LinkTypeEthernet {
			t.Fatalf("Ethernet in, link type %v out; want Ethernet", lt)
		}
		comparePackets(t, "sluice's decryption of Ethernet-framed Scapy ESP", got, ethernet(plain))
	})
	t.Run("decrypt-linktype-ipv4", func(t *testing.T) {
		// Scapy's own wrpcap() labels IPv4 packets LINKTYPE_IPV4 (228), not
		// LINKTYPE_RAW: what a Scapy user hands sluice.
		_, esp := mustReadPcap(t, filepath.Join(dir, "scapy-esp.pcap"))
		mustWritePcap(t, filepath.Join(dir, "scapy-esp-228.pcap"), layers.LinkType(228), esp)
		s, code := sluiceDecrypt(t, bin, sa, filepath.Join(dir, "scapy-esp-228.pcap"), filepath.Join(dir, "inner-228.pcap"), true)
		if code != 0 || s.OK != len(plain) {
			t.Fatalf("sluice decrypt: exit %d, summary %v", code, s)
		}
		_, got := mustReadPcap(t, filepath.Join(dir, "inner-228.pcap"))
		comparePackets(t, "sluice's decryption of a LINKTYPE_IPV4 capture", got, plain)
	})
}
