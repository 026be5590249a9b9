//go:build openssl

package tls

import _ "github.com/sluicegw/sluice/cryptodev/openssl"

// With the cgo engine built, every end-to-end test runs on it too.
func init() { testEngines = append(testEngines, "openssl") }
