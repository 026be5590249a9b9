package lab

// ESP on the wire, for the failover tests (issue 18): a capture of every
// ESP packet that crosses an interface into a pcap file, a checker that
// reads it back and counts, per SPI, packets that repeat an (SPI, IV)
// pair (a repeated AEAD nonce) or an (SPI, sequence number) pair, and a
// replayer that sends captured packets again, byte for byte, so that a test
// can check that a gateway refuses them.
//
//  1. CaptureESP reads an AF_PACKET socket on the interface (both
//     directions; Ethernet or no link header), with PACKET_VNET_HDR so that a UDP GSO super-packet
//     (sluice sends runs of ESP-in-UDP with UDP_SEGMENT, and veth passes
//     them on whole) is cut into the packets it stands for; it keeps ESP
//     (IP protocol 50) and ESP in UDP (port 4500, SPI not zero: not IKE,
//     not a NAT keepalive), and writes them as raw IP (LINKTYPE_RAW) with
//     nanosecond timestamps.
//  2. ReadESP parses a capture (also one written by tcpdump: Ethernet and
//     Linux cooked frames are read too) into ESPPackets; CheckESP counts.
//  3. ReplayESP sends packets again from a namespace through a raw socket
//     (IP_HDRINCL): same addresses, same bytes. Their UDP checksum is
//     recomputed, since a capture on a veth shows a checksum the sender
//     left for the device to finish.

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/pktio/pcap"
)

// ESPPort is the port of ESP in UDP (RFC 3948).
const ESPPort = 4500

// ESPPacket is one ESP packet of a capture.
type ESPPacket struct {
	// Record is the packet's 1-based number in its file (0 if it came
	// from elsewhere).
	Record int
	Time   time.Time
	// Src and Dst are the outer addresses, with the UDP ports for ESP in
	// UDP (UDP true) and port 0 for ESP in IP.
	Src, Dst netip.AddrPort
	UDP      bool
	SPI      uint32
	Seq      uint32
	// IV is the 8 bytes after the ESP header: the explicit IV of the
	// AEAD transforms (RFC 4106, RFC 7634). HasIV is false for a packet
	// too short to have one.
	IV    [8]byte
	HasIV bool
	// Data is the whole IP packet (its own copy); Truncated says the
	// capture cut it short, so it cannot be replayed.
	Data      []byte
	Truncated bool
}

// String names the packet: "0x1001 #42 iv 0102... 192.0.2.10:4500 -> ...".
func (p *ESPPacket) String() string {
	return fmt.Sprintf("SPI 0x%08x seq %d iv %s %v -> %v (record %d)", p.SPI, p.Seq, hex.EncodeToString(p.IV[:]), p.Src, p.Dst, p.Record)
}

// ParseESP reads an IPv4 or IPv6 packet and returns the ESP in it, or
// false if it carries none (another protocol, IKE or a keepalive on port
// 4500, or a packet too short for an ESP header). IPv6 extension headers
// are not followed. The ESPPacket's Data aliases ip.
func ParseESP(ip []byte) (ESPPacket, bool) {
	var p ESPPacket
	var proto byte
	var payload []byte
	var src, dst netip.Addr
	ip = trimIP(ip)
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		hl := int(ip[0]&0x0f) * 4
		if hl < 20 || len(ip) < hl {
			return p, false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
			return p, false // a later fragment
		}
		proto, payload = ip[9], ip[hl:]
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	case len(ip) >= 40 && ip[0]>>4 == 6:
		proto, payload = ip[6], ip[40:]
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	default:
		return p, false
	}
	var sport, dport uint16
	switch proto {
	case unix.IPPROTO_ESP:
	case unix.IPPROTO_UDP:
		if len(payload) < 8 {
			return p, false
		}
		sport, dport = binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:])
		if sport != ESPPort && dport != ESPPort {
			return p, false
		}
		payload = payload[8:]
		p.UDP = true
	default:
		return p, false
	}
	if len(payload) < 8 {
		return p, false // a NAT keepalive (one byte 0xff) or short
	}
	p.SPI, p.Seq = binary.BigEndian.Uint32(payload), binary.BigEndian.Uint32(payload[4:])
	if p.SPI == 0 {
		return p, false // the non-ESP marker: IKE
	}
	if len(payload) >= 16 {
		p.IV, p.HasIV = [8]byte(payload[8:16]), true
	}
	p.Src, p.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	p.Data = ip
	return p, true
}

// trimIP cuts what follows the IP packet (Ethernet padding) off ip, by
// the length its header gives; a header that claims more than there is
// leaves ip as it is.
func trimIP(ip []byte) []byte {
	var n int
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		n = int(binary.BigEndian.Uint16(ip[2:]))
	case len(ip) >= 40 && ip[0]>>4 == 6:
		n = 40 + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return ip
	}
	if n > 0 && n < len(ip) {
		return ip[:n]
	}
	return ip
}

