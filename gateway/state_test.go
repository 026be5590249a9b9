package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

func TestSeqState(t *testing.T) {
	dir := t.TempDir()
	sa := &config.SA{SPI: 0x1001, Alg: cryptodev.AES128GCM16, EncKey: make([]byte, 20)}
	p := seqStatePath(dir, sa, esp.Outbound)
	other := *sa
	other.EncKey = append([]byte{1}, sa.EncKey[1:]...)
	if seqStatePath(dir, &other, esp.Outbound) == p {
		t.Fatal("a new key must get a new reservation file")
	}
	if seqStatePath(dir, sa, esp.Inbound) == p {
		t.Fatal("the directions must have reservation files of their own")
	}
	if w, err := loadReserved(p); err != nil || w != 0 {
		t.Fatalf("missing file: %d, %v", w, err)
	}
	if err := writeReserved(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	if w, err := loadReserved(p); err != nil || w != 1<<20 {
		t.Fatalf("reservation read back as %d, %v", w, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := loadReserved(p); err == nil {
		t.Fatal("a corrupt reservation must be an error, not 0")
	}
	if err := writeReserved(filepath.Join(dir, "missing", "x.seq"), 5); err == nil {
		t.Fatal("an unwritable reservation must fail")
	}
}

const stateTestConfig = `[gateway]
state_dir = "STATE"

[tun]
addresses = ["10.1.0.1/24"]

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
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`

// logBuffer collects log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testGateway is a Gateway with what openSA needs (no devices, no data
// plane): the configuration with state_dir = stateDir and a soft engine.
func testGateway(t *testing.T, stateDir string) (*Gateway, *logBuffer) {
	t.Helper()
	cfg, err := config.ParseGateway("gw.toml", []byte(strings.Replace(stateTestConfig, "STATE", stateDir, 1)))
	if err != nil {
		t.Fatal(err)
	}
	logs := new(logBuffer)
	return &Gateway{cfg: cfg, log: slog.New(slog.NewTextHandler(logs, nil)), cfg0: fixedConfig{Engine: cfg.Engine, StateDir: cfg.StateDir},
		engines: map[string]cryptodev.Engine{"": soft.New()}}, logs
}

// waitWriter waits until g's state writer has recorded every bound asked
// for (statewriter.go).
func waitWriter(t *testing.T, g *Gateway) {
	t.Helper()
	w := &g.stateWriter
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		running := w.running
		w.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the state writer did not finish in 10s")
		}
	}
}

func openTest(t *testing.T, g *Gateway, name string, d esp.Direction) *sad.SA {
	t.Helper()
	s, err := g.openSA(g.cfg, &g.cfg.Tunnels[0], name, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Key.Destroy() })
	return s
}

// TestStateDirUnwritableRefused: a state directory that cannot be made, or
// exists but cannot be written, is refused before the gateway starts, and
// an SA whose reservation cannot be written is refused before it is
// installed (start, reload, the control socket), not left to drop every
// packet. The checks hold as root too: they do not rely on permission bits.
func TestStateDirUnwritableRefused(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o600)
	if err := checkStateDir(filepath.Join(file, "state")); err == nil || !strings.Contains(err.Error(), "cannot be made") {
		t.Errorf("state_dir under a regular file: %v", err)
	}
	// An existing directory where the probe cannot be written.
	ro := filepath.Join(tmp, "ro")
	os.MkdirAll(filepath.Join(ro, ".sluice-probe.tmp", "x"), 0o700)
	if err := checkStateDir(ro); err == nil || !strings.Contains(err.Error(), "is not writable") {
		t.Errorf("unwritable state_dir: %v", err)
	}
	if os.Geteuid() != 0 {
		ro2 := t.TempDir()
		os.Chmod(ro2, 0o500)
		defer os.Chmod(ro2, 0o700)
		if err := checkStateDir(ro2); err == nil {
			t.Error("read-only state_dir accepted")
		}
	}

	// An SA whose own reservation file cannot be written.
	dir := t.TempDir()
	g, _ := testGateway(t, dir)
	for _, d := range []esp.Direction{esp.Outbound, esp.Inbound} {
		name := map[esp.Direction]string{esp.Outbound: "o", esp.Inbound: "i"}[d]
		sa := withTunnelAddrs(*g.cfg.SA(name), g.cfg.Tunnels[0].Local, g.cfg.Tunnels[0].Peer, d)
		os.MkdirAll(filepath.Join(seqStatePath(dir, &sa, d)+".tmp", "x"), 0o700)
		s, err := g.openSA(g.cfg, &g.cfg.Tunnels[0], name, d)
		if err == nil {
			s.Key.Destroy()
			t.Fatalf("SA %q opened without a reservation", name)
		}
		if !strings.Contains(err.Error(), "cannot record its sequence-number reservation") {
			t.Errorf("SA %q: %v", name, err)
		}
	}
}

