package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

type rec struct {
	t    time.Time
	data []byte
	link LinkType
	orig int
}

func readAll(t *testing.T, b []byte) ([]rec, *Reader, error) {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(b), "x.pcap")
	if err != nil {
		return nil, nil, err
	}
	var out []rec
	for {
		var p Packet
		err := rd.Next(&p)
		if err == io.EOF {
			return out, rd, nil
		}
		if err != nil {
			return out, rd, err
		}
		if p.Record != len(out)+1 {
			t.Fatalf("record number %d, want %d", p.Record, len(out)+1)
		}
		out = append(out, rec{p.Time, bytes.Clone(p.Data), p.Link, p.OrigLen})
	}
}

func samplePackets() []rec {
	base := time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.UTC)
	var rs []rec
	for i, n := range []int{0, 1, 3, 60, 1500, 9000, MaxCapLen} {
		d := make([]byte, n)
		for j := range d {
			d[j] = byte(i*31 + j)
		}
		rs = append(rs, rec{t: base.Add(time.Duration(i) * 1001 * time.Microsecond), data: d})
	}
	return rs
}

func TestPcapRoundTrip(t *testing.T) {
	for _, nanos := range []bool{false, true} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, LinkEthernet, nanos)
		if err != nil {
			t.Fatal(err)
		}
		in := samplePackets()
		for _, r := range in {
			if err := w.WritePacket(r.t, r.data); err != nil {
				t.Fatal(err)
			}
		}
		w.Flush()
		got, rd, err := readAll(t, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if rd.Format() != FormatPcap || rd.LinkType() != LinkEthernet {
			t.Fatalf("format %v link %v", rd.Format(), rd.LinkType())
		}
		wantRes := time.Microsecond
		if nanos {
			wantRes = time.Nanosecond
		}
		if rd.Resolution() != wantRes {
			t.Fatalf("resolution %v, want %v", rd.Resolution(), wantRes)
		}
		checkSame(t, got, in, wantRes, LinkEthernet)
	}
}

func checkSame(t *testing.T, got, want []rec, res time.Duration, lt LinkType) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].data, want[i].data) || got[i].link != lt || got[i].orig != len(want[i].data) {
			t.Fatalf("packet %d: %d bytes link %v orig %d", i, len(got[i].data), got[i].link, got[i].orig)
		}
		if !got[i].t.Equal(want[i].t.Truncate(res)) {
			t.Fatalf("packet %d: time %v, want %v", i, got[i].t, want[i].t.Truncate(res))
		}
	}
}

func TestPcapNGRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewNgWriter(&buf, LinkLinuxSLL2)
	if err != nil {
		t.Fatal(err)
	}
	in := samplePackets()
	for _, r := range in {
		if err := w.WritePacket(r.t, r.data); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	got, rd, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if rd.Format() != FormatPcapNG || rd.LinkType() != LinkLinuxSLL2 || rd.Resolution() != time.Nanosecond {
		t.Fatalf("format %v link %v resolution %v", rd.Format(), rd.LinkType(), rd.Resolution())
	}
	checkSame(t, got, in, time.Nanosecond, LinkLinuxSLL2)
}

// pcapng block types and option codes, for ngBuilder.
const (
	ngSHB        = magicNgSHB
	ngByteOrder  = 0x1a2b3c4d
	ngIDB        = 1
	ngPB         = 2 // obsolete packet block
	ngSPB        = 3
	ngEPB        = 6
	ngOptTSResol = 9
	ngOptTSOff   = 14
)

// ngBuilder writes pcapng blocks by hand, in either byte order, to test
// what NgWriter never writes.
type ngBuilder struct {
	o byteOrder
	b bytes.Buffer
}

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

func (g *ngBuilder) block(typ uint32, body []byte) {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	total := uint32(12 + len(body))
	g.b.Write(g.o.AppendUint32(g.o.AppendUint32(nil, typ), total))
	g.b.Write(body)
	g.b.Write(g.o.AppendUint32(nil, total))
}

func (g *ngBuilder) shb() {
	body := g.o.AppendUint32(nil, ngByteOrder)
	body = g.o.AppendUint16(body, 1)
	body = g.o.AppendUint16(body, 0)
	body = g.o.AppendUint64(body, ^uint64(0))
	// an option: shb_userappl
	body = g.opt(body, 4, []byte("test"))
	body = g.o.AppendUint32(body, 0)
	g.block(ngSHB, body)
}

