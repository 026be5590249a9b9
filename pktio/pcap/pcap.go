// Package pcap reads and writes capture files for sluice: classic libpcap
// files and pcapng, through github.com/gopacket/gopacket/pcapgo, which owns
// the file formats. This package adds what sluice needs around it: format
// detection by magic number, packets numbered by record, errors that name
// the file and the record, and the IP packet inside the link-layer frames
// sluice handles: Ethernet (with 802.1Q and 802.1ad tags), raw IP, and Linux
// cooked captures (SLL and SLL2).
//
// A Reader returns one packet at a time in a buffer it reuses; a Writer
// writes classic pcap and an NgWriter writes pcapng with one interface.
package pcap

import (
	"errors"
	"fmt"
)

// LinkType is a capture's link-layer header type, as registered at
// https://www.tcpdump.org/linktypes.html.
type LinkType uint32

// The link types sluice reads. DLT_RAW was 12 on most systems and 14 on
// OpenBSD before LINKTYPE_RAW (101) was assigned; old files carry either.
const (
	LinkNull      LinkType = 0
	LinkEthernet  LinkType = 1
	LinkRawDLT12  LinkType = 12
	LinkRawDLT14  LinkType = 14
	LinkRaw       LinkType = 101 // raw IPv4 or IPv6, no link-layer header
	LinkLinuxSLL  LinkType = 113 // Linux cooked capture v1
	LinkIPv4      LinkType = 228
	LinkIPv6      LinkType = 229
	LinkLinuxSLL2 LinkType = 276 // Linux cooked capture v2
)

var linkNames = map[LinkType]string{
	LinkNull:      "NULL",
	LinkEthernet:  "ETHERNET",
	LinkRawDLT12:  "RAW (DLT 12)",
	LinkRawDLT14:  "RAW (DLT 14)",
	LinkRaw:       "RAW",
	LinkLinuxSLL:  "LINUX_SLL",
	LinkIPv4:      "IPV4",
	LinkIPv6:      "IPV6",
	LinkLinuxSLL2: "LINUX_SLL2",
	105:           "IEEE802_11",
	108:           "LOOP",
	127:           "IEEE802_11_RADIOTAP",
}

// String returns the LINKTYPE_ name without its prefix, with the number
// for types this package does not name.
func (lt LinkType) String() string {
	if n, ok := linkNames[lt]; ok {
		return n
	}
	return fmt.Sprintf("linktype %d", uint32(lt))
}

// Supported reports whether SplitFrame understands frames of this type.
func (lt LinkType) Supported() bool {
	switch lt {
	case LinkEthernet, LinkRawDLT12, LinkRawDLT14, LinkRaw, LinkLinuxSLL, LinkIPv4, LinkIPv6, LinkLinuxSLL2:
		return true
	}
	return false
}

// SupportedLinkTypes names the link types SplitFrame understands, for
// messages.
const SupportedLinkTypes = "ETHERNET (1), RAW (101, and DLT_RAW 12/14), IPV4 (228), IPV6 (229), LINUX_SLL (113), LINUX_SLL2 (276)"

// MaxCapLen bounds the captured length of one packet, as libpcap's
// MAXIMUM_SNAPLEN does: a Reader rejects a longer record as corrupt, and
// the Writers write it as the snap length of their files. That is also
// tcpdump's default, and it holds the largest IP packet sluice handles
// (an IPv6 packet with a 65535-byte payload) behind any link-layer header,
// so no reader that honours the snap length cuts an output packet short.
const MaxCapLen = 262144

// Errors a Reader returns, wrapped in a *RecordError (or, for the file
// header, with a message of their own). Test with errors.Is.
var (
	// ErrTruncated: the file ends inside a header or a record. The error
	// also matches io.ErrUnexpectedEOF.
	ErrTruncated = errors.New("truncated capture")
	// ErrFormat: the bytes are not a pcap or pcapng structure pcapgo reads
	// (bad magic, inconsistent lengths, unsupported version, ...). The
	// error also wraps pcapgo's own.
	ErrFormat = errors.New("malformed capture")
)

// RecordError is an error about one record of a capture. Record is the
// 1-based number of the packet record being read (for a broken non-packet
// pcapng block, the number the next packet would have had). File is the
// name the Reader was given, or empty.
type RecordError struct {
	File   string
	Record int
	Err    error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%s: record %d: %v", prefix(e.File), e.Record, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// prefix is what messages start with: the file's name, or the package's.
func prefix(name string) string {
	if name == "" {
		return "pcap"
	}
	return name
}
