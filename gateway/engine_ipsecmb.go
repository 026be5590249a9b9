//go:build ipsecmb

package gateway

// The intel-ipsec-mb engine, linked in by the build tag ipsecmb (cgo).
import _ "github.com/sluicegw/sluice/cryptodev/ipsecmb"
