package control

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file that does not load is refused before the gateway is touched (nil
// here), with the position of each error.
func TestReloadFileRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.toml", "[gateway]\nworkers = \"many\"\n")
	engine := write("engine.toml", "[gateway]\nengine = \"quantum\"\n"+minimalTunnel)
	tests := []struct{ file, want string }{
		{"", "control: reload: the running configuration did not come from a file"},
		{filepath.Join(dir, "missing.toml"), "no such file or directory"},
		{bad, bad + ":2:11: gateway.workers: "},
		{engine, engine + ":2:10: gateway.engine: engine \"quantum\" is not registered"},
	}
	for _, tt := range tests {
		_, err := reloadFile(nil, tt.file)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("reload %q: %v, want %q", tt.file, err, tt.want)
		}
	}
}

const minimalTunnel = `
[[tunnel]]
name = "t"
local = "192.0.2.1"
peer = "192.0.2.2"
remote = ["10.2.0.0/24"]
out = "o"
in = ["i"]

[[sa]]
name = "o"
spi = 0x1001
encap = "udp"
esp = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "i"
spi = 0x1002
encap = "udp"
esp = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"
`
