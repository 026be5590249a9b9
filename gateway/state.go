package gateway

// Durable sequence-number state (DESIGN.md decision 7). sluice's SAs are
// keyed by configuration, so a restarted gateway meets the same keys again.
// One mechanism serves both directions: before an SA goes past its last
// reservation it records a new upper bound here, durably (esp.Lease, or
// esp.Config.SeqReserve), and at start the SA begins at the recorded bound:
//   - outbound, its sequence numbers start above every one used before;
//   - inbound, its replay window starts with everything up to the bound
//     treated as received, so no packet is accepted twice across restarts
//     (a crash costs at most one and a half reservation steps of the
//     peer's legitimate packets, the step ahead and what was left of the
//     one before: 96 at low rates, a few seconds' worth at high ones; see
//     stateLeaseStep).
// An SA's first bound is recorded in its own file when it is opened; the
// next ones are recorded ahead of use by the state writer, many SAs' in
// one fdatasync of the slot file, and granted to the SA once durable
// (statewriter.go, stateslots.go), so no record is written on a lane with
// an SA's lock held; a start takes the higher of the two. (A HA group's
// SAs record beside their lease, on their lane: esp.Config.SeqReserve.)
// When an SA is retired (clean shutdown, deletion, a reload that takes it
// out) it records its exact state in place of the reserved bound
// (stateFile.retire) and frees its slot, so a clean restart, or the same
// SA installed again, costs nothing.
//
// AEAD nonces do not depend on this state (package esp's doc): losing it
// costs replay protection and sequence-number continuity, never a nonce.
//
// A state directory that cannot be written is an error at start (the first
// reservation is written before the SA is installed) and, at run time, a
// dropped packet counted as seq_reserve_failed, an error logged once per SA
// and then at most every StateLogInterval while it lasts, and the SA's
// StateHealth, shown by `sluice stats` and in metrics.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
)

// StateLogInterval is the least time between two log lines about the same
// SA's failing reservations.
var StateLogInterval = time.Minute

// seqStatePath names the reservation file of an SA in one direction: its
// SPI and a digest of its key material, so a new key starts afresh.
// Outbound files keep the name they had before inbound ones existed.
func seqStatePath(dir string, sa *config.SA, d esp.Direction) string {
	h := sha256.New()
	var b [5]byte
	binary.BigEndian.PutUint32(b[:], sa.SPI)
	b[4] = byte(sa.Alg)
	h.Write(b[:])
	h.Write(sa.EncKey)
	h.Write(sa.AuthKey)
	prefix := "out"
	if d == esp.Inbound {
		prefix = "in"
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%08x-%x.seq", prefix, sa.SPI, h.Sum(nil)[:8]))
}

// checkStateDir makes the state directory if it is missing and checks that
// a file can be written and synced in it, before anything else starts.
func checkStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory %s cannot be made: %w; sluice records sequence-number reservations there", dir, err)
	}
	probe := filepath.Join(dir, ".sluice-probe")
	err := writeReserved(probe, 0)
	os.Remove(probe)
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w; sluice records sequence-number reservations there "+
			"and would drop every packet without them (make it writable, or name another)", dir, err)
	}
	return nil
}

// stateLockName is the file in the state directory that the running
// gateway holds an exclusive flock(2) on, with its pid inside.
const stateLockName = ".sluice.lock"

// lockStateDir takes the state directory for this process: two gateways
// with the same directory (and so the same SAs' files) would each reserve
// the same sequence numbers and undo each other's replay reservations. The
// lock lasts until the returned file is closed or the process ends, however
// it ends (the kernel releases flock locks with the last descriptor).
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, stateLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory %s cannot be locked: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "another gateway (pid " + pid + ")"
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by %s: two gateways must not share one, "+
				"or both would send the same sequence numbers and accept each other's replays (give each its own state_dir)", dir, holder)
		}
		return nil, fmt.Errorf("state directory %s cannot be locked: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// loadReserved reads the recorded bound; a missing file is 0.
func loadReserved(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("gateway: %s: corrupt sequence reservation: %w", path, err)
	}
	return v, nil
}

