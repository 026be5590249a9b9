package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchDoc is the JSON document of a bench command, with the fields its
// consumers rely on.
type benchDoc struct {
	Env struct {
		Go   string `json:"go"`
		CPUs int    `json:"cpus"`
	} `json:"env"`
	Results []map[string]any `json:"results"`
	Notes   []string         `json:"notes"`
}

func runBenchJSON(t *testing.T, args ...string) benchDoc {
	t.Helper()
	code, out, errOut := run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	if strings.Contains(out, "\r") || strings.Contains(errOut, "\r") {
		t.Errorf("a progress bar was drawn in JSON mode")
	}
	var d benchDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v: output is not one JSON document: %v\n%s", args, err, out)
	}
	if d.Env.Go == "" || d.Env.CPUs <= 0 {
		t.Errorf("env %+v", d.Env)
	}
	return d
}

func hasKeys(t *testing.T, r map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := r[k]; !ok {
			t.Errorf("result %v lacks %q", r, k)
		}
	}
}

func TestBenchCryptoJSON(t *testing.T) {
	d := runBenchJSON(t, "bench", "crypto", "--engines", "raw,soft,sched", "--algs", "aes128gcm16,aes128-sha256",
		"--sizes", "64,1420", "--threads", "1,2", "--batch", "16", "--duration", "20ms")
	if len(d.Results) != 2*2*2*3 {
		t.Fatalf("%d results, want 24", len(d.Results))
	}
	for _, r := range d.Results {
		hasKeys(t, r, "engine", "alg", "size", "threads", "batch", "ops_per_sec", "bytes_per_sec")
		if r["ops_per_sec"].(float64) <= 0 || r["batch"].(float64) != 16 || r["op"] != "encrypt" {
			t.Errorf("result %v", r)
		}
	}
	if r := d.Results[0]; r["engine"] != "raw" || r["alg"] != "aes128gcm16" || r["size"].(float64) != 64 || r["threads"].(float64) != 1 {
		t.Errorf("first result %v: want raw aes128gcm16 64 bytes 1 thread", r)
	}
}

func TestBenchCryptoSignatures(t *testing.T) {
	d := runBenchJSON(t, "bench", "crypto", "--engines", "raw,soft,sched", "--algs", "ed25519,x25519", "--duration", "20ms")
	if len(d.Results) != 6 {
		t.Fatalf("%d results, want 6", len(d.Results))
	}
	for i, r := range d.Results {
		want := "sign"
		if i >= 3 {
			want = "agree"
		}
		if r["op"] != want || r["size"].(float64) != 0 || r["bytes_per_sec"].(float64) != 0 || r["ops_per_sec"].(float64) <= 0 {
			t.Errorf("result %v", r)
		}
	}
}

func TestBenchCryptoTable(t *testing.T) {
	code, out, errOut := run("bench", "crypto", "--algs", "aes128gcm16,ecdsap256", "--sizes", "64", "--duration", "20ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "\r") || strings.Contains(errOut, "\r") {
		t.Error("a progress bar was drawn on a non-terminal")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+6 || !strings.HasPrefix(lines[0], "# go") || !strings.HasPrefix(lines[1], "engine") {
		t.Fatalf("table:\n%s", out)
	}
	for _, l := range lines[2:] {
		if f := strings.Fields(l); f[0] != "raw" && !strings.HasSuffix(f[len(f)-3], "%") {
			t.Errorf("row %q has no ratio to raw", l)
		}
	}
	if f := strings.Fields(lines[len(lines)-1]); f[1] != "ecdsap256" || f[2] != "sign" || f[3] != "-" {
		t.Errorf("signature row %q", lines[len(lines)-1])
	}
}

func TestBenchESPJSON(t *testing.T) {
	d := runBenchJSON(t, "bench", "esp", "--engines", "raw,soft,sched", "--sizes", "64,imix", "--tunnels", "1,3",
		"--workers", "1,2", "--batch", "16", "--duration", "20ms")
	// 2 directions x 2 sizes x 3 (tunnels, workers) combinations x 3 engines;
	// 1 tunnel with 2 workers is skipped.
	if len(d.Results) != 2*2*3*3 {
		t.Fatalf("%d results, want 36", len(d.Results))
	}
	if len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "2 workers, 1 tunnels") {
		t.Errorf("notes %q", d.Notes)
	}
	dirs := map[any]int{}
	for _, r := range d.Results {
		hasKeys(t, r, "engine", "alg", "size", "tunnels", "workers", "direction", "pps", "bps")
		dirs[r["direction"]]++
		if r["pps"].(float64) <= 0 || r["bps"].(float64) <= 0 {
			t.Errorf("result %v", r)
		}
		if s, ok := r["size"].(string); ok && s != "imix" {
			t.Errorf("size %q", s)
		}
	}
	if dirs["encap"] != 18 || dirs["decap"] != 18 {
		t.Errorf("directions %v", dirs)
	}
}

