package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Offsets in an Ethernet frame (no VLAN tag) that the program reads.
const (
	ethLen     = 14
	ethType    = 12
	v4Off      = ethLen     // IPv4 header
	v4Frag     = v4Off + 6  // flags and fragment offset
	v4Proto    = v4Off + 9  // protocol
	v4Dst      = v4Off + 16 // destination address
	v4L4       = v4Off + 20 // UDP header or ESP (the program takes only IHL 5)
	v6Off      = ethLen     // IPv6 header
	v6Next     = v6Off + 6  // next header
	v6Dst      = v6Off + 24 // destination address
	v6L4       = v6Off + 40 // UDP header or ESP
	udpDPort   = 2          // in the UDP header
	udpLength  = 4          // in the UDP header
	udpHdr     = 8          // UDP header size
	espMinUDP  = 4          // an ESP-in-UDP payload has a non-zero first word (the SPI)
	espHdrLen  = 8          // SPI and sequence number
	xdpPass    = 2          // XDP_PASS
	xdpMdData  = 0          // struct xdp_md: data
	xdpMdEnd   = 4          // data_end
	xdpMdQueue = 16         // rx_queue_index
	keyOff     = -16        // the address map's key on the stack
	addrKeyLen = 16         // IPv6, or IPv4-mapped IPv6
	maxAddrs   = 256        // addresses the program knows
	protoUDP   = 17
	protoESP   = 50
)

// native converts a 16- or 32-bit value in network byte order into what a
// load of it from packet memory yields on this host, for comparisons.
func native16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

func native32(b [4]byte) int32 { return int32(binary.NativeEndian.Uint32(b[:])) }

