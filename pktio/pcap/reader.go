package pcap

// Reading: NewReader looks at the magic number and hands the stream to
// pcapgo's Reader (pcap) or NgReader (pcapng); Next returns their packets
// one at a time, numbered, with their link type, and turns their errors
// into errors that name the file and the record.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Format is a capture file format.
type Format uint8

const (
	FormatPcap Format = iota + 1
	FormatPcapNG
)

func (f Format) String() string {
	switch f {
	case FormatPcap:
		return "pcap"
	case FormatPcapNG:
		return "pcapng"
	}
	return "unknown"
}

// Magic numbers, as they read in the file's own byte order.
const (
	magicMicros = 0xa1b2c3d4
	magicNanos  = 0xa1b23c4d
	magicKuznet = 0xa1b2cd34 // "modified" libpcap format: extra fields per record
	magicNgSHB  = 0x0a0d0d0a // pcapng section header block type (a palindrome)
)

// Packet is one captured packet.
type Packet struct {
	Time time.Time
	// Link is the link-layer type of Data: the file's (pcap) or that of
	// the packet's interface (pcapng).
	Link LinkType
	// Data is the captured bytes. It aliases the Reader's buffer and is
	// valid until the next call to Next.
	Data []byte
	// OrigLen is the packet's length on the wire; it exceeds len(Data)
	// when the capture's snap length cut the packet short.
	OrigLen int
	// Record is the packet's 1-based number in the file.
	Record int
}

// Reader reads packets from a pcap or pcapng stream. It is not safe for
// concurrent use.
type Reader struct {
	name   string
	format Format
	src    *sourceErr
	pc     *pcapgo.Reader   // pcap
	ng     *pcapgo.NgReader // pcapng
	link   LinkType
	res    time.Duration
	n      int   // packets returned
	err    error // sticky

	// pcapng: the first packet, read by NewReader to learn the first
	// interface, and returned by the first Next.
	pending bool
	first   read
}

// read is one result of pcapgo.
type read struct {
	data []byte
	ci   gopacket.CaptureInfo
	err  error
}

// sourceErr remembers the first error other than io.EOF that the
// underlying reader returned, to tell I/O errors from format errors once
// pcapgo has passed them on.
type sourceErr struct {
	r   io.Reader
	err error
}

func (s *sourceErr) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// NewReader reads the file header from r and returns a Reader positioned at
// the first packet. name is used in error messages (usually the file's
// name; empty means "pcap").
//
// For pcapng the first packet is read too (and kept for Next), since
// pcapgo describes the interfaces only once it has seen their blocks.
func NewReader(r io.Reader, name string) (*Reader, error) {
	rd := &Reader{name: name, src: &sourceErr{r: r}}
	// pcapgo buffers with bufio.NewReader, which adopts this buffer since
	// it is larger than the default.
	br := bufio.NewReaderSize(rd.src, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		switch {
		case len(magic) == 0 && err == io.EOF:
			return nil, fmt.Errorf("%s: empty file, not a pcap or pcapng capture", prefix(name))
		case err == io.EOF:
			return nil, fmt.Errorf("%s: %w: file header has %d bytes", prefix(name), ErrTruncated, len(magic))
		}
		return nil, fmt.Errorf("%s: %w", prefix(name), err)
	}
	be, le := binary.BigEndian.Uint32(magic), binary.LittleEndian.Uint32(magic)
	switch {
	case be == magicNgSHB:
		rd.format = FormatPcapNG
		// Mixed link types: each packet comes with its interface's link
		// type, rather than packets of the other types being skipped.
		rd.ng, err = pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, rd.headerErr("section header", err)
		}
		if err := rd.readFirst(); err != nil {
			return nil, err
		}
		return rd, nil
	case be == magicMicros || be == magicNanos || le == magicMicros || le == magicNanos:
		rd.format = FormatPcap
		rd.pc, err = pcapgo.NewReader(br)
		if err != nil {
			return nil, rd.headerErr("file header", err)
		}
		rd.link = LinkType(rd.pc.LinkType())
		rd.res = rd.pc.Resolution().ToDuration()
		return rd, nil
	case be == magicKuznet || le == magicKuznet:
		return nil, fmt.Errorf("%s: %w: the modified (Kuznetzov) pcap format is not supported; convert it with editcap -F pcap", prefix(name), ErrFormat)
	}
	return nil, fmt.Errorf("%s: not a pcap or pcapng file (magic number 0x%08x)", prefix(name), be)
}

