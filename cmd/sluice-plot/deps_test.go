package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGatewayLinksNoCharts: the gateway's binary (cmd/sluice) does not
// depend on the plotting library; only this command does.
func TestGatewayLinksNoCharts(t *testing.T) {
	goExe, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not installed")
	}
	for _, tc := range []struct {
		pkg  string
		want bool
	}{
		{"github.com/sluicegw/sluice/cmd/sluice", false},
		{"github.com/sluicegw/sluice/cmd/sluice-plot", true},
	} {
		out, err := exec.Command(goExe, "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		got := strings.Contains(string(out), "gonum.org/v1/plot")
		if got != tc.want {
			t.Errorf("%s depends on gonum.org/v1/plot: %v, want %v", tc.pkg, got, tc.want)
		}
	}
}