// writeReserved records upTo: it writes a temporary file, syncs it, renames
// it into place and syncs the directory.
func writeReserved(path string, upTo uint64) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatUint(upTo, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	return err
}

// syncDir fsyncs a directory, making the renames in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// stateFile is the gateway's side of one state file. More than one SA
// runtime can write the same file: an SA installed again while the one
// before it is still being retired, or one added through the control
// socket with the definition of a running one. Its lock makes each write
// whole (one temporary file per path), and the file never goes below what
// any runtime of it may have used until the last of them has retired.
type stateFile struct {
	path string
	g    *Gateway

	mu       sync.Mutex
	recorded uint64 // the highest bound recorded since the file was last trimmed
	live     int    // runtimes that write it and have not retired
	final    uint64 // the highest final state of those retired since live was 0
	gone     bool   // the last runtime retired and the record left the gateway's map
	slotCopy int    // the copy of its slot the next recordSlot writes
}

// stateFile returns the gateway's record of the file at path. A record
// lives while runtimes of its file do (each rekey names a new file, so the
// map would otherwise grow for the process's life); open reports
// errStateGone for one that has just left, and the caller asks again.
func (g *Gateway) stateFile(path string) *stateFile {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	if g.stateFiles == nil {
		g.stateFiles = map[string]*stateFile{}
	}
	f := g.stateFiles[path]
	if f == nil {
		f = &stateFile{path: path, g: g}
		g.stateFiles[path] = f
	}
	return f
}

// errStateLoad marks an error reading a state file, as against writing it.
var errStateLoad = errors.New("cannot read the state file")

// errStateGone says the record was retired while the caller held it.
var errStateGone = errors.New("state file record retired")

// open starts a runtime on the file: it returns the bound to start from
// (at least seq), recorded before it returns with ahead more: what the
// runtime may use before it records again.
func (f *stateFile) open(seq, ahead uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return 0, errStateGone
	}
	w, err := loadReserved(f.path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errStateLoad, err)
	}
	seq = max(seq, w, f.recorded)
	v := max(seq+ahead, f.recorded)
	if err := writeReserved(f.path, v); err != nil {
		return 0, err
	}
	f.recorded = v
	f.live++
	return seq, nil
}

// record records a bound of a live runtime: upTo, or more if another
// runtime of the file has recorded more.
func (f *stateFile) record(upTo uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := max(upTo, f.recorded)
	if err := writeReserved(f.path, v); err != nil {
		return err
	}
	f.recorded = v
	return nil
}

// recordSlot is record for the writer of a group (stateWriter): the bound
// goes to the file's slot (stateslots.go), in the copy not written last,
// and is durable once the writer has synced the slot file, which it does
// once for the group before it grants anything. It returns the bound
// written, or errStateGone if the file's last runtime has retired.
func (f *stateFile) recordSlot(upTo uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return 0, errStateGone
	}
	v := max(upTo, f.recorded)
	if err := f.g.stateWriter.slots.write(f.path, f.slotCopy, v); err != nil {
		return 0, err
	}
	f.slotCopy ^= 1
	f.recorded = v
	return v, nil
}

// unsynced says that the slot file's sync failed after recordSlot: the
// copy written may not be durable, so the next record writes it again
// rather than the other, which holds the last durable bound.
func (f *stateFile) unsynced() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slotCopy ^= 1
}

// bound returns the highest bound recorded in f.
func (f *stateFile) bound() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recorded
}

// retire ends a runtime whose final state is final: the last number sent,
// or the highest one accepted. When the last runtime of the file retires,
// the file gets the highest of their final states in place of the bound
// reserved ahead of use, so a clean shutdown, a deletion or a reload that
// takes the SA out leaves the exact state, and the same SA installed again
// (a restart, a reload that restores what the control socket removed)
// refuses none of the peer's new packets. Until then the file holds a
// bound ahead of use: a crash costs up to one reservation step of the
// peer's packets.
func (f *stateFile) retire(final uint64, log *slog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.final = max(f.final, final)
	if f.live--; f.live > 0 {
		return
	}
	if err := writeReserved(f.path, f.final); err != nil {
		log.Warn("cannot record the final sequence state of a retired SA; the reserved bound stays (up to one "+
			"reservation step of the peer's packets may be refused if the SA is installed again)", "file", f.path, "err", err)
	} else if err := f.g.stateWriter.slots.release(f.path); err != nil {
		// The file holds the final state, the slot a reserved bound
		// above it: a start takes the higher.
		log.Warn("cannot free the slot of a retired SA; its reserved bound stays (up to one "+
			"reservation step of the peer's packets may be refused if the SA is installed again)", "file", f.path, "err", err)
	}
	// The file holds all there is to know: the record goes.
	f.gone = true
	f.g.stateMu.Lock()
	if f.g.stateFiles[f.path] == f {
		delete(f.g.stateFiles, f.path)
	}
	f.g.stateMu.Unlock()
}