// ESPCapture is a running capture; CaptureESP starts it, Stop ends it.
type ESPCapture struct {
	fd      int
	file    *os.File
	w       *pcap.Writer
	name    string
	stop    atomic.Bool
	done    chan struct{}
	packets atomic.Uint64

	// The loop's, read after done.
	stats ESPCaptureStats
	err   error

	stopOnce sync.Once
}

// ESPCaptureStats is what a capture saw.
type ESPCaptureStats struct {
	Packets uint64 `json:"packets"` // ESP packets written
	Other   uint64 `json:"other"`   // other packets on the interface
	Split   uint64 `json:"split"`   // GSO super-packets cut into packets
	// Dropped is what the kernel could not queue to the capture
	// (PACKET_STATISTICS): a capture with drops is not complete.
	Dropped uint64 `json:"dropped"`
}

// virtio_net_hdr (include/uapi/linux/virtio_net.h), before each packet
// read from a socket with PACKET_VNET_HDR.
const (
	vnetHdrLen      = 10
	vnetGSOUDPL4    = 5
	vnetGSOECN      = 0x80
	captureRcvBuf   = 64 << 20
	captureMaxFrame = 1 << 16
)

// CaptureESP starts capturing, on ifname in ns, every ESP packet that
// the interface sends or receives, into the pcap file (created or
// truncated). It needs root. The capture runs until Stop.
func CaptureESP(ns *Netns, ifname, file string) (*ESPCapture, error) {
	c := &ESPCapture{fd: -1, name: ifname + " in " + ns.name, done: make(chan struct{})}
	proto := int(htons16(unix.ETH_P_ALL))
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		// SOCK_RAW: the kernel gives the virtio_net_hdr only there.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, fmt.Errorf("lab: capture on %s: %w", c.name, err)
	}
	unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, captureRcvBuf)
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	f, err := os.Create(file)
	if err != nil {
		unix.Close(c.fd)
		return nil, fmt.Errorf("lab: capture on %s: %w", c.name, err)
	}
	c.file = f
	if c.w, err = pcap.NewWriter(f, pcap.LinkRaw, true); err != nil {
		f.Close()
		unix.Close(c.fd)
		return nil, fmt.Errorf("lab: capture on %s: %w", c.name, err)
	}
	go c.loop()
	return c, nil
}

func htons16(v uint16) uint16 { return v<<8 | v>>8 }

// Packets is how many ESP packets the capture has written so far.
func (c *ESPCapture) Packets() uint64 { return c.packets.Load() }

func (c *ESPCapture) loop() {
	defer close(c.done)
	buf := make([]byte, vnetHdrLen+captureMaxFrame)
	seg := make([]byte, captureMaxFrame)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue // the receive timeout: look at stop again
			}
			c.err = fmt.Errorf("lab: capture on %s: %w", c.name, err)
			return
		}
		now := time.Now()
		if n < vnetHdrLen {
			continue
		}
		gsoType, gsoSize := buf[1]&^vnetGSOECN, int(binary.LittleEndian.Uint16(buf[4:]))
		ip := buf[vnetHdrLen:n]
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Hatype != unix.ARPHRD_NONE {
			// An Ethernet header (veth, bridge); a TUN device has none.
			if _, ip, ok = pcap.SplitFrame(pcap.LinkEthernet, ip); !ok {
				c.stats.Other++
				continue
			}
		}
		if gsoType == vnetGSOUDPL4 && gsoSize > 0 {
			if err := c.split(now, ip, gsoSize, seg); err != nil {
				c.err = err
				return
			}
			continue
		}
		if err := c.write(now, ip); err != nil {
			c.err = err
			return
		}
	}
}

// write writes ip if it is ESP.
func (c *ESPCapture) write(t time.Time, ip []byte) error {
	p, ok := ParseESP(ip)
	if !ok {
		c.stats.Other++
		return nil
	}
	if err := c.w.WritePacket(t, p.Data); err != nil {
		return fmt.Errorf("lab: capture on %s: %w", c.name, err)
	}
	c.packets.Add(1)
	return nil
}