func (g *ngBuilder) opt(b []byte, code uint16, v []byte) []byte {
	b = g.o.AppendUint16(b, code)
	b = g.o.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (g *ngBuilder) idb(lt LinkType, snap uint32, opts ...[]byte) {
	body := g.o.AppendUint16(nil, uint16(lt))
	body = g.o.AppendUint16(body, 0)
	body = g.o.AppendUint32(body, snap)
	for _, o := range opts {
		body = append(body, o...)
	}
	if len(opts) > 0 {
		body = g.o.AppendUint32(body, 0)
	}
	g.block(ngIDB, body)
}

func (g *ngBuilder) epb(ifc uint32, ts uint64, data []byte, orig int) {
	body := g.o.AppendUint32(nil, ifc)
	body = g.o.AppendUint32(body, uint32(ts>>32))
	body = g.o.AppendUint32(body, uint32(ts))
	body = g.o.AppendUint32(body, uint32(len(data)))
	body = g.o.AppendUint32(body, uint32(orig))
	body = append(body, data...)
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	body = g.opt(body, 1, []byte("a comment")) // opt_comment
	body = g.o.AppendUint32(body, 0)
	g.block(ngEPB, body)
}

func TestPcapNGHandBuilt(t *testing.T) {
	for _, o := range []byteOrder{binary.BigEndian, binary.LittleEndian} {
		g := &ngBuilder{o: o}
		g.shb()
		g.block(0x40000bad, []byte("custom block before any interface"))
		// Interface 0: Ethernet, milliseconds, offset one day.
		res := g.opt(nil, ngOptTSResol, []byte{3})
		off := g.opt(nil, ngOptTSOff, o.AppendUint64(nil, 86400))
		g.idb(LinkEthernet, 0, res, off)
		// Interface 1: raw IP, 2^-10 seconds.
		g.idb(LinkRaw, 96, g.opt(nil, ngOptTSResol, []byte{0x80 | 10}))
		g.epb(0, 1500, []byte{1, 2, 3}, 3)         // 1.5 s + 1 day
		g.epb(1, 3<<10|512, []byte{4, 5, 6, 7}, 9) // 3.5 s, snapped
		g.block(4, make([]byte, 16))               // name resolution block, skipped
		// Simple packet block on interface 0 (snap length 0: unlimited).
		g.block(ngSPB, append(o.AppendUint32(nil, 5), 9, 9, 9, 9, 9))
		// Obsolete packet block, interface 1 (16-bit id, drops count).
		pb := o.AppendUint16(nil, 1)
		pb = o.AppendUint16(pb, 0)
		pb = o.AppendUint32(pb, 0)
		pb = o.AppendUint32(pb, 1<<10)
		pb = o.AppendUint32(pb, 2)
		pb = o.AppendUint32(pb, 2)
		g.block(ngPB, append(pb, 0xaa, 0xbb))
		// A new section resets the interfaces, in the other byte order.
		var other *ngBuilder
		if o == byteOrder(binary.LittleEndian) {
			other = &ngBuilder{o: binary.BigEndian}
		} else {
			other = &ngBuilder{o: binary.LittleEndian}
		}
		other.shb()
		other.idb(LinkIPv6, 0)
		other.epb(0, 7_000_001, []byte{0x60}, 1) // microseconds by default
		g.b.Write(other.b.Bytes())

		got, rd, err := readAll(t, g.b.Bytes())
		if err != nil {
			t.Fatalf("%v: %v", o, err)
		}
		if rd.LinkType() != LinkEthernet || rd.Resolution() != time.Millisecond {
			t.Fatalf("%v: first interface %v %v", o, rd.LinkType(), rd.Resolution())
		}
		want := []rec{
			{time.Unix(86400+1, 500e6), []byte{1, 2, 3}, LinkEthernet, 3},
			// pcapgo scales binary fractions by a whole number of
			// nanoseconds per unit (976562 for 2^-10 s): 512/1024 s comes
			// out 256ns short of 0.5 s.
			{time.Unix(3, 512*976562), []byte{4, 5, 6, 7}, LinkRaw, 9},
			{time.Unix(0, 0), []byte{9, 9, 9, 9, 9}, LinkEthernet, 5},
			{time.Unix(1, 0), []byte{0xaa, 0xbb}, LinkRaw, 2},
			{time.Unix(7, 1000), []byte{0x60}, LinkIPv6, 1},
		}
		if len(got) != len(want) {
			t.Fatalf("%v: %d packets, want %d", o, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if !g.t.Equal(w.t) || !bytes.Equal(g.data, w.data) || g.link != w.link || g.orig != w.orig {
				t.Errorf("%v: packet %d: got %v %x %v %d, want %v %x %v %d", o, i+1, g.t, g.data, g.link, g.orig, w.t, w.data, w.link, w.orig)
			}
		}
	}
}

func TestPcapBigEndian(t *testing.T) {
	be := binary.BigEndian
	h := be.AppendUint32(nil, magicNanos)
	h = be.AppendUint16(h, 2)
	h = be.AppendUint16(h, 4)
	h = append(h, make([]byte, 8)...)
	h = be.AppendUint32(h, 65535)
	h = be.AppendUint32(h, 1<<28|uint32(LinkRaw)) // FCS bits above the link type
	h = be.AppendUint32(h, 10)
	h = be.AppendUint32(h, 999_999_999)
	h = be.AppendUint32(h, 2)
	h = be.AppendUint32(h, 40)
	h = append(h, 0x45, 0)
	got, rd, err := readAll(t, h)
	if err != nil {
		t.Fatal(err)
	}
	if rd.LinkType() != LinkRaw || len(got) != 1 || !got[0].t.Equal(time.Unix(10, 999_999_999)) || got[0].orig != 40 {
		t.Fatalf("link %v, %+v", rd.LinkType(), got)
	}
}

type packetWriter interface {
	WritePacket(time.Time, []byte) error
	Flush() error
}

// TestTruncated cuts a capture at every byte: the packets before the cut
// are read, then an ErrTruncated naming the record cut short (or, at a
// record boundary, a clean end).
func TestTruncated(t *testing.T) {
	for _, name := range []string{"pcap", "pcapng"} {
		var buf bytes.Buffer
		var w packetWriter
		if name == "pcap" {
			w, _ = NewWriter(&buf, LinkRaw, false)
		} else {
			w, _ = NewNgWriter(&buf, LinkRaw)
		}
		var ends []int // end offset of each record
		w.Flush()
		hdrLen := buf.Len()
		for i := range 4 {
			w.WritePacket(time.Unix(int64(i), 0), bytes.Repeat([]byte{byte(i)}, 5+i))
			w.Flush()
			ends = append(ends, buf.Len())
		}
		full := buf.Bytes()
		shbLen := -1
		if name == "pcapng" {
			shbLen = int(binary.LittleEndian.Uint32(full[4:]))
		}
		for cut := 0; cut < len(full); cut++ {
			got, _, err := readAll(t, full[:cut])
			if cut < hdrLen {
				if cut == shbLen {
					if err != nil {
						t.Fatalf("%s cut %d: a section header alone: %v", name, cut, err)
					}
					continue // a section header alone is an empty capture
				}
				if err == nil {
					t.Fatalf("%s cut %d: header accepted", name, cut)
				}
				continue
			}
			complete := 0
			for _, e := range ends {
				if cut >= e {
					complete++
				}
			}
			if len(got) != complete {
				t.Fatalf("%s cut %d: %d packets, want %d", name, cut, len(got), complete)
			}
			atBoundary := cut == hdrLen
			for _, e := range ends {
				atBoundary = atBoundary || cut == e
			}
			if atBoundary {
				if err != nil {
					t.Fatalf("%s cut %d at a record boundary: %v", name, cut, err)
				}
				continue
			}
			var re *RecordError
			if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || !errors.As(err, &re) || re.Record != complete+1 {
				t.Fatalf("%s cut %d: %v", name, cut, err)
			}
			if err.Error() != fmt.Sprintf("x.pcap: record %d: truncated capture: unexpected EOF", complete+1) {
				t.Fatalf("%s cut %d: message %q", name, cut, err)
			}
		}
	}
}

func TestMalformed(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkRaw, false)
	w.WritePacket(time.Unix(1, 0), []byte{0x45})
	w.Flush()
	pcapFile := bytes.Clone(buf.Bytes())
	huge := bytes.Clone(pcapFile)
	binary.LittleEndian.PutUint32(huge[24+8:], MaxCapLen+1)

	// pcapng: a packet on an interface the section does not describe, and
	// one longer than MaxCapLen.
	g := &ngBuilder{o: binary.LittleEndian}
	g.shb()
	g.idb(LinkRaw, 0)
	g.epb(3, 0, []byte{0x45}, 1)
	badIface := bytes.Clone(g.b.Bytes())
	g = &ngBuilder{o: binary.LittleEndian}
	g.shb()
	g.idb(LinkRaw, 0)
	g.epb(0, 0, make([]byte, MaxCapLen+1), MaxCapLen+1)
	hugeNG := bytes.Clone(g.b.Bytes())
	g = &ngBuilder{o: binary.LittleEndian}
	g.shb()
	g.epb(0, 0, []byte{0x45}, 1)
	noIface := bytes.Clone(g.b.Bytes())

	cases := []struct {
		name   string
		b      []byte
		want   string
		format bool // an ErrFormat in a *RecordError for record 1
	}{
		{"empty", nil, "x.pcap: empty file", false},
		{"short magic", []byte{0xd4, 0xc3}, "x.pcap: truncated capture: file header has 2 bytes", false},
		{"short file header", pcapFile[:20], "x.pcap: truncated capture: file header: unexpected EOF", false},
		{"text", []byte("hello, world, this is not a capture"), "x.pcap: not a pcap or pcapng file (magic number 0x68656c6c)", false},
		{"kuznetzov", binary.LittleEndian.AppendUint32(nil, magicKuznet), "modified (Kuznetzov) pcap format is not supported", false},
		{"huge record", huge, "x.pcap: record 1: malformed capture: capture length exceeds snap length: 262145 > 262144", true},
		{"huge pcapng record", hugeNG, "x.pcap: record 1: malformed capture: captured length 262145 exceeds the 262144-byte maximum", true},
		{"unknown interface", badIface, "x.pcap: record 1: malformed capture: Interface id 3 not present in section (have only 1 interfaces)", true},
		{"packet before any interface", noIface, "x.pcap: record 1: malformed capture: Interface id 0 not present", true},
	}
	for _, c := range cases {
		_, _, err := readAll(t, c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
			continue
		}
		var re *RecordError
		if isRec := errors.As(err, &re); c.format && (!isRec || re.Record != 1 || !errors.Is(err, ErrFormat)) || !c.format && isRec {
			t.Errorf("%s: %#v", c.name, err)
		}
	}
}

// TestPcapgoLimits documents where pcapgo, which reads the files, differs
// from what a stricter reader would do.
func TestPcapgoLimits(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkRaw, false)
	w.WritePacket(time.Unix(1, 0), []byte{0x45, 0, 0, 0})
	w.Flush()
	pcapFile := buf.Bytes()

	// Only pcap version 2.4 is read: 2.2 and 2.3 files are rejected.
	v22 := bytes.Clone(pcapFile)
	binary.LittleEndian.PutUint16(v22[6:], 2)
	if _, _, err := readAll(t, v22); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "Unknown minor version 2") {
		t.Errorf("pcap 2.2: %v", err)
	}
	// A record whose captured length exceeds its original length is an
	// error, not a packet.
	capOverOrig := bytes.Clone(pcapFile)
	binary.LittleEndian.PutUint32(capOverOrig[24+12:], 2)
	if _, _, err := readAll(t, capOverOrig); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "capture length exceeds original packet length") {
		t.Errorf("caplen > origlen: %v", err)
	}

	// pcapng: the trailing length of a block is not checked.
	buf.Reset()
	nw, _ := NewNgWriter(&buf, LinkRaw)
	nw.WritePacket(time.Unix(1, 0), []byte{0x45, 0, 0, 0})
	nw.Flush()
	badTrailer := bytes.Clone(buf.Bytes())
	badTrailer[len(badTrailer)-1] ^= 1
	if got, _, err := readAll(t, badTrailer); err != nil || len(got) != 1 {
		t.Errorf("bad trailing length: %d packets, %v", len(got), err)
	}
	// A pcapng section of another version than 1.0 is an error.
	v12 := bytes.Clone(buf.Bytes())
	binary.LittleEndian.PutUint16(v12[14:], 2)
	if _, _, err := readAll(t, v12); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "Unknown pcapng Version") {
		t.Errorf("pcapng 1.2: %v", err)
	}
}

