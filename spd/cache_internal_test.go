package spd

import (
	"testing"
	"unsafe"
)

func TestCacheSetSize(t *testing.T) {
	if n := unsafe.Sizeof(cacheSet{}); n != 128 {
		t.Errorf("a cache set takes %d bytes, want 128 (two cache lines)", n)
	}
}
