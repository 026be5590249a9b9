package esp

import (
	"io"
	"time"
)

// SetTestIV makes every packet sa seals carry iv, so that known-answer tests
// can reproduce published packets (their IVs are fixed, often equal to the
// sequence number). It is the only way to pin an IV, and it exists only in
// the package's tests: it breaks IV uniqueness.
func SetTestIV(sa *SA, iv []byte) { sa.testIV = append([]byte(nil), iv...) }

// SetRandom makes r the source of AEAD IV epochs until restore is called.
func SetRandom(r io.Reader) (restore func()) {
	old := randReader
	randReader = r
	return func() { randReader = old }
}

// SetIVCount sets how many packets sa has sealed under its current IV
// epoch, so a test can reach the 2^32 rollover.
func SetIVCount(sa *SA, n uint64) { sa.ivCount = n }

// SetLeaseClock makes now the leases' clock until restore is called.
func SetLeaseClock(now func() time.Time) (restore func()) {
	old := leaseNow
	leaseNow = now
	return func() { leaseNow = old }
}

// IPv4ChecksumValid is Parse's check of an outer IPv4 header's checksum.
var IPv4ChecksumValid = ipv4ChecksumValid
