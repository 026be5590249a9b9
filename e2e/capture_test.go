package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicegw/sluice/internal/lab"
)

// captureEnv names a directory: when it is set, captureNS records every
// packet of a test's namespaces there (tcpdump -i any, one pcap per
// namespace and test) and the daemons' logs are copied beside them, so
// that a lost packet can be followed hop by hop afterwards (tshark).
const captureEnv = "SLUICE_E2E_PCAP"

// captureNS starts tcpdump on all of ns's interfaces, those made later
// included, if captureEnv is set; the lab stops it (tcpdump then flushes
// its file). logs are copied into the directory when the test ends.
func captureNS(t *testing.T, l *lab.Lab, nss []*lab.Netns, logs ...string) {
	dir := os.Getenv(captureEnv)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sub, err := os.MkdirTemp(dir, filepath.Base(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capturing into %s", sub)
	for _, ns := range nss {
		file := filepath.Join(sub, ns.Name()+".pcap")
		if _, err := l.Start(ns, "tcpdump "+ns.Name(), []string{"tcpdump", "-i", "any", "-n", "-U", "-s", "200", "-w", file}, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, f := range logs {
			if data, err := os.ReadFile(f); err == nil {
				os.WriteFile(filepath.Join(sub, filepath.Base(f)), data, 0o644)
			}
		}
	})
}