// failingReader returns its bytes, then err.
type failingReader struct {
	b   []byte
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, f.err
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// TestReadError: an error of the underlying reader comes back as it is,
// in a *RecordError, not as a format error.
func TestReadError(t *testing.T) {
	ioErr := errors.New("disk on fire")
	for _, ng := range []bool{false, true} {
		var buf bytes.Buffer
		var w packetWriter
		if ng {
			w, _ = NewNgWriter(&buf, LinkRaw)
		} else {
			w, _ = NewWriter(&buf, LinkRaw, false)
		}
		for i := range 3 {
			w.WritePacket(time.Unix(int64(i), 0), []byte{0x45, 0, 0, byte(i)})
		}
		w.Flush()
		b := buf.Bytes()
		rd, err := NewReader(&failingReader{b: b[:len(b)-3], err: ioErr}, "x.pcap")
		if err != nil {
			t.Fatal(err)
		}
		var p Packet
		n := 0
		for err = rd.Next(&p); err == nil; err = rd.Next(&p) {
			n++
		}
		var re *RecordError
		if n != 2 || !errors.Is(err, ioErr) || errors.Is(err, ErrFormat) || !errors.As(err, &re) || re.Record != 3 {
			t.Errorf("ng=%v: %d packets, then %v", ng, n, err)
		}
		if err2 := rd.Next(&p); err2 != err {
			t.Errorf("ng=%v: error not sticky: %v", ng, err2)
		}
	}
}

// TestWriterHeaders: the files' snap length is MaxCapLen, and pcapng
// files say nanoseconds and name sluice.
func TestWriterHeaders(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkEthernet, true)
	w.Flush()
	h := buf.Bytes()
	le := binary.LittleEndian
	if le.Uint32(h[0:]) != magicNanos || le.Uint16(h[4:]) != 2 || le.Uint16(h[6:]) != 4 || le.Uint32(h[16:]) != MaxCapLen || le.Uint32(h[20:]) != uint32(LinkEthernet) {
		t.Fatalf("pcap header %x", h)
	}
	if _, err := NewWriter(&buf, 1<<16, false); err == nil {
		t.Fatalf("32-bit link type accepted")
	}
	buf.Reset()
	nw, _ := NewNgWriter(&buf, LinkLinuxSLL2)
	nw.Flush()
	if !bytes.Contains(buf.Bytes(), []byte("sluice")) {
		t.Fatalf("pcapng section header does not name sluice")
	}
	ng, err := pcapgo.NewNgReader(bytes.NewReader(buf.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if ifc, err := ng.Interface(0); err != nil || ifc.SnapLength != MaxCapLen || ifc.LinkType != layers.LinkType(LinkLinuxSLL2) || ifc.TimestampResolution != 9 {
		t.Fatalf("pcapng interface %+v, %v", ifc, err)
	}
	for _, tm := range []time.Time{time.Unix(-1, 0), time.Unix(1<<33, 0)} {
		if err := w.WritePacket(tm, nil); err == nil {
			t.Errorf("pcap: time %v accepted", tm)
		}
	}
	for _, tm := range []time.Time{time.Unix(-1, 0), time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if err := nw.WritePacket(tm, nil); err == nil {
			t.Errorf("pcapng: time %v accepted", tm)
		}
	}
	if err := w.WritePacket(time.Unix(1, 0), make([]byte, MaxCapLen+1)); err == nil {
		t.Errorf("pcap: packet longer than MaxCapLen accepted")
	}
}

func TestSplitFrame(t *testing.T) {
	v4 := []byte{0x45, 0, 0, 20}
	v6 := []byte{0x60, 0, 0, 0}
	eth := func(et uint16, tags ...uint16) []byte {
		f := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		for _, tag := range tags {
			f = binary.BigEndian.AppendUint16(f, tag)
			f = append(f, 0x0f, 0xff)
		}
		return binary.BigEndian.AppendUint16(f, et)
	}
	sll := func(et uint16) []byte { return binary.BigEndian.AppendUint16(make([]byte, 14), et) }
	sll2 := func(et uint16) []byte { return append(binary.BigEndian.AppendUint16(nil, et), make([]byte, 18)...) }
	cases := []struct {
		lt     LinkType
		frame  []byte
		hl     int
		ok     bool
		ipWant []byte
	}{
		{LinkEthernet, append(eth(EtherTypeIPv4), v4...), 14, true, v4},
		{LinkEthernet, append(eth(EtherTypeIPv6), v6...), 14, true, v6},
		{LinkEthernet, append(eth(EtherTypeIPv4, EtherTypeVLAN), v4...), 18, true, v4},
		{LinkEthernet, append(eth(EtherTypeIPv6, EtherTypeQinQ, EtherTypeVLAN), v6...), 22, true, v6},
		{LinkEthernet, append(eth(EtherTypeIPv4, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN), v4...), 0, false, nil},
		{LinkEthernet, append(eth(0x0806), v4...), 0, false, nil}, // ARP
		{LinkEthernet, append(eth(EtherTypeIPv4), v6...), 0, false, nil},
		{LinkEthernet, eth(EtherTypeIPv4)[:13], 0, false, nil},
		{LinkEthernet, eth(EtherTypeIPv4, EtherTypeVLAN)[:16], 0, false, nil},
		{LinkLinuxSLL, append(sll(EtherTypeIPv4), v4...), 16, true, v4},
		{LinkLinuxSLL, append(sll(0x0003), v4...), 0, false, nil},
		{LinkLinuxSLL, sll(EtherTypeIPv4)[:15], 0, false, nil},
		{LinkLinuxSLL2, append(sll2(EtherTypeIPv6), v6...), 20, true, v6},
		{LinkLinuxSLL2, sll2(EtherTypeIPv6)[:19], 0, false, nil},
		{LinkRaw, v4, 0, true, v4},
		{LinkRawDLT12, v6, 0, true, v6},
		{LinkRawDLT14, v4, 0, true, v4},
		{LinkRaw, []byte{0x50}, 0, false, nil},
		{LinkRaw, nil, 0, false, nil},
		{LinkIPv4, v4, 0, true, v4},
		{LinkIPv4, v6, 0, false, nil},
		{LinkIPv6, v6, 0, true, v6},
		{LinkIPv6, v4, 0, false, nil},
		{105, v4, 0, false, nil},
	}
	for i, c := range cases {
		hdr, ip, ok := SplitFrame(c.lt, c.frame)
		if ok != c.ok || len(hdr) != c.hl || !bytes.Equal(ip, c.ipWant) {
			t.Errorf("case %d (%v): ok=%v hdr=%d ip=%x", i, c.lt, ok, len(hdr), ip)
		}
	}
	h := eth(EtherTypeIPv6, EtherTypeVLAN)
	SetEtherType(h, 4)
	if binary.BigEndian.Uint16(h[16:]) != EtherTypeIPv4 || binary.BigEndian.Uint16(h[12:]) != EtherTypeVLAN {
		t.Fatalf("SetEtherType changed the wrong field: %x", h)
	}
}

// TestWiresharkTools checks our files against Wireshark's: editcap converts
// what we write, and we read what it writes (pcapng with its own options,
// and nanosecond pcap). Skipped when editcap is not installed.
func TestWiresharkTools(t *testing.T) {
	editcap, err := exec.LookPath("editcap")
	if err != nil {
		t.Skip("editcap not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "in.pcap")
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkEthernet, false)
	in := samplePackets()[:6]
	for _, r := range in {
		w.WritePacket(r.t, r.data)
	}
	w.Flush()
	os.WriteFile(src, buf.Bytes(), 0o644)
	for _, f := range []struct {
		format string
		res    time.Duration
	}{{"pcapng", time.Microsecond}, {"nsecpcap", time.Microsecond}, {"pcap", time.Microsecond}} {
		dst := filepath.Join(dir, "out."+f.format)
		if out, err := exec.Command(editcap, "-F", f.format, src, dst).CombinedOutput(); err != nil {
			t.Fatalf("editcap -F %s: %v: %s", f.format, err, out)
		}
		b, _ := os.ReadFile(dst)
		got, _, err := readAll(t, b)
		if err != nil {
			t.Fatalf("%s written by editcap: %v", f.format, err)
		}
		checkSame(t, got, in, f.res, LinkEthernet)
	}
}

// FuzzReader reads arbitrary bytes as a capture and checks what Reader
// promises: an error that starts with "pcap: " for a file it refuses;
// packets numbered from 1, no longer than MaxCapLen or their OrigLen; a
// reading that ends in io.EOF or a *RecordError for the next record that
// is ErrTruncated or ErrFormat, and returns it again; SplitFrame's header
// and packet cut the frame without losing a byte; and a classic pcap file
// written back from what was read reads the same. The seed corpus is
// testdata/fuzz/FuzzReader.
//
//	go test -run '^$' -fuzz '^FuzzReader$' -fuzztime 60s ./pktio/pcap/
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewNgWriter(&buf, LinkEthernet)
	w.WritePacket(time.Unix(5, 5), []byte{1, 2, 3, 4, 5})
	w.Flush()
	f.Add(buf.Bytes())
	buf.Reset()
	pw, _ := NewWriter(&buf, LinkRaw, true)
	pw.WritePacket(time.Unix(5, 5), []byte{0x45, 0, 0, 5, 0})
	pw.Flush()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		rd, err := NewReader(bytes.NewReader(b), "")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "pcap: ") {
				t.Fatalf("NewReader: %q does not start with the file's name", err)
			}
			return
		}
		var got []rec
		for {
			var p Packet
			err := rd.Next(&p)
			if err != nil {
				checkEnd(t, rd, err, len(got))
				break
			}
			if p.Record != len(got)+1 || len(p.Data) > MaxCapLen || p.OrigLen < len(p.Data) {
				t.Fatalf("packet %d: record %d, %d bytes captured of %d", len(got)+1, p.Record, len(p.Data), p.OrigLen)
			}
			checkSplit(t, p.Link, p.Data)
			got = append(got, rec{t: p.Time, data: bytes.Clone(p.Data), link: p.Link})
			if len(got) == 1000 {
				break
			}
		}
		if rd.Format() == FormatPcap {
			checkRewrite(t, rd.LinkType(), got)
		}
	})
}