// TestStateFailsAtRunTime: when the state directory goes away under a
// running SA, each failed reservation counts, the SA's health shows it
// (sluice stats, metrics), and the error is logged once, then at most every
// StateLogInterval; a later success clears it and says so.
func TestStateFailsAtRunTime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	g, logs := testGateway(t, dir)
	if err := checkStateDir(dir); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, g, "o", esp.Outbound)
	if s.State == nil {
		t.Fatal("outbound SA keeps no state")
	}
	// The synchronous records of a HA group's SAs (esp.Config.SeqReserve;
	// TestStateWriterFails has the writer's).
	sa := withTunnelAddrs(*g.cfg.SA("o"), g.cfg.Tunnels[0].Local, g.cfg.Tunnels[0].Peer, esp.Outbound)
	reserve := reserver(g.stateFile(seqStatePath(dir, &sa, esp.Outbound)), &health{h: s.State, log: g.log, what: []any{"sa", "o"}})
	if err := reserve(100); err != nil {
		t.Fatal(err)
	}
	// The directory is replaced by a regular file.
	os.RemoveAll(dir)
	os.WriteFile(dir, nil, 0o600)
	defer func(old time.Duration) { StateLogInterval = old }(StateLogInterval)
	StateLogInterval = time.Hour
	for range 5 {
		if reserve(200) == nil {
			t.Fatal("reservation in a vanished directory succeeded")
		}
	}
	info := saInfo(s, "out")
	if !info.StateFailing || info.StateFailures != 5 || !strings.Contains(info.StateError, "not a directory") {
		t.Fatalf("SA info after 5 failures: failing %v, failures %d, error %q", info.StateFailing, info.StateFailures, info.StateError)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d error lines for 5 failures, want 1:\n%s", n, logs)
	}
	StateLogInterval = 0
	reserve(200)
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Fatalf("%d error lines after the interval, want 2", n)
	}
	os.Remove(dir)
	os.MkdirAll(dir, 0o700)
	if err := reserve(300); err != nil {
		t.Fatal(err)
	}
	if info := saInfo(s, "out"); info.StateFailing || info.StateFailures != 6 {
		t.Fatalf("after recovery: failing %v, failures %d", info.StateFailing, info.StateFailures)
	}
	if !strings.Contains(logs.String(), "recorded again") {
		t.Fatalf("no recovery line:\n%s", logs)
	}
}

// espRunner seals and opens single packets on the soft engine.
type espRunner struct {
	t    *testing.T
	pool *packet.Pool
	q    cryptodev.Queue
}

func newESPRunner(t *testing.T) *espRunner {
	q, err := soft.New().NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	return &espRunner{t: t, pool: packet.NewPool(8, 4096, 256), q: q}
}

func (r *espRunner) seal(sa *esp.SA, inner []byte) []byte {
	p := r.pool.Get()
	defer p.Release()
	p.Write(r.pool.Headroom(), inner)
	var w esp.Work
	b := &cryptodev.Batch{Ops: make([]cryptodev.Op, 1)}
	if reason := sa.PrepareOutbound(p, &w, &b.Ops[0]); reason != esp.ReasonNone {
		r.t.Fatal(reason)
	}
	if err := cryptodev.Run(r.q, b); err != nil {
		r.t.Fatal(err)
	}
	if reason := sa.FinishOutbound(p, &w, &b.Ops[0]); reason != esp.ReasonNone {
		r.t.Fatal(reason)
	}
	return bytes.Clone(p.Bytes())
}

