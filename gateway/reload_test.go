package gateway

import (
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
)

// A refused reload names the tables as the file writes them: [tun], not
// the [[tun]] that formatting a list of names with %v made of it.
func TestFixedPartsEqualNamesTables(t *testing.T) {
	a := &config.Gateway{File: "gw.toml", TUN: config.TUN{Name: "sluice0", MTU: 1400}}
	b := *a
	b.TUN.MTU = 1300
	err := fixedPartsEqual(a, &b)
	want := "gateway: gw.toml: changing [tun] needs a restart; the running configuration stays"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	b.Workers = a.Workers + 1
	b.UDP = &config.UDP{}
	err = fixedPartsEqual(a, &b)
	if err == nil || !strings.Contains(err.Error(), "changing gateway.workers, [tun], [udp] needs a restart") {
		t.Fatalf("got %v", err)
	}
	if err := fixedPartsEqual(a, a); err != nil {
		t.Fatalf("same configuration refused: %v", err)
	}
}
