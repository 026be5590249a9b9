package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

const quick = 30 * time.Millisecond

func TestRunCrypto(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.ChaCha20Poly1305, cryptodev.AES256CBCSHA512, cryptodev.NullSHA256} {
		for _, engine := range []string{Raw, "soft", "sched"} {
			s := CryptoSpec{Engine: engine, Alg: alg, Size: 100, Threads: 2, Batch: 16, Duration: quick, Warmup: 5 * time.Millisecond}
			r, err := RunCrypto(ctx, s, nil)
			if err != nil {
				t.Fatalf("%s %v: %v", engine, alg, err)
			}
			if r.OpsPerSec <= 0 || r.Ops%16 != 0 || r.Op != "encrypt" || r.Size != 100 || r.Threads != 2 || r.Batch != 16 {
				t.Errorf("%s %v: %+v", engine, alg, r)
			}
			// Bytes count the nominal size, also for CBC (which encrypts 112).
			if got := r.BytesPerSec / r.OpsPerSec; math.Abs(got-100) > 1e-6 {
				t.Errorf("%s %v: %v bytes per op, want 100", engine, alg, got)
			}
		}
	}
}

func TestRunCryptoAsym(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []cryptodev.Alg{cryptodev.Ed25519, cryptodev.ECDSAP256, cryptodev.X25519, cryptodev.ECDHP256} {
		for _, engine := range []string{Raw, "soft", "sched"} {
			s := CryptoSpec{Engine: engine, Alg: alg, Threads: 1, Batch: 64, Duration: quick, Warmup: 5 * time.Millisecond}
			r, err := RunCrypto(ctx, s, nil)
			if err != nil {
				t.Fatalf("%s %v: %v", engine, alg, err)
			}
			want := "sign"
			if alg.CanAgree() {
				want = "agree"
			}
			if r.OpsPerSec <= 0 || r.BytesPerSec != 0 || r.Size != 0 || r.Op != want || r.Batch != MaxAsymBatch {
				t.Errorf("%s %v: %+v", engine, alg, r)
			}
		}
	}
}

func TestRunESP(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES128CBCSHA256} {
		for _, dir := range []esp.Direction{esp.Outbound, esp.Inbound} {
			for _, engine := range []string{Raw, "soft", "sched"} {
				for _, size := range []Size{64, 1420, IMIX} {
					s := ESPSpec{Engine: engine, Alg: alg, Size: size, Tunnels: 5, Workers: 2, Dir: dir, Batch: 16,
						Duration: quick, Warmup: 5 * time.Millisecond}
					r, err := RunESP(ctx, s, nil)
					if err != nil {
						t.Fatalf("%s %v %s %v: %v", engine, alg, DirName(dir), size, err)
					}
					mean := float64(size)
					if size == IMIX {
						mean = (7*64 + 4*576 + 1500) / 12.0
					}
					if r.PPS <= 0 || r.MeanSize != mean || r.Direction != DirName(dir) {
						t.Errorf("%+v", r)
					}
					// Packets are counted in whole batches of 16 and the
					// IMIX cycle is 12 long, so a short window's mean can
					// stray from the cycle's.
					got, tol := r.BPS/r.PPS/8, 1e-9
					if size == IMIX {
						tol = 0.3
					}
					if math.Abs(got-mean) > mean*tol {
						t.Errorf("%s %v %v: %v bytes per packet, want %v", engine, alg, size, got, mean)
					}
				}
			}
		}
	}
}

