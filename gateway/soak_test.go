package gateway_test

// The soak: two gateways in one process (internal/lab's MemoryPair) on a
// wire that loses, corrupts, duplicates, reorders and delays
// (pktio/fault), carrying sequence-numbered UDP floods both ways while
// both directions are rekeyed make-before-break every few seconds through
// the control socket's path (gateway.InstallSA, then RemoveInbound). At
// the end nothing may be lost beyond what the wire lost or corrupted, and
// goroutines, heap and file descriptors must be where they were after the
// warm-up.
//
//	go test ./gateway -run TestSoak -v              10s (60s under CI=true)
//	go test ./gateway -run TestSoak -v -soak=10m    longer

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/internal/lab"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/fault"
)

var soakFor = flag.Duration("soak", 0, "how long TestSoak carries traffic (0: 60s under CI=true, 10s otherwise; 3s with -short)")

// soakDuration is -soak, or the default for where the test runs.
func soakDuration() time.Duration {
	switch {
	case *soakFor > 0:
		return *soakFor
	case os.Getenv("CI") == "true":
		return time.Minute
	case testing.Short():
		return 3 * time.Second
	}
	return 10 * time.Second
}

const (
	// rekeyEvery is how often both directions are rekeyed (a fifth of the
	// soak if that is shorter).
	rekeyEvery = 2 * time.Second
	// settle bounds every wait for a condition.
	settle = 30 * time.Second
	// The soak's tolerances, end against start (both sampled between
	// rounds, with the traffic stopped): a goroutine or two for the data
	// plane's key retirement still finishing; 2 MiB of heap after a GC,
	// far less than anything that grows with packets (millions) or
	// rekeys would add over a long soak, and more than the noise (0.1
	// MiB measured, with and without -race); no file descriptor.
	goroutineSlack = 2
	heapSlack      = 2 << 20
	fdSlack        = 0
)

// saText is one [[sa]] table with a fresh key, as `sluice sa add` sends it.
func saText(rng *rand.Rand, name string, spi uint32, src, dst string) string {
	key := make([]byte, 20) // AES-128 key and salt
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	return fmt.Sprintf(`
[[sa]]
name = %q
spi = %#x
src = %q
dst = %q
mode = "tunnel"
encap = "udp"
esp = "aes128gcm16"
enc_key = %q
replay_window = 1024
`, name, spi, src, dst, hex.EncodeToString(key))
}

// soakSA parses one saText.
func soakSA(t *testing.T, rng *rand.Rand, name string, spi uint32, src, dst string) *config.SA {
	t.Helper()
	sas, err := config.ParseSAs(name+".toml", []byte(saText(rng, name, spi, src, dst)))
	if err != nil || len(sas) != 1 {
		t.Fatalf("SA %s: %v", name, err)
	}
	return &sas[0]
}

