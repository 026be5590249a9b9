package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/internal/lab"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestPercentile: nearest rank, on a copy, with the edges.
func TestPercentile(t *testing.T) {
	ds := []time.Duration{ms(50), ms(10), ms(40), ms(20), ms(30)}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{1, ms(10)}, {20, ms(10)}, {21, ms(20)}, {50, ms(30)}, {60, ms(30)}, {61, ms(40)}, {99, ms(50)}, {100, ms(50)}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%g of %v = %v, want %v", tc.p, ds, got, tc.want)
		}
	}
	if ds[0] != ms(50) {
		t.Errorf("Percentile sorted its argument: %v", ds)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
	one := []time.Duration{ms(7)}
	if d := DistOf(one); d != (Dist{ms(7), ms(7), ms(7)}) {
		t.Errorf("DistOf(%v) = %+v", one, d)
	}
	// 100 values 1..100 ms: p99 is the 99th.
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, ms(i))
	}
	if d := DistOf(hundred); d != (Dist{ms(50), ms(99), ms(100)}) {
		t.Errorf("DistOf(1..100 ms) = %+v", d)
	}
}

// TestSummarize: gaps by percentile, losses by median, refusals by the
// most, runs that gave up counted; strongSwan's -1 refusals stay "-".
func TestSummarize(t *testing.T) {
	ss := []Sample{
		{GapUp: ms(300), GapDown: ms(310), LostUp: 6000, LostDown: 6200, Refused: 90, TCPStall: ms(400)},
		{GapUp: ms(320), GapDown: ms(330), LostUp: 6400, LostDown: 6600, Refused: 120, TCPStall: ms(600)},
		{GapUp: ms(280), GapDown: ms(900), LostUp: 5600, LostDown: 18000, Refused: 100, TCPStall: ms(500), GaveUp: true},
		{GapUp: ms(290), GapDown: ms(320), LostUp: 5800, LostDown: 6400, Refused: 110, TCPError: "the TCP stream carried nothing"},
	}
	s := Summarize(SluiceHA, ss)
	want := Summary{System: SluiceHA, Runs: 4, GaveUp: 1,
		GapUp: Dist{ms(290), ms(320), ms(320)}, GapDown: Dist{ms(320), ms(900), ms(900)},
		LostUp: 5800, LostDown: 6400, LostMax: 18000, Refused: 120, TCPStall: Dist{ms(500), ms(600), ms(600)}}
	if s != want {
		t.Errorf("Summarize:\n got %+v\nwant %+v", s, want)
	}
	ss = []Sample{{GapUp: ms(1), Refused: -1}}
	if s := Summarize(StrongSwanRestart, ss); s.Refused != -1 {
		t.Errorf("refusals of a system that does not count them: %d, want -1", s.Refused)
	}
}

// TestTable: the row shows seconds, ">bound" where the bound was reached,
// and "-" for refusals not counted; columns line up with the header.
func TestTable(t *testing.T) {
	tb := Table{GiveUp: 60 * time.Second}
	ha := Summary{System: SluiceHA, Runs: 5, GapUp: Dist{ms(310), ms(345), ms(345)}, GapDown: Dist{ms(305), ms(350), ms(350)},
		LostUp: 6100, LostDown: 6050, Refused: 87, TCPStall: Dist{ms(500), ms(600), ms(700)}}
	ss := Summary{System: StrongSwanRestart, Runs: 5, GapUp: Dist{60 * time.Second, 60 * time.Second, 61 * time.Second},
		GapDown: Dist{ms(42500), 60 * time.Second, 60 * time.Second}, Refused: -1, TCPStall: Dist{60 * time.Second, 60 * time.Second, 60 * time.Second}}
	rowHA, rowSS := tb.Row(ha), tb.Row(ss)
	for _, want := range []string{"sluice-ha", "0.310s/0.345s/0.345s", "0.305s/0.350s/0.350s", "6100/6050", " 87 ", "0.500s/0.700s"} {
		if !strings.Contains(rowHA, want) {
			t.Errorf("row %q lacks %q", rowHA, want)
		}
	}
	for _, want := range []string{">60s/>60s/>60s", "42.5s/>60s/>60s", " - "} {
		if !strings.Contains(rowSS, want) {
			t.Errorf("row %q lacks %q", rowSS, want)
		}
	}
	h := tb.Header()
	for _, col := range []string{"gap up", "gap down", "lost up/down", "refused", "TCP stall"} {
		if !strings.Contains(h, col) {
			t.Errorf("header %q lacks %q", h, col)
		}
	}
	if strings.Index(h, "refused")+len("refused") != strings.Index(rowHA, "87")+len("87") {
		t.Errorf("the refused column is not right-aligned under its header:\n%s\n%s", h, rowHA)
	}
	var w bytes.Buffer
	WriteRatios(&w, []Summary{ha, ss}, tb.GiveUp)
	if got := w.String(); !strings.Contains(got, "strongswan-restart >60s, sluice-ha 0.350s: strongswan-restart/sluice-ha = >=171.4 (target >= 20)") {
		t.Errorf("ratios: %q", got)
	}
	w.Reset()
	WriteThroughput(&w, &Throughput{Without: 400, With: 380, Repeat: 3, Seconds: 5})
	if got := w.String(); !strings.Contains(got, "without a standby 400 Mbit/s, with one 380 Mbit/s (95.0%)") {
		t.Errorf("throughput: %q", got)
	}
}