// program builds the XDP program. It redirects to xsks (by rx queue
// index) the frames that are
//
//   - IPv4 (IHL 5, not a fragment) or IPv6 (UDP or ESP directly after
//     the fixed header, not to an IPv4-mapped address) to an address in
//     addrs,
//   - UDP to port whose length leaves at least four payload bytes and
//     whose first four payload bytes are not zero (ESP, not IKE's non-ESP
//     marker; a one-byte NAT-keepalive is too short), or, if rawESP, IP
//     protocol 50 with at least an ESP header;
//
// and passes everything else to the kernel. A queue without a socket in
// xsks passes too (the redirect's default action).
func program(xsks, addrs *ebpf.Map, port uint16, rawESP bool) asm.Instructions {
	const (
		pData = asm.R2 // packet start (kept in R7 across the helper call)
		pEnd  = asm.R3
		tmp   = asm.R4
		val   = asm.R5
		ctx   = asm.R6
		proto = asm.R8
	)
	// notUDP is where a frame that is not UDP goes: to the address
	// lookup if it is ESP and raw ESP is steered, else to the kernel.
	notUDP := func(sym string) asm.Instructions {
		if !rawESP {
			return asm.Instructions{asm.Ja.Label("pass").WithSymbol(sym)}
		}
		return asm.Instructions{asm.JEq.Imm(proto, protoESP, "lookup").WithSymbol(sym), asm.Ja.Label("pass")}
	}
	// espInUDP takes the frame's transport protocol (at protoAt) and, if
	// it is UDP to the port (at l4) with an ESP payload, goes to the
	// address lookup; a frame that is not UDP goes to notUDP.
	espInUDP := func(protoAt, l4 int16, notUDPSym string) asm.Instructions {
		ins := asm.Instructions{
			asm.LoadMem(proto, pData, protoAt, asm.Byte),
			asm.JNE.Imm(proto, protoUDP, notUDPSym),
			asm.Mov.Reg(tmp, pData),
			asm.Add.Imm(tmp, int32(l4)+udpHdr+espMinUDP),
			asm.JGT.Reg(tmp, pEnd, "pass"),
			asm.LoadMem(val, pData, l4+udpDPort, asm.Half),
			asm.JNE.Imm(val, native16(port), "pass"),
			asm.LoadMem(val, pData, l4+udpLength, asm.Half),
			asm.HostTo(asm.BE, val, asm.Half),
			asm.JLT.Imm(val, udpHdr+espMinUDP, "pass"),
			asm.LoadMem(val, pData, l4+udpHdr, asm.Word),
			asm.JEq.Imm(val, 0, "pass"),
			asm.Ja.Label("lookup"),
		}
		return append(ins, notUDP(notUDPSym)...)
	}
	ins := asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(pData, ctx, xdpMdData, asm.Word),
		asm.LoadMem(pEnd, ctx, xdpMdEnd, asm.Word),
		asm.Mov.Reg(tmp, pData),
		asm.Add.Imm(tmp, ethLen),
		asm.JGT.Reg(tmp, pEnd, "pass"),
		asm.LoadMem(val, pData, ethType, asm.Half),
		asm.JEq.Imm(val, native16(0x0800), "ipv4"),
		asm.JEq.Imm(val, native16(0x86dd), "ipv6"),
		asm.Ja.Label("pass"),

		// IPv4: the header and an ESP header (or UDP and 4 bytes) in the frame.
		asm.Mov.Reg(tmp, pData).WithSymbol("ipv4"),
		asm.Add.Imm(tmp, v4L4+espHdrLen),
		asm.JGT.Reg(tmp, pEnd, "pass"),
		asm.LoadMem(val, pData, v4Off, asm.Byte),
		asm.JNE.Imm(val, 0x45, "pass"),
		asm.LoadMem(val, pData, v4Frag, asm.Half),
		asm.And.Imm(val, native16(0x3fff)),
		asm.JNE.Imm(val, 0, "pass"),
		// Key: ::ffff:a.b.c.d.
		asm.StoreImm(asm.RFP, keyOff, 0, asm.Word),
		asm.StoreImm(asm.RFP, keyOff+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, keyOff+8, int64(native32([4]byte{0, 0, 0xff, 0xff})), asm.Word),
		asm.LoadMem(val, pData, v4Dst, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+12, val, asm.Word),
	}
	ins = append(ins, espInUDP(v4Proto, v4L4, "v4notudp")...)
	ins = append(ins,
		// IPv6: the fixed header and an ESP header in the frame.
		asm.Mov.Reg(tmp, pData).WithSymbol("ipv6"),
		asm.Add.Imm(tmp, v6L4+espHdrLen),
		asm.JGT.Reg(tmp, pEnd, "pass"),
		asm.LoadMem(val, pData, v6Off, asm.Byte),
		asm.And.Imm(val, 0xf0),
		asm.JNE.Imm(val, 0x60, "pass"),
		asm.LoadMem(val, pData, v6Dst, asm.DWord),
		asm.StoreMem(asm.RFP, keyOff, val, asm.DWord),
		// An IPv4-mapped destination (::ffff:a.b.c.d) would match an
		// IPv4 address's key; the kernel delivers no such packet
		// (RFC 4291 section 2.5.5.2), so neither does the program.
		asm.JNE.Imm(val, 0, "v6notmapped"),
		asm.LoadMem(val, pData, v6Dst+8, asm.Word),
		asm.JEq.Imm32(val, native32([4]byte{0, 0, 0xff, 0xff}), "pass"),
		asm.LoadMem(val, pData, v6Dst+8, asm.DWord).WithSymbol("v6notmapped"),
		asm.StoreMem(asm.RFP, keyOff+8, val, asm.DWord),
	)
	ins = append(ins, espInUDP(v6Next, v6L4, "v6notudp")...)
	ins = append(ins,
		// Is the destination one of ours?
		asm.LoadMapPtr(asm.R1, addrs.FD()).WithSymbol("lookup"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, ctx, xdpMdQueue, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
	return ins
}

// genericOnly makes attach skip the native mode (tests and benchmarks set
// it to compare the two).
var genericOnly bool

// attachment is the program, its maps and its attachment to one
// interface, shared by the sockets Open made; the last to close releases
// it.
type attachment struct {
	xsks, addrs *ebpf.Map
	prog        *ebpf.Program
	link        link.Link
	native      bool
}

// attach loads the program for port and the addresses local and attaches
// it to the interface, natively if the driver can and generically
// otherwise.
func attach(ifindex, queues int, local []netip.Addr, port uint16, rawESP bool) (*attachment, error) {
	a := &attachment{}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	var err error
	a.xsks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "sluice_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("xdp: socket map: %w", err)
	}
	a.addrs, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "sluice_addrs", Type: ebpf.Hash, KeySize: addrKeyLen, ValueSize: 1, MaxEntries: maxAddrs,
	})
	if err != nil {
		return nil, fmt.Errorf("xdp: address map: %w", err)
	}
	if err := a.setAddrs(local); err != nil {
		return nil, err
	}
	a.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "sluice_esp", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: program(a.xsks, a.addrs, port, rawESP),
	})
	if err != nil {
		return nil, fmt.Errorf("xdp: load program: %w", err)
	}
	err = errors.ErrUnsupported
	if !genericOnly {
		a.link, err = link.AttachXDP(link.XDPOptions{Program: a.prog, Interface: ifindex, Flags: link.XDPDriverMode})
	}
	if err == nil {
		a.native = true
	} else {
		var gerr error
		a.link, gerr = link.AttachXDP(link.XDPOptions{Program: a.prog, Interface: ifindex, Flags: link.XDPGenericMode})
		if gerr != nil {
			return nil, fmt.Errorf("xdp: attach program: %w", errors.Join(err, gerr))
		}
	}
	ok = true
	return a, nil
}

// setAddrs makes local the addresses the program steers (adding before
// removing, so that an address in both sets is never missing).
func (a *attachment) setAddrs(local []netip.Addr) error {
	if len(local) > maxAddrs {
		return fmt.Errorf("xdp: %d addresses, at most %d", len(local), maxAddrs)
	}
	want := make(map[[addrKeyLen]byte]bool, len(local))
	one := uint8(1)
	for _, ad := range local {
		k := ad.As16()
		want[k] = true
		if err := a.addrs.Update(k, one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("xdp: address map: %w", err)
		}
	}
	var k [addrKeyLen]byte
	var v uint8
	var stale [][addrKeyLen]byte
	it := a.addrs.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := a.addrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdp: address map: %w", err)
		}
	}
	return nil
}

func (a *attachment) close() {
	if a.link != nil {
		a.link.Close()
	}
	if a.prog != nil {
		a.prog.Close()
	}
	if a.xsks != nil {
		a.xsks.Close()
	}
	if a.addrs != nil {
		a.addrs.Close()
	}
}
