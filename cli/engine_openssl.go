//go:build openssl

package cli

// The libcrypto engine, in builds with the openssl tag (go build -tags
// openssl): it registers itself as "openssl".
import _ "github.com/sluicegw/sluice/cryptodev/openssl"
