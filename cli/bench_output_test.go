package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/tlsbench"
	"github.com/sluicegw/sluice/bench/tunnel"
)

// TestBenchEstimateAndProgress: a bench whose output is not a terminal
// prints the estimate of its whole time first, then a progress line for
// finished runs (here every one), and each row with its spread over the
// default repetitions (more than one).
func TestBenchEstimateAndProgress(t *testing.T) {
	old := progressEvery
	progressEvery = 0
	t.Cleanup(func() { progressEvery = old })
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"bench", "esp", "--engines", "soft", "--sizes", "64", "--dir", "encap", "--duration", "10ms"},
		strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if !regexp.MustCompile(`^estimate: about \S+ for 3 measured runs$`).MatchString(lines[0]) {
		t.Errorf("first stderr line %q: want the estimate of 3 runs (the default count)", lines[0])
	}
	var progress []string
	for _, l := range lines {
		if strings.HasPrefix(l, "progress: ") {
			progress = append(progress, l)
		}
	}
	if len(progress) != 3 || !strings.HasPrefix(progress[2], "progress: 3/3 done (100%)") {
		t.Errorf("progress lines %q: want one per run, the last 3/3", progress)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.Contains(rows[0], "median of 3") || !strings.HasSuffix(rows[1], "spread") {
		t.Errorf("table head %q", rows[:2])
	}
	if f := strings.Fields(rows[len(rows)-1]); !strings.HasPrefix(f[len(f)-1], "±") {
		t.Errorf("row %q: no spread", rows[len(rows)-1])
	}
}

// issueRef matches a reference to an issue of the project's tracker.
var issueRef = regexp.MustCompile(`(?i)\bissue\b|#[0-9]`)

// TestBenchOutputNoIssueNumbers: what the benches print (help, ratio
// tables, notes) speaks of the project's targets, not of its issues.
func TestBenchOutputNoIssueNumbers(t *testing.T) {
	var texts []string
	for _, sub := range []string{"crypto", "esp", "tunnel", "tls"} {
		var out, errOut bytes.Buffer
		Run(context.Background(), []string{"bench", sub, "--help"}, strings.NewReader(""), &out, &errOut)
		texts = append(texts, out.String())
	}
	var w bytes.Buffer
	tunnel.WriteRatios(&w, tunnel.Ratios([]tunnel.Result{
		{Cell: tunnel.Cell{System: tunnel.Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1}, Metric: tunnel.TCP1, Value: 2},
		{Cell: tunnel.Cell{System: tunnel.WireGuard, Encap: "udp", Engine: "-", Alg: tunnel.WireGuardAlg, Tunnels: 1}, Metric: tunnel.TCP1, Value: 1},
	}))
	tlsbench.WriteRatios(&w, tlsbench.Ratios([]tlsbench.Result{
		{Server: tlsbench.Server{System: tlsbench.Sluice, Engine: "soft"}, Key: tlsbench.ECDSAP256, Version: "1.3", Metric: tlsbench.HSFullCPU, Value: 2},
		{Server: tlsbench.Server{System: tlsbench.Nginx, Engine: "-"}, Key: tlsbench.ECDSAP256, Version: "1.3", Metric: tlsbench.HSFullCPU, Value: 1},
	}))
	if !strings.Contains(strings.ToLower(w.String()), "targets") {
		t.Fatalf("no ratio tables: %q", w.String())
	}
	texts = append(texts, w.String())
	for _, s := range texts {
		if m := issueRef.FindString(s); m != "" {
			t.Errorf("output names an issue (%q):\n%s", m, s)
		}
	}
}

// TestBenchPlot: --plot writes the document into the directory and has
// sluice-plot (here found in the source tree and run with go run) draw the
// charts beside it; without sluice-plot, a note says what to run and the
// bench does not fail.
func TestBenchPlot(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not installed: sluice-plot cannot be run from the source tree")
	}
	doc := &tunnel.Document{Results: []tunnel.Result{
		{Cell: tunnel.Cell{System: tunnel.Sluice, Encap: "udp", Engine: "soft", Alg: "aes128gcm16", Tunnels: 1}, Size: 1400, Metric: tunnel.UDPRate, Value: 1},
		{Cell: tunnel.Cell{System: tunnel.WireGuard, Encap: "udp", Engine: "-", Alg: tunnel.WireGuardAlg, Tunnels: 1}, Size: 1400, Metric: tunnel.UDPRate, Value: 0.8},
	}}
	var out, errOut bytes.Buffer
	r := &benchRun{e: &env{stdout: &out, stderr: &errOut}}
	dir := filepath.Join(t.TempDir(), "plots")
	if err := r.end(dir, tunnel.BenchName, nil, true, &doc.Notes, doc.WriteJSON, func(io.Writer) {}); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, f := range []string{"tunnel.json", "udp-1400.png", "udp-1400.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%v", err)
		}
	}
	if !strings.Contains(errOut.String(), "note: charts: "+filepath.Join(dir, "udp-1400.png")) {
		t.Errorf("stderr %q: no note naming the charts", errOut.String())
	}

	old := plotCommand
	plotCommand = func() *exec.Cmd { return nil }
	t.Cleanup(func() { plotCommand = old })
	errOut.Reset()
	dir = filepath.Join(t.TempDir(), "plots")
	if err := r.end(dir, tunnel.BenchName, nil, true, &doc.Notes, doc.WriteJSON, func(io.Writer) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tunnel.json")); err != nil {
		t.Error(err)
	}
	if want := "sluice-plot -o " + dir + " " + filepath.Join(dir, "tunnel.json"); !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q: want the command %q", errOut.String(), want)
	}
}

// TestREADMEBenchCommands: every bench command of the README's "Other
// things to try" runs in about a minute (by its --dry-run estimate).
func TestREADMEBenchCommands(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	est := regexp.MustCompile(`^estimate: about (\S+) for`)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		cmdline, _, _ := strings.Cut(l, "#")
		_, after, ok := strings.Cut(cmdline, "go run ./cmd/sluice bench ")
		if !ok {
			continue
		}
		n++
		args := append([]string{"bench"}, strings.Fields(after)...)
		args = append(args, "--dry-run")
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errOut.String())
			continue
		}
		m := est.FindStringSubmatch(errOut.String())
		if m == nil {
			t.Errorf("%v: no estimate: %q", args, errOut.String())
			continue
		}
		d, err := time.ParseDuration(m[1])
		if err != nil || d > 90*time.Second {
			t.Errorf("README: %s: estimated at %s, want about a minute (at most 90s)", strings.TrimSpace(l), m[1])
		}
	}
	if n != 4 {
		t.Errorf("%d bench commands in the README, want 4 (crypto, esp, tunnel, tls)", n)
	}
}