func (r *espRunner) open(sa *esp.SA, pkt []byte) esp.Reason {
	p := r.pool.Get()
	defer p.Release()
	p.Write(r.pool.Headroom(), pkt)
	b := esp.NewBatch(1)
	b.Reset(esp.Inbound, 1)
	b.Bufs[0] = p
	if reason := esp.Parse(p.Bytes(), []uint16{esp.NATTPort}, &b.Parsed[0]); reason != esp.ReasonNone {
		return reason
	}
	b.SAs[0] = sa
	if err := esp.NewPipeline(r.q).Run(b); err != nil {
		r.t.Fatal(err)
	}
	return b.Reasons[0]
}

// openWaiting is open for a packet of an SA leased by g's state writer
// that must be accepted: one refused at an ungranted bound (the writer's
// fdatasync took longer than the SA waits, as on a loaded machine) is
// opened again once the writer is done.
func (r *espRunner) openWaiting(g *Gateway, sa *esp.SA, pkt []byte) esp.Reason {
	reason := r.open(sa, pkt)
	for i := 0; i < 3 && reason == esp.ReasonSeqReserve; i++ {
		waitWriter(r.t, g)
		reason = r.open(sa, pkt)
	}
	return reason
}

func innerPacket(i int) []byte {
	b := make([]byte, 20+8+16)
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(len(b)), TTL: 64, Protocol: packet.ProtoUDP,
		Src: netip.MustParseAddr("10.2.0.2").As4(), Dst: netip.MustParseAddr("10.1.0.1").As4()})
	packet.UDP(b[20:]).Encode(1000, 2000, 24)
	b[30] = byte(i)
	return b
}

// peerSA is the peer's outbound SA: the same definition as the test
// configuration's inbound SA "i".
func peerSA(t *testing.T, stateDir string) *esp.SA {
	t.Helper()
	g, _ := testGateway(t, stateDir)
	cfg := *g.cfg.SA("i")
	cfg.Src, cfg.Dst = g.cfg.Tunnels[0].Peer, g.cfg.Tunnels[0].Local
	peer, err := OpenSA(soft.New(), &cfg, esp.Outbound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Config().Key.Destroy() })
	return peer
}

// TestReplayAcrossRestart: the receiver accepts packets 1..50, restarts
// (new SA from the same configuration and state directory), and refuses all
// 50 replayed; the peer's packets after the recorded bound are accepted,
// and the ones between (at most one reservation step) are the restart's
// cost. Before inbound reservations, the restarted SA accepted all 50.
func TestReplayAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	// The peer's outbound SA: the same definition as our inbound "i".
	peer := peerSA(t, dir)

	g1, _ := testGateway(t, dir)
	in1 := openTest(t, g1, "i", esp.Inbound)
	var sent [][]byte
	for i := range 50 {
		pkt := r.seal(peer, innerPacket(i))
		sent = append(sent, pkt)
		if reason := r.openWaiting(g1, in1.SA, pkt); reason != esp.ReasonNone {
			t.Fatalf("packet %d: %v", i+1, reason)
		}
	}
	// Restart: the first runtime is gone (its writer done); a new one
	// from the same file.
	waitWriter(t, g1)
	g2, _ := testGateway(t, dir)
	in2 := openTest(t, g2, "i", esp.Inbound)
	for i, pkt := range sent {
		if reason := r.open(in2.SA, pkt); reason != esp.ReasonReplay {
			t.Fatalf("packet %d replayed to the restarted receiver: %v, want replay", i+1, reason)
		}
	}
	bound := in2.SA.Seq()
	if bound < 50 || bound > 50+esp.ReplayReserveMax {
		t.Fatalf("restarted window starts at %d", bound)
	}
	lost := 0
	for peer.Seq() < bound+20 {
		pkt := r.seal(peer, innerPacket(0))
		reason := r.openWaiting(g2, in2.SA, pkt)
		switch {
		case peer.Seq() <= bound && reason == esp.ReasonReplay:
			lost++
		case peer.Seq() > bound && reason == esp.ReasonNone:
		default:
			t.Fatalf("seq %d (bound %d): %v", peer.Seq(), bound, reason)
		}
	}
	t.Logf("the restart cost %d legitimate packets (bound %d, step at most %d)", lost, bound, esp.ReplayReserveMax)
}