// split cuts a UDP GSO super-packet into the datagrams it stands for
// (payloads of size bytes, the last shorter), each behind a copy of the
// IP and UDP headers with its lengths set, and writes them.
func (c *ESPCapture) split(t time.Time, ip []byte, size int, seg []byte) error {
	hl := ipHeaderLen(ip)
	if hl == 0 || len(ip) < hl+8 || (ip[0]>>4 == 4 && ip[9] != unix.IPPROTO_UDP) || (ip[0]>>4 == 6 && ip[6] != unix.IPPROTO_UDP) {
		return c.write(t, ip)
	}
	c.stats.Split++
	hdr, payload := ip[:hl+8], ip[hl+8:]
	for len(payload) > 0 {
		k := min(size, len(payload))
		s := append(append(seg[:0], hdr...), payload[:k]...)
		payload = payload[k:]
		setIPLen(s)
		binary.BigEndian.PutUint16(s[hl+4:], uint16(8+k))
		fixUDPChecksum(s)
		if err := c.write(t, s); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends the capture, flushes and closes the file, and returns what it
// saw. The error is the capture's, if it failed. It is idempotent.
func (c *ESPCapture) Stop() (ESPCaptureStats, error) {
	c.stopOnce.Do(func() {
		c.stop.Store(true)
		<-c.done
		var st unix.TpacketStats
		l := uint32(unsafe.Sizeof(st))
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(c.fd), unix.SOL_PACKET, unix.PACKET_STATISTICS,
			uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e == 0 {
			c.stats.Dropped = uint64(st.Drops)
		}
		unix.Close(c.fd)
		c.stats.Packets = c.packets.Load()
		werr := c.w.Flush()
		cerr := c.file.Close()
		c.err = errors.Join(c.err, werr, cerr)
	})
	return c.stats, c.err
}

// ipHeaderLen is the length of the IP header (IPv4 with options, or the
// fixed IPv6 header), 0 if ip is too short.
func ipHeaderLen(ip []byte) int {
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		if hl := int(ip[0]&0x0f) * 4; hl >= 20 && len(ip) >= hl {
			return hl
		}
	case len(ip) >= 40 && ip[0]>>4 == 6:
		return 40
	}
	return 0
}

// setIPLen sets the IP header's length field to len(ip), and for IPv4 the
// header checksum.
func setIPLen(ip []byte) {
	if ip[0]>>4 == 6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40))
		return
	}
	hl := int(ip[0]&0x0f) * 4
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip[:hl], 0)))
}

// fixUDPChecksum computes the UDP checksum of a UDP packet in ip (IPv4 or
// IPv6, no extension headers).
func fixUDPChecksum(ip []byte) {
	hl := ipHeaderLen(ip)
	udp := ip[hl:]
	udp[6], udp[7] = 0, 0
	var s uint32
	if ip[0]>>4 == 4 {
		s = sum(ip[12:20], 0)
	} else {
		s = sum(ip[8:40], 0)
	}
	s += unix.IPPROTO_UDP + uint32(len(udp))
	c := ^fold(sum(udp, s))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// sum adds b as big-endian 16-bit words to s (RFC 1071).
func sum(b []byte, s uint32) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// ReadESP reads the ESP packets of a capture file (pcap or pcapng, raw
// IP, Ethernet or Linux cooked frames), in file order.
func ReadESP(file string) ([]ESPPacket, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f, file)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var out []ESPPacket
	var p pcap.Packet
	for {
		if err := r.Next(&p); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("lab: %w", err)
		}
		_, ip, ok := pcap.SplitFrame(p.Link, p.Data)
		if !ok {
			continue
		}
		e, ok := ParseESP(ip)
		if !ok {
			continue
		}
		e.Data = slices.Clone(e.Data)
		e.Truncated = p.OrigLen > len(p.Data)
		e.Record, e.Time = p.Record, p.Time
		out = append(out, e)
	}
}

// SPIReport is what CheckESP found for one SPI.
type SPIReport struct {
	SPI      uint32         `json:"spi"`
	Src, Dst netip.AddrPort `json:"-"` // of the first packet
	Packets  int            `json:"packets"`
	MinSeq   uint32         `json:"min_seq"`
	MaxSeq   uint32         `json:"max_seq"`
	// DupIV counts packets whose (SPI, IV) pair an earlier packet had:
	// for an AEAD SA, a repeated nonce. Not counted for the SPIs given
	// to CheckESP as not AEAD.
	DupIV int `json:"dup_iv"`
	// DupSeq counts packets whose (SPI, sequence number) pair an earlier
	// packet had.
	DupSeq int `json:"dup_seq"`
	// Examples describe the first few repeats.
	Examples []string `json:"examples,omitempty"`
}

// ESPReport is what CheckESP found, per SPI in ascending order.
type ESPReport struct {
	Packets int         `json:"packets"`
	SPIs    []SPIReport `json:"spis"`
}

// DupIV is the repeated (SPI, IV) pairs over all SPIs.
func (r ESPReport) DupIV() int {
	n := 0
	for _, s := range r.SPIs {
		n += s.DupIV
	}
	return n
}

