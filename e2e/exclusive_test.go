package e2e_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// TestSecondGatewayRefused starts a second `sluice run` in gateway A's
// namespace, with a tunnel, TUN device, control socket and state
// directory of its own but A's [udp] listen (0.0.0.0:4500), while A
// carries a ping to B.
// Like a second charon or wireguard-go, it must stop with exit status 2
// and "address already in use", and not join A's SO_REUSEPORT group (where the kernel would hand it a share
// of A's flows); A loses nothing.
func TestSecondGatewayRefused(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	cfgs[0].UDP = netip.MustParseAddrPort("0.0.0.0:4500")
	tb := startPair(t, wan4, cfgs)
	a := tb.sites[0]
	ctx := tb.ctx
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	// A gateway of its own: another TUN device, subnet and tunnel (to a
	// site C), another control socket and state directory; only [udp] is
	// A's.
	wanC := netip.MustParseAddr("192.0.2.3")
	second := &gwConfig{
		StateDir: filepath.Join(tb.dir, "state-a2"),
		TUN:      []netip.Prefix{netip.MustParsePrefix("10.9.0.1/24")},
		UDP:      cfgs[0].UDP,
		Tunnels: []tunnelConfig{{Name: "to-c", Local: a.wan, Peer: wanC, Encap: "udp",
			Remote: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/24")}, Out: "a-to-c", In: []string{"c-to-a"}}},
		SAs: []saConfig{
			newSA(t, "a-to-c", 0x3001, a.wan, wanC, "udp", "aes128gcm16"),
			newSA(t, "c-to-a", 0x3002, wanC, a.wan, "udp", "aes128gcm16"),
		},
	}
	cfgPath := filepath.Join(tb.dir, "gateway-a2.toml")
	second.TUNName = "sluice9"
	text := second.render()
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	const count, interval = 300, 10 * time.Millisecond
	type pinged struct {
		r   pingResult
		err error
	}
	pingc := make(chan pinged, 1)
	go func() {
		r, err := ping(ctx, a.ns, inner4[1].Addr(), count, interval)
		pingc <- pinged{r, err}
	}()
	// It exits by itself, or is killed when runCtx ends.
	runCtx, cancel := context.WithTimeout(ctx, upWait)
	defer cancel()
	outb, err := a.ns.Command(runCtx, sluiceBin, "run", "-c", cfgPath, "--socket", filepath.Join(tb.dir, "a2.sock")).CombinedOutput()
	out := string(outb)
	if runCtx.Err() != nil {
		t.Fatalf("a second gateway on A's port was still running after %v:\n%s", upWait, lab.Tail(out, 20))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(out, "address already in use") || strings.Contains(out, "gateway up") {
		t.Fatalf("second gateway: %v, want exit status 2 and \"address already in use\":\n%s", err, lab.Tail(out, 20))
	}
	t.Logf("second gateway: %s", lab.Tail(out, 1))
	r := <-pingc
	if r.err != nil {
		t.Fatal(r.err)
	}
	measuref(t, "A->B while a second gateway tried A's port: ping -c %d -i %v: %v", count, interval, r.r)
	if r.r.Received != count {
		t.Errorf("A->B lost %d of %d pings while a second gateway tried its port", count-r.r.Received, count)
	}
	// A goes on as before.
	mustPing(t, ctx, "A->B after the second gateway exited", a.ns, inner4[1].Addr(), 50, interval)
	if ts := a.tunnels(); len(ts) != 1 {
		t.Fatalf("gateway A after the second one: %+v", ts)
	}
}