// TestStateDirLocked: a second gateway with the same state directory is
// refused with an error naming the holder; the directory is free again
// once the first lets go (Close, or its process ending).
func TestStateDirLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockStateDir(dir)
	want := fmt.Sprintf("state directory %s is in use by another gateway (pid %d)", dir, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock: %v; want %q", err, want)
	}
	first.Close()
	again, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}

// TestRetiredSARecordsFinalState: an SA that is retired (clean shutdown,
// deleted, or taken out by a reload) records its exact state in place of
// the bound it reserved, so the same SA installed again refuses every
// packet it accepted and none of the peer's new ones; an outbound one goes
// on from the last number it sent. A retired SA whose file a newer SA has
// taken over leaves that one's reservation alone.
func TestRetiredSARecordsFinalState(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	peer := peerSA(t, dir)

	g, _ := testGateway(t, dir)
	in1 := openTest(t, g, "i", esp.Inbound)
	out1 := openTest(t, g, "o", esp.Outbound)
	var sent [][]byte
	for i := range 30 {
		pkt := r.seal(peer, innerPacket(i))
		sent = append(sent, pkt)
		if reason := r.openWaiting(g, in1.SA, pkt); reason != esp.ReasonNone {
			t.Fatalf("packet %d: %v", i+1, reason)
		}
		r.seal(out1.SA, innerPacket(i))
	}
	in1.Retired()
	out1.Retired()

	in2 := openTest(t, g, "i", esp.Inbound)
	for i, pkt := range sent {
		if reason := r.open(in2.SA, pkt); reason != esp.ReasonReplay {
			t.Fatalf("packet %d replayed after the SA came back: %v, want replay", i+1, reason)
		}
	}
	if reason := r.openWaiting(g, in2.SA, r.seal(peer, innerPacket(0))); reason != esp.ReasonNone {
		t.Fatalf("the peer's next packet after the SA came back: %v, want accepted", reason)
	}
	if out2 := openTest(t, g, "o", esp.Outbound); out2.SA.Seq() != 30 {
		t.Errorf("outbound SA installed again starts after %d, want 30", out2.SA.Seq())
	}

	// A newer SA of the same file (in3) has taken it over when in2 retires:
	// in2 must not undo in3's reservation.
	for range 100 {
		r.openWaiting(g, in2.SA, r.seal(peer, innerPacket(0)))
	}
	in3 := openTest(t, g, "i", esp.Inbound)
	sa := withTunnelAddrs(*g.cfg.SA("i"), g.cfg.Tunnels[0].Local, g.cfg.Tunnels[0].Peer, esp.Inbound)
	path := seqStatePath(dir, &sa, esp.Inbound)
	waitWriter(t, g)
	before, err := loadReserved(path)
	if err != nil {
		t.Fatal(err)
	}
	in2.Retired()
	if after, _ := loadReserved(path); after != before || after < in3.SA.Seq() {
		t.Errorf("a retired SA rewrote the file a newer one owns: %d, then %d (the newer SA's window at %d)", before, after, in3.SA.Seq())
	}
}

