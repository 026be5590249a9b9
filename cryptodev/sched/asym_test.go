package sched

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"golang.org/x/sys/unix"
)

// TestAsymOnLowPriorityWorkers checks where Sign ops run: only on the
// asymmetric workers, whose threads run at nice asymNice, never on the
// submitter waiting in Dequeue (which helps with symmetric chunks only)
// nor on a symmetric worker; and on at most AsymWorkers threads.
func TestAsymOnLowPriorityWorkers(t *testing.T) {
	for _, asym := range []int{1, 2} {
		e, err := newEngine(Options{Workers: 3, AsymWorkers: asym})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu     sync.Mutex
			tids   = map[int]bool{}
			nices  = map[int]int{}
			signed int
		)
		e.onChunk = func(b *cryptodev.Batch, lo, hi int) {
			if b.Ops[lo].Dir != cryptodev.Sign {
				return
			}
			n, err := threadNice()
			if err != nil {
				t.Errorf("thread priority: %v", err)
			}
			mu.Lock()
			tids[unix.Gettid()] = true
			nices[n] += hi - lo
			signed += hi - lo
			mu.Unlock()
		}
		e.start()
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, err := e.NewPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		q, err := e.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		digest := sha256.Sum256([]byte("asym"))
		const ops = 24
		b := cryptodev.NewBatch(ops)
		b.Reset(ops)
		dst := make([]byte, ops*128)
		for i := range b.Ops {
			op := &b.Ops[i]
			op.Key, op.Dir, op.Src, op.Hash, op.Dst = key, cryptodev.Sign, digest[:], crypto.SHA256, dst[i*128:(i+1)*128]
		}
		if err := q.Submit(b); err != nil {
			t.Fatal(err)
		}
		if got := q.Dequeue(true); got != b {
			t.Fatalf("Dequeue returned %p, want the batch %p", got, b)
		}
		for i, op := range b.Ops {
			if op.Status != cryptodev.StatusOK {
				t.Fatalf("op %d: status %v", i, op.Status)
			}
			if !ecdsa.VerifyASN1(&priv.PublicKey, digest[:], op.Dst[:op.N]) {
				t.Fatalf("op %d: the signature does not verify", i)
			}
		}
		q.Close()
		e.Close()
		mu.Lock()
		if signed != ops {
			t.Errorf("AsymWorkers %d: %d ops signed through chunks, want %d", asym, signed, ops)
		}
		if len(tids) > asym {
			t.Errorf("AsymWorkers %d: Sign ops ran on %d threads, want at most %d", asym, len(tids), asym)
		}
		if e.asymNiced.Load() == int32(asym) {
			if nices[asymNice] != ops {
				t.Errorf("AsymWorkers %d: ops signed by nice value: %v; want all %d at nice %d", asym, nices, ops, asymNice)
			}
		} else {
			t.Logf("the system did not let the workers lower their priority; niceness not checked")
		}
		mu.Unlock()
	}
}

// TestAsymWorkersOption checks the default and the bounds of AsymWorkers.
func TestAsymWorkersOption(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, c := range []struct{ workers, asym, want int }{{1, 0, 1}, {2, 0, 1}, {4, 0, 3}, {4, 2, 2}} {
		e, err := newEngine(Options{Workers: c.workers, AsymWorkers: c.asym})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AsymWorkers(); got != c.want {
			t.Errorf("Workers %d, AsymWorkers %d: %d asymmetric workers, want %d", c.workers, c.asym, got, c.want)
		}
		e.start()
		e.Close()
	}
	if _, err := New(Options{AsymWorkers: -1}); err == nil {
		t.Error("AsymWorkers -1: no error")
	}
}

// TestAsymWorkersGOMAXPROCS: by default the asymmetric workers leave one
// of the runtime's Ps to other goroutines also when Workers is more than
// GOMAXPROCS (Workers defaults to the CPUs, GOMAXPROCS to a container's
// CPU limit): all of them busy signing must not hold every P.
func TestAsymWorkersGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	e, err := newEngine(Options{Workers: 8})
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	defer e.Close()
	if got := e.AsymWorkers(); got != 1 {
		t.Errorf("Workers 8, GOMAXPROCS 2: %d asymmetric workers, want 1", got)
	}
}

// setAllThreadsNice sets every thread of the process to nice n; it
// reports false where the system does not allow it (raising priority
// needs CAP_SYS_NICE).
func setAllThreadsNice(t *testing.T, n int) bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	for _, d := range tasks {
		tid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && err != unix.ESRCH {
			return false
		}
	}
	return true
}

// TestAsymNiceRelative: the asymmetric workers run asymNice steps below
// the process, not at nice asymNice whatever the process runs at (under
// nice -n -10 they would get about 1% of a core against the others,
// which the garbage collector's stops then wait for; under nice 15 they
// would run before everything else).
func TestAsymNiceRelative(t *testing.T) {
	if !setAllThreadsNice(t, -5) {
		if os.Getenv("CI") == "true" {
			t.Fatal("no permission to raise thread priorities (CI=true: not skipping)")
		}
		t.Skip("no permission to raise thread priorities")
	}
	t.Cleanup(func() { setAllThreadsNice(t, 0) })
	e, err := newEngine(Options{Workers: 2, AsymWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		nices []int
	)
	e.onChunk = func(b *cryptodev.Batch, lo, hi int) {
		n, err := threadNice()
		if err != nil {
			t.Errorf("thread priority: %v", err)
		}
		mu.Lock()
		nices = append(nices, n)
		mu.Unlock()
	}
	e.start()
	defer e.Close()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := e.NewPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Destroy()
	q, err := e.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	digest := sha256.Sum256([]byte("nice"))
	b := cryptodev.NewBatch(1)
	b.Reset(1)
	b.Ops[0] = cryptodev.Op{Key: key, Dir: cryptodev.Sign, Src: digest[:], Hash: crypto.SHA256, Dst: make([]byte, 128)}
	if err := q.Submit(b); err != nil {
		t.Fatal(err)
	}
	q.Dequeue(true)
	if b.Ops[0].Status != cryptodev.StatusOK {
		t.Fatalf("status %v", b.Ops[0].Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := -5 + asymNice; len(nices) != 1 || nices[0] != want {
		t.Errorf("process at nice -5: signed at nice %v, want %d", nices, want)
	}
}