// DupSeq is the repeated (SPI, sequence number) pairs over all SPIs.
func (r ESPReport) DupSeq() int {
	n := 0
	for _, s := range r.SPIs {
		n += s.DupSeq
	}
	return n
}

// SPI returns the report of one SPI (zero if it had no packets).
func (r ESPReport) SPI(spi uint32) SPIReport {
	for _, s := range r.SPIs {
		if s.SPI == spi {
			return s
		}
	}
	return SPIReport{SPI: spi}
}

// String is one line per SPI.
func (r ESPReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ESP packets", r.Packets)
	for _, s := range r.SPIs {
		fmt.Fprintf(&b, "; SPI 0x%08x %v -> %v: %d packets, seq %d..%d, %d repeated IVs, %d repeated sequence numbers",
			s.SPI, s.Src, s.Dst, s.Packets, s.MinSeq, s.MaxSeq, s.DupIV, s.DupSeq)
		if len(s.Examples) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(s.Examples, "; "))
		}
	}
	return b.String()
}

// maxExamples is how many repeats an SPIReport describes.
const maxExamples = 3

// CheckESP counts, per SPI, the packets and those that repeat an (SPI,
// IV) or (SPI, sequence number) pair of an earlier one. notAEAD names
// SPIs whose IV may repeat without harm (CBC IVs are random, NULL has
// none); their IVs are not checked.
func CheckESP(pkts []ESPPacket, notAEAD ...uint32) ESPReport {
	type key struct {
		spi uint32
		iv  [8]byte
	}
	type seqKey struct{ spi, seq uint32 }
	ivs := make(map[key]int, len(pkts))
	seqs := make(map[seqKey]int, len(pkts))
	by := map[uint32]*SPIReport{}
	for i := range pkts {
		p := &pkts[i]
		s := by[p.SPI]
		if s == nil {
			s = &SPIReport{SPI: p.SPI, Src: p.Src, Dst: p.Dst, MinSeq: p.Seq, MaxSeq: p.Seq}
			by[p.SPI] = s
		}
		s.Packets++
		s.MinSeq, s.MaxSeq = min(s.MinSeq, p.Seq), max(s.MaxSeq, p.Seq)
		if p.HasIV && !slices.Contains(notAEAD, p.SPI) {
			k := key{p.SPI, p.IV}
			if j, ok := ivs[k]; ok {
				s.DupIV++
				if len(s.Examples) < maxExamples {
					s.Examples = append(s.Examples, fmt.Sprintf("IV repeated: %v and %v", &pkts[j], p))
				}
			} else {
				ivs[k] = i
			}
		}
		k := seqKey{p.SPI, p.Seq}
		if j, ok := seqs[k]; ok {
			s.DupSeq++
			if len(s.Examples) < maxExamples {
				s.Examples = append(s.Examples, fmt.Sprintf("sequence number repeated: %v and %v", &pkts[j], p))
			}
		} else {
			seqs[k] = i
		}
	}
	r := ESPReport{Packets: len(pkts)}
	for _, s := range by {
		r.SPIs = append(r.SPIs, *s)
	}
	slices.SortFunc(r.SPIs, func(a, b SPIReport) int { return cmp.Compare(a.SPI, b.SPI) })
	return r
}

// ReplayESP sends the packets again from ns, as they were captured (the
// same addresses, ports and bytes; UDP checksums recomputed), through a
// raw socket, in bursts of 32 a millisecond apart. It returns how many it
// sent; truncated packets are refused. It needs root.
func ReplayESP(ns *Netns, pkts []ESPPacket) (int, error) {
	var fd4, fd6 int = -1, -1
	defer func() {
		for _, fd := range []int{fd4, fd6} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	err := ns.Do(func() (err error) {
		if fd4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		if fd6, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("lab: replay from %s: %w", ns.name, err)
	}
	buf := make([]byte, 0, captureMaxFrame)
	for i := range pkts {
		p := &pkts[i]
		if p.Truncated {
			return i, fmt.Errorf("lab: replay from %s: %v was cut short by the capture", ns.name, p)
		}
		b := append(buf[:0], p.Data...)
		if p.UDP {
			fixUDPChecksum(b)
		}
		var sa unix.Sockaddr
		fd := fd4
		if a := p.Dst.Addr(); a.Is4() {
			sa = &unix.SockaddrInet4{Addr: a.As4()}
		} else {
			sa, fd = &unix.SockaddrInet6{Addr: a.As16()}, fd6
		}
		if err := unix.Sendto(fd, b, 0, sa); err != nil {
			return i, fmt.Errorf("lab: replay from %s: %v: %w", ns.name, p, err)
		}
		if i%32 == 31 {
			time.Sleep(time.Millisecond)
		}
	}
	return len(pkts), nil
}
