package ha

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The sync channel carries frames, each a 4-byte big-endian length n
// followed by n bytes: a type byte and the message body. Integers in a body
// are unsigned varints; strings and byte strings are a varint length and
// the bytes. Every message about a group starts with the group's name and
// the sender's epoch for it.

// MaxFrame is the largest frame (type byte and body) a member sends or
// accepts. A peer announcing a longer one is cut off before anything is
// allocated for it.
const MaxFrame = 16 << 20

// frameHeader is the length prefix.
const frameHeader = 4

// msgType is a frame's first byte.
type msgType byte

const (
	mHeartbeat    msgType = iota + 1 // every group's role and epoch at the sender
	mSnapshot                        // owner→standby: a group's whole state, acked
	mBound                           // owner→standby: a reservation bound, acked
	mAck                             // standby→owner: everything up to seq recorded
	mForget                          // owner→standby: a key is gone
	mIKE                             // owner→standby: an IKE SA snapshot (or its removal)
	mHandover                        // owner→standby: take the group with this exact state
	mHandoverDone                    // new owner→old: taken
	mHandoverAsk                     // preferred standby→owner: please hand over
	mTypeEnd
)

// A heartbeat group is a name, a role byte, a preference byte, a synced
// byte (0 or 1) and an epoch; from wire version 2 on, two more integers:
// the next IV block of the member whose name sorts lower, then of the
// other (iv.go). A connection's version comes from its handshake (tls.go).

var typeNames = [...]string{"", "heartbeat", "snapshot", "bound", "ack", "forget", "ike", "handover", "handover-done", "handover-ask"}

func (t msgType) String() string {
	if t > 0 && t < mTypeEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("type %d", byte(t))
}

// hbGroup is one group in a heartbeat.
type hbGroup struct {
	Name       string
	Role       role
	Epoch      uint64
	Preference uint8
	Synced     bool      // a standby holding the owner's snapshot
	IV         [2]uint64 // version 2: both members' next IV blocks (ivBlocks.next)
}

// msg is any decoded message; which fields are meaningful depends on Type.
type msg struct {
	Type   msgType
	Ver    int       // the wire version it is encoded in or was decoded from
	Groups []hbGroup // heartbeat

	Group string
	Epoch uint64
	Seq   uint64 // snapshot, bound, ack
	Key   string // bound, forget, ike
	UpTo  uint64 // bound
	Snap  []byte // ike; nil: the SA is gone
	State *State // snapshot, handover
}

var (
	errFrameSize = errors.New("ha: frame length out of range")
	errTruncated = errors.New("ha: message truncated")
	errTrailing  = errors.New("ha: bytes after the message")
)

// appendFrame appends m as a frame (length prefix included) to dst.
func appendFrame(dst []byte, m *msg) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(m.Type))
	switch m.Type {
	case mHeartbeat:
		dst = binary.AppendUvarint(dst, uint64(len(m.Groups)))
		for _, g := range m.Groups {
			dst = appendString(dst, g.Name)
			synced := byte(0)
			if g.Synced {
				synced = 1
			}
			dst = append(dst, byte(g.Role), g.Preference, synced)
			dst = binary.AppendUvarint(dst, g.Epoch)
			if m.Ver >= wireV2 {
				dst = binary.AppendUvarint(dst, g.IV[0])
				dst = binary.AppendUvarint(dst, g.IV[1])
			}
		}
	default:
		dst = appendString(dst, m.Group)
		dst = binary.AppendUvarint(dst, m.Epoch)
		switch m.Type {
		case mSnapshot:
			dst = binary.AppendUvarint(dst, m.Seq)
			dst = appendState(dst, m.State)
		case mHandover:
			dst = appendState(dst, m.State)
		case mBound:
			dst = binary.AppendUvarint(dst, m.Seq)
			dst = appendString(dst, m.Key)
			dst = binary.AppendUvarint(dst, m.UpTo)
		case mAck:
			dst = binary.AppendUvarint(dst, m.Seq)
		case mForget:
			dst = appendString(dst, m.Key)
		case mIKE:
			dst = appendString(dst, m.Key)
			if m.Snap == nil {
				dst = append(dst, 0)
			} else {
				dst = append(dst, 1)
				dst = appendString(dst, string(m.Snap))
			}
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-frameHeader))
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendState(dst []byte, st *State) []byte {
	if st == nil {
		return append(dst, 0, 0, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.Bounds)))
	for k, v := range st.Bounds {
		dst = appendString(dst, string(k))
		dst = binary.AppendUvarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.IKE)))
	for k, v := range st.IKE {
		dst = appendString(dst, k)
		dst = appendString(dst, string(v))
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.Seq)))
	for k, v := range st.Seq {
		dst = appendString(dst, string(k))
		dst = binary.AppendUvarint(dst, v)
	}
	return dst
}

