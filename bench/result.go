package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CryptoResult is one row of `sluice bench crypto`.
type CryptoResult struct {
	Engine  string `json:"engine"`
	Alg     string `json:"alg"`
	Op      string `json:"op"`   // encrypt, sign or agree
	Size    int    `json:"size"` // bytes per op; 0 for sign and agree
	Threads int    `json:"threads"`
	Batch   int    `json:"batch"`
	// OpsPerSec and BytesPerSec are the rates over the measured window, all
	// threads together. BytesPerSec is 0 for sign and agree.
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	// Ops and Seconds are the window's count and length; CPUSeconds is the
	// CPU time the whole process used meanwhile (all three 0 for openssl
	// rows, which report rates only). CPUSeconds/Seconds is how many cores
	// the run kept busy: below Threads on a sync engine, the machine was
	// short of cores.
	Ops        uint64  `json:"ops,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// Command is the command line an external row (openssl) came from.
	Command string `json:"command,omitempty"`
	Note    string `json:"note,omitempty"`
	// Samples are the ops/s of every repetition, in run order, when the
	// row is the median of several (MedianCrypto), and SampleCores the
	// cores each kept busy (CPUSeconds/Seconds).
	Samples     []float64 `json:"samples,omitempty"`
	SampleCores []float64 `json:"sample_cores,omitempty"`
}

// Size is an ESP packet size: the inner IP packet's bytes, or IMIX. It is
// a JSON number, or the string "imix".
type Size int

// IMIX is the Size of the simple IMIX (see package doc).
const IMIX Size = -1

func (s Size) String() string {
	if s == IMIX {
		return "imix"
	}
	return strconv.Itoa(int(s))
}

// MarshalJSON writes a number, or "imix".
func (s Size) MarshalJSON() ([]byte, error) {
	if s == IMIX {
		return []byte(`"imix"`), nil
	}
	return []byte(strconv.Itoa(int(s))), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Size) UnmarshalJSON(b []byte) error {
	if string(b) == `"imix"` {
		*s = IMIX
		return nil
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("bench: size %s: want a number or \"imix\"", b)
	}
	*s = Size(n)
	return nil
}

// ESPResult is one row of `sluice bench esp`.
type ESPResult struct {
	Engine    string  `json:"engine"`
	Alg       string  `json:"alg"`
	Size      Size    `json:"size"`
	MeanSize  float64 `json:"mean_size"` // bytes per inner packet, on average
	Tunnels   int     `json:"tunnels"`
	Workers   int     `json:"workers"`
	Batch     int     `json:"batch"`
	Direction string  `json:"direction"` // encap or decap
	// PPS is packets per second; BPS is inner packet bits per second.
	PPS     float64 `json:"pps"`
	BPS     float64 `json:"bps"`
	Packets uint64  `json:"packets"`
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the CPU time the process used during the window.
	CPUSeconds float64 `json:"cpu_seconds"`
	Note       string  `json:"note,omitempty"`
	// Samples are the packets/s of every repetition, in run order, when
	// the row is the median of several (MedianESP), and SampleCores the
	// cores each kept busy.
	Samples     []float64 `json:"samples,omitempty"`
	SampleCores []float64 `json:"sample_cores,omitempty"`
}

// median returns the index of the run with the median rate (the upper
// one of an even count) and every rate in run order.
func median(n int, rate func(int) float64) (int, []float64) {
	samples := make([]float64, n)
	idx := make([]int, n)
	for i := range n {
		samples[i], idx[i] = rate(i), i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(samples[a], samples[b]) })
	return idx[n/2], samples
}

// MedianCrypto returns the repetition of one run with the median ops/s,
// with every repetition's rate in Samples. rs must not be empty.
func MedianCrypto(rs []CryptoResult) CryptoResult {
	i, samples := median(len(rs), func(i int) float64 { return rs[i].OpsPerSec })
	r := rs[i]
	if len(rs) > 1 {
		r.Samples = samples
		if r.Seconds > 0 {
			for _, x := range rs {
				r.SampleCores = append(r.SampleCores, busy(x.CPUSeconds, x.Seconds))
			}
		}
	}
	return r
}

// busy is the cores a run kept busy, to two decimals.
func busy(cpu, wall float64) float64 {
	if wall <= 0 {
		return 0
	}
	return math.Round(100*cpu/wall) / 100
}

// MedianESP returns the repetition of one run with the median packets/s,
// with every repetition's rate in Samples. rs must not be empty.
func MedianESP(rs []ESPResult) ESPResult {
	i, samples := median(len(rs), func(i int) float64 { return rs[i].PPS })
	r := rs[i]
	if len(rs) > 1 {
		r.Samples = samples
		for _, x := range rs {
			r.SampleCores = append(r.SampleCores, busy(x.CPUSeconds, x.Seconds))
		}
	}
	return r
}

// Env describes where a document was measured.
type Env struct {
	Go         string `json:"go"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Load       string `json:"load,omitempty"` // 1, 5 and 15 minute load averages at the start
}

// CurrentEnv describes this process and machine.
func CurrentEnv() Env {
	e := Env{Go: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			e.Load = strings.Join(f[:3], " ")
		}
	}
	return e
}

