//go:build ipsecmb && cgo

package ipsecmb

/*
#include <stdlib.h>
#include "smb.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sluicegw/sluice/cryptodev"
)

// SealLoop is the library's own limit on this machine, as sluice bench
// crypto's raw row is Go's: batches of AES-GCM seals in place over C
// memory laid out as the bench lays out its arena, sealed by a loop
// written in C through the same functions the engine calls, so
// that the engine can be measured against it. It is for one goroutine.
type SealLoop struct {
	mgr   *C.IMB_MGR
	key   *C.smb_key
	arena unsafe.Pointer
	slot  int
	size  int
	batch int
}

// NewSealLoop prepares batch seals of size bytes with a key of alg, an
// AES-GCM suite; key is the key material without the salt.
func NewSealLoop(alg cryptodev.Alg, key []byte, size, batch, slotLen int) (*SealLoop, error) {
	info := alg.Info()
	if !info.AEAD || alg == cryptodev.ChaCha20Poly1305 {
		return nil, fmt.Errorf("%w: the ipsecmb C loop seals AES-GCM only", cryptodev.ErrUnsupported)
	}
	if len(key) < info.KeyLen || size <= 0 || batch <= 0 || slotLen < size+56 {
		return nil, errors.New("ipsecmb: bad C loop shape")
	}
	m, _, err := newMgr()
	if err != nil {
		return nil, err
	}
	l := &SealLoop{mgr: m, slot: slotLen, size: size, batch: batch}
	l.key = C.smb_key_new(m, C.SMB_GCM, (*C.uint8_t)(unsafe.Pointer(&key[0])), C.int(info.KeyLen), nil, 0, 0, 16)
	l.arena = C.calloc(C.size_t(batch), C.size_t(slotLen))
	if l.key == nil || l.arena == nil {
		l.Close()
		return nil, errors.New("ipsecmb: out of memory")
	}
	return l, nil
}

// Run seals batches batches in C and returns the seconds C measured.
func (l *SealLoop) Run(batches int) float64 {
	return float64(C.smb_bench_gcm(l.mgr, l.key, (*C.uint8_t)(l.arena), C.int(l.slot), C.int(l.size), C.int(l.batch), C.long(batches)))
}

// Close frees the loop's C memory.
func (l *SealLoop) Close() {
	if l.key != nil {
		C.smb_key_free(l.key)
		l.key = nil
	}
	if l.arena != nil {
		C.free(l.arena)
		l.arena = nil
	}
	if l.mgr != nil {
		C.smb_mgr_free(l.mgr)
		l.mgr = nil
	}
}
