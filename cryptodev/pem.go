package cryptodev

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

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
