package gateway

// Outbound sequence-number reservations. sluice's SAs are keyed by
// configuration, so a restarted gateway meets the same keys again; were it
// to start counting from the file's seq, it would reuse AES-GCM and
// ChaCha20-Poly1305 nonces (the IV is the sequence number). Before an
// outbound SA uses numbers past its reservation it records a new upper bound
// here, durably; at start the SA begins above the recorded bound
// (DESIGN.md decision 7).

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/config"
)

// seqStatePath names the reservation file of an outbound SA: its SPI and a
// digest of its key material, so a new key starts afresh.
func seqStatePath(dir string, sa *config.SA) string {
	h := sha256.New()
	var b [5]byte
	binary.BigEndian.PutUint32(b[:], sa.SPI)
	b[4] = byte(sa.Alg)
	h.Write(b[:])
	h.Write(sa.EncKey)
	h.Write(sa.AuthKey)
	return filepath.Join(dir, fmt.Sprintf("out-%08x-%x.seq", sa.SPI, h.Sum(nil)[:8]))
}

// loadReserved reads the recorded bound; a missing file is 0.
func loadReserved(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("gateway: %s: corrupt sequence reservation: %w", path, err)
	}
	return v, nil
}

// reserver returns the SeqReserve function of an SA: it writes the bound to
// a temporary file, syncs it and renames it into place.
func reserver(path string) func(uint64) error {
	return func(upTo uint64) error {
		tmp := path + ".tmp"
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteString(strconv.FormatUint(upTo, 10) + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err == nil {
			if d, derr := os.Open(filepath.Dir(path)); derr == nil {
				err = d.Sync()
				d.Close()
			}
		}
		return err
	}
}
