package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/tlsbench"
	"github.com/sluicegw/sluice/cryptodev"
	sluicetls "github.com/sluicegw/sluice/tls"
)

// runTLSCmd runs `sluice bench tls args...` in-process, bounded.
func runTLSCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	code = Run(ctx, append([]string{"bench", "tls"}, args...), strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// TestBenchTLSFlags: bad flags exit with status 2 and name the flag,
// before anything starts.
func TestBenchTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--systems", "apache"}, "--systems"},
		{[]string{"--keys", "ed448"}, "--keys"},
		{[]string{"--engines", "quantum"}, "--engines"},
		{[]string{"--versions", "1.1"}, "--versions"},
		{[]string{"--sizes", "1g"}, "--sizes"},
		{[]string{"--sizes", "0"}, "--sizes"},
		{[]string{"--conns", "0"}, "--conns"},
		{[]string{"--duration", "1ms"}, "--duration"},
		{[]string{"--repeat", "0"}, "--repeat"},
		{[]string{"--client", "curl"}, "--client"},
		{[]string{"--gomaxprocs", "-1"}, "--gomaxprocs"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, stdout, stderr := runTLSCmd(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d naming %s", tc.args, code, stdout, stderr, ExitUsage, tc.want)
		}
	}
}

// requireNginx skips without nginx, except under CI=true, where it fails.
func requireNginx(t *testing.T) {
	t.Helper()
	if _, err := tlsbench.FindNginx(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skip(err)
	}
}

// benchProcesses lists the processes still running from a bench's
// directory (nginx, sluice), by their command lines.
func benchProcesses(t *testing.T) []string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("sluice-bench-tls-")) {
			out = append(out, e.Name()+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// shortTLSArgs are the flags of a bench that takes seconds: one key, one
// version, one size, tiny windows, the Go client.
var shortTLSArgs = []string{"--keys", "ecdsap256", "--versions", "1.3", "--sizes", "1k", "--duration", "200ms",
	"--repeat", "1", "--conns", "2", "--client", "go", "--json"}

// checkTLSDoc parses a bench's JSON and checks that every server has a
// positive rate for every measurement and nothing is left running.
func checkTLSDoc(t *testing.T, stdout string, servers []string) tlsbench.Document {
	t.Helper()
	var doc tlsbench.Document
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("JSON: %v\n%s", err, stdout)
	}
	got := map[string]float64{}
	for _, r := range doc.Results {
		got[r.Server.String()+" "+r.Metric] = r.Value
		if r.Unit == "" || r.Spread.N != 1 || r.Value < 0 {
			t.Errorf("record %+v", r)
		}
	}
	for _, s := range servers {
		for _, m := range []string{tlsbench.HSFull, tlsbench.Req, tlsbench.LatIdleP99, tlsbench.LatStormP99, tlsbench.StormHS} {
			if m == tlsbench.Req && s == "sluice/sched" {
				continue // requests run on sluice's first engine only
			}
			if got[s+" "+m] <= 0 {
				t.Errorf("%s %s: %v, want > 0", s, m, got[s+" "+m])
			}
		}
	}
	if ps := benchProcesses(t); len(ps) > 0 {
		t.Errorf("left running: %q", ps)
	}
	return doc
}

// TestBenchTLSNginx: a very short bench of nginx alone gives figures for
// every measurement and stops nginx.
func TestBenchTLSNginx(t *testing.T) {
	requireNginx(t)
	t.Cleanup(func() {
		if ps := benchProcesses(t); len(ps) > 0 {
			t.Errorf("left running: %q", ps)
		}
	})
	code, stdout, stderr := runTLSCmd(t, append([]string{"--systems", "nginx"}, shortTLSArgs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	doc := checkTLSDoc(t, stdout, []string{"nginx"})
	if got := doc.Results[0].Server; got.System != tlsbench.Nginx || got.Engine != "-" {
		t.Errorf("first record's server %+v", got)
	}
	if !strings.Contains(strings.Join(doc.Notes, "\n"), "one worker process") {
		t.Errorf("notes %q: want the nginx worker note", doc.Notes)
	}
}

// sluiceTLSListener reports whether this build has a TLS service that
// starts a listener (the tls package's implementation).
func sluiceTLSListener(t *testing.T) bool {
	t.Helper()
	m, err := tlsbench.NewMaterial(t.TempDir(), []string{tlsbench.ECDSAP256}, []int{1024})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sluicetls.Start(sluicetls.Config{Listeners: []sluicetls.ListenerConfig{{
		Name: "probe", Listen: "127.0.0.1:0", Backend: "static:" + m.WWW, Engine: "soft",
		Certs: []sluicetls.Cert{{CertFile: m.Certs[tlsbench.ECDSAP256].Cert, KeyFile: m.Certs[tlsbench.ECDSAP256].Key}},
	}}}, sluicetls.Options{Engine: cryptodev.Open})
	if err != nil {
		t.Logf("no TLS listener in this build: %v", err)
		return false
	}
	s.Close()
	return true
}

// TestBenchTLSSluice: a very short bench of sluice (this test binary as
// `sluice run`, with soft and sched) and nginx gives figures for every
// server, the ratios against nginx, and stops everything.
func TestBenchTLSSluice(t *testing.T) {
	requireNginx(t)
	if !sluiceTLSListener(t) {
		t.Skip("the sluice TLS listener is not available in this build")
	}
	useTestBinaryAsGateway(t)
	t.Cleanup(func() {
		if ps := benchProcesses(t); len(ps) > 0 {
			t.Errorf("left running: %q", ps)
		}
	})
	code, stdout, stderr := runTLSCmd(t, append([]string{"--engines", "soft,sched"}, shortTLSArgs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	doc := checkTLSDoc(t, stdout, []string{"nginx", "sluice/soft", "sluice/sched"})
	targets := map[string]bool{}
	for _, r := range doc.Ratios {
		targets[r.Target+" "+r.Server.String()] = true
	}
	for _, want := range []string{"ecdsa_full sluice/soft", "ecdsa_full sluice/sched", "ecdsa_resumed sluice/soft",
		"req_1k sluice/soft", "storm_p99 sluice/sched", "storm_p99 nginx"} {
		if !targets[want] {
			t.Errorf("no ratio %q in %v", want, targets)
		}
	}
}