// checkEnd checks the error that ended a reading after n packets.
func checkEnd(t *testing.T, rd *Reader, err error, n int) {
	t.Helper()
	var p Packet
	if again := rd.Next(&p); again != err {
		t.Fatalf("Next after %v: %v", err, again)
	}
	if err == io.EOF {
		return
	}
	var re *RecordError
	if !errors.As(err, &re) || re.Record != n+1 || !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFormat) ||
		!strings.HasPrefix(err.Error(), fmt.Sprintf("pcap: record %d: ", n+1)) {
		t.Fatalf("after %d packets: %v (%#v)", n, err, err)
	}
}

// checkSplit checks that SplitFrame cuts frame into its header and an IP
// packet of the version the header announces.
func checkSplit(t *testing.T, lt LinkType, frame []byte) {
	t.Helper()
	hdr, ip, ok := SplitFrame(lt, frame)
	if !ok {
		return
	}
	v := ipVersion(ip)
	if len(hdr)+len(ip) != len(frame) || len(hdr) > 0 && &hdr[0] != &frame[0] || v != 4 && v != 6 ||
		lt == LinkEthernet && len(hdr) > MaxLinkHeader {
		t.Fatalf("SplitFrame(%v, %x) = %x, %x", lt, frame, hdr, ip)
	}
}

// checkRewrite writes pkts to a classic pcap file and checks that it reads
// back the same. Packets whose time a pcap file cannot hold are skipped.
func checkRewrite(t *testing.T, lt LinkType, pkts []rec) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, lt, true)
	if err != nil {
		return // a link type wider than 16 bits
	}
	var want []rec
	for _, p := range pkts {
		if w.WritePacket(p.t, p.data) == nil {
			want = append(want, p)
		}
	}
	w.Flush()
	rd, err := NewReader(&buf, "")
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	for i, p := range want {
		var q Packet
		if err := rd.Next(&q); err != nil || !bytes.Equal(q.Data, p.data) || !q.Time.Equal(p.t) || q.Link != lt {
			t.Fatalf("packet %d read back as %+v (%v), want %x at %v", i+1, q, err, p.data, p.t)
		}
	}
	var q Packet
	if err := rd.Next(&q); err != io.EOF {
		t.Fatalf("after %d packets read back: %v", len(want), err)
	}
}