// soakConfigs are two gateways with one tunnel between them.
func soakConfigs(t *testing.T, rng *rand.Rand) (a, b *config.Gateway) {
	t.Helper()
	sas := saText(rng, "a-to-b", 0x1001, "192.0.2.1", "192.0.2.2") + saText(rng, "b-to-a", 0x2001, "192.0.2.2", "192.0.2.1")
	a, b, err := lab.PairConfigs(sas)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// usage is what the soak watches for growth.
type usage struct {
	goroutines int
	heap       uint64 // bytes in use after a GC
	fds        int
}

func measure(t *testing.T) usage {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return usage{goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc, fds: len(fds)}
}

func (u usage) String() string {
	return fmt.Sprintf("%d goroutines, heap %.1f MiB, %d fds", u.goroutines, float64(u.heap)/(1<<20), u.fds)
}

// direction is one way through the pair: from's ESP crosses wire to to.
type direction struct {
	name     string
	from, to *lab.MemorySite
	wire     *fault.Link
	spi      uint32 // the SA in use
}

// saPackets is the packet count of the SA (spi, dir) at s, or -1 when s
// has no such SA.
func saPackets(s *lab.MemorySite, spi uint32, dir string) int64 {
	for _, x := range s.SAs() {
		if x.SPI == spi && x.Direction == dir {
			return int64(x.Packets)
		}
	}
	return -1
}

// drained waits until every packet d.from sealed with SAs older than
// newSPI has been opened or dropped by d.to: d.to has opened a packet of
// the new SA (so d.from seals with it: one lane carries a direction in
// memory, and it switched between two reads), the wire has passed on
// everything written before that (held and delayed copies included), and
// d.to has read all that the wire passed on. After that the old inbound SA
// may go without losing a packet.
func drained(t *testing.T, ctx context.Context, d *direction, newSPI uint32) {
	t.Helper()
	wait := func(what string, cond func() bool) {
		t.Helper()
		err := lab.WaitFor(ctx, d.name+": "+what, settle, time.Millisecond, func() (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	wait(fmt.Sprintf("SA %#x to carry traffic", newSPI), func() bool { return saPackets(d.to, newSPI, "in") > 0 })
	mark := d.wire.Mark()
	wait("the wire to pass on the old SA's packets", func() bool { return d.wire.Drained(mark) })
	queued := d.wire.Stats().TxPackets.Load()
	wait("the receiver to read them", func() bool {
		var read uint64
		for _, r := range d.to.Stats().Dataplane.Receivers {
			if !r.Plain {
				read += r.Packets
			}
		}
		return read >= queued
	})
}

// TestSoak: traffic both ways through two gateways over a faulty wire,
// with make-before-break rekeys of both directions every rekeyEvery, for
// soakDuration. Every datagram the wire did not lose or corrupt arrives
// exactly once; the receivers count each corrupted packet as an
// authentication failure and each duplicate as a replay and drop nothing
// else; goroutines, heap and file descriptors stay flat.
func TestSoak(t *testing.T) {
	dur := soakDuration()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Everything the soak started has ended once the lab is closed.
		err := lab.WaitFor(context.Background(), "the soak's goroutines to end", settle, 0, func() (bool, error) {
			n := runtime.NumGoroutine()
			return n <= before, fmt.Errorf("%d goroutines, %d before", n, before)
		})
		if err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*settle)
	t.Cleanup(cancel)
	l := lab.New(nil)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})

	rng := rand.New(rand.NewChaCha8([32]byte{'s', 'o', 'a', 'k'}))
	ca, cb := soakConfigs(t, rng)
	wireCfg := fault.Config{Loss: 0.01, Corrupt: 0.005, CorruptFrom: 20 + 8 + 8, Duplicate: 0.01,
		Reorder: 0.05, ReorderDepth: 8, Delay: 100 * time.Microsecond,
		Queue: 512} // room for both floods' windows; its slots are made by round 2

	var wab, wba *fault.Link
	a, b, err := l.MemoryPairWith(ctx, ca, cb, lab.MemoryOptions{Wire: func(x, y pktio.Link) (pktio.Link, pktio.Link) {
		cx, cy := wireCfg, wireCfg
		cx.Seed, cy.Seed = 1, 2
		wab, wba = fault.New(x, cx), fault.New(y, cy)
		return wab, wba
	}})
	if err != nil {
		t.Fatal(err)
	}
	ab := &direction{name: "A->B", from: a, to: b, wire: wab, spi: 0x1001}
	ba := &direction{name: "B->A", from: b, to: a, wire: wba, spi: 0x2001}

	// The traffic runs in rounds of rekeyEvery: a flood each way, with
	// one rekey of both directions while they run. Between rounds the
	// traffic stops for a moment (the floods' drain), so that the usage
	// is sampled quiet: a GC under traffic counts what is allocated
	// during its mark phase as live, and that noise (±10 MiB under the
	// race detector) would hide a slow leak.
	listen := func(h *lab.MemHost, ap string) lab.Conn {
		c, err := h.ListenUDP(netip.MustParseAddrPort(ap))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	aTx, bRx := listen(a.Host, "10.1.0.1:5001"), listen(b.Host, "10.2.0.1:5001")
	bTx, aRx := listen(b.Host, "10.2.0.1:5002"), listen(a.Host, "10.1.0.1:5002")
	every := min(rekeyEvery, dur/5)
	type result struct {
		r   lab.FloodResult
		err error
	}
	flood := func(src lab.Conn, dst string, sink lab.Conn) chan result {
		ch := make(chan result, 1)
		// The drain is a quiet time after the last datagram arrived:
		// the wire holds none longer than its Hold (5ms).
		o := lab.FloodOptions{Size: 500, Duration: every, Window: 64, Drain: 500 * time.Millisecond}
		go func() {
			r, err := lab.Flood(ctx, src, netip.MustParseAddrPort(dst), sink, o)
			ch <- result{r, err}
		}()
		return ch
	}

	rekeys := 0
	rekey := func() {
		rekeys++
		nab := soakSA(t, rng, fmt.Sprintf("a-to-b-%d", rekeys), 0x10000+uint32(rekeys), "192.0.2.1", "192.0.2.2")
		nba := soakSA(t, rng, fmt.Sprintf("b-to-a-%d", rekeys), 0x20000+uint32(rekeys), "192.0.2.2", "192.0.2.1")
		// 1. Each side accepts the SA the other will send with.
		must(t, b.AddSA("t", "in", nab))
		must(t, a.AddSA("t", "in", nba))
		// 2. Each side sends with its new SA.
		must(t, a.AddSA("t", "out", nab))
		must(t, b.AddSA("t", "out", nba))
		// 3. Once the old SAs have drained, each side drops the old
		// inbound SA.
		for _, c := range []struct {
			d      *direction
			newSPI uint32
		}{{ab, nab.SPI}, {ba, nba.SPI}} {
			drained(t, ctx, c.d, c.newSPI)
			must(t, c.d.to.DelSA(c.d.spi))
			c.d.spi = c.newSPI
		}
	}

	// The usage is sampled after the second round (by then every pool,
	// queue and slot on the path has been used, the lazily grown ones
	// included) and after the last.
	const warmup = 2
	var (
		first, last usage
		rab, rba    lab.FloodResult
	)
	start := time.Now()
	for round := 1; round <= warmup+1 || time.Since(start)+every <= dur; round++ {
		abDone, baDone := flood(aTx, "10.2.0.1:5001", bRx), flood(bTx, "10.1.0.1:5002", aRx)
		// Rekey under traffic: once both floods are carried.
		for _, d := range []*direction{ab, ba} {
			was := saPackets(d.to, d.spi, "in")
			err := lab.WaitFor(ctx, d.name+": traffic", settle, time.Millisecond, func() (bool, error) {
				return saPackets(d.to, d.spi, "in") > was+100, nil
			})
			must(t, err)
		}
		rekey()
		for _, c := range []struct {
			done chan result
			sum  *lab.FloodResult
		}{{abDone, &rab}, {baDone, &rba}} {
			r := <-c.done
			must(t, r.err)
			c.sum.Sent += r.r.Sent
			c.sum.Received += r.r.Received
			c.sum.Lost += r.r.Lost
			c.sum.Stalls += r.r.Stalls
		}
		for _, w := range []*fault.Link{wab, wba} {
			must(t, lab.WaitFor(ctx, "the wire to pass on everything", settle, 0, func() (bool, error) { return w.Pending() == 0, nil }))
		}
		if round == warmup {
			first = measure(t)
		}
	}
	last = measure(t)

	// Nothing lost beyond the wire's own losses and corruptions; every
	// drop is the wire's doing and counted as such.
	for _, c := range []struct {
		d *direction
		r lab.FloodResult
	}{{ab, rab}, {ba, rba}} {
		f := c.d.wire.Faults()
		if c.r.Lost != f.Lost+f.Corrupted {
			t.Errorf("%s: %d of %d datagrams lost; the wire lost %d and corrupted %d (%+v)", c.d.name, c.r.Lost, c.r.Sent, f.Lost, f.Corrupted, f)
		}
		d := c.d.to.Stats().Dataplane.Drops()
		if d["replay"] != f.Duplicated || d["auth_failed"] != f.Corrupted || len(d) > 2 {
			t.Errorf("%s: the receiver dropped %v; the wire duplicated %d and corrupted %d", c.d.name, d, f.Duplicated, f.Corrupted)
		}
		if s := c.d.wire.Stats().Snapshot(); f.Overflow != 0 || s.TxFull != 0 {
			t.Errorf("%s: the wire's queues overflowed: %+v, %+v", c.d.name, f, s)
		}
		if n := c.d.to.Host.Unclaimed.Load(); n != 0 {
			t.Errorf("%s: %d datagrams reached no socket", c.d.name, n)
		}
		t.Logf("%s: %d datagrams sent, %d delivered once, %d lost (the wire lost %d and corrupted %d; it also duplicated %d and reordered %d)",
			c.d.name, c.r.Sent, c.r.Received, c.r.Lost, f.Lost, f.Corrupted, f.Duplicated, f.Reordered)
	}

	for _, s := range []*lab.MemorySite{a, b} {
		if n := len(s.SAs()); n != 2 {
			t.Errorf("%s holds %d SAs after the rekeys, want 2 (one each way)", s.Config.File, n)
		}
	}
	t.Logf("soak: %v (traffic in %d rounds of %v), %d rekeys of each direction; usage after round %d: %v; at the end: %v",
		time.Since(start).Round(time.Millisecond), rekeys, every, rekeys, warmup, first, last)
	if last.goroutines > first.goroutines+goroutineSlack || last.heap > first.heap+heapSlack || last.fds > first.fds+fdSlack {
		t.Errorf("usage grew beyond the tolerance (%d goroutines, %d MiB of heap, %d fds): from %v to %v",
			goroutineSlack, heapSlack>>20, fdSlack, first, last)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
