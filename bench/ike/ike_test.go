package ikebench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

type testObserver struct{ t *testing.T }

func (o testObserver) Step(label string)   { o.t.Log(label) }
func (o testObserver) StepDone()           {}
func (o testObserver) Progress(float64)    {}
func (o testObserver) Note(msg string)     { o.t.Log("note:", msg) }
func (o testObserver) ResultDone(r Result) { o.t.Log(Table{}.Row(r)) }

// buildSluice builds ./cmd/sluice into dir.
func buildSluice(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", out, "github.com/sluicegw/sluice/cmd/sluice")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, b)
	}
	return out
}

// TestTiny: as root, 20 road warriors of each kind (PSK, ECDSA, RSA) against sluice (and charon when
// installed) all complete, each with its Child SA installed at the
// responder, and the figures are filled in.
func TestTiny(t *testing.T) {
	lab.Require(t)
	systems := []string{Sluice}
	if _, err := exec.LookPath(lab.CharonPath); err == nil {
		systems = append(systems, Charon)
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v (CI=true: not skipping charon)", lab.CharonPath, err)
	}
	bin := buildSluice(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := Options{Systems: systems, Auth: AuthKinds, Count: 20, Concurrency: 4, Duration: time.Minute,
		GatewayArgv: func(args ...string) ([]string, error) { return append([]string{bin}, args...), nil }}
	doc, err := Run(ctx, o, testObserver{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != len(systems)*len(AuthKinds) {
		t.Fatalf("results %+v, want one per system and kind", doc.Results)
	}
	for _, r := range doc.Results {
		if r.Completed != 20 || r.Failed != 0 || r.Installed != 20 {
			t.Errorf("%s, %s: %d completed, %d failed, %d installed; want 20, 0, 20 (%s)", r.System, r.Auth, r.Completed, r.Failed, r.Installed, r.FirstError)
		}
		// 20 setups may take less than a clock tick (10 ms) of the
		// responder's CPU.
		if r.PerSecond <= 0 || r.CPU < 0 || (r.CPU > 0) != (r.PerCPUSec > 0) || r.P50 <= 0 || r.P99 < r.P50 || r.RSSAfter <= 0 {
			t.Errorf("%s: figures missing: %+v", r.System, r)
		}
	}
}
