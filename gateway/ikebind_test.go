package gateway

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
)

func bindTestConfig(t *testing.T, ike, local string) *config.Gateway {
	t.Helper()
	doc := ike + `[[connection]]
name = "b"
local_addrs = ["` + local + `"]
remote_addrs = ["192.0.2.2"]
  [connection.local]
  auth = "psk"
  id = "a.example"
  [connection.remote]
  auth = "psk"
  id = "b.example"
  [[connection.children]]
  name = "b-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.2.0.0/24"]
[[secret]]
type = "ike"
secret = "0x00112233445566778899aabbccddeeff"
`
	cfg, err := config.ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestIKEBindErrorField: when the IKE port cannot be bound, the error
// names the field to change at its line: the [ike] port when the port is
// taken, a connection's local_addrs when the address is not this host's
// (issue 16, defect 16; it said "1:1 ike.port" for both).
func TestIKEBindErrorField(t *testing.T) {
	taken, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.LocalAddr().(*net.UDPAddr).Port
	ikeSection := fmt.Sprintf("[ike]\nport = %d\n", port)
	for _, c := range []struct {
		name, ike, local, want string
	}{
		{"port taken", ikeSection, "127.0.0.1", "gw.toml:2:8: ike.port: IKE port"},
		{"address not here, port set", ikeSection, "192.0.2.77", "gw.toml:5:15: connection[1].local_addrs: IKE port"},
		{"address not here", "", "192.0.2.77", "gw.toml:3:15: connection[1].local_addrs: IKE port 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := bindTestConfig(t, c.ike, c.local)
			g := &Gateway{cfg: cfg, log: slog.New(slog.DiscardHandler), engines: map[string]cryptodev.Engine{"": soft.New()}}
			err := g.buildEndpoint(cfg)
			if err == nil {
				g.ike.ep.Close()
				g.ike.port500.Close()
				t.Fatal("bound")
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %q, want it to start %q", err, c.want)
			}
		})
	}
}
