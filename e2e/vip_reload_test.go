package e2e_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
)

// TestStrongSwanRoadWarriorPoolReload: a reload that changes only a
// [[pool]] is applied without touching the SAs that stand (before, reload
// compared only connections, and the running pool went on as it was): the
// road warrior with 10.3.0.1 keeps its IKE and Child SAs and its traffic,
// and a second one, once the pool holds only 10.3.0.1, gets no address
// (INTERNAL_ADDRESS_FAILURE) instead of 10.3.0.2 from the old pool.
func TestStrongSwanRoadWarriorPoolReload(t *testing.T) {
	b := newRABed(t, raSetup{vips: "0.0.0.0", remoteTS: "10.2.0.0/24", rws: 2,
		conn: config.FileConnection{Pools: []string{"rw"},
			Children: []config.FileChild{{LocalTS: []string{"10.2.0.0/24"}, RemoteTS: []string{"10.3.0.0/24"}}}},
		tun:   []string{"10.2.0.1/24"},
		pools: []config.FilePool{{Name: "rw", Addrs: "10.3.0.0/24"}},
	})
	ctx := b.gw.tb.ctx
	if out, err := b.ch.Swanctl(ctx, "--initiate", "--child", "net", "--ike", "rw1", "--timeout", "20"); err != nil {
		t.Fatalf("road warrior 1 initiating: %v\n%s", err, out)
	}
	before := b.gw.waitChild(ctx, "rw", 20*time.Second, nil)
	dst := netip.MustParseAddr("10.2.0.1")
	waitPing(t, ctx, b.ss, dst)

	text, err := os.ReadFile(b.gw.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(text), `addrs = '10.3.0.0/24'`, `addrs = '10.3.0.1-10.3.0.1'`, 1)
	if changed == string(text) {
		t.Fatalf("no pool to change in\n%s", text)
	}
	b.gw.writeConfigText(changed)
	out, err := b.gw.cli("reload")
	if err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	t.Logf("reload:\n%s", out)
	after := b.gw.waitChild(ctx, "rw", time.Second, nil)
	if after.InSPI != before.InSPI || after.OutSPI != before.OutSPI {
		t.Fatalf("the pool reload replaced the Child SA: %x/%x -> %x/%x", before.InSPI, before.OutSPI, after.InSPI, after.OutSPI)
	}
	mustPing(t, ctx, "road warrior 1 after the pool reload", b.ss, dst, 10, 10*time.Millisecond)

	out, err = b.ch.Swanctl(ctx, "--initiate", "--child", "net", "--ike", "rw2", "--timeout", "20")
	sas, _ := b.ch.Swanctl(ctx, "--list-sas")
	if strings.Contains(sas, "[10.3.0.2]") {
		t.Fatalf("road warrior 2 got 10.3.0.2 from the pool as it was before the reload:\n%s", sas)
	}
	if err == nil {
		t.Fatalf("road warrior 2 initiated with the pool exhausted:\n%s\n%s", out, sas)
	}
	mustPing(t, ctx, "road warrior 1 after road warrior 2 was refused", b.ss, dst, 10, 10*time.Millisecond)
}