// reserver returns the SeqReserve function of an SA: it records the bound
// in f and keeps h up to date. It runs with the SA's lock held, so its own
// state (when it last logged) needs no other.
func reserver(f *stateFile, h *health) func(uint64) error {
	return func(upTo uint64) error {
		err := f.record(upTo)
		h.note(f.path, err)
		return err
	}
}

// withState makes cfg, the esp configuration of SA sa (named name) in
// direction d, start at its recorded bound and record new ones in the state
// directory; it returns the health to attach to the SAD entry and the
// state file, whose retire the caller calls when the SA ends. The bound is
// written once here, so a directory that cannot be written is refused
// before the SA carries traffic. Without a state directory, or inbound
// without anti-replay, it changes nothing and returns nils.
func (g *Gateway) withState(cfg *esp.Config, sa *config.SA, name string, d esp.Direction) (*sad.StateHealth, *stateFile, error) {
	dir := g.cfg0.StateDir
	if dir == "" || (d == esp.Inbound && cfg.ReplayWindow == 0) {
		return nil, nil, nil
	}
	path := seqStatePath(dir, sa, d)
	// An SA of its own (not leased by a HA group) is leased by the state
	// directory's writer (statewriter.go): its first step is recorded
	// here, the next ones ahead, off its lane. A HA group's SA records
	// beside its lease, on its lane (esp.Config.SeqReserve).
	leased := cfg.Lease == nil
	var ahead uint64
	switch {
	case leased && d == esp.Inbound:
		ahead = esp.ReplayReserveMin
	case leased:
		ahead = esp.SeqReserveBlock
	}
	// The slot file holds the bounds the writer recorded (stateslots.go):
	// a start takes the higher of it and the SA's own file.
	slots := &g.stateWriter.slots
	err := slots.open(dir)
	var seq uint64
	var f *stateFile
	if err == nil {
		start := max(cfg.Seq, slots.bound(path))
		f = g.stateFile(path)
		seq, err = f.open(start, ahead)
		for errors.Is(err, errStateGone) {
			f = g.stateFile(path)
			seq, err = f.open(start, ahead)
		}
	}
	if err != nil {
		if errors.Is(err, errStateLoad) {
			return nil, nil, fmt.Errorf("gateway: state_dir: SA %q: %w", name, err)
		}
		return nil, nil, fmt.Errorf("gateway: state_dir %s: SA %q (spi 0x%08x): cannot record its sequence-number reservation, "+
			"without which it would drop every packet: %w (make the directory writable, or set gateway.state_dir to one that is)",
			dir, name, sa.SPI, err)
	}
	cfg.Seq = seq
	dirName := "out"
	if d == esp.Inbound {
		dirName = "in"
	}
	h := &health{h: new(sad.StateHealth), log: g.log, what: []any{"sa", name, "spi", ike.ESPSPI(sa.SPI), "direction", dirName}}
	if !leased {
		cfg.SeqReserve = reserver(f, h)
		return h.h, f, nil
	}
	e := &leasedState{f: f, health: *h}
	e.lease = esp.NewLeaseWith(func(upTo uint64) { g.stateWriter.ask(e, upTo) },
		esp.LeaseOptions{Step: stateLeaseStep, StepMax: stateLeaseStepMax, Wait: stateLeaseWait})
	e.lease.Grant(seq + ahead)
	cfg.Lease = e.lease
	return h.h, f, nil
}