// Document is the JSON output of a bench command: one object with every
// result, and the notes (skipped runs, substitutions).
type Document[R any] struct {
	Env     Env      `json:"env"`
	Results []R      `json:"results"`
	Notes   []string `json:"notes,omitempty"`
}

// Spread is the range of the repetitions a median was taken from.
type Spread struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	N   int     `json:"n"` // repetitions
}

// Median returns the median of vs (the mean of the middle two for an even
// count) and their spread; a zero Spread for no values. vs is not
// reordered.
func Median(vs []float64) (float64, Spread) {
	if len(vs) == 0 {
		return 0, Spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return m, Spread{Min: s[0], Max: s[n-1], N: n}
}

// Ticker calls progress with the fraction of d gone (at most 1) every
// 100 ms, from a goroutine of its own, until the returned stop is called;
// stop returns once that goroutine has ended.
func Ticker(d time.Duration, progress func(float64)) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				progress(min(1, float64(time.Since(start))/float64(d)))
			}
		}
	}()
	return func() { close(done); <-exited }
}

// WriteJSON writes d, indented, with a final newline.
func (d *Document[R]) WriteJSON(w io.Writer) error {
	if d.Results == nil {
		d.Results = []R{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// CryptoTable formats crypto results as fixed-width rows, one at a time as
// they come, with each row's rate relative to the raw row of the same
// algorithm, size and threads when one came before it.
type CryptoTable struct {
	raw map[[3]string]float64
}

// NewCryptoTable returns an empty table.
func NewCryptoTable() *CryptoTable { return &CryptoTable{raw: map[[3]string]float64{}} }

// Header is the table's header line.
func (t *CryptoTable) Header() string {
	return fmt.Sprintf("%-18s %-16s %-7s %6s %7s %5s %12s %10s %7s %5s %7s",
		"engine", "alg", "op", "size", "threads", "batch", "ops/s", "MB/s", "vs raw", "cpu", "spread")
}

// Row formats r (without a newline).
func (t *CryptoTable) Row(r CryptoResult) string {
	size, mbs := "-", "-"
	if r.Size > 0 {
		size = strconv.Itoa(r.Size)
		mbs = fmt.Sprintf("%.1f", r.BytesPerSec/1e6)
	}
	k := [3]string{r.Alg, size, strconv.Itoa(r.Threads)}
	vs := "-"
	if r.Engine == Raw {
		t.raw[k] = r.OpsPerSec
	} else if base := t.raw[k]; base > 0 {
		vs = fmt.Sprintf("%.1f%%", 100*r.OpsPerSec/base)
	}
	return fmt.Sprintf("%-18s %-16s %-7s %6s %7d %5d %12.0f %10s %7s %5s %7s",
		r.Engine, r.Alg, r.Op, size, r.Threads, r.Batch, r.OpsPerSec, mbs, vs, cores(r.CPUSeconds, r.Seconds), SpreadText(r.OpsPerSec, r.Samples))
}

// ESPTable formats ESP results as CryptoTable does crypto results.
type ESPTable struct {
	raw map[string]float64
}

// NewESPTable returns an empty table.
func NewESPTable() *ESPTable { return &ESPTable{raw: map[string]float64{}} }

// Header is the table's header line.
func (t *ESPTable) Header() string {
	return fmt.Sprintf("%-8s %-16s %-5s %5s %7s %7s %11s %8s %7s %5s %7s",
		"engine", "alg", "dir", "size", "tunnels", "workers", "pps", "Gbit/s", "vs raw", "cpu", "spread")
}

// Row formats r (without a newline).
func (t *ESPTable) Row(r ESPResult) string {
	k := fmt.Sprintf("%s/%s/%v/%d/%d", r.Alg, r.Direction, r.Size, r.Tunnels, r.Workers)
	vs := "-"
	if r.Engine == Raw {
		t.raw[k] = r.PPS
	} else if base := t.raw[k]; base > 0 {
		vs = fmt.Sprintf("%.1f%%", 100*r.PPS/base)
	}
	return fmt.Sprintf("%-8s %-16s %-5s %5v %7d %7d %11.0f %8.3f %7s %5s %7s",
		r.Engine, r.Alg, r.Direction, r.Size, r.Tunnels, r.Workers, r.PPS, r.BPS/1e9, vs, cores(r.CPUSeconds, r.Seconds), SpreadText(r.PPS, r.Samples))
}

// SpreadText formats how far the repetitions in samples strayed from their
// median m: "±3.2%" is the largest distance of one from m, in percent of
// m; "-" for fewer than two repetitions.
func SpreadText(m float64, samples []float64) string {
	if len(samples) < 2 || m <= 0 {
		return "-"
	}
	d := 0.0
	for _, v := range samples {
		d = max(d, math.Abs(v-m))
	}
	return fmt.Sprintf("±%.1f%%", 100*d/m)
}

// cores formats the cores a run kept busy, or "-" when not measured.
func cores(cpu, wall float64) string {
	if cpu <= 0 || wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", cpu/wall)
}

// Summary is the line a table starts with: where and how it was measured.
func (e Env) Summary() string {
	s := fmt.Sprintf("# %s %s/%s, %d CPUs, GOMAXPROCS %d", e.Go, e.GOOS, e.GOARCH, e.CPUs, e.GOMAXPROCS)
	if e.Load != "" {
		s += ", loadavg " + e.Load
	}
	return s
}