// TestDocumentJSON: the document's shape, durations in nanoseconds.
func TestDocumentJSON(t *testing.T) {
	d := &Document{Samples: []Sample{{System: SluiceRestart, Run: 1, GapUp: ms(43), Refused: 12}},
		Summaries: []Summary{Summarize(SluiceRestart, []Sample{{GapUp: ms(43), Refused: 12}})}}
	var b bytes.Buffer
	if err := d.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Samples []struct {
			System string `json:"system"`
			GapUp  int64  `json:"gap_up_ns"`
		} `json:"samples"`
		Summaries []struct {
			GapUp struct {
				P99 int64 `json:"p99_ns"`
			} `json:"gap_up"`
			Refused int64 `json:"refused_max"`
		} `json:"summaries"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Samples) != 1 || v.Samples[0].System != SluiceRestart || v.Samples[0].GapUp != 43e6 ||
		len(v.Summaries) != 1 || v.Summaries[0].GapUp.P99 != 43e6 || v.Summaries[0].Refused != 12 || v.Notes == nil {
		t.Errorf("document %s", b.String())
	}
}

// TestCheck: every bound of the options is checked, with the flag named.
func TestCheck(t *testing.T) {
	ok := Options{Systems: Systems, Runs: 5, Rate: DefaultRate, TCPMbps: DefaultTCPMbps, GiveUp: DefaultGiveUp,
		DPDDelay: DefaultDPDDelay, Throughput: DefaultThroughput, ThroughputRepeat: DefaultTPRepeat}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.Systems = nil }, "--systems"},
		{func(o *Options) { o.Systems = []string{"keepalived"} }, "--systems"},
		{func(o *Options) { o.Runs = 0 }, "--runs"},
		{func(o *Options) { o.Rate = 10 }, "--rate"},
		{func(o *Options) { o.TCPMbps = 0 }, "--tcp-rate"},
		{func(o *Options) { o.GiveUp = time.Second }, "--give-up"},
		{func(o *Options) { o.DPDDelay = 0 }, "--dpd-delay"},
		{func(o *Options) { o.Throughput = -time.Second }, "--throughput"},
		{func(o *Options) { o.ThroughputRepeat = 0 }, "--throughput-repeat"},
	} {
		o := ok
		tc.set(&o)
		if err := o.Check(); err == nil || !strings.HasPrefix(err.Error(), tc.want+" ") && !strings.HasPrefix(err.Error(), tc.want+":") {
			t.Errorf("Check: %v, want an error naming %s", err, tc.want)
		}
	}
	o := ok
	o.Systems = []string{StrongSwanRestart, SluiceHA}
	if got := o.Ordered(); len(got) != 2 || got[0] != SluiceHA {
		t.Errorf("Ordered: %v", got)
	}
	if o.Steps() != 2*5+2*DefaultTPRepeat {
		t.Errorf("Steps: %d", o.Steps())
	}
}

// TestHasRole: a member has a role once a group shows it in sync.
func TestHasRole(t *testing.T) {
	st := ha.Status{Groups: []ha.GroupStatus{{Name: "site", Role: "owner", InSync: false}}}
	if hasRole(st, "owner") {
		t.Error("an owner whose standby is not in sync counts")
	}
	st.Groups = append(st.Groups, ha.GroupStatus{Name: "site2", Role: "standby", InSync: true})
	if !hasRole(st, "standby") || hasRole(st, "owner") {
		t.Errorf("hasRole(%+v) wrong", st)
	}
}

// buildSluice builds cmd/sluice into dir.
func buildSluice(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/sluice")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, b)
	}
	return out
}

type testObserver struct{ t *testing.T }

func (o testObserver) Step(label string)                { o.t.Log(label) }
func (o testObserver) StepDone()                        {}
func (o testObserver) Note(msg string)                  { o.t.Log("note:", msg) }
func (o testObserver) SystemDone(s Summary, _ []Sample) { o.t.Log(Table{}.Row(s)) }

// TestSmoke: as root, one kill of sluice-restart at a low rate gives a
// sample with a gap both ways and traffic back, and leaves no namespace
// behind. Times are not checked (the machine may be loaded).
func TestSmoke(t *testing.T) {
	lab.Require(t)
	for _, tool := range []string{"nft", "ping", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v", tool, err)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	bin := buildSluice(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := Options{Systems: []string{SluiceRestart}, Runs: 1, Rate: 2000, TCPMbps: 5, GiveUp: 20 * time.Second, DPDDelay: DefaultDPDDelay,
		GatewayArgv: func(args ...string) ([]string, error) { return append([]string{bin}, args...), nil }}
	doc, err := Run(ctx, o, testObserver{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Samples) != 1 || len(doc.Summaries) != 1 {
		t.Fatalf("samples %+v, summaries %+v", doc.Samples, doc.Summaries)
	}
	s := doc.Samples[0]
	if s.GaveUp || s.GapUp <= 0 || s.GapDown <= 0 || s.Refused < 0 || s.TCPMbps <= 0 {
		t.Errorf("sample %+v: want traffic back, a gap both ways, refusals counted and the TCP stream's rate", s)
	}
	left, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range strings.Fields(string(left)) {
		if strings.HasPrefix(n, lab.Prefix+strconv.Itoa(os.Getpid())+"-") {
			t.Errorf("namespace %s left behind", n)
		}
	}
}
