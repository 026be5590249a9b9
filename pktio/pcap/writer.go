package pcap

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Writer writes a classic pcap file (pcapgo's Writer: little-endian,
// version 2.4, snap length MaxCapLen). It buffers: call Flush when done.
// It is not safe for concurrent use.
type Writer struct {
	w  *bufio.Writer
	pw *pcapgo.Writer
}

// NewWriter writes a pcap file header for link type lt to w. With nanos
// the file carries nanosecond timestamps (magic 0xa1b23c4d), otherwise
// microseconds.
func NewWriter(w io.Writer, lt LinkType, nanos bool) (*Writer, error) {
	if err := checkLink(lt); err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	pw := pcapgo.NewWriter(bw)
	if nanos {
		pw = pcapgo.NewWriterNanos(bw)
	}
	if err := pw.WriteFileHeader(MaxCapLen, layers.LinkType(lt)); err != nil {
		return nil, err
	}
	return &Writer{w: bw, pw: pw}, nil
}

// checkLink rejects link types the file formats' writers cannot hold:
// pcapgo's link types, like pcapng's, are 16 bits wide.
func checkLink(lt LinkType) error {
	if lt > 0xffff {
		return fmt.Errorf("pcap: link type %d does not fit 16 bits", uint32(lt))
	}
	return nil
}

// WritePacket appends one record. The capture time must fall between 1970
// and 2106, what the format's unsigned 32-bit seconds can hold.
func (w *Writer) WritePacket(t time.Time, data []byte) error {
	if err := checkPacket(data); err != nil {
		return err
	}
	if sec := t.Unix(); sec < 0 || sec > 1<<32-1 {
		return fmt.Errorf("pcap: time %v does not fit a pcap timestamp", t)
	}
	return w.pw.WritePacket(captureInfo(t, data), data)
}

func checkPacket(data []byte) error {
	if len(data) > MaxCapLen {
		return fmt.Errorf("pcap: packet of %d bytes exceeds the %d-byte maximum", len(data), MaxCapLen)
	}
	return nil
}

// captureInfo describes a whole packet captured at t.
func captureInfo(t time.Time, data []byte) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(data)}
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }

// NgWriter writes a pcapng file with one section and one interface
// (pcapgo's NgWriter: little-endian, nanosecond timestamps, snap length
// MaxCapLen). It buffers: call Flush when done. It is not safe for
// concurrent use.
type NgWriter struct {
	nw *pcapgo.NgWriter
}

// NewNgWriter writes the section header and an interface description for
// link type lt to w.
func NewNgWriter(w io.Writer, lt LinkType) (*NgWriter, error) {
	if err := checkLink(lt); err != nil {
		return nil, err
	}
	ifc := pcapgo.NgInterface{LinkType: layers.LinkType(lt), SnapLength: MaxCapLen, TimestampResolution: 9}
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "sluice"}}
	nw, err := pcapgo.NewNgWriterInterface(w, ifc, opts)
	if err != nil {
		return nil, err
	}
	return &NgWriter{nw: nw}, nil
}

// WritePacket appends an enhanced packet block. The capture time must fall
// between 1970 and 2262, what a 64-bit count of nanoseconds can hold.
func (w *NgWriter) WritePacket(t time.Time, data []byte) error {
	if err := checkPacket(data); err != nil {
		return err
	}
	if t.Before(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
		return fmt.Errorf("pcap: time %v does not fit a pcapng timestamp", t)
	}
	return w.nw.WritePacket(captureInfo(t, data), data)
}

// Flush writes buffered blocks to the underlying writer.
func (w *NgWriter) Flush() error { return w.nw.Flush() }
