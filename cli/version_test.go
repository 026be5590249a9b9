package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cli"
	"github.com/sluicegw/sluice/internal/buildinfo"
)

// TestVersion: `sluice version` and `sluice --version` print the same line,
// naming the Go toolchain and the engines linked in; --json is the Info.
func TestVersion(t *testing.T) {
	code, out, stderr := run("version")
	if code != 0 {
		t.Fatalf("version: exit %d: %s", code, stderr)
	}
	want := buildinfo.Get().String()
	if strings.TrimSpace(out) != want {
		t.Errorf("version printed %q, want %q", out, want)
	}
	// Engines are listed by priority: with -tags ipsecmb, ipsecmb first.
	for _, s := range []string{"sluice ", "go1.", "engines ", "soft"} {
		if !strings.Contains(out, s) {
			t.Errorf("version %q lacks %q", out, s)
		}
	}
	code, flagOut, stderr := run("--version")
	if code != 0 || flagOut != out {
		t.Errorf("--version: exit %d, %q (stderr %q); want %q", code, flagOut, stderr, out)
	}
	code, js, stderr := run("version", "--json")
	if code != 0 {
		t.Fatalf("version --json: exit %d: %s", code, stderr)
	}
	var in buildinfo.Info
	if err := json.Unmarshal([]byte(js), &in); err != nil || in.Version == "" || len(in.Engines) == 0 {
		t.Errorf("version --json: %v %+v\n%s", err, in, js)
	}
	if code, _, _ := run("version", "extra"); code != cli.ExitUsage {
		t.Errorf("version extra: exit %d, want %d", code, cli.ExitUsage)
	}
}