// TestStateFileShared: two runtimes of one state file (an SA installed
// again before the one before it has retired) never take the file below
// what either may have used, and only the last to retire trims it to the
// highest final state of both.
func TestStateFileShared(t *testing.T) {
	g, _ := testGateway(t, t.TempDir())
	path := filepath.Join(g.cfg.StateDir, "out-shared.seq")
	a, b := g.stateFile(path), g.stateFile(path)
	if a != b {
		t.Fatal("one path, two records")
	}
	read := func() uint64 {
		t.Helper()
		v, err := loadReserved(path)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if s, err := a.open(0, 0); err != nil || s != 0 {
		t.Fatalf("first open: %d, %v", s, err)
	}
	a.record(1000)
	if s, err := a.open(10, 0); err != nil || s != 1000 {
		t.Fatalf("second open: %d, %v; want 1000", s, err)
	}
	a.record(50) // the older runtime's next bound, below the other's
	if v := read(); v != 1000 {
		t.Errorf("file %d after a lower bound of a shared file, want 1000", v)
	}
	a.retire(700, g.log)
	if v := read(); v != 1000 {
		t.Errorf("file %d after the first of two retired, want 1000", v)
	}
	a.retire(300, g.log)
	if v := read(); v != 700 {
		t.Errorf("file %d after both retired, want the higher final state 700", v)
	}
	// The record is gone with its last runtime; the next one starts from
	// the file.
	if _, err := a.open(0, 0); !errors.Is(err, errStateGone) {
		t.Errorf("open of a retired record: %v", err)
	}
	c := g.stateFile(path)
	if c == a || len(g.stateFiles) != 1 {
		t.Fatalf("record not replaced: %d records", len(g.stateFiles))
	}
	if s, err := c.open(0, 0); err != nil || s != 700 {
		t.Errorf("open after retirement: %d, %v; want 700", s, err)
	}
}

// TestStateWriterDies: the state writer dies mid-way through a group
// (before it writes a slot; after it wrote the slots, with the copy it
// wrote then lost or torn as a crash before the fdatasync may leave it;
// after the fdatasync, before it granted), the SA goes on until it reaches
// its granted bound, and a restart from the state directory refuses every
// packet the first instance accepted (DESIGN.md decision 7).
func TestStateWriterDies(t *testing.T) {
	for _, point := range []string{"write", "written", "synced"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			r := newESPRunner(t)
			peer := peerSA(t, dir)
			g1, _ := testGateway(t, dir)
			in1 := openTest(t, g1, "i", esp.Inbound)
			var accepted [][]byte
			highest := uint64(0)
			alive := true
			send := func() esp.Reason {
				pkt := r.seal(peer, innerPacket(0))
				var reason esp.Reason
				if alive {
					reason = r.openWaiting(g1, in1.SA, pkt)
				} else {
					reason = r.open(in1.SA, pkt)
				}
				if reason == esp.ReasonNone {
					accepted = append(accepted, pkt)
					highest = peer.Seq()
				}
				return reason
			}
			// Some groups recorded and granted: the bound is in the slot
			// file, above what the SA's own file holds.
			for range 300 {
				if reason := send(); reason != esp.ReasonNone {
					t.Fatalf("seq %d with the writer alive: %v", peer.Seq(), reason)
				}
			}
			waitWriter(t, g1)
			sa := withTunnelAddrs(*g1.cfg.SA("i"), g1.cfg.Tunnels[0].Local, g1.cfg.Tunnels[0].Peer, esp.Inbound)
			path := seqStatePath(dir, &sa, esp.Inbound)
			alive = false
			var died sync.WaitGroup
			died.Add(1)
			g1.stateWriter.testHook = func(step string) {
				if step != point {
					return
				}
				if step == "written" {
					// The copy just written never reached the disk, or
					// reached it torn.
					w := &g1.stateWriter
					i := w.slots.slots[slotKeyOf(path)]
					c := g1.stateFiles[path].slotCopy ^ 1
					w.slots.f.WriteAt(bytes.Repeat([]byte{0xa5}, copySize), int64(i*slotSize+c*copySize))
				}
				died.Done()
				runtime.Goexit()
			}
			// The SA carries on up to its granted bound, then refuses.
			refused := 0
			for refused < 1 {
				switch reason := send(); reason {
				case esp.ReasonNone:
					refused = 0
				case esp.ReasonSeqReserve:
					refused++
				default:
					t.Fatalf("seq %d after the writer died: %v", peer.Seq(), reason)
				}
				if peer.Seq() > 1<<20 {
					t.Fatal("the SA never stopped at its bound")
				}
			}
			died.Wait()
			// Restart from what is on disk.
			g2, _ := testGateway(t, dir)
			in2 := openTest(t, g2, "i", esp.Inbound)
			if b := in2.SA.Seq(); b < highest {
				t.Fatalf("restarted at %d below seq %d, which the first instance accepted", b, highest)
			}
			for i, pkt := range accepted {
				if reason := r.open(in2.SA, pkt); reason != esp.ReasonReplay {
					t.Fatalf("accepted packet %d of %d (highest seq %d) replayed after the restart: %v, want replay",
						i+1, len(accepted), highest, reason)
				}
			}
			t.Logf("writer died at %q: %d packets accepted, restart at %d", point, len(accepted), in2.SA.Seq())
		})
	}
}

