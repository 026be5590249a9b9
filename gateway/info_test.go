package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/sad"
)

// TestAddSAChecksLikeTheFile: an outbound SA whose src is the peer is
// refused by the control socket's sa add with the message the file gives
// for the same SA (only the positions differ), and installs nothing; the
// same SA with the right src is accepted. Before, sa add accepted it and the
// tunnel blackholed.
func TestAddSAChecksLikeTheFile(t *testing.T) {
	dir := t.TempDir()
	badSrc := strings.Replace(stateTestConfig, "name = \"o\"\nspi = 0x1001\n", "name = \"o\"\nspi = 0x1001\nsrc = \"192.0.2.2\"\n", 1)
	_, fileErr := config.ParseGateway("gw.toml", []byte(strings.Replace(badSrc, "STATE", dir, 1)))
	var fe config.Errors
	if !errors.As(fileErr, &fe) || len(fe) != 1 {
		t.Fatalf("the file with src = peer: %v", fileErr)
	}

	g, _ := testGateway(t, dir)
	g.store = sad.NewStore(nil)
	defer g.store.Close()
	if err := g.addTunnel(&g.cfg.Tunnels[0], 0); err != nil {
		t.Fatal(err)
	}
	sas, err := config.ParseSAs("sa.add", []byte(`[[sa]]
name = "o2"
spi = 0x1003
src = "192.0.2.2"
encap = "udp"
esp = "aes128gcm16"
enc_key = "303132333435363738393a3b3c3d3e3f40414243"
`))
	if err != nil {
		t.Fatal(err)
	}
	err = g.AddSA("t", "out", &sas[0])
	var ce config.Errors
	if !errors.As(err, &ce) || len(ce) != 1 {
		t.Fatalf("sa add with src = peer: %v", err)
	}
	// The same message, but for where the tunnel is named.
	where := regexp.MustCompile(` \(tunnel\[1\]\.out, [^)]*\)`)
	if fm, cm := where.ReplaceAllString(fe[0].Msg, ""), where.ReplaceAllString(ce[0].Msg, ""); fm != cm || !strings.Contains(cm, "src 192.0.2.2 is not the local address 192.0.2.1") {
		t.Fatalf("messages differ:\n file: %s\n sa add: %s", fe[0].Msg, ce[0].Msg)
	}
	if fe[0].Field != "sa[1].src" || ce[0].Field != "sa.src" {
		t.Errorf("fields %q and %q", fe[0].Field, ce[0].Field)
	}
	t.Logf("file: %v\nsa add: %v", fileErr, err)
	if out := g.store.Load().Tunnel("t").Out(); out.Name != "o" {
		t.Fatalf("the refused SA was installed: %s", out.Name)
	}
	sas[0].Src = g.cfg.Tunnels[0].Local
	if err := g.AddSA("t", "out", &sas[0]); err != nil {
		t.Fatalf("the same SA from the local address: %v", err)
	}
	if out := g.store.Load().Tunnel("t").Out(); out.Name != "o2" {
		t.Fatalf("outbound SA %s after sa add", out.Name)
	}
}

// TestStatsNamesConfigFile: the stats say which file the gateway runs, as
// an absolute path, so that sluice -c FILE can tell another gateway's
// socket from its own.
func TestStatsNamesConfigFile(t *testing.T) {
	g, _ := testGateway(t, t.TempDir())
	g.store = sad.NewStore(nil)
	defer g.store.Close()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.Stats().Config, filepath.Join(wd, "gw.toml"); got != want {
		t.Errorf("Stats().Config = %q, want %q", got, want)
	}
}