func TestSpecErrors(t *testing.T) {
	ctx := context.Background()
	base := ESPSpec{Engine: "soft", Alg: cryptodev.AES128GCM16, Size: 64, Tunnels: 1, Workers: 1, Batch: 8, Duration: quick}
	s := base
	s.Workers = 2
	if _, err := RunESP(ctx, s, nil); !errors.Is(err, ErrTooFewTunnels) {
		t.Errorf("2 workers, 1 tunnel: %v", err)
	}
	for _, mod := range []func(*ESPSpec){
		func(s *ESPSpec) { s.Size = 27 },
		func(s *ESPSpec) { s.Size = MaxESPSize + 1 },
		func(s *ESPSpec) { s.Engine = "nope" },
		func(s *ESPSpec) { s.Alg = cryptodev.Ed25519 },
		func(s *ESPSpec) { s.Batch = 0 },
		func(s *ESPSpec) { s.Tunnels = 0 },
	} {
		s := base
		mod(&s)
		if _, err := RunESP(ctx, s, nil); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	for _, s := range []CryptoSpec{
		{Engine: "soft", Alg: cryptodev.AES128GCM16, Size: 0, Threads: 1, Batch: 1, Duration: quick},
		{Engine: "soft", Alg: cryptodev.AES128GCM16, Size: 64, Threads: 0, Batch: 1, Duration: quick},
		{Engine: "nope", Alg: cryptodev.AES128GCM16, Size: 64, Threads: 1, Batch: 1, Duration: quick},
		{Engine: "soft", Alg: cryptodev.AlgInvalid, Size: 64, Threads: 1, Batch: 1, Duration: quick},
	} {
		if _, err := RunCrypto(ctx, s, nil); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

// failLoop fails on its third step.
type failLoop struct{ n int }

func (l *failLoop) step() (int, int, error) {
	if l.n++; l.n == 3 {
		return 0, 0, errors.New("boom")
	}
	return 1, 1, nil
}
func (l *failLoop) drain() {}

func TestMeasureStopsOnError(t *testing.T) {
	_, err := measure(context.Background(), []loop{&failLoop{}, &failLoop{n: -1 << 30}}, time.Millisecond, time.Minute, nil)
	if err == nil || err.Error() != "boom" {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestMeasureCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := measure(ctx, []loop{&failLoop{n: -1 << 30}}, time.Millisecond, time.Minute, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestSizeJSON(t *testing.T) {
	b, err := json.Marshal([]Size{64, IMIX})
	if err != nil || string(b) != `[64,"imix"]` {
		t.Fatalf("%s %v", b, err)
	}
	var back []Size
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back[0] != 64 || back[1] != IMIX {
		t.Fatalf("%v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`["big"]`), &back); err == nil {
		t.Error("accepted \"big\"")
	}
}

func TestIMIXCycle(t *testing.T) {
	count := map[int]int{}
	for _, n := range imixCycle {
		count[n]++
	}
	if count[64] != 7 || count[576] != 4 || count[1500] != 1 || len(count) != 3 {
		t.Fatalf("imix cycle %v", count)
	}
}

// Machine-readable outputs of OpenSSL 3.0.19's speed.
const (
	sslGCM = `+DT:AES-128-GCM:1:64
+R:1690694:AES-128-GCM:1.000000
+H:64
+F:25:AES-128-GCM:108204416.00
`
	sslGCMMulti = `Forked child 0
Forked child 1
Got: +H:1420 from 0
Got: +F:25:AES-128-GCM:1052281060.00 from 0
Got: +H:1420 from 1
Got: +F:25:AES-128-GCM:1126210520.00 from 1
+F:25:AES-128-GCM:2178491580.00
`
	sslRSA = `+DTP:4096:private:rsa:1
+R1:158:4096:1.00
+F2:4:4096:352.059406:22471.000000
`
	sslECDSA = "+F4:3:256:28709.090909:10347.000000\n"
	sslECDH  = "+F5:22:253:20242.000000:0.000049\n"
	sslEd    = "+F6:0:253:Ed25519:15029.000000:5810.101010\n"
)

func TestParseOpenSSL(t *testing.T) {
	for _, c := range []struct {
		out  string
		alg  cryptodev.Alg
		size int
		want float64
	}{
		{sslGCM, cryptodev.AES128GCM16, 64, 108204416.0 / 64},
		{sslGCMMulti, cryptodev.AES128GCM16, 1420, 2178491580.0 / 1420},
		{sslRSA, cryptodev.RSA4096, 0, 352.059406},
		{sslECDSA, cryptodev.ECDSAP256, 0, 28709.090909},
		{sslECDH, cryptodev.X25519, 0, 20242},
		{sslEd, cryptodev.Ed25519, 0, 15029},
	} {
		got, err := ParseOpenSSL([]byte(c.out), c.alg, c.size)
		if err != nil || math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%v: %v %v, want %v", c.alg, got, err, c.want)
		}
	}
	if _, err := ParseOpenSSL([]byte("Got: +F:25:AES-128-GCM:1.00 from 0\n"), cryptodev.AES128GCM16, 64); err == nil {
		t.Error("a child's line was taken for the total")
	}
	if _, err := ParseOpenSSL([]byte("+F:25:AES-128-GCM:x\n"), cryptodev.AES128GCM16, 64); err == nil {
		t.Error("a bad number was accepted")
	}
}

func TestOpenSSLArgs(t *testing.T) {
	args, err := OpenSSLSpec{Engine: OpenSSLSpeedAEAD, Alg: cryptodev.AES128GCM16, Size: 1420, Threads: 2, Duration: 1500 * time.Millisecond}.Args()
	if want := "speed -mr -elapsed -seconds 2 -multi 2 -aead -evp aes-128-gcm -bytes 1420"; err != nil || strings.Join(args, " ") != want {
		t.Errorf("%q %v, want %q", args, err, want)
	}
	args, err = OpenSSLSpec{Engine: OpenSSLSpeed, Alg: cryptodev.X25519, Threads: 1, Duration: time.Second}.Args()
	if want := "speed -mr -elapsed -seconds 1 ecdhx25519"; err != nil || strings.Join(args, " ") != want {
		t.Errorf("%q %v, want %q", args, err, want)
	}
	if _, err := (OpenSSLSpec{Engine: OpenSSLSpeed, Alg: cryptodev.AES256CBCSHA512, Size: 64, Threads: 1}).Args(); err == nil {
		t.Error("aes256-sha512 has no openssl counterpart")
	}
	if _, err := (OpenSSLSpec{Engine: OpenSSLSpeedAEAD, Alg: cryptodev.AES128CBCSHA256, Size: 64, Threads: 1}).Args(); err == nil {
		t.Error("-aead for a CBC suite")
	}
	if e := OpenSSLEngines(cryptodev.NullSHA256); len(e) != 0 {
		t.Errorf("null-sha256: %v", e)
	}
}

func TestRunOpenSSL(t *testing.T) {
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	if testing.Short() {
		t.Skip("runs openssl for a second")
	}
	r, err := RunOpenSSL(context.Background(), path, OpenSSLSpec{Engine: OpenSSLSpeedAEAD, Alg: cryptodev.AES128GCM16, Size: 64, Threads: 1, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.OpsPerSec <= 0 || r.BytesPerSec != 64*r.OpsPerSec || !strings.Contains(r.Command, "-aead") {
		t.Errorf("%+v", r)
	}
}

func TestTables(t *testing.T) {
	ct := NewCryptoTable()
	if h := ct.Header(); !strings.Contains(h, "ops/s") || !strings.Contains(h, "vs raw") {
		t.Errorf("header %q", h)
	}
	ct.Row(CryptoResult{Engine: Raw, Alg: "aes128gcm16", Op: "encrypt", Size: 64, Threads: 1, Batch: 64, OpsPerSec: 200, BytesPerSec: 12800})
	row := ct.Row(CryptoResult{Engine: "soft", Alg: "aes128gcm16", Op: "encrypt", Size: 64, Threads: 1, Batch: 64, OpsPerSec: 190, BytesPerSec: 12160})
	if f := strings.Fields(row); f[8] != "95.0%" || f[9] != "-" {
		t.Errorf("row %q: want 95.0%% of raw", row)
	}
	row = ct.Row(CryptoResult{Engine: "soft", Alg: "rsa2048", Op: "sign", Threads: 1, Batch: 8, OpsPerSec: 1000})
	if f := strings.Fields(row); f[3] != "-" || f[7] != "-" {
		t.Errorf("sign row %q: want size and MB/s -", row)
	}
	et := NewESPTable()
	et.Row(ESPResult{Engine: Raw, Alg: "aes128gcm16", Size: IMIX, Tunnels: 1, Workers: 1, Direction: "encap", PPS: 100, BPS: 1e9})
	row = et.Row(ESPResult{Engine: "soft", Alg: "aes128gcm16", Size: IMIX, Tunnels: 1, Workers: 1, Direction: "encap", PPS: 80, BPS: 0.8e9})
	if f := strings.Fields(row); f[3] != "imix" || f[8] != "80.0%" {
		t.Errorf("esp row %q", row)
	}
}

func TestMedian(t *testing.T) {
	rs := []CryptoResult{{OpsPerSec: 3, Ops: 30}, {OpsPerSec: 1, Ops: 10}, {OpsPerSec: 2, Ops: 20}}
	m := MedianCrypto(rs)
	if m.Ops != 20 || len(m.Samples) != 3 || m.Samples[0] != 3 || m.Samples[1] != 1 {
		t.Errorf("median %+v", m)
	}
	if m := MedianCrypto(rs[:1]); m.Ops != 30 || m.Samples != nil {
		t.Errorf("median of one %+v", m)
	}
	e := MedianESP([]ESPResult{{PPS: 5}, {PPS: 9}, {PPS: 7}, {PPS: 1}})
	if e.PPS != 7 || len(e.Samples) != 4 {
		t.Errorf("median of four %+v", e)
	}
}

func TestBar(t *testing.T) {
	var b bytes.Buffer
	bar := NewBar(&b, 2)
	bar.Start("soft aes128gcm16 64B")
	bar.Progress(0.5)
	bar.Println(&b, "a row")
	bar.Done()
	bar.Finish()
	out := b.String()
	for _, want := range []string{"1/2", "soft aes128gcm16 64B", "a row\n", "====="} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output %q lacks %q", out, want)
		}
	}
	if !strings.HasSuffix(out, "\r") {
		t.Errorf("Finish did not leave the line clear: %q", out)
	}
	var nilBar *Bar // what a non-terminal gets: every method is a no-op
	nilBar.Start("x")
	nilBar.Progress(1)
	nilBar.Done()
	nilBar.Finish()
	var o bytes.Buffer
	nilBar.Println(&o, "row")
	if o.String() != "row\n" {
		t.Errorf("nil bar Println: %q", o.String())
	}
	if IsTerminal(&o) {
		t.Error("a buffer is not a terminal")
	}
}

// TestMedianSpread: the median of repetitions and their spread; the input is
// not reordered.
func TestMedianSpread(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
		sp   Spread
	}{
		{nil, 0, Spread{}},
		{[]float64{3}, 3, Spread{Min: 3, Max: 3, N: 1}},
		{[]float64{5, 1, 3}, 3, Spread{Min: 1, Max: 5, N: 3}},
		{[]float64{4, 1, 3, 2}, 2.5, Spread{Min: 1, Max: 4, N: 4}},
	} {
		in := append([]float64(nil), tc.in...)
		got, sp := Median(tc.in)
		if got != tc.want || sp != tc.sp {
			t.Errorf("Median(%v) = %v, %+v; want %v, %+v", tc.in, got, sp, tc.want, tc.sp)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("Median reordered its input: %v", tc.in)
			}
		}
	}
}