// TestStateWriterFails: when the writer cannot record an inbound SA's
// bound, the SA's health shows it (failures counted, the error kept, one
// log line), the packets that reach the ungranted bound are dropped as
// seq_reserve_failed without waiting, and once the slot file can be
// written again the writer's retry records and grants the bound and the
// SA carries traffic again.
func TestStateWriterFails(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	peer := peerSA(t, dir)
	g, logs := testGateway(t, dir)
	in := openTest(t, g, "i", esp.Inbound)
	defer func(old time.Duration) { stateRetry = old }(stateRetry)
	stateRetry = time.Millisecond
	// The slot file becomes unwritable: a read-only descriptor in its place.
	w := &g.stateWriter
	ro, err := os.Open(filepath.Join(dir, slotFileName))
	if err != nil {
		t.Fatal(err)
	}
	w.slots.mu.Lock()
	rw := w.slots.f
	w.slots.f = ro
	w.slots.mu.Unlock()
	refused := 0
	for refused < 5 {
		pkt := r.seal(peer, innerPacket(0))
		switch reason := r.open(in.SA, pkt); reason {
		case esp.ReasonNone:
		case esp.ReasonSeqReserve:
			refused++
		default:
			t.Fatalf("seq %d: %v", peer.Seq(), reason)
		}
		if peer.Seq() > 10000 {
			t.Fatal("no packet refused with the slot file unwritable")
		}
	}
	info := saInfo(in, "in")
	if !info.StateFailing || info.StateFailures == 0 || info.StateError == "" {
		t.Fatalf("SA info with the slot file unwritable: failing %v, failures %d, error %q", info.StateFailing, info.StateFailures, info.StateError)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d error lines, want 1:\n%s", n, logs)
	}
	// Writable again: the retry grants, the SA carries traffic.
	w.slots.mu.Lock()
	w.slots.f = rw
	w.slots.mu.Unlock()
	ro.Close()
	waitWriter(t, g)
	if reason := r.open(in.SA, r.seal(peer, innerPacket(0))); reason != esp.ReasonNone {
		t.Fatalf("after the slot file recovered: %v", reason)
	}
	if info := saInfo(in, "in"); info.StateFailing {
		t.Fatal("the SA still shows failing after a record succeeded")
	}
	if !strings.Contains(logs.String(), "recorded again") {
		t.Fatalf("no recovery line:\n%s", logs)
	}
}

// TestSlotFileRemoved: the slot file removed under a running gateway (the
// state directory emptied) is made again, with every slot's bound, at the
// writer's next sync, so a restart still refuses every packet accepted.
func TestSlotFileRemoved(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	peer := peerSA(t, dir)
	g, _ := testGateway(t, dir)
	in1 := openTest(t, g, "i", esp.Inbound)
	var accepted [][]byte
	send := func(n int) {
		for range n {
			pkt := r.seal(peer, innerPacket(0))
			if reason := r.openWaiting(g, in1.SA, pkt); reason != esp.ReasonNone {
				t.Fatalf("seq %d: %v (%+v)", peer.Seq(), reason, saInfo(in1, "in"))
			}
			accepted = append(accepted, pkt)
		}
	}
	send(300)
	waitWriter(t, g)
	if err := os.Remove(filepath.Join(dir, slotFileName)); err != nil {
		t.Fatal(err)
	}
	send(300)
	waitWriter(t, g)
	if _, err := os.Stat(filepath.Join(dir, slotFileName)); err != nil {
		t.Fatalf("the slot file was not made again: %v", err)
	}
	g2, _ := testGateway(t, dir)
	in2 := openTest(t, g2, "i", esp.Inbound)
	if b := in2.SA.Seq(); b < peer.Seq() {
		t.Fatalf("restarted at %d below seq %d, which the first instance accepted", b, peer.Seq())
	}
	for i, pkt := range accepted {
		if reason := r.open(in2.SA, pkt); reason != esp.ReasonReplay {
			t.Fatalf("accepted packet %d replayed after the restart: %v, want replay", i+1, reason)
		}
	}
}

