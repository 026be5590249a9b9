package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDemoTLS runs `sluice demo tls` briefly, without root: every phase
// gets through, resumed handshakes resume, the listener's counters and
// signing batches are reported, and the temporary directory is gone.
func TestDemoTLS(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := runDemoCmd(t, ctx, "tls", "--duration", "800ms", "--conns", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var rep demoTLSReport
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("demo tls --json output is not the report: %v\n%s", err, stdout)
	}
	if len(rep.Phases) != 4 {
		t.Fatalf("phases %+v", rep.Phases)
	}
	for _, p := range rep.Phases {
		if p.OK == 0 || p.PerSec <= 0 || p.P50Us <= 0 || p.P50Us > p.P99Us || p.Errors != 0 {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	if full, res := rep.Phases[0], rep.Phases[1]; full.Resumed != 0 || res.ResumeRate < 0.5 {
		t.Errorf("resumption: full %+v, resumed %+v", full, res)
	}
	if big := rep.Phases[3]; big.MiBps <= 0 {
		t.Errorf("1 MB requests: %+v", big)
	}
	l := rep.Listener
	if l.Name != "demo" || l.Handshakes == 0 || l.Resumed == 0 || l.BytesOut < 1<<20 || l.SignOps == 0 || l.SignBatches == 0 ||
		l.SignMaxBatch == 0 || rep.MeanSignBatch < 1 {
		t.Errorf("listener %+v, mean batch %v", l, rep.MeanSignBatch)
	}
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("left behind in TMPDIR: %v %v", ents, err)
	}

	// The text report.
	code, stdout, stderr = runDemoCmd(t, ctx, "tls", "--duration", "400ms", "--conns", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"full handshakes", "resumed handshakes", "1 KB requests", "1 MB requests", "MEAN BATCH", "handshake signatures: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
}

func TestDemoTLSUsage(t *testing.T) {
	for _, args := range [][]string{
		{"tls", "--duration", "10ms"},
		{"tls", "--conns", "0"},
		{"tls", "--engine", "nope"},
		{"tls", "extra"},
	} {
		if code, _, stderr := runDemoCmd(t, nil, args...); code != ExitUsage {
			t.Errorf("%q: exit %d, %s", args, code, stderr)
		}
	}
}
