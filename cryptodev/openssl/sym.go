//go:build openssl

package openssl

/*
#include "ossl.h"
*/
import "C"

import (
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/sluicegw/sluice/cryptodev"
)

// symKey is the engine's expanded symmetric key: a C object holding the
// key material and the libcrypto contexts made from it (see ossl.c).
type symKey struct {
	alg    cryptodev.Alg
	icvLen int
	ivLen  int            // 8 for AEAD suites, 16 for CBC, 0 for NULL
	cbc    bool           // payloads must be whole AES blocks
	c      unsafe.Pointer // *C.struct_sl_symkey; nil once destroyed (atomic)
}

// suiteOf is the C suite number of a symmetric suite.
func suiteOf(alg cryptodev.Alg) C.int {
	switch alg {
	case cryptodev.AES128GCM16:
		return C.SL_AES128GCM
	case cryptodev.AES192GCM16:
		return C.SL_AES192GCM
	case cryptodev.AES256GCM16:
		return C.SL_AES256GCM
	case cryptodev.ChaCha20Poly1305:
		return C.SL_CHACHAPOLY
	}
	switch alg.Info().KeyLen {
	case 16:
		return C.SL_AES128CBC
	case 32:
		return C.SL_AES256CBC
	}
	return C.SL_NULLCIPHER
}

func hashOf(h cryptodev.Hash) C.int {
	switch h {
	case cryptodev.HashSHA256:
		return C.SL_SHA256
	case cryptodev.HashSHA384:
		return C.SL_SHA384
	case cryptodev.HashSHA512:
		return C.SL_SHA512
	}
	return 0
}

// NewKey expands a symmetric key into libcrypto contexts. See
// cryptodev.Engine. The C object keeps its own copy of the key material;
// Destroy frees the contexts (libcrypto clears their key schedules) and
// overwrites the copy.
func (e *Engine) NewKey(alg cryptodev.Alg, encKey, authKey []byte) (*cryptodev.Key, error) {
	if !alg.Valid() || alg.IsAsymmetric() {
		return nil, fmt.Errorf("%w: %v is not an ESP suite (asymmetric keys come from NewPrivateKey)", cryptodev.ErrUnsupported, alg)
	}
	info := alg.Info()
	if len(encKey) != alg.EncKeyLen() {
		return nil, fmt.Errorf("openssl: %s takes %d bytes of encryption key material, got %d", alg, alg.EncKeyLen(), len(encKey))
	}
	if len(authKey) != info.AuthKeyLen {
		return nil, fmt.Errorf("openssl: %s takes %d bytes of authentication key, got %d", alg, info.AuthKeyLen, len(authKey))
	}
	c := C.sl_symkey_new(suiteOf(alg), bytesPtr(encKey), C.size_t(len(encKey)),
		hashOf(info.Hash), bytesPtr(authKey), C.size_t(len(authKey)), C.size_t(info.ICVLen))
	if c == nil {
		return nil, fmt.Errorf("openssl: libcrypto refused a %s key", alg)
	}
	k := &symKey{alg: alg, icvLen: info.ICVLen, ivLen: info.IVLen, cbc: !info.AEAD && info.KeyLen > 0}
	k.c = unsafe.Pointer(c)
	return cryptodev.NewKeyHandle(alg, Name, k, k.destroy), nil
}

// destroy frees the C key. The caller (Key.Destroy) guarantees that no op
// in flight uses it.
func (k *symKey) destroy() {
	if c := atomic.SwapPointer(&k.c, nil); c != nil {
		C.sl_symkey_free((*C.struct_sl_symkey)(c))
	}
}

// bytesPtr is b's first byte for C, or nil for an empty b.
func bytesPtr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

// addr is the address of b's first byte for C, or 0 for an empty b
// (packet.Pins: pinned for the call unless b is in a pinned arena).
func (q *processor) addr(b []byte) C.uintptr_t { return C.uintptr_t(q.pins.Addr(b)) }

// addSym checks a symmetric op and appends its descriptor, returning
// StatusPending; or returns the status that ends the op without running it.
// The lengths checked are those of soft's, so both engines refuse the same
// ops.
func (q *processor) addSym(op *cryptodev.Op) cryptodev.Status {
	if op.Key == nil || op.Dir > cryptodev.Decrypt {
		return cryptodev.StatusInvalid
	}
	k, ok := op.Key.State().(*symKey)
	if !ok || k == nil {
		return cryptodev.StatusInvalid
	}
	c := atomic.LoadPointer(&k.c)
	n := len(op.Src)
	switch {
	case c == nil,
		len(op.Dst) != n, len(op.Tag) != k.icvLen, len(op.IV) != k.ivLen,
		k.cbc && n%16 != 0,
		n > math.MaxInt32, len(op.AAD) > math.MaxInt32, len(op.AuthTrailer) > math.MaxInt32:
		return cryptodev.StatusInvalid
	}
	q.descs = append(q.descs, C.sl_op{
		key:        C.uintptr_t(uintptr(c)),
		src:        q.addr(op.Src),
		dst:        q.addr(op.Dst),
		iv:         q.addr(op.IV),
		aad:        q.addr(op.AAD),
		trailer:    q.addr(op.AuthTrailer),
		tag:        q.addr(op.Tag),
		len:        C.uint32_t(n),
		aadlen:     C.uint32_t(len(op.AAD)),
		trailerlen: C.uint32_t(len(op.AuthTrailer)),
		dir:        C.uint8_t(op.Dir),
	})
	return cryptodev.StatusPending
}

// runSym runs the descriptors addSym collected in one cgo call and copies
// their statuses back to ops.
//
// The descriptors carry the addresses of the ops' buffers as integers, so
// that the call passes one pointer (to the descriptor array, which holds no
// Go pointers) and cgo's check does not walk every op. The buffers are
// pinned for the call (packet.Pins): packet memory is, in its pool's
// arenas, at no cost per op; anything else is pinned here (70-90 ns per
// buffer) and unpinned when C returns. C keeps no address after the call.
func (q *processor) runSym(ops []cryptodev.Op) {
	if len(q.descs) == 0 {
		return
	}
	C.sl_sym_run(&q.descs[0], C.int(len(q.descs)))
	q.pins.Unpin()
	for j, i := range q.idx {
		ops[i].Status = cryptodev.Status(q.descs[j].status)
	}
	// Drop the addresses: the descriptors must not outlive the batch.
	clear(q.descs)
}

// holdSlots marks every context slot of a symmetric key taken (or free
// again), so that a test sees ops run on temporary contexts, as they do
// when more goroutines than a key has slots use it at once.
func holdSlots(k *cryptodev.Key, hold bool) {
	s := k.State().(*symKey)
	busy := C.int(0)
	if hold {
		busy = 1
	}
	C.sl_symkey_hold((*C.struct_sl_symkey)(atomic.LoadPointer(&s.c)), busy)
}