// TestCloseSyncsFinalStatesOnce: the SAs a closing gateway retires write
// their exact final states with one syncfs for all of them, and keep their
// slots (a bound above the final state) until that sync is done, so a crash
// before it still starts each SA above what it used.
func TestCloseSyncsFinalStatesOnce(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	peer := peerSA(t, dir)
	g, _ := testGateway(t, dir)
	in := openTest(t, g, "i", esp.Inbound)
	out := openTest(t, g, "o", esp.Outbound)
	for i := range 30 {
		if reason := r.openWaiting(g, in.SA, r.seal(peer, innerPacket(i))); reason != esp.ReasonNone {
			t.Fatalf("packet %d: %v", i+1, reason)
		}
		r.seal(out.SA, innerPacket(i))
	}
	waitWriter(t, g)
	paths := map[string]esp.Direction{}
	for _, d := range []esp.Direction{esp.Inbound, esp.Outbound} {
		name := map[esp.Direction]string{esp.Inbound: "i", esp.Outbound: "o"}[d]
		sa := withTunnelAddrs(*g.cfg.SA(name), g.cfg.Tunnels[0].Local, g.cfg.Tunnels[0].Peer, d)
		paths[seqStatePath(dir, &sa, d)] = d
	}

	bounds := map[string]uint64{}
	for p := range paths {
		bounds[p] = max(g.stateWriter.slots.bound(p), loadedBound(t, p))
		if bounds[p] <= 30 {
			t.Fatalf("%s: bound %d before retiring, want above 30", p, bounds[p])
		}
	}

	fs := &finalStates{}
	g.closing.Store(fs)
	in.Retired()
	out.Retired()
	for p := range paths {
		// A crash now restarts from the bound.
		if v := max(g.stateWriter.slots.bound(p), loadedBound(t, p)); v != bounds[p] {
			t.Errorf("%s: %d before the sync; want the reserved bound %d until the final state is durable", p, v, bounds[p])
		}
	}
	fs.sync(&g.stateWriter.slots, g.log)
	if fs.syncs != 2 {
		t.Errorf("%d syncs for %d final states, want 2", fs.syncs, len(paths))
	}
	for p := range paths {
		if v, err := loadReserved(p); err != nil || v != 30 {
			t.Errorf("%s after the sync: %d, %v; want the final state 30", p, v, err)
		}
		if b := g.stateWriter.slots.bound(p); b != 0 {
			t.Errorf("%s: slot still holds %d after the sync", p, b)
		}
		if _, err := os.Stat(p + finalSuffix); !os.IsNotExist(err) {
			t.Errorf("%s%s left behind: %v", p, finalSuffix, err)
		}
	}
	if out2 := openTest(t, g, "o", esp.Outbound); out2.SA.Seq() != 30 {
		t.Errorf("outbound SA installed again starts after %d, want 30", out2.SA.Seq())
	}
}

