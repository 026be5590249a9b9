package pcap

import "encoding/binary"

// EtherTypes of the frames SplitFrame looks into.
const (
	EtherTypeIPv4  = 0x0800
	EtherTypeIPv6  = 0x86dd
	EtherTypeVLAN  = 0x8100 // IEEE 802.1Q tag
	EtherTypeQinQ  = 0x88a8 // IEEE 802.1ad service tag
	etherHeaderLen = 14
	vlanTagLen     = 4
	maxVLANTags    = 2
	sllHeaderLen   = 16
	sll2HeaderLen  = 20
)

// MaxLinkHeader is the longest link-layer header SplitFrame returns for an
// Ethernet frame (two VLAN tags); an Ethernet header written in front of an
// output packet is never longer.
const MaxLinkHeader = etherHeaderLen + maxVLANTags*vlanTagLen

// SplitFrame finds the IP packet in a frame of link type lt. It returns the
// link-layer header in front of it and the rest of the frame, both aliasing
// frame; ip may extend past the IP packet (Ethernet padding, an FCS). ok is
// false when the frame carries something other than IPv4 or IPv6 (ARP,
// LLDP, 802.3 frames, ...), is too short for its link-layer header, or lt is
// not Supported.
//
// For Ethernet the header is the addresses, up to two 802.1Q/802.1ad tags,
// and the EtherType; SetEtherType changes it for an output packet of another
// IP version.
func SplitFrame(lt LinkType, frame []byte) (hdr, ip []byte, ok bool) {
	var et uint16
	var hl int
	switch lt {
	case LinkEthernet:
		if len(frame) < etherHeaderLen {
			return nil, nil, false
		}
		hl = etherHeaderLen
		et = binary.BigEndian.Uint16(frame[12:])
		for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < maxVLANTags; tags++ {
			if len(frame) < hl+vlanTagLen {
				return nil, nil, false
			}
			et = binary.BigEndian.Uint16(frame[hl+2:])
			hl += vlanTagLen
		}
	case LinkLinuxSLL:
		if len(frame) < sllHeaderLen {
			return nil, nil, false
		}
		hl, et = sllHeaderLen, binary.BigEndian.Uint16(frame[14:])
	case LinkLinuxSLL2:
		if len(frame) < sll2HeaderLen {
			return nil, nil, false
		}
		hl, et = sll2HeaderLen, binary.BigEndian.Uint16(frame[0:])
	case LinkRaw, LinkRawDLT12, LinkRawDLT14:
		switch ipVersion(frame) {
		case 4:
			et = EtherTypeIPv4
		case 6:
			et = EtherTypeIPv6
		}
	case LinkIPv4:
		if ipVersion(frame) == 4 {
			et = EtherTypeIPv4
		}
	case LinkIPv6:
		if ipVersion(frame) == 6 {
			et = EtherTypeIPv6
		}
	default:
		return nil, nil, false
	}
	ip = frame[hl:]
	if et == EtherTypeIPv4 && ipVersion(ip) == 4 || et == EtherTypeIPv6 && ipVersion(ip) == 6 {
		return frame[:hl], ip, true
	}
	return nil, nil, false
}

func ipVersion(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0] >> 4)
}

// SetEtherType sets the innermost EtherType of an Ethernet header that
// SplitFrame returned to the one for IP version v (4 or 6).
func SetEtherType(hdr []byte, v int) {
	et := uint16(EtherTypeIPv4)
	if v == 6 {
		et = EtherTypeIPv6
	}
	binary.BigEndian.PutUint16(hdr[len(hdr)-2:], et)
}
