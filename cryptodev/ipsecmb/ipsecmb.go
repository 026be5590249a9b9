//go:build ipsecmb && cgo

package ipsecmb

/*
#cgo LDFLAGS: -lIPSec_MB
#include <stdlib.h>
#include "smb.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/packet"
)

// Name is the engine's registry name.
const Name = "ipsecmb"

// Version is the intel-ipsec-mb version the package was built against.
const Version = C.IMB_VERSION_STR

func init() {
	// Above soft (10): measured faster for AES-GCM at every size (see
	// bench-ipsecmb.md), so it is the default where it is linked in.
	cryptodev.Register(Name, 20, func() (cryptodev.Engine, error) { return New() })
}

// Engine is the intel-ipsec-mb engine. It is safe for concurrent use; each
// Queue and Processor is for one goroutine at a time.
type Engine struct {
	closed atomic.Bool
	arch   string

	mu     sync.Mutex
	keyMgr *C.IMB_MGR // expands keys, under mu; nil after Close
}

// New initialises the library for the best architecture the CPU supports.
func New() (*Engine, error) {
	m, arch, err := newMgr()
	if err != nil {
		return nil, err
	}
	return &Engine{arch: arch, keyMgr: m}, nil
}

var archNames = map[C.int]string{
	C.IMB_ARCH_NOAESNI: "noaesni", C.IMB_ARCH_SSE: "sse", C.IMB_ARCH_AVX: "avx",
	C.IMB_ARCH_AVX2: "avx2", C.IMB_ARCH_AVX512: "avx512",
}

func newMgr() (*C.IMB_MGR, string, error) {
	var arch C.int
	var feat C.uint64_t
	m := C.smb_mgr_new(&arch, &feat)
	if m == nil {
		return nil, "", errors.New("ipsecmb: cannot initialise a multi-buffer manager")
	}
	name := archNames[arch]
	if name == "" {
		name = fmt.Sprintf("arch(%d)", arch)
	}
	var ext []string
	for _, f := range []struct {
		bit  C.uint64_t
		name string
	}{{C.IMB_FEATURE_VAES, "VAES"}, {C.IMB_FEATURE_VPCLMULQDQ, "VPCLMULQDQ"}, {C.IMB_FEATURE_SHANI, "SHA-NI"}} {
		if feat&f.bit != 0 {
			ext = append(ext, f.name)
		}
	}
	if len(ext) > 0 {
		name += " (" + strings.Join(ext, ", ") + ")"
	}
	return m, name, nil
}

// Arch names the multi-buffer manager the library chose for this CPU and
// the extensions it uses, for example "avx512 (VAES, VPCLMULQDQ, SHA-NI)".
func (e *Engine) Arch() string { return e.arch }

// Describe says which library and manager the engine runs, for logs and
// benchmark tables.
func (e *Engine) Describe() string { return "intel-ipsec-mb " + Version + ", " + e.arch + " manager" }

func (*Engine) Name() string { return Name }
func (*Engine) Async() bool  { return false }

// Supports reports whether alg is a symmetric suite: the library does them
// all.
func (*Engine) Supports(a cryptodev.Alg) bool { return a.Valid() && !a.IsAsymmetric() }

// Close makes later NewKey, NewQueue, NewProcessor and Submit calls fail
// with ErrClosed. Nothing is ever in flight in a synchronous engine. Keys
// and queues stay valid until destroyed or closed.
func (e *Engine) Close() error {
	e.closed.Store(true)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.keyMgr != nil {
		C.smb_mgr_free(e.keyMgr)
		e.keyMgr = nil
	}
	return nil
}

// keyState is an expanded key: the library's form in C memory, and Go's
// form (a soft key) for the ops the library cannot take in one job.
type keyState struct {
	c      *C.smb_key
	alg    cryptodev.Alg
	aead   bool
	cbc    bool
	icvLen int
	salt   [4]byte
	soft   *cryptodev.Key
}

// NewKey expands the key in C memory. See cryptodev.Engine.
func (e *Engine) NewKey(alg cryptodev.Alg, encKey, authKey []byte) (*cryptodev.Key, error) {
	if !e.Supports(alg) {
		return nil, cryptodev.ErrUnsupported
	}
	sk, err := soft.New().NewKey(alg, encKey, authKey) // checks the lengths
	if err != nil {
		return nil, fmt.Errorf("ipsecmb: %w", err)
	}
	info := alg.Info()
	ks := &keyState{alg: alg, aead: info.AEAD, cbc: !info.AEAD && info.KeyLen > 0, icvLen: info.ICVLen, soft: sk}
	kind := C.SMB_GCM
	hash := 0
	switch {
	case alg == cryptodev.ChaCha20Poly1305:
		kind = C.SMB_CHACHA
	case info.AEAD:
	case info.KeyLen > 0:
		kind = C.SMB_CBC_HMAC
	default:
		kind = C.SMB_NULL_HMAC
	}
	switch info.Hash {
	case cryptodev.HashSHA256:
		hash = C.IMB_AUTH_HMAC_SHA_256
	case cryptodev.HashSHA384:
		hash = C.IMB_AUTH_HMAC_SHA_384
	case cryptodev.HashSHA512:
		hash = C.IMB_AUTH_HMAC_SHA_512
	}
	if info.AEAD {
		copy(ks.salt[:], encKey[info.KeyLen:])
	}
	// Go memory passed for the length of the call: it holds no pointers.
	var kp, ap *C.uint8_t
	if info.KeyLen > 0 {
		kp = (*C.uint8_t)(unsafe.Pointer(&encKey[0]))
	}
	if len(authKey) > 0 {
		ap = (*C.uint8_t)(unsafe.Pointer(&authKey[0]))
	}
	e.mu.Lock()
	if e.keyMgr == nil {
		e.mu.Unlock()
		sk.Destroy()
		return nil, cryptodev.ErrClosed
	}
	ks.c = C.smb_key_new(e.keyMgr, C.int(kind), kp, C.int(info.KeyLen), ap, C.int(len(authKey)), C.int(hash), C.int(info.ICVLen))
	e.mu.Unlock()
	if ks.c == nil {
		sk.Destroy()
		return nil, errors.New("ipsecmb: out of memory for a key")
	}
	return cryptodev.NewKeyHandle(alg, Name, ks, ks.destroy), nil
}

// destroy zeroes and frees the C key and the Go one.
func (k *keyState) destroy() {
	C.smb_key_free(k.c)
	k.c = nil
	clear(k.salt[:])
	k.soft.Destroy()
}

// NewQueue opens a queue with a manager of its own. See cryptodev.Engine.
func (e *Engine) NewQueue() (cryptodev.Queue, error) {
	p, err := e.newProcessor()
	if err != nil {
		return nil, err
	}
	return cryptodev.NewSyncQueue(p, &e.closed), nil
}

// NewProcessor returns a Processor with a manager of its own (package
// sched runs one per worker). See cryptodev.ProcessorEngine.
func (e *Engine) NewProcessor() (cryptodev.Processor, error) { return e.newProcessor() }

var _ cryptodev.ProcessorEngine = (*Engine)(nil)

// cState is a processor's C memory: its manager and descriptor array. A
// cleanup frees it if the processor is dropped without Close.
type cState struct {
	mgr   *C.IMB_MGR
	descs *C.smb_op
	n     int // descriptors allocated
}

// setJobErrno sets the manager's error status as a job the library
// refused leaves it (for tests: no op Go hands to C makes a job fail).
func (p *processor) setJobErrno(v int) { p.c.mgr.imb_errno = C.int(v) }

func (c *cState) free() {
	if c.mgr != nil {
		C.smb_mgr_free(c.mgr)
		C.free(unsafe.Pointer(c.descs))
		c.mgr, c.descs, c.n = nil, nil, 0
	}
}

// processor runs batches through one manager.
type processor struct {
	c       *cState
	idx     []int32 // op index of each descriptor
	pins    packet.Pins
	scratch soft.Scratch
	ran     int // ops the library ran, for tests
}

func (e *Engine) newProcessor() (*processor, error) {
	if e.closed.Load() {
		return nil, cryptodev.ErrClosed
	}
	m, _, err := newMgr()
	if err != nil {
		return nil, err
	}
	p := &processor{c: &cState{mgr: m}}
	runtime.AddCleanup(p, (*cState).free, p.c)
	p.grow(64)
	return p, nil
}

// grow makes room for n descriptors.
func (p *processor) grow(n int) {
	if n <= p.c.n {
		return
	}
	d := C.realloc(unsafe.Pointer(p.c.descs), C.size_t(n)*C.size_t(unsafe.Sizeof(C.smb_op{})))
	if d == nil {
		panic("ipsecmb: out of memory for descriptors")
	}
	p.c.descs, p.c.n = (*C.smb_op)(d), n
	p.idx = make([]int32, n)
}

// Close frees the manager. It is idempotent.
func (p *processor) Close() { p.c.free() }

// addr returns b's address as C takes it (packet.Pins). b must not be
// empty.
func (p *processor) addr(b []byte) C.uintptr_t { return C.uintptr_t(p.pins.Addr(b)) }

// end returns the address just past b.
func end(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b)) }

func start(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Process runs ops: one cgo call for all that the library takes, Go's code
// for the rest. See cryptodev.Processor.
func (p *processor) Process(ops []cryptodev.Op) {
	if p.c.mgr == nil {
		for i := range ops {
			ops[i].Status = cryptodev.StatusAborted
		}
		return
	}
	p.grow(len(ops))
	descs := unsafe.Slice(p.c.descs, p.c.n)
	n := 0
	var lastKey *cryptodev.Key
	var lastKS *keyState
	for i := range ops {
		op := &ops[i]
		if op.Dir >= cryptodev.Sign {
			op.Status = cryptodev.StatusUnsupported
			continue
		}
		// A batch's ops mostly share a key (an SA's): look its state up
		// once.
		if op.Key != lastKey || lastKey == nil {
			lastKey, lastKS = op.Key, nil
			if op.Key != nil {
				lastKS, _ = op.Key.State().(*keyState)
			}
		}
		ks := lastKS
		if ks == nil || ks.c == nil {
			op.Status = cryptodev.StatusInvalid
			continue
		}
		if st := ks.check(op); st != cryptodev.StatusPending {
			op.Status = st
			continue
		}
		d := &descs[n]
		if !p.fill(d, op, ks) {
			p.soft(op, ks)
			continue
		}
		p.idx[n] = int32(i)
		n++
	}
	if n > 0 {
		C.smb_run(p.c.mgr, p.c.descs, C.int(n))
		p.ran += n
	}
	p.pins.Unpin()
	if n == len(ops) {
		// Every op went to C, in order: idx is the identity.
		for j := range ops {
			ops[j].Status = cryptodev.Status(descs[j].status)
		}
		return
	}
	for j := range n {
		ops[p.idx[j]].Status = cryptodev.Status(descs[j].status)
	}
}

// check validates an op's lengths as package soft does.
func (k *keyState) check(op *cryptodev.Op) cryptodev.Status {
	if len(op.Dst) != len(op.Src) || len(op.Tag) != k.icvLen {
		return cryptodev.StatusInvalid
	}
	switch {
	case k.aead:
		if len(op.IV) != 8 {
			return cryptodev.StatusInvalid
		}
	case k.cbc:
		if len(op.IV) != 16 || len(op.Src)%16 != 0 {
			return cryptodev.StatusInvalid
		}
	default:
		if len(op.IV) != 0 {
			return cryptodev.StatusInvalid
		}
	}
	return cryptodev.StatusPending
}

// fill describes op in d. It reports false if the library cannot take op
// in one job: the caller runs it on Go's code.
func (p *processor) fill(d *C.smb_op, op *cryptodev.Op, ks *keyState) bool {
	n := len(op.Src)
	enc := op.Dir == cryptodev.Encrypt
	if ks.aead {
		if len(op.AAD) > len(d.aad) {
			return false
		}
		// Fixed-size stores rather than copy's calls: check has made
		// IV 8 bytes, and ESP's AAD is 8 or 12.
		*(*[4]byte)(unsafe.Pointer(&d.iv[0])) = ks.salt
		*(*[8]byte)(unsafe.Pointer(&d.iv[4])) = [8]byte(op.IV)
		switch len(op.AAD) {
		case 8:
			*(*[8]byte)(unsafe.Pointer(&d.aad[0])) = [8]byte(op.AAD)
		case 12:
			*(*[12]byte)(unsafe.Pointer(&d.aad[0])) = [12]byte(op.AAD)
		default:
			copy(unsafe.Slice((*byte)(&d.aad[0]), len(d.aad)), op.AAD)
		}
		d.aad_len = C.uint8_t(len(op.AAD))
	} else {
		// ICV over AAD || IV || data, hashed from memory in one run:
		// ESP's layout, encrypted in place, no ESN bits after the data.
		if len(op.AuthTrailer) > 0 || len(op.AAD) == 0 || end(op.AAD) != start(op.IV) && len(op.IV) > 0 ||
			end(op.AAD)+uintptr(len(op.IV)) != start(op.Src) || enc && start(op.Dst) != start(op.Src) {
			return false
		}
		hl := len(op.AAD) + len(op.IV) + n
		hp := unsafe.Pointer(unsafe.SliceData(op.AAD))
		if !p.pins.InArena(hp, hl) {
			// Adjacent slices may be different objects: pin each (the
			// data below).
			p.addr(op.AAD)
			if len(op.IV) > 0 {
				p.addr(op.IV)
			}
		}
		d.hash = C.uintptr_t(uintptr(hp))
		d.hash_len = C.uint32_t(hl)
		if ks.cbc {
			copy(unsafe.Slice((*byte)(&d.iv[0]), 16), op.IV)
		}
	}
	d.key = C.uintptr_t(uintptr(unsafe.Pointer(ks.c)))
	d.len = C.uint32_t(n)
	if n > 0 {
		// Covers is Addr's inlined fast path: packet memory in the
		// arena of the op before.
		if u := start(op.Src); p.pins.Covers(u, uintptr(n)) {
			d.src = C.uintptr_t(u)
		} else {
			d.src = p.addr(op.Src)
		}
		d.dst = d.src
		if start(op.Dst) != start(op.Src) {
			d.dst = p.addr(op.Dst)
		}
	} else {
		// The library wants addresses even for no data.
		d.src = C.uintptr_t(uintptr(unsafe.Pointer(&d.tag_out[0])))
		d.dst = d.src
	}
	if enc {
		d.dir = 0
		if u := start(op.Tag); p.pins.Covers(u, uintptr(len(op.Tag))) {
			d.tag = C.uintptr_t(u)
		} else {
			d.tag = p.addr(op.Tag)
		}
	} else {
		d.dir = 1
		d.tag = 0
		if len(op.Tag) == 16 {
			*(*[16]byte)(unsafe.Pointer(&d.tag_in[0])) = [16]byte(op.Tag)
		} else {
			copy(unsafe.Slice((*byte)(&d.tag_in[0]), len(d.tag_in)), op.Tag)
		}
	}
	d.status = 0
	return true
}

// soft runs op on Go's code, through the key's soft twin.
func (p *processor) soft(op *cryptodev.Op, ks *keyState) {
	k := op.Key
	op.Key = ks.soft
	soft.Process(unsafe.Slice(op, 1), &p.scratch)
	op.Key = k
}