func TestBenchCount(t *testing.T) {
	d := runBenchJSON(t, "bench", "esp", "--engines", "raw,soft", "--sizes", "64", "--dir", "encap", "--duration", "10ms", "--count", "3")
	if len(d.Results) != 2 {
		t.Fatalf("%d results, want one median row per engine", len(d.Results))
	}
	for _, r := range d.Results {
		samples, _ := r["samples"].([]any)
		if len(samples) != 3 {
			t.Fatalf("samples %v, want 3", r["samples"])
		}
		n := 0
		for _, v := range samples {
			if v.(float64) < r["pps"].(float64) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pps %v is not the median of %v", r["pps"], samples)
		}
	}
}

func TestBenchESPTable(t *testing.T) {
	code, out, errOut := run("bench", "esp", "--engines", "raw,soft", "--sizes", "1420", "--dir", "decap", "--duration", "20ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "Gbit/s") || !strings.Contains(lines[3], "decap") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestBenchCPUProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	code, _, errOut := run("bench", "esp", "--engines", "soft", "--sizes", "64", "--dir", "encap", "--duration", "20ms", "--cpuprofile", prof)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v", err)
	}
	if _, out, _ := run("bench", "esp", "--help"); strings.Contains(out, "cpuprofile") {
		t.Error("--cpuprofile is meant to be hidden")
	}
}

func TestBenchOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	if testing.Short() {
		t.Skip("runs openssl speed for seconds")
	}
	d := runBenchJSON(t, "bench", "crypto", "--openssl", "--engines", "raw", "--algs", "aes128gcm16,null-sha256", "--sizes", "64", "--duration", "1s")
	engines := map[any]bool{}
	for _, r := range d.Results {
		engines[r["engine"]] = true
		if strings.HasPrefix(r["engine"].(string), "openssl-speed") && (!strings.HasPrefix(r["command"].(string), "openssl speed") || r["ops_per_sec"].(float64) <= 0) {
			t.Errorf("openssl row %v", r)
		}
	}
	if !engines["openssl-speed"] || !engines["openssl-speed-aead"] {
		t.Errorf("engines %v: want openssl-speed and openssl-speed-aead rows", engines)
	}
	if len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "null-sha256") {
		t.Errorf("notes %q: want one about null-sha256", d.Notes)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "crypto", "--algs", "aes129gcm16"}, `unknown algorithm "aes129gcm16"`},
		{[]string{"bench", "crypto", "--engines", "soft,qat"}, `unknown engine "qat"`},
		{[]string{"bench", "crypto", "--sizes", "64,0"}, "--sizes 0"},
		{[]string{"bench", "crypto", "--sizes", "-5"}, "--sizes -5"},
		{[]string{"bench", "crypto", "--sizes", "big"}, "--sizes"},
		{[]string{"bench", "crypto", "--threads", "0"}, "--threads 0"},
		{[]string{"bench", "crypto", "--batch", "0"}, "--batch 0"},
		{[]string{"bench", "crypto", "--duration", "0s"}, "--duration"},
		{[]string{"bench", "crypto", "extra"}, "unknown command"},
		{[]string{"bench", "esp", "--algs", "rsa2048"}, `unknown ESP algorithm "rsa2048"`},
		{[]string{"bench", "esp", "--sizes", "imixx"}, `--sizes "imixx"`},
		{[]string{"bench", "esp", "--sizes", "20"}, `--sizes "20"`},
		{[]string{"bench", "esp", "--tunnels", "0"}, "--tunnels 0"},
		{[]string{"bench", "esp", "--workers", "-1"}, "--workers -1"},
		{[]string{"bench", "esp", "--dir", "sideways"}, `--dir "sideways"`},
		{[]string{"bench", "esp", "--engines", "nope"}, `unknown engine "nope"`},
		{[]string{"bench", "esp", "--count", "0"}, "--count 0"},
		{[]string{"bench", "nope"}, "unknown command"},
	} {
		code, out, errOut := run(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
		if out != "" {
			t.Errorf("%v: printed %q before failing", c.args, out)
		}
	}
}
