package bench

// openssl speed, run beside sluice's own rows so that a table shows what
// the machine's OpenSSL does on the same algorithm, size and thread count.
//
// Two rows per symmetric AEAD run:
//
//	openssl-speed       openssl speed -evp ALG -bytes N: one
//	                    EVP_EncryptUpdate per buffer on one context (a
//	                    stream: no per-packet nonce, AAD or tag)
//	openssl-speed-aead  the same with -aead: init, AAD, update and final per
//	                    buffer, the TLS-like sequence that matches a
//	                    per-packet seal
//
// The rows are named apart from the engine "openssl" (package
// cryptodev/openssl, build tag openssl), which is libcrypto driven through
// sluice's engine API; these are the openssl binary on its own.
//
// Both run with -elapsed (wall-clock time, as sluice measures, not user CPU
// time) and -mr (machine-readable output, parsed here), and with -multi N
// when threads > 1. Signatures and agreements run openssl's own tests
// (rsa2048, ecdsap256, ed25519, ecdhx25519, ...), which time sign and verify.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
)

// Engine names of openssl speed rows.
const (
	OpenSSLSpeed     = "openssl-speed"
	OpenSSLSpeedAEAD = "openssl-speed-aead"
)

// openSSLCipher is the EVP name of a symmetric suite.
var openSSLCipher = map[cryptodev.Alg]string{
	cryptodev.AES128GCM16:      "aes-128-gcm",
	cryptodev.AES192GCM16:      "aes-192-gcm",
	cryptodev.AES256GCM16:      "aes-256-gcm",
	cryptodev.ChaCha20Poly1305: "chacha20-poly1305",
	cryptodev.AES128CBCSHA256:  "aes-128-cbc-hmac-sha256",
	cryptodev.AES256CBCSHA256:  "aes-256-cbc-hmac-sha256",
}

// openSSLAsym is openssl speed's test name of an asymmetric key type and
// the prefix of its machine-readable result line.
var openSSLAsym = map[cryptodev.Alg][2]string{
	cryptodev.RSA2048:   {"rsa2048", "+F2"},
	cryptodev.RSA3072:   {"rsa3072", "+F2"},
	cryptodev.RSA4096:   {"rsa4096", "+F2"},
	cryptodev.ECDSAP256: {"ecdsap256", "+F4"},
	cryptodev.ECDSAP384: {"ecdsap384", "+F4"},
	cryptodev.Ed25519:   {"ed25519", "+F6"},
	cryptodev.X25519:    {"ecdhx25519", "+F5"},
	cryptodev.ECDHP256:  {"ecdhp256", "+F5"},
}

// OpenSSLSpec is one openssl speed run.
type OpenSSLSpec struct {
	// Engine is OpenSSLSpeed or OpenSSLSpeedAEAD (symmetric AEAD suites only).
	Engine  string
	Alg     cryptodev.Alg
	Size    int // symmetric only
	Threads int
	// Duration is rounded up to whole seconds (openssl's -seconds).
	Duration time.Duration
}

// OpenSSLEngines lists the openssl rows that exist for alg: none, or
// OpenSSLSpeed, or OpenSSLSpeed and OpenSSLSpeedAEAD.
func OpenSSLEngines(alg cryptodev.Alg) []string {
	if _, ok := openSSLAsym[alg]; ok {
		return []string{OpenSSLSpeed}
	}
	if _, ok := openSSLCipher[alg]; !ok {
		return nil
	}
	if alg.Info().AEAD {
		return []string{OpenSSLSpeed, OpenSSLSpeedAEAD}
	}
	return []string{OpenSSLSpeed}
}

// Args returns openssl's arguments for s, or an error if openssl speed has
// no counterpart.
func (s OpenSSLSpec) Args() ([]string, error) {
	secs := max(1, int((s.Duration+time.Second-1)/time.Second))
	args := []string{"speed", "-mr", "-elapsed", "-seconds", strconv.Itoa(secs)}
	if s.Threads > 1 {
		args = append(args, "-multi", strconv.Itoa(s.Threads))
	}
	if a, ok := openSSLAsym[s.Alg]; ok {
		if s.Engine != OpenSSLSpeed {
			return nil, fmt.Errorf("bench: %s has no %s row", s.Alg, s.Engine)
		}
		return append(args, a[0]), nil
	}
	c, ok := openSSLCipher[s.Alg]
	if !ok {
		return nil, fmt.Errorf("bench: openssl speed has no counterpart for %v", s.Alg)
	}
	if s.Size <= 0 {
		return nil, fmt.Errorf("bench: size %d: want > 0", s.Size)
	}
	switch s.Engine {
	case OpenSSLSpeed:
	case OpenSSLSpeedAEAD:
		if !s.Alg.Info().AEAD {
			return nil, fmt.Errorf("bench: %v is not an AEAD: no -aead run", s.Alg)
		}
		args = append(args, "-aead")
	default:
		return nil, fmt.Errorf("bench: unknown openssl row %q", s.Engine)
	}
	return append(args, "-evp", c, "-bytes", strconv.Itoa(s.Size)), nil
}

// RunOpenSSL runs openssl (the binary at path) for s and returns its row.
func RunOpenSSL(ctx context.Context, path string, s OpenSSLSpec) (CryptoResult, error) {
	res := CryptoResult{Engine: s.Engine, Alg: s.Alg.String(), Op: opName(s.Alg), Threads: s.Threads, Batch: 1}
	if !s.Alg.IsAsymmetric() {
		res.Size = s.Size
	}
	args, err := s.Args()
	if err != nil {
		return res, err
	}
	res.Command = "openssl " + strings.Join(args, " ")
	// Signature tests time sign and verify, each for -seconds.
	ctx, cancel := context.WithTimeout(ctx, 3*s.Duration+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("bench: %s: %v: %s", res.Command, err, strings.TrimSpace(stderr.String()))
	}
	ops, err := ParseOpenSSL(out, s.Alg, s.Size)
	if err != nil {
		return res, fmt.Errorf("bench: %s: %w", res.Command, err)
	}
	res.OpsPerSec = ops
	if res.Size > 0 {
		res.BytesPerSec = ops * float64(res.Size)
	}
	return res, nil
}

// ParseOpenSSL reads the ops per second of alg from the machine-readable
// output (-mr) of openssl speed: the total line "+F:..." of a cipher test
// (bytes per second for each size; size is the one asked), or "+F2" (RSA),
// "+F4" (ECDSA), "+F5" (ECDH), "+F6" (EdDSA) of a public-key test. Lines a
// -multi parent echoes from its children ("Got: +F...") are not totals and
// are skipped.
func ParseOpenSSL(out []byte, alg cryptodev.Alg, size int) (float64, error) {
	prefix, field := "+F", 3
	if a, ok := openSSLAsym[alg]; ok {
		prefix = a[1]
		if prefix == "+F6" {
			field = 4 // +F6:index:bits:name:sign/s:verify/s
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if f[0] != prefix || len(f) <= field {
			continue
		}
		v, err := strconv.ParseFloat(f[field], 64)
		if err != nil {
			return 0, fmt.Errorf("bad result line %q", sc.Text())
		}
		if prefix == "+F" {
			if size <= 0 {
				return 0, fmt.Errorf("cipher result without a size")
			}
			v /= float64(size) // bytes per second to ops per second
		}
		return v, nil
	}
	return 0, fmt.Errorf("no %s result line in its output", prefix)
}
