package gateway

import (
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
)

// mtuTestConnection is an IKE connection over IPv6 whose child may be
// negotiated with AES-GCM or with AES-CBC-128 and HMAC-SHA-512-256.
const mtuTestConnection = `
[[connection]]
name = "c"
local_addrs = ["2001:db8::1"]
remote_addrs = ["2001:db8::2"]
  [connection.local]
  auth = "psk"
  id = "a.example"
  [connection.remote]
  auth = "psk"
  id = "b.example"
  [[connection.children]]
  name = "k"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.3.0.0/24"]
  esp_proposals = "aes256gcm16,aes128-sha256-sha512"

[[secret]]
type = "ike"
ids = ["a.example", "b.example"]
secret = "0x000102030405060708090a0b0c0d0e0f"
`

// TestTunnelMTU (issue 16, defect 3): the TUN device's MTU is the smallest
// its tunnels take, an IKE child's the worst its proposals may be
// negotiated with; a static tunnel's own MTU is its SA's.
func TestTunnelMTU(t *testing.T) {
	parse := func(text string) *config.Gateway {
		t.Helper()
		cfg, err := config.ParseGateway("gw.toml", []byte(strings.Replace(text, "STATE", t.TempDir(), 1)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	static := parse(stateTestConfig)
	if got := tunnelMTU(static); got != 1438 {
		t.Errorf("TUN MTU with one aes128gcm16 tunnel in UDP over IPv4: %d, want 1438", got)
	}
	if got := staticTunnelMTU(static, &static.Tunnels[0]); got != 1438 {
		t.Errorf("the tunnel's MTU: %d, want 1438", got)
	}
	both := parse(stateTestConfig + mtuTestConnection)
	if got := tunnelMTU(both); got != 1390 {
		t.Errorf("TUN MTU with a child that may get aes128-sha512 in UDP over IPv6: %d, want 1390", got)
	}
	if got := staticTunnelMTU(both, &both.Tunnels[0]); got != 1438 {
		t.Errorf("the static tunnel's MTU beside the child: %d, want 1438", got)
	}
	set := parse(strings.Replace(stateTestConfig, "[tun]\n", "[tun]\nmtu = 1300\n", 1))
	if got := tunnelMTU(set); got != 1300 {
		t.Errorf("TUN MTU configured 1300: %d", got)
	}
}