// readFirst reads the first packet of a pcapng file and takes the link
// type and timestamp resolution from the first interface. An error before
// any interface description fails NewReader; a later one is Next's.
func (r *Reader) readFirst() error {
	data, ci, err := r.ng.ZeroCopyReadPacketData()
	r.first, r.pending = read{data, ci, err}, true
	r.res = time.Microsecond
	if r.ng.NInterfaces() == 0 {
		if err != nil && err != io.EOF {
			return r.recordErr(ci, err)
		}
		return nil
	}
	ifc, _ := r.ng.Interface(0)
	r.link = LinkType(ifc.LinkType)
	r.res = max(ifc.Resolution().ToDuration(), time.Nanosecond)
	return nil
}

// headerErr describes an error pcapgo returned for the file or section
// header.
func (r *Reader) headerErr(what string, err error) error {
	switch {
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: %w: %s: %w", prefix(r.name), ErrTruncated, what, io.ErrUnexpectedEOF)
	case r.ioErr(err):
		return fmt.Errorf("%s: %w", prefix(r.name), r.src.err)
	}
	return fmt.Errorf("%s: %w: %s: %w", prefix(r.name), ErrFormat, what, err)
}

// Name is the name the Reader was made with, as messages use it.
func (r *Reader) Name() string { return prefix(r.name) }

// Format is the file's format.
func (r *Reader) Format() Format { return r.format }

// LinkType is the file's link type (pcap) or that of the first interface
// (pcapng; 0 if the file describes none before its first packet).
func (r *Reader) LinkType() LinkType { return r.link }

// Resolution is the timestamp resolution of the file (pcap) or of its first
// interface (pcapng), rounded to whole nanoseconds (at least 1ns).
func (r *Reader) Resolution() time.Duration { return r.res }

// Next reads the next packet into p. It returns io.EOF after the last
// packet, a *RecordError for a truncated or malformed record or a read
// error (and the same error on every later call).
func (r *Reader) Next(p *Packet) error {
	if r.err != nil {
		return r.err
	}
	var rec read
	switch {
	case r.pending:
		rec, r.pending, r.first = r.first, false, read{}
	case r.ng != nil:
		rec.data, rec.ci, rec.err = r.ng.ZeroCopyReadPacketData()
	default:
		rec.data, rec.ci, rec.err = r.pc.ZeroCopyReadPacketData()
	}
	if rec.err != nil {
		r.err = r.recordErr(rec.ci, rec.err)
		return r.err
	}
	if len(rec.data) > MaxCapLen {
		r.err = &RecordError{File: r.name, Record: r.n + 1, Err: fmt.Errorf("%w: captured length %d exceeds the %d-byte maximum", ErrFormat, len(rec.data), MaxCapLen)}
		return r.err
	}
	link := r.link
	if r.ng != nil && len(rec.ci.AncillaryData) > 0 {
		if lt, ok := rec.ci.AncillaryData[0].(layers.LinkType); ok {
			link = LinkType(lt)
		}
	}
	t := rec.ci.Timestamp
	if t.IsZero() {
		t = time.Unix(0, 0) // a pcapng simple packet block has no timestamp
	}
	r.n++
	*p = Packet{Time: t, Link: link, Data: rec.data, OrigLen: max(rec.ci.Length, len(rec.data)), Record: r.n}
	return nil
}

// recordErr classifies an error pcapgo returned for the next record; ci is
// what pcapgo returned with it. io.EOF before a record header is the clean
// end of the capture.
func (r *Reader) recordErr(ci gopacket.CaptureInfo, err error) error {
	headerRead := !ci.Timestamp.IsZero() || ci.CaptureLength != 0 || ci.Length != 0
	switch {
	case err == io.EOF && !headerRead:
		return io.EOF
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("%w: %w", ErrTruncated, io.ErrUnexpectedEOF)
	case r.ioErr(err):
		err = r.src.err
	default:
		err = fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return &RecordError{File: r.name, Record: r.n + 1, Err: err}
}

// ioErr reports whether err, which pcapgo returned, is (or, formatted with
// %v, quotes) the underlying reader's error.
func (r *Reader) ioErr(err error) bool {
	return r.src.err != nil && (errors.Is(err, r.src.err) || strings.Contains(err.Error(), r.src.err.Error()))
}
