package gateway

// The slot file: where the state writer (statewriter.go) records inbound
// bounds, many in one fdatasync. Creating and renaming a file per record
// (state.go's writeReserved) costs the file system far more than the write:
// measured here, 200 records took 65-670 ms that way and 0.5 ms as 200
// writes into one file and one fdatasync.
//
// The file is an array of 64-byte slots; a state file (an SA's bounds in
// one direction) that the writer records takes a slot, and gives it back
// when its last runtime retires, after its final state is in its own file.
// A slot has two 32-byte copies, written in turn:
//
//	key [16]byte    the state file's name, hashed
//	bound uint64    big endian
//	crc uint32      CRC-32C of key and bound
//	zero [4]byte
//
// The copy not being written holds the bound recorded before, which covers
// every number granted until the new one is synced; a copy torn by a crash
// fails its CRC and is ignored. A state file's bound at start is the
// highest of its own file and its slot's valid copies.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// slotFileName is the slot file in the state directory.
const slotFileName = "reserved.slots"

const (
	slotSize = 64
	copySize = 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type slotKey [16]byte

func slotKeyOf(path string) slotKey {
	h := sha256.Sum256([]byte(filepath.Base(path)))
	return slotKey(h[:16])
}

// slotFile is the state directory's slot file. Its methods are safe for
// concurrent use.
type slotFile struct {
	mu     sync.Mutex
	f      *os.File
	dir    string
	err    error              // opening or reading it failed
	bounds map[slotKey]uint64 // the highest bound read or written, by key
	slots  map[slotKey]int    // the slot of each key, while its state file holds it
	free   []int
	n      int // slots in the file
	// stuck holds the slots read with two state files' copies, as read:
	// they belong to neither (read), and a file made again keeps them.
	stuck map[int][slotSize]byte
}

// open opens and reads the slot file in dir, once; later calls return what
// the first found.
func (s *slotFile) open(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil || s.err != nil {
		return s.err
	}
	s.err = s.read(dir)
	return s.err
}

func (s *slotFile) read(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, slotFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return err
	}
	s.bounds, s.slots = map[slotKey]uint64{}, map[slotKey]int{}
	// The last slot may be half there: a new slot's first write, to its
	// copy 0, ends the file (and its sync makes that copy count). What
	// is missing reads as zeros, an empty copy.
	s.n = (len(b) + slotSize - 1) / slotSize
	b = append(b, make([]byte, s.n*slotSize-len(b))...)
	for i := range s.n {
		var keys [2]slotKey
		used := 0
		for c := range 2 {
			k, v, ok := decodeCopy(b[i*slotSize+c*copySize:][:copySize])
			if !ok {
				continue
			}
			keys[used] = k
			used++
			s.bounds[k] = max(s.bounds[k], v)
		}
		switch {
		case used == 0:
			s.free = append(s.free, i)
		case used == 2 && keys[0] != keys[1]:
			// Two state files' copies in one slot (torn sectors, or
			// damage): written as either's slot, it would overwrite
			// the other's only copy. It stays taken, by neither; its
			// bounds count at start, and each gets a slot of its own.
			if s.stuck == nil {
				s.stuck = map[int][slotSize]byte{}
			}
			s.stuck[i] = [slotSize]byte(b[i*slotSize:][:slotSize])
		default:
			if _, dup := s.slots[keys[0]]; !dup {
				s.slots[keys[0]] = i
			}
		}
	}
	s.f, s.dir = f, dir
	return nil
}

// decodeCopy reads one copy: ok is false for an empty or torn one.
func decodeCopy(b []byte) (k slotKey, v uint64, ok bool) {
	if crc32.Checksum(b[:24], castagnoli) != binary.BigEndian.Uint32(b[24:]) {
		return k, 0, false
	}
	copy(k[:], b)
	if k == (slotKey{}) {
		return k, 0, false
	}
	return k, binary.BigEndian.Uint64(b[16:]), true
}

func encodeCopy(b []byte, k slotKey, v uint64) {
	copy(b, k[:])
	binary.BigEndian.PutUint64(b[16:], v)
	binary.BigEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	clear(b[28:copySize])
}

// bound returns what the slot file holds for the state file at path: 0
// if nothing. The caller has opened it.
func (s *slotFile) bound(path string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bounds[slotKeyOf(path)]
}

// write puts v in copy c of path's slot, taking a slot if it has none. It
// does not sync (sync does, for many).
func (s *slotFile) write(path string, c int, v uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errSlotsClosed
	}
	k := slotKeyOf(path)
	i, ok := s.slots[k]
	if !ok {
		if n := len(s.free); n > 0 {
			i, s.free = s.free[n-1], s.free[:n-1]
		} else {
			i = s.n
			s.n++
		}
		s.slots[k] = i
	}
	s.bounds[k] = max(s.bounds[k], v)
	var b [copySize]byte
	encodeCopy(b[:], k, v)
	_, err := s.f.WriteAt(b[:], int64(i*slotSize+c*copySize))
	return err
}

// sync makes every write before it durable. If the file was removed
// (the state directory emptied or deleted under the gateway), what it
// synced went nowhere: it makes a new file holding every slot's last
// bound and syncs that, or fails while it cannot.
func (s *slotFile) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errSlotsClosed
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(s.f.Fd()), &st); err != nil {
		return err
	}
	if st.Nlink > 0 {
		return nil
	}
	if err := s.recreateLocked(); err != nil {
		return fmt.Errorf("gateway: %s was removed and cannot be made again: %w", slotFileName, err)
	}
	return nil
}

// recreateLocked replaces a removed slot file with a new one that holds,
// in the same slots, the highest bound written to each, and syncs it and
// its directory. s.mu is held.
func (s *slotFile) recreateLocked() error {
	path := filepath.Join(s.dir, slotFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	b := make([]byte, s.n*slotSize)
	for k, i := range s.slots {
		encodeCopy(b[i*slotSize:], k, s.bounds[k])
		encodeCopy(b[i*slotSize+copySize:], k, s.bounds[k])
	}
	for i, c := range s.stuck {
		copy(b[i*slotSize:], c[:])
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	s.f.Close()
	s.f = f
	return nil
}

// release empties path's slot and frees it: its state file now holds all
// there is to know. It does not sync: a crash before the writer's next
// sync leaves the slot's bound, above the final state (a restart then
// refuses up to a step of the peer's packets, as after any crash), and
// whatever takes the slot next is granted only after a sync, which makes
// the emptying durable with it. A slot that cannot be emptied stays taken.
func (s *slotFile) release(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKeyOf(path)
	i, ok := s.slots[k]
	if !ok || s.f == nil {
		return nil
	}
	var b [slotSize]byte
	if _, err := s.f.WriteAt(b[:], int64(i*slotSize)); err != nil {
		return fmt.Errorf("gateway: %s: %w", slotFileName, err)
	}
	delete(s.slots, k)
	delete(s.bounds, k)
	s.free = append(s.free, i)
	return nil
}

// errSlotsClosed says the gateway closed the slot file: nothing is
// recorded or granted any more.
var errSlotsClosed = errors.New("gateway: the slot file is closed")

// close closes the file; writes fail with errSlotsClosed from then on.
func (s *slotFile) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	s.err = errSlotsClosed
}
