package sockio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batch is the memory of one direction's mmsg calls: n message headers,
// one socket address and one control buffer per message, and iovecs. It is
// made once per Link direction and reused for every call.
type Batch struct {
	Msgs  []unix.Mmsghdr
	Iovs  []unix.Iovec
	Names []unix.RawSockaddrInet6 // large enough for either family
	ctrl  []uint64                // 8-byte aligned control buffers, ctrlSize bytes each
	cs    int
}

// NewBatch makes a Batch of n messages with iovs iovecs (at least n) and
// ctrlSize bytes of control buffer per message (rounded up to 8).
func NewBatch(n, iovs, ctrlSize int) *Batch {
	ctrlSize = (ctrlSize + 7) &^ 7
	return &Batch{
		Msgs:  make([]unix.Mmsghdr, n),
		Iovs:  make([]unix.Iovec, max(iovs, n)),
		Names: make([]unix.RawSockaddrInet6, n),
		ctrl:  make([]uint64, n*ctrlSize/8),
		cs:    ctrlSize,
	}
}

// Prepare resets message i to receive into p: one iovec (Iovs[i]), the
// full socket address and control buffers.
func (b *Batch) Prepare(i int, p []byte) {
	iov := &b.Iovs[i]
	iov.Base = unsafe.SliceData(p)
	iov.SetLen(len(p))
	h := &b.Msgs[i].Hdr
	h.Name = (*byte)(unsafe.Pointer(&b.Names[i]))
	h.Namelen = unix.SizeofSockaddrInet6
	h.Iov = iov
	h.SetIovlen(1)
	if b.cs > 0 {
		h.Control = &b.ctrlBytes(i)[0]
		h.SetControllen(b.cs)
	} else {
		h.Control = nil
		h.SetControllen(0)
	}
	h.Flags = 0
	b.Msgs[i].Len = 0
}

// SetSend prepares message i to send the iovecs Iovs[first:first+count] to
// the address in Names[i] (namelen bytes of it), with control messages
// ctrlLen bytes of CtrlBuf(i).
func (b *Batch) SetSend(i, first, count int, namelen uint32, ctrlLen int) {
	h := &b.Msgs[i].Hdr
	h.Name = (*byte)(unsafe.Pointer(&b.Names[i]))
	h.Namelen = namelen
	h.Iov = &b.Iovs[first]
	h.SetIovlen(count)
	if ctrlLen > 0 {
		h.Control = &b.ctrlBytes(i)[0]
	} else {
		h.Control = nil
	}
	h.SetControllen(ctrlLen)
	h.Flags = 0
	b.Msgs[i].Len = 0
}

// SetIov points iovec j at p.
func (b *Batch) SetIov(j int, p []byte) {
	b.Iovs[j].Base = unsafe.SliceData(p)
	b.Iovs[j].SetLen(len(p))
}

// CtrlBuf is message i's whole control buffer, for writing control
// messages to send.
func (b *Batch) CtrlBuf(i int) []byte { return b.ctrlBytes(i) }

// Control is the part of message i's control buffer the kernel filled.
func (b *Batch) Control(i int) []byte {
	n := int(b.Msgs[i].Hdr.Controllen)
	return b.ctrlBytes(i)[:min(n, b.cs)]
}

func (b *Batch) ctrlBytes(i int) []byte {
	if b.cs == 0 {
		return nil
	}
	all := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.ctrl))), len(b.ctrl)*8)
	return all[i*b.cs : (i+1)*b.cs : (i+1)*b.cs]
}
