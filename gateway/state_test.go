package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
)

func TestSeqState(t *testing.T) {
	dir := t.TempDir()
	sa := &config.SA{SPI: 0x1001, Alg: cryptodev.AES128GCM16, EncKey: make([]byte, 20)}
	p := seqStatePath(dir, sa)
	other := *sa
	other.EncKey = append([]byte{1}, sa.EncKey[1:]...)
	if seqStatePath(dir, &other) == p {
		t.Fatal("a new key must get a new reservation file")
	}
	if w, err := loadReserved(p); err != nil || w != 0 {
		t.Fatalf("missing file: %d, %v", w, err)
	}
	if err := reserver(p)(1 << 20); err != nil {
		t.Fatal(err)
	}
	if w, err := loadReserved(p); err != nil || w != 1<<20 {
		t.Fatalf("reservation read back as %d, %v", w, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := loadReserved(p); err == nil {
		t.Fatal("a corrupt reservation must be an error, not 0")
	}
	if err := reserver(filepath.Join(dir, "missing", "x.seq"))(5); err == nil {
		t.Fatal("an unwritable reservation must fail")
	}
}