// readFrame reads one frame from r into buf (grown as needed, up to
// MaxFrame) and returns its contents (type byte and body), which alias buf.
// A length of zero or above MaxFrame is an error before anything is read
// or allocated for the body.
func readFrame(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return buf, fmt.Errorf("%w: %d bytes (1..%d)", errFrameSize, n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	return buf, nil
}

// decodeMsg decodes a frame's contents (type byte and body) of wire
// version ver. The result does not alias b.
func decodeMsg(b []byte, ver int) (*msg, error) {
	if len(b) == 0 {
		return nil, errTruncated
	}
	m := &msg{Type: msgType(b[0]), Ver: ver}
	d := decoder{b: b[1:]}
	switch m.Type {
	case mHeartbeat:
		n := d.count(4)
		for i := 0; i < n && d.err == nil; i++ {
			g := hbGroup{Name: d.str()}
			g.Role = role(d.byte())
			g.Preference = d.byte()
			switch d.byte() {
			case 0:
			case 1:
				g.Synced = true
			default:
				d.fail(errors.New("ha: heartbeat: bad synced flag"))
			}
			g.Epoch = d.uvarint()
			if ver >= wireV2 {
				g.IV[0] = d.uvarint()
				g.IV[1] = d.uvarint()
			}
			if d.err == nil && g.Role >= roleEnd {
				d.err = fmt.Errorf("ha: heartbeat: unknown role %d", byte(g.Role))
			}
			m.Groups = append(m.Groups, g)
		}
	case mSnapshot, mHandover, mBound, mAck, mForget, mIKE, mHandoverDone, mHandoverAsk:
		m.Group = d.str()
		m.Epoch = d.uvarint()
		switch m.Type {
		case mSnapshot:
			m.Seq = d.uvarint()
			m.State = d.state()
		case mHandover:
			m.State = d.state()
		case mBound:
			m.Seq = d.uvarint()
			m.Key = d.str()
			m.UpTo = d.uvarint()
		case mAck:
			m.Seq = d.uvarint()
		case mForget:
			m.Key = d.str()
		case mIKE:
			m.Key = d.str()
			switch d.byte() {
			case 0:
			case 1:
				m.Snap = []byte(d.str())
			default:
				if d.err == nil {
					d.err = errors.New("ha: ike: bad presence flag")
				}
			}
		}
	default:
		return nil, fmt.Errorf("ha: unknown message type %d", b[0])
	}
	if d.err != nil {
		return nil, fmt.Errorf("ha: %v: %w", m.Type, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("ha: %v: %w (%d)", m.Type, errTrailing, len(d.b))
	}
	return m, nil
}

// decoder reads a body; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail(errTruncated)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(errTruncated)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// count reads an element count, refusing one that the remaining bytes
// cannot hold at min bytes an element (so that a hostile count cannot make
// the decoder allocate).
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.fail(errTruncated)
		return 0
	}
	return int(n)
}

func (d *decoder) state() *State {
	st := newState()
	n := d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		st.Bounds[Key(k)] = d.uvarint()
	}
	n = d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		st.IKE[k] = []byte(d.str())
	}
	n = d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		st.Seq[Key(k)] = d.uvarint()
	}
	return st
}
