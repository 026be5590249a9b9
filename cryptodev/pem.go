package cryptodev

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
)

// LooseKeyFile reports whether a private key file may be read or written
// by users other than its owner and group (any "other" permission bit),
// with its permission bits, for the caller to warn: sshd refuses such a
// key. A group bit alone is not loose (Debian's ssl-cert group reads keys
// in /etc/ssl/private, mode 0640). A file that cannot be stat'ed is not
// loose: ReadPrivateKey reports it.
func LooseKeyFile(file string) (fs.FileMode, bool) {
	fi, err := os.Stat(file)
	if err != nil {
		return 0, false
	}
	return fi.Mode().Perm(), fi.Mode().Perm()&0o007 != 0
}

// ReadPrivateKey parses the first private key of a PEM file (PKCS #8
// "PRIVATE KEY", PKCS #1 "RSA PRIVATE KEY" or SEC 1 "EC PRIVATE KEY"
// blocks; others are skipped) for AsymEngine.NewPrivateKey, and wipes the
// file's bytes and the key block it parsed. The caller should drop the
// returned key once the engine has its copy. Errors name the file.
func ReadPrivateKey(file string) (crypto.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cryptodev: private key: %w", err)
	}
	defer clear(data)
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf(`cryptodev: %s: no private key (want a PEM "PRIVATE KEY", "RSA PRIVATE KEY" or "EC PRIVATE KEY" block)`, file)
		}
		var k any
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			continue
		}
		clear(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("cryptodev: %s: %w", file, err)
		}
		return k, nil
	}
}