func loadedBound(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := loadReserved(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSlotHoldingTwoKeys: a slot file read with a slot whose two copies
// are valid and name different state files (torn sectors, or a file
// damaged some other way) gives that slot to neither: written as the
// slot of one, it would overwrite the only copy of the other's bound,
// and a restart after that would start the other below what it granted.
func TestSlotHoldingTwoKeys(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "in-a.seq"), filepath.Join(dir, "in-b.seq")
	var buf [slotSize]byte
	encodeCopy(buf[:], slotKeyOf(b), 1000)
	encodeCopy(buf[copySize:], slotKeyOf(a), 50)
	if err := os.WriteFile(filepath.Join(dir, slotFileName), buf[:], 0o600); err != nil {
		t.Fatal(err)
	}
	var s slotFile
	if err := s.open(dir); err != nil {
		t.Fatal(err)
	}
	if got := s.bound(b); got != 1000 {
		t.Fatalf("b's bound read %d, want 1000", got)
	}
	for c, v := range []uint64{60, 70} {
		if err := s.write(a, c, v); err != nil {
			t.Fatal(err)
		}
		if err := s.sync(); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	var again slotFile
	if err := again.open(dir); err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if got, gotA := again.bound(b), again.bound(a); got != 1000 || gotA != 70 {
		t.Fatalf("after a's bound was written twice, the file holds %d for b and %d for a, want 1000 and 70", got, gotA)
	}
}

// TestStateWriterSlowStopsWaits: once the writer's group has taken
// longer than a packet waits (stateLeaseWait: a disk stuck in fdatasync),
// the other SAs that reach an ungranted bound drop at once instead of
// each waiting stateLeaseWait with its lock held in turn: a lane's stall
// behind a stuck disk is one wait, not one per SA (a batch of 64 SAs
// stalled 32 s). Once the group is done, they carry traffic again.
func TestStateWriterSlowStopsWaits(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	g, _ := testGateway(t, dir)
	in1, in2 := openTest(t, g, "i", esp.Inbound), openTest(t, g, "i", esp.Inbound)
	peer1, peer2 := peerSA(t, dir), peerSA(t, dir)
	// in2 starts above in1's bound (they share a state file): bring
	// peer2 there.
	for {
		if reason := r.open(in2.SA, r.seal(peer2, innerPacket(0))); reason == esp.ReasonNone {
			break
		} else if reason != esp.ReasonReplay {
			t.Fatalf("seq %d on the second SA: %v", peer2.Seq(), reason)
		}
	}
	waitWriter(t, g)
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	g.stateWriter.testHook = func(step string) {
		if step == "written" {
			once.Do(func() { close(stuck); <-release })
		}
	}
	var freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(func() { free(); waitWriter(t, g) })
	send := func(in *sad.SA, peer *esp.SA) (esp.Reason, time.Duration) {
		pkt := r.seal(peer, innerPacket(0))
		start := time.Now()
		reason := r.open(in.SA, pkt)
		return reason, time.Since(start)
	}
	// The first SA runs into its bound with the writer stuck: its packet
	// waits, in vain.
	for {
		reason, _ := send(in1, peer1)
		if reason == esp.ReasonSeqReserve {
			break
		}
		if reason != esp.ReasonNone {
			t.Fatalf("seq %d on the first SA: %v", peer1.Seq(), reason)
		}
	}
	<-stuck
	// The second SA's ask comes while the group is stuck: its packet
	// at the bound does not wait.
	for {
		reason, d := send(in2, peer2)
		if reason == esp.ReasonSeqReserve {
			if d >= stateLeaseWait {
				t.Fatalf("the second SA's packet at its bound waited %v with the writer stuck past stateLeaseWait (%v): each SA waits in turn",
					d.Round(time.Millisecond), stateLeaseWait)
			}
			break
		}
		if reason != esp.ReasonNone {
			t.Fatalf("seq %d on the second SA: %v", peer2.Seq(), reason)
		}
	}
	free()
	waitWriter(t, g)
	for _, s := range []struct {
		in   *sad.SA
		peer *esp.SA
	}{{in1, peer1}, {in2, peer2}} {
		if reason := r.openWaiting(g, s.in.SA, r.seal(s.peer, innerPacket(0))); reason != esp.ReasonNone {
			t.Fatalf("after the writer is done: %v", reason)
		}
	}
}

// TestSlotFileLastSlotHalfWritten: a new slot at the end of the file
// whose first write is its copy 0 leaves the file half a slot longer
// than the slots before; that copy, synced and granted, is read at start.
// (The file was read in whole slots only, and a restart lost the bound.)
func TestSlotFileLastSlotHalfWritten(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "in-a.seq")
	var s slotFile
	if err := s.open(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.write(a, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	s.close()
	var again slotFile
	if err := again.open(dir); err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if got := again.bound(a); got != 100 {
		t.Fatalf("a's bound, synced in copy 0 of the file's last slot, read back as %d, want 100", got)
	}
}

// TestRestartAfterFirstSlotRecord: a gateway that dies after its state
// writer's first record of a fresh SA (one copy written in a new slot at
// the end of the slot file) restarts the SA above every packet it
// accepted.
func TestRestartAfterFirstSlotRecord(t *testing.T) {
	dir := t.TempDir()
	r := newESPRunner(t)
	peer := peerSA(t, dir)
	g1, _ := testGateway(t, dir)
	in1 := openTest(t, g1, "i", esp.Inbound)
	for peer.Seq() < 90 {
		if reason := r.openWaiting(g1, in1.SA, r.seal(peer, innerPacket(0))); reason != esp.ReasonNone {
			t.Fatalf("seq %d: %v", peer.Seq(), reason)
		}
	}
	waitWriter(t, g1)
	// g1 dies here: nothing is closed. A restart from the directory.
	g2, _ := testGateway(t, dir)
	in2 := openTest(t, g2, "i", esp.Inbound)
	if b := in2.SA.Seq(); b < peer.Seq() {
		t.Fatalf("restarted at %d, below seq %d, which the first instance accepted", b, peer.Seq())
	}
}
