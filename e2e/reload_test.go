package e2e_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestReloadRefusesInvalidConfig writes broken configurations over gateway
// A's file and asks it to reload them, by `sluice reload` and by SIGHUP,
// while a UDP stream runs A -> B. Each must be refused with the file and
// line of the mistake (or, for a change that needs a restart, a message
// that says so), and the running configuration must go on carrying
// traffic: the daemon stays up, its tunnels and SAs stay as they were, and
// the stream loses nothing. A valid file afterwards reloads.
func TestReloadRefusesInvalidConfig(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	valid := cfgs[0].render()

	// lineOf is the 1-based line of the first line of text that contains
	// s.
	lineOf := func(text, s string) int {
		for i, l := range strings.Split(text, "\n") {
			if strings.Contains(l, s) {
				return i + 1
			}
		}
		t.Fatalf("%q not in the configuration", s)
		return 0
	}
	type broken struct {
		name string
		text string
		want string // in the error
	}
	var cases []broken
	{
		text := valid + "this is not TOML\n"
		cases = append(cases, broken{"syntax error", text, fmt.Sprintf("%s:%d:", a.cfgPath, lineOf(text, "this is not TOML"))})
	}
	// brokenBy is A's configuration changed by mod.
	brokenBy := func(mod func(c *gwConfig)) string {
		c := *cfgs[0]
		c.TUN = slices.Clone(c.TUN)
		c.Tunnels = slices.Clone(c.Tunnels)
		c.SAs = slices.Clone(c.SAs)
		mod(&c)
		return c.render()
	}
	{
		text := brokenBy(func(c *gwConfig) { c.Tunnels[0].Out = "no-such-sa" })
		cases = append(cases, broken{"unknown SA", text, fmt.Sprintf("%s:%d:", a.cfgPath, lineOf(text, "no-such-sa"))})
	}
	{
		text := brokenBy(func(c *gwConfig) { c.SAs[0].SPI = 0x10 })
		cases = append(cases, broken{"reserved SPI", text, fmt.Sprintf("%s:%d:", a.cfgPath, lineOf(text, "spi = 16"))})
	}
	{
		text := brokenBy(func(c *gwConfig) { c.SAs[0].Alg = "aes128gcm12" })
		cases = append(cases, broken{"unknown algorithm", text, fmt.Sprintf("%s:%d:", a.cfgPath, lineOf(text, "aes128gcm12"))})
	}
	{
		text := brokenBy(func(c *gwConfig) { c.TUN[0] = netip.MustParsePrefix("10.1.0.9/24") })
		cases = append(cases, broken{"needs a restart", text, "needs a restart"})
	}

	tunnelsBefore, sasBefore := a.tunnels(), a.sas()

	// The stream, for the whole time.
	aTx, err := a.ns.ListenUDP(netip.AddrPortFrom(inner4[0].Addr(), 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer aTx.Close()
	bRx, err := b.ns.ListenUDP(netip.AddrPortFrom(inner4[1].Addr(), 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer bRx.Close()
	waitPing(t, ctx, a.ns, inner4[1].Addr())
	type result struct {
		r   lab.FloodResult
		err error
	}
	done := make(chan result, 1)
	floodStart := time.Now()
	const floodFor = 4 * time.Second * slowdown
	go func() {
		r, err := lab.Flood(ctx, aTx, netip.AddrPortFrom(inner4[1].Addr(), 6001), bRx,
			lab.FloodOptions{Size: 1000, Duration: floodFor, Window: 32, Stall: 2 * time.Second})
		done <- result{r, err}
	}()

	logOffset := 0
	for _, c := range cases {
		a.writeConfigText(c.text)
		// By the control socket.
		err := a.reload()
		if err == nil {
			t.Errorf("%s: sluice reload accepted the broken file", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: sluice reload: %v\nwant the error to name %q", c.name, err, c.want)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
		// By SIGHUP: the daemon stays up and logs the refusal.
		if err := syscall.Kill(a.proc.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		err = lab.WaitFor(ctx, "gateway A to log the refused SIGHUP reload", 5*time.Second, 20*time.Millisecond, func() (bool, error) {
			if done, err := a.proc.Exited(); done {
				return false, fmt.Errorf("%w: gateway A exited after SIGHUP: %v", lab.ErrStop, err)
			}
			data, err := os.ReadFile(a.logPath)
			if err != nil {
				return false, err
			}
			if i := strings.Index(string(data[logOffset:]), "SIGHUP"); i >= 0 {
				rest := string(data[logOffset+i:])
				if j := strings.Index(rest, "reload refused"); j >= 0 {
					line := rest[j:]
					if k := strings.IndexByte(line, '\n'); k >= 0 {
						logOffset += i + j + k
						line = line[:k]
					}
					if !strings.Contains(line, c.want) {
						return false, fmt.Errorf("%w: the log says %q, want it to name %q", lab.ErrStop, line, c.want)
					}
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if ts := a.tunnels(); !reflect.DeepEqual(ts, tunnelsBefore) {
			t.Errorf("%s: tunnels changed by a refused reload:\n%+v\nwant\n%+v", c.name, ts, tunnelsBefore)
		}
		if sas := a.sas(); len(sas) != len(sasBefore) || findSA(sas, spiAB, "out") == nil || findSA(sas, spiBA, "in") == nil {
			t.Errorf("%s: SAs changed by a refused reload: %+v", c.name, sas)
		}
	}
	if el := time.Since(floodStart); el > floodFor {
		t.Errorf("the refused reloads took %v, longer than the %v stream that checks them", el, floodFor)
	}
	res := <-done
	measuref(t, "A -> B across %d refused reloads: %d sent, %d received, %d lost, %.0f pps",
		2*len(cases), res.r.Sent, res.r.Received, res.r.Lost, res.r.PPS())
	if res.err != nil {
		t.Error(res.err)
	}
	if res.r.Sent == 0 || res.r.Lost != 0 {
		t.Errorf("A -> B across the refused reloads: %d of %d lost, want none", res.r.Lost, res.r.Sent)
	}
	mustPing(t, ctx, "after refused reloads A->B", a.ns, inner4[1].Addr(), 50, 5*time.Millisecond)

	// A valid file is still taken.
	a.writeConfigText(valid)
	a.mustReload()
	mustPing(t, ctx, "after a valid reload A->B", a.ns, inner4[1].Addr(), 20, 5*time.Millisecond)
}

// TestReloadNewKeySameSPI changes the key of the A -> B SA in both files,
// keeping its SPI, and reloads B, then A, then B again. Changing the key
// of a running SA in place can be taken (the SA is replaced) or refused;
// either way a reload that sluice reports as applied must leave the tunnel
// working with the file's keys, and one it refuses must leave B running
// its old configuration, so that the same file is refused again.
func TestReloadNewKeySameSPI(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	newKey := randomHex(20)
	for _, c := range cfgs {
		c.SAs[0].EncKey = newKey // a-to-b, SPI 0x1001
	}
	b.writeConfig(cfgs[1])
	a.writeConfig(cfgs[0])
	first := b.reload()
	t.Logf("B, first reload: %v", first)
	a.mustReload()
	second := b.reload()
	t.Logf("B, second reload of the same file: %v", second)

	if first != nil && second != nil {
		t.Logf("sluice refuses a new key under a running SA's SPI, consistently: %v", first)
		return
	}
	// B says it runs the file: A -> B works with the new key.
	r, err := ping(ctx, a.ns, inner4[1].Addr(), 20, 10*time.Millisecond, "-W", "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping A->B after the reloads: %v", r)
	if r.Received != r.Sent {
		in := mustSA(t, b.sas(), spiAB, "in")
		msg := fmt.Sprintf("B reported the file applied, but A -> B lost %d of %d pings (B's inbound SA 0x%x drops %v): "+
			"B still opens with the old key", r.Sent-r.Received, r.Sent, spiAB, in.Drops)
		if first != nil {
			knownBug(t, "a reload refused part-way (%v) still replaced the running configuration's record (Gateway.Reload sets "+
				"g.cfg = next before applying it): the next reload of the same file compares it with itself, changes nothing "+
				"and reports \"configuration reloaded\"; %s", first, msg)
			return
		}
		t.Error(msg)
	}
}

// TestReloadKeepsSequenceNumbers reloads gateway A with a file in which
// its outbound SA differs only in replay_window, a setting that matters
// to the receiver alone, between two UDP streams A -> B. The SA keeps its
// SPI and key, so its sequence numbers must go on: were they to start
// again from the file's seq, the same AES-GCM nonces would be used twice
// under the key, and B's replay window would drop the packets.
func TestReloadKeepsSequenceNumbers(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	for _, c := range cfgs {
		c.Link = "socket" // the capture below reads wan0 with a packet socket, which AF_XDP's packets pass by
	}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	capture, err := captureESP(b.ns, wanIf, wan4[0].Addr(), spiAB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capture.close)

	aTx, err := a.ns.ListenUDP(netip.AddrPortFrom(inner4[0].Addr(), 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer aTx.Close()
	bRx, err := b.ns.ListenUDP(netip.AddrPortFrom(inner4[1].Addr(), 6001))
	if err != nil {
		t.Fatal(err)
	}
	defer bRx.Close()
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	flood := func() lab.FloodResult {
		t.Helper()
		r, err := lab.Flood(ctx, aTx, netip.AddrPortFrom(inner4[1].Addr(), 6001), bRx,
			lab.FloodOptions{Size: 500, Duration: 500 * time.Millisecond * slowdown, Window: 16, Stall: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Traffic on the SA, the reload, traffic again.
	r1 := flood()
	before := capture.take()
	cfgs[0].SAs[0].ReplayWindow *= 2 // a-to-b
	a.writeConfig(cfgs[0])
	a.mustReload()
	r2 := flood()
	after := capture.take()
	if r1.Received == 0 || len(before) == 0 || len(after) == 0 {
		t.Fatalf("too little traffic to tell: %d and %d datagrams through, %d and %d ESP packets captured", r1.Received, r2.Received, len(before), len(after))
	}
	reused := 0
	for iv := range after {
		if _, ok := before[iv]; ok {
			reused++
		}
	}
	in := mustSA(t, b.sas(), spiAB, "in")
	measuref(t, "A -> B before the reload: %d sent, %d lost; after: %d sent, %d received, %d lost; ESP IVs: %d before, %d after, %d used twice; B's inbound drops %v",
		r1.Sent, r1.Lost, r2.Sent, r2.Received, r2.Lost, len(before), len(after), reused, in.Drops)
	if reused > 0 || r2.Lost > 0 || r1.Lost > 0 {
		knownBug(t, "a reload that changes only replay_window of the outbound SA (same SPI, same key) replaces its runtime "+
			"and starts its sequence numbers again from the file's seq (gateway.rekey: !sameSA -> openSA + SwitchOutbound): "+
			"%d ESP packets reused an AES-GCM IV already used under the key, and B dropped %d packets as replays (%d of %d lost)",
			reused, in.Drops["replay"], r2.Lost, r2.Sent)
	}
}

// TestReloadRestoresFileState: a reload makes the running SAs what the
// file says, whatever the control socket changed before, and says what it
// changed. On A the inbound SA is deleted (B -> A is lost), the outbound
// SA is switched to one B does not know (A -> B is lost) and an extra
// inbound SA is added; `sluice reload` puts the file's SAs back, drains
// the extra one, lists each change, and the tunnel carries traffic both
// ways again. A second reload changes nothing and says so.
func TestReloadRestoresFileState(t *testing.T) {
	requireTool(t, "ping")
	cfgs := pairConfigs(t, pairOptions{wan: wan4})
	tb := startPair(t, wan4, cfgs)
	a := tb.sites[0]
	ctx := tb.ctx
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	saFile := func(name string, spi uint32, src, dst netip.Addr) string {
		sa := newSA(t, name, spi, src, dst, "udp", "aes128gcm16")
		text := (&gwConfig{SAs: []saConfig{sa}}).render()
		text = text[strings.Index(text, "[[sa]]"):]
		path := filepath.Join(tb.dir, name+".sa.toml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if _, err := a.cli("sa", "del", "--spi", fmt.Sprint(spiBA)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli("sa", "add", "--tunnel", "to-b", "--dir", "out", saFile("stray-out", 0x1009, wan4[0].Addr(), wan4[1].Addr())); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli("sa", "add", "--tunnel", "to-b", "--dir", "in", saFile("stray-in", 0x2009, wan4[1].Addr(), wan4[0].Addr())); err != nil {
		t.Fatal(err)
	}
	if r, err := ping(ctx, a.ns, inner4[1].Addr(), 5, 20*time.Millisecond, "-W", "1"); err != nil || r.Received != 0 {
		t.Fatalf("ping after the control socket broke the tunnel: %+v, %v; want all lost", r, err)
	}

	out, err := a.cli("reload")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sluice reload:\n%s", out)
	for _, want := range []string{
		"configuration reloaded: 3 changes",
		fmt.Sprintf("inbound SA installed tunnel=to-b sa=b-to-a spi=0x%08x", spiBA),
		fmt.Sprintf("outbound SA switched tunnel=to-b sa=a-to-b spi=0x%08x", spiAB),
		"inbound SA draining tunnel=to-b sa=stray-in spi=0x00002009",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reload output lacks %q", want)
		}
	}
	mustPing(t, ctx, "A -> B after the reload", a.ns, inner4[1].Addr(), 20, 10*time.Millisecond)
	if s := findSA(a.sas(), spiBA, "in"); s == nil || s.Packets == 0 {
		t.Errorf("A's inbound SA after the reload: %+v", s)
	}
	if s := findSA(a.sas(), spiAB, "out"); s == nil || s.Packets == 0 {
		t.Errorf("A's outbound SA after the reload: %+v", s)
	}
	err = lab.WaitFor(ctx, "the stray inbound SA to drain", gateway.DrainTime+5*time.Second, 50*time.Millisecond, func() (bool, error) {
		return findSA(a.sas(), 0x2009, "in") == nil, nil
	})
	if err != nil {
		t.Error(err)
	}
	if out, err := a.cli("reload"); err != nil || !strings.Contains(out, "configuration reloaded: nothing changed") {
		t.Errorf("second reload: %q, %v", out, err)
	}
}

// TestReloadRefusesAbsentLocalAddr: between two sluice gateways keyed by
// IKE, under a 100 pps ping, A's file moves its connection to a local
// address the host does not have. `sluice run` refuses that file, and a
// reload must too, with the file, line and field, before it changes
// anything: the child keeps its SPIs and the ping loses nothing. The
// valid file reloads afterwards, and a valid change of the connection
// (its DPD delay) is taken and renegotiates.
func TestReloadRefusesAbsentLocalAddr(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes128gcm16", true)
	// On the wildcard, [udp] allows any local address (a specific listen
	// address pins local_addrs to it, and the file check refuses others).
	cfgs[0].UDP = netip.MustParseAddrPort("0.0.0.0:4500")
	tb := startPair(t, wan4, cfgs)
	a := tb.sites[0]
	ctx := tb.ctx
	before := a.waitChild(ctx, "net-b", 20*time.Second, nil)
	waitPing(t, ctx, a.ns, inner4[1].Addr())
	valid := cfgs[0].render()

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

	absent := netip.MustParseAddr("192.0.2.99")
	bad := *cfgs[0]
	bad.Connections = append([]connConfig(nil), cfgs[0].Connections...)
	bad.Connections[0].Local = absent
	text := bad.render()
	a.writeConfigText(text)
	line := 0
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "local_addrs = ") {
			line = i + 1
		}
	}
	want := fmt.Sprintf("%s:%d:15: connection[1].local_addrs", a.cfgPath, line)
	err := a.reload()
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), absent.String()) {
		t.Errorf("reload to the absent local address %v: %v\nwant it refused naming %q", absent, err, want)
	} else {
		t.Logf("refused: %v", err)
	}
	// Nothing changed: the same child, the same SPIs.
	after := a.waitChild(ctx, "net-b", 5*time.Second, nil)
	if after.InSPI != before.InSPI || after.OutSPI != before.OutSPI {
		t.Errorf("a refused reload renegotiated the child: SPIs in %#x out %#x, were in %#x out %#x",
			after.InSPI, after.OutSPI, before.InSPI, before.OutSPI)
	}
	r := <-pingc
	if r.err != nil {
		t.Fatal(r.err)
	}
	measuref(t, "A->B across a refused reload of local_addrs: ping -c %d -i %v: %v", count, interval, r.r)
	if r.r.Received != count {
		t.Errorf("A->B across a refused reload: %d of %d pings lost, want none", count-r.r.Received, count)
	}

	// The valid file again: nothing to change, and taken.
	a.writeConfigText(valid)
	a.mustReload()
	if c := a.waitChild(ctx, "net-b", 5*time.Second, nil); c.InSPI != before.InSPI {
		t.Errorf("reloading the unchanged file renegotiated the child: %+v", c)
	}
	// A valid change of the connection is applied: the child is
	// negotiated again, and traffic goes on.
	cfgs[0].Connections[0].DPDDelay = "30s"
	a.writeConfig(cfgs[0])
	a.mustReload()
	a.waitChild(ctx, "net-b", 20*time.Second, func(c gateway.IKEChildInfo) bool { return c.InSPI != before.InSPI })
	waitPing(t, ctx, a.ns, inner4[1].Addr())
}

// TestReloadMovesLocalAddr: a reload that moves A's connection to another
// address the host has is taken: the IKE port is bound there, the child
// is negotiated again from it, and traffic goes on (B accepts any remote
// address).
func TestReloadMovesLocalAddr(t *testing.T) {
	lab.Require(t)
	requireTool(t, "ping")
	cfgs := ikePairConfigs("aes128gcm16", true)
	cfgs[0].UDP = netip.MustParseAddrPort("0.0.0.0:4500")
	cfgs[1].Connections[0].Remote = netip.Addr{}
	tb := startPair(t, wan4, cfgs)
	a, b := tb.sites[0], tb.sites[1]
	ctx := tb.ctx
	before := a.waitChild(ctx, "net-b", 20*time.Second, nil)
	waitPing(t, ctx, a.ns, inner4[1].Addr())

	moved := netip.MustParsePrefix("192.0.2.11/24")
	if err := a.ns.AddAddr(wanIf, moved); err != nil {
		t.Fatal(err)
	}
	cfgs[0].Connections[0].Local = moved.Addr()
	a.writeConfig(cfgs[0])
	a.mustReload()
	a.waitChild(ctx, "net-b", 20*time.Second, func(c gateway.IKEChildInfo) bool { return c.InSPI != before.InSPI })
	waitPing(t, ctx, a.ns, inner4[1].Addr())
	if ts := b.tunnels(); len(ts) != 1 || ts[0].Peer != moved.Addr().String() {
		t.Errorf("B's tunnels after A moved to %v: %+v", moved.Addr(), ts)
	}
	mustPing(t, ctx, "A->B from the moved address", a.ns, inner4[1].Addr(), 50, 10*time.Millisecond)
}
