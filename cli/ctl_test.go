package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway"
)

// fakeGateway serves a controltest.Backend on a fresh socket until the
// test ends.
func fakeGateway(t *testing.T) (string, *controltest.Backend) {
	t.Helper()
	path := controltest.SocketPath(t)
	b := controltest.New()
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(b)
	t.Cleanup(func() { s.Close() })
	return path, b
}

// sluice runs the command line with ctx and returns the exit status and
// what went to stdout and stderr.
func ctlRunCtx(ctx context.Context, stdin string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func ctlRun(args ...string) (int, string, string) {
	return ctlRunCtx(context.Background(), "", args...)
}

// lines trims the trailing spaces tabwriter may leave and returns the
// lines of out.
func ctlLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		ls = append(ls, strings.TrimRight(l, " "))
	}
	return ls
}

func ctlCheckLines(t *testing.T, what, got string, want ...string) {
	t.Helper()
	g := ctlLines(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got:\n%s\nwant:\n%s", what, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

func TestSAList(t *testing.T) {
	sock, _ := fakeGateway(t)
	code, out, errOut := ctlRun("sa", "list", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "sa list", out,
		"TUNNEL  DIR  NAME    SPI         ALG          FLAGS  PACKETS  BYTES  DROPS",
		"to-b    out  a-to-b  0x00001001  aes128gcm16  -      10       1000   -",
		"to-b    in   b-to-a  0x00002001  aes128gcm16  -      7        700    auth_failed=1 replay=2",
	)
	_, out, _ = ctlRun("sa", "list", "-o", "wide", "--socket", sock)
	ctlCheckLines(t, "sa list -o wide", out,
		"TUNNEL  DIR  NAME    SPI         ALG          MODE    ENCAP  ENGINE  FLAGS  PACKETS  BYTES  DROPS",
		"to-b    out  a-to-b  0x00001001  aes128gcm16  tunnel  udp    soft    -      10       1000   -",
		"to-b    in   b-to-a  0x00002001  aes128gcm16  tunnel  udp    soft    -      7        700    auth_failed=1 replay=2",
	)
	code, out, _ = ctlRun("sa", "--socket", sock, "list", "--json")
	var sas []gateway.SAInfo
	if err := json.Unmarshal([]byte(out), &sas); code != 0 || err != nil || len(sas) != 2 || sas[1].Drops["replay"] != 2 {
		t.Fatalf("sa list --json: exit %d, %v: %s", code, err, out)
	}
}

func TestSAAddDel(t *testing.T) {
	sock, b := fakeGateway(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const sa = `[[sa]]
name = "b-to-a-new"
spi = 0x2002
encap = "udp"
esp = "aes128gcm16"
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`
	good := write("new.toml", sa)
	code, out, errOut := ctlRun("sa", "add", "--socket", sock, "--tunnel", "to-b", "--dir", "in", good)
	if code != 0 || out != "tunnel to-b now also receives with SA b-to-a-new (SPI 0x00002002)\n" {
		t.Fatalf("sa add in: exit %d, %q, %q", code, out, errOut)
	}
	out2 := strings.Replace(sa, "0x2002", "0x1002", 1)
	out2 = strings.Replace(out2, "b-to-a-new", "a-to-b-new", 1)
	code, out, errOut = ctlRunCtx(context.Background(), out2, "sa", "add", "--socket", sock, "--tunnel", "to-b", "--dir", "out", "-")
	if code != 0 || out != "tunnel to-b now sends with SA a-to-b-new (SPI 0x00001002)\n" {
		t.Fatalf("sa add out from stdin: exit %d, %q, %q", code, out, errOut)
	}
	if ts := b.Tunnels(); ts[0].Out != "a-to-b-new" || len(ts[0].In) != 2 {
		t.Fatalf("tunnel after sa add: %+v", ts[0])
	}

	code, out, errOut = ctlRun("sa", "del", "--socket", sock, "--spi", "0x2001")
	if code != 0 || out != "deleted the inbound SA with SPI 0x00002001\n" {
		t.Fatalf("sa del: exit %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = ctlRun("sa", "del", "--socket", sock, "--spi", "8193")
	if code != ExitUsage || errOut != "sluice: sad: no inbound SA with SPI 0x2001\n" {
		t.Fatalf("sa del of a gone SA: exit %d, %q", code, errOut)
	}

	calls := b.Calls("AddSA")
	bad := write("bad.toml", strings.Replace(sa, `"aes128gcm16"`, `"aes128gcm"`, 1))
	two := write("two.toml", sa+strings.NewReplacer("0x2002", "0x2003", "b-to-a-new", "other").Replace(sa))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--tunnel", "to-b", "--dir", "in", bad}, "sluice: " + bad + ":5:7: sa[1].esp: unknown ESP algorithm \"aes128gcm\""},
		{[]string{"--tunnel", "to-b", "--dir", "in", two}, "sluice: " + two + ": want exactly one [[sa]] table, found 2\n"},
		{[]string{"--tunnel", "to-b", "--dir", "in", filepath.Join(dir, "none.toml")}, "no such file or directory"},
		{[]string{"--tunnel", "to-b", "--dir", "sideways", good}, `sluice: --dir must be in or out, not "sideways"`},
		{[]string{"--dir", "in", good}, `required flag(s) "tunnel" not set`},
		{[]string{"--tunnel", "to-b", "--dir", "in"}, "accepts 1 arg(s), received 0"},
	}
	for _, tt := range tests {
		code, _, errOut := ctlRun(append([]string{"sa", "add", "--socket", sock}, tt.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("sa add %q: exit %d, %q, want %q", tt.args, code, errOut, tt.want)
		}
	}
	if b.Calls("AddSA") != calls {
		t.Errorf("bad input reached the gateway")
	}
	// Errors the gateway finds come back as they are.
	code, _, errOut = ctlRun("sa", "add", "--socket", sock, "--tunnel", "to-x", "--dir", "in", good)
	if code != ExitUsage || errOut != "sluice: gateway: no tunnel \"to-x\"\n" {
		t.Errorf("sa add to a missing tunnel: exit %d, %q", code, errOut)
	}
	code, _, errOut = ctlRun("sa", "del", "--socket", sock, "--spi", "0x1_0000_0000")
	if code != ExitUsage || !strings.Contains(errOut, "--spi") {
		t.Errorf("sa del with a bad SPI: exit %d, %q", code, errOut)
	}
}

func TestTunnelAndPolicyList(t *testing.T) {
	sock, _ := fakeGateway(t)
	code, out, errOut := ctlRun("tunnel", "list", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "tunnel list", out,
		"NAME  PEER       ENCAP  MTU   OUT     IN      REMOTE",
		"to-b  192.0.2.2  udp    1400  a-to-b  b-to-a  10.2.0.0/24",
	)
	_, out, _ = ctlRun("tunnel", "list", "-o", "wide", "--socket", sock)
	ctlCheckLines(t, "tunnel list -o wide", out,
		"NAME  LOCAL      PEER       ENCAP  MTU   WORKER  OUT     IN      REMOTE",
		"to-b  192.0.2.1  192.0.2.2  udp    1400  0       a-to-b  b-to-a  10.2.0.0/24",
	)
	code, out, _ = ctlRun("tunnel", "list", "--json", "--socket", sock)
	var ts []gateway.TunnelInfo
	if err := json.Unmarshal([]byte(out), &ts); code != 0 || err != nil || len(ts) != 1 || ts[0].MTU != 1400 {
		t.Fatalf("tunnel list --json: exit %d, %v: %s", code, err, out)
	}
	code, out, errOut = ctlRun("policy", "list", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "policy list", out,
		"#  NAME  SELECTOR                        ACTION   TUNNEL",
		"1  web   10.1.0.0/24 -> 10.2.0.0/24 tcp  protect  to-b",
	)
	code, out, _ = ctlRun("policy", "list", "--json", "--socket", sock)
	var ps []gateway.PolicyInfo
	if err := json.Unmarshal([]byte(out), &ps); code != 0 || err != nil || len(ps) != 1 || ps[0].Action != "protect" {
		t.Fatalf("policy list --json: exit %d, %v: %s", code, err, out)
	}
}

func TestEmptyLists(t *testing.T) {
	path := controltest.SocketPath(t)
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(&controltest.Backend{})
	defer s.Close()
	for args, want := range map[string]string{
		"sa list":        "no SAs\n",
		"tunnel list":    "no tunnels\n",
		"policy list":    "no policies: route-based mode (each tunnel's remote prefixes)\n",
		"sa list --json": "[]\n",
	} {
		code, out, errOut := ctlRun(append(strings.Fields(args), "--socket", path)...)
		if code != 0 || out != want {
			t.Errorf("%s: exit %d, %q, %q; want %q", args, code, out, errOut, want)
		}
	}
}

var wantStatsTable = []string{
	"WORKER  SEALED  OPENED  TX  TX ERRORS  DROPS",
	"0       10      7       17  0          no_route=3",
	"1       0       0       0   0          -",
	"total   10      7       17  0          no_route=3",
	"",
	"RECEIVER  SIDE   PACKETS  BYTES  DROPS",
	"0         plain  13       1300   -",
	"1         esp    10       1500   unknown_spi=1",
	"",
	"TUNNEL  DIR  SA      SPI         PACKETS  BYTES  DROPS",
	"to-b    out  a-to-b  0x00001001  10       1000   -",
	"to-b    in   b-to-a  0x00002001  7        700    auth_failed=1 replay=2",
	"",
	"TLS  KIND       LISTEN          OPEN  HANDSHAKES  BYTES IN  BYTES OUT  FAILURES",
	"web  terminate  127.0.0.1:8443  2     10          5120      1048576    protocol=1 timeout=1",
}

func TestStats(t *testing.T) {
	sock, _ := fakeGateway(t)
	code, out, errOut := ctlRun("stats", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "stats", out, wantStatsTable...)
	code, out, _ = ctlRun("stats", "-o", "wide", "--socket", sock)
	if code != 0 || !strings.Contains(out, "\n"+
		"TLS  KIND       LISTEN          OPEN  ACCEPTED  REFUSED  IDLE CLOSED  HANDSHAKES  RESUMED  BYTES IN  BYTES OUT  REQUESTS  SIGNS  BATCHES  MEAN BATCH  MAX BATCH  QUEUE  FAILURES\n"+
		"web  terminate  127.0.0.1:8443  2     12        1        3            10          4        5120      1048576    7         6      2        3.0         4          0      protocol=1 timeout=1\n") {
		t.Errorf("stats -o wide: exit %d:\n%s", code, out)
	}
	code, out, _ = ctlRun("stats", "--json", "--socket", sock)
	var st gateway.Stats
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Dataplane.Receivers) != 2 {
		t.Fatalf("stats --json: exit %d, %v: %s", code, err, out)
	}
	for _, args := range [][]string{{"--interval", "2s"}, {"--watch", "--interval", "1ms"}, {"--watch", "--interval", "soon"}, {"-o", "tall"}} {
		if code, _, errOut := ctlRun(append([]string{"stats", "--socket", sock}, args...)...); code != ExitUsage {
			t.Errorf("stats %q: exit %d, %q", args, code, errOut)
		}
	}
}

// endAfterCalls returns a context that ends once the backend has
// answered method n times (or after 10 s): a watch is ended by the reads
// it made, not by a deadline that a loaded machine may reach first.
func endAfterCalls(t *testing.T, b *controltest.Backend, method string, n int) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for b.Calls(method) < n {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		cancel()
	}()
	return ctx
}

func TestStatsWatch(t *testing.T) {
	sock, b := fakeGateway(t)
	// The fourth read starts after the third snapshot is printed.
	ctx := endAfterCalls(t, b, "Stats", 4)
	code, out, errOut := ctlRunCtx(ctx, "", "stats", "--watch", "--interval", "100ms", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	snaps := strings.Split(out, "--- ")[1:]
	// A read in flight when the watch ends is not shown.
	if n := b.Calls("Stats"); len(snaps) < 3 || n < len(snaps) || n > len(snaps)+1 {
		t.Fatalf("%d snapshots, %d reads at 100ms:\n%s", len(snaps), b.Calls("Stats"), out)
	}
	if strings.Contains(out, ctlClearScreen) {
		t.Errorf("screen cleared on a pipe")
	}
	// Each snapshot is a whole table set, after a timestamp line: the
	// first with the totals, the next ones with rates (the fake's
	// counters stand still).
	for i, s := range snaps {
		head, body, _ := strings.Cut(s, "\n")
		ts, what, _ := strings.Cut(head, " ")
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("snapshot header %q: %v", head, err)
		}
		if i == 0 {
			if what != "(totals; rates per second from the next snapshot)" {
				t.Errorf("first snapshot header %q", head)
			}
			ctlCheckLines(t, "snapshot", body, wantStatsTable...)
			continue
		}
		if !strings.HasPrefix(what, "(rates per second over the last ") {
			t.Errorf("snapshot header %q", head)
		}
		if !strings.Contains(body, "\nto-b    in   b-to-a  0x00002001  0       0       0        auth_failed=1 replay=2\n") {
			t.Errorf("snapshot %d:\n%s", i, body)
		}
	}

	ctx = endAfterCalls(t, b, "Stats", b.Calls("Stats")+3)
	code, out, _ = ctlRunCtx(ctx, "", "stats", "--watch", "--json", "--interval", "100ms", "--socket", sock)
	js := ctlLines(out)
	if code != 0 || len(js) < 2 {
		t.Fatalf("--watch --json: exit %d:\n%s", code, out)
	}
	for _, l := range js {
		var st gateway.Stats
		if err := json.Unmarshal([]byte(l), &st); err != nil || len(st.SAs) != 2 {
			t.Errorf("line %q: %v", l, err)
		}
	}
}

// A watch ends with an error when the gateway goes away.
func TestStatsWatchGatewayGone(t *testing.T) {
	path := controltest.SocketPath(t)
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := controltest.New()
	s.Serve(b)
	// Gone once the second read came: the first snapshot is printed.
	go func() {
		for end := time.Now().Add(10 * time.Second); b.Calls("Stats") < 2 && time.Now().Before(end); {
			time.Sleep(2 * time.Millisecond)
		}
		s.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, out, errOut := ctlRunCtx(ctx, "", "stats", "--watch", "--interval", "100ms", "--socket", path)
	if code != ExitUsage || !strings.Contains(errOut, "cannot reach sluice at "+path) || !strings.Contains(out, "--- ") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	if ctx.Err() != nil {
		t.Fatal("watch did not end")
	}
}

func TestReload(t *testing.T) {
	sock, b := fakeGateway(t)
	code, out, errOut := ctlRun("reload", "--socket", sock)
	if code != 0 || out != "configuration reloaded: nothing changed\n" || b.Calls("Reload") != 1 {
		t.Fatalf("reload: exit %d, %q, %q", code, out, errOut)
	}
	b.SetReloadChanges([]string{"tunnel added tunnel=t2", "inbound SA installed tunnel=t sa=i spi=0x2001"})
	code, out, errOut = ctlRun("reload", "--socket", sock)
	want := "configuration reloaded: 2 changes\n  tunnel added tunnel=t2\n  inbound SA installed tunnel=t sa=i spi=0x2001\n"
	if code != 0 || out != want {
		t.Fatalf("reload with changes: exit %d, %q, %q; want %q", code, out, errOut, want)
	}
	b.SetReloadChanges(nil)
	b.SetReloadErr(errors.New("gw.toml:3:11: gateway.workers: want an integer 0..1024\ngw.toml:9:1: tunnel[1].peer: required"))
	code, out, errOut = ctlRun("reload", "--socket", sock)
	if code != ExitUsage || out != "" || errOut != "sluice: gw.toml:3:11: gateway.workers: want an integer 0..1024\ngw.toml:9:1: tunnel[1].peer: required\n" {
		t.Fatalf("refused reload: exit %d, %q, %q", code, out, errOut)
	}
}

func TestDeadSocket(t *testing.T) {
	path := controltest.SocketPath(t)
	want := "sluice: cannot reach sluice at " + path + " (--socket): is `sluice run` running?"
	for _, args := range [][]string{
		{"sa", "list"}, {"sa", "del", "--spi", "4097"}, {"tunnel", "list"}, {"policy", "list"},
		{"stats"}, {"stats", "--watch"}, {"reload"},
	} {
		code, out, errOut := ctlRun(append(args, "--socket", path)...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, want) {
			t.Errorf("%q: exit %d, %q, %q", args, code, out, errOut)
		}
	}
	// A file that is not a socket is reported the same way.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := ctlRun("stats", "--socket", path); code != ExitUsage || !strings.HasPrefix(errOut, want) {
		t.Errorf("stats on a regular file: exit %d, %q", code, errOut)
	}
}

func TestDefaultSocketFlag(t *testing.T) {
	for _, args := range [][]string{{"sa", "list"}, {"tunnel", "list"}, {"policy", "list"}, {"stats"}, {"reload"}} {
		code, out, _ := ctlRun(append(args, "--help")...)
		if code != 0 || !strings.Contains(out, `--socket string`) || !strings.Contains(out, `-c, --config string`) ||
			!strings.Contains(out, "else $SLUICE_SOCKET, else /run/sluice/sluice.sock)") {
			t.Errorf("%q --help: exit %d:\n%s", args, code, out)
		}
	}
}

// openPTY opens a pseudo-terminal pair; the test ends both.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// On a terminal, --watch redraws the screen.
func TestStatsWatchTerminal(t *testing.T) {
	sock, b := fakeGateway(t)
	master, tty := openPTY(t)
	if !ctlIsTerminal(tty) {
		t.Fatal("a pty is not a terminal")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	for _, f := range []*os.File{pw, mustOpen(t, os.DevNull)} {
		if ctlIsTerminal(f) {
			t.Errorf("%s is a terminal", f.Name())
		}
	}
	screen := make(chan string)
	go func() {
		data, _ := io.ReadAll(master) // ends with EIO when tty closes
		screen <- string(data)
	}()
	ctx := endAfterCalls(t, b, "Stats", 3) // two redraws done
	var stderr bytes.Buffer
	if code := Run(ctx, []string{"stats", "--watch", "--interval", "100ms", "--socket", sock}, strings.NewReader(""), tty, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	tty.Close()
	out := <-screen
	if n := strings.Count(out, ctlClearScreen); n < 2 || strings.Count(out, "WORKER") != n || !strings.Contains(out, "sluice stats, every 100ms (totals; rates per second from the next snapshot): ") ||
		!strings.Contains(out, "sluice stats, every 100ms (rates per second over the last ") {
		t.Fatalf("%d redraws:\n%q", n, out)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestStatsStateFailing: sluice stats says, below the SA table, which SAs
// cannot record their sequence-number reservations and why.
func TestStatsStateFailing(t *testing.T) {
	var b strings.Builder
	st := gateway.Stats{SAs: []gateway.SAInfo{{Name: "o", Tunnel: "t", Direction: "out", SPI: 0x1001,
		StateFailing: true, StateFailures: 3, StateError: "read-only file system"}}}
	if err := printStats(&b, st, ctlView{}); err != nil {
		t.Fatal(err)
	}
	want := "STATE FAILING: SA o (out, spi 0x00001001) cannot record its sequence-number reservation and drops its packets: read-only file system (3 failures)"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("stats:\n%s\nlacks %q", b.String(), want)
	}
}

// TestStatsTLSOnly: a TLS-only gateway's stats are its TLS table alone,
// without empty ESP tables.
func TestStatsTLSOnly(t *testing.T) {
	path := controltest.SocketPath(t)
	b := &controltest.Backend{}
	b.SetTLS([]gateway.TLSInfo{
		{Name: "web", Kind: "terminate", Listen: ":8443", Handshakes: 5, HandshakeFailures: map[string]uint64{}},
		{Name: "api", Kind: "originate", Listen: "127.0.0.1:9080", Handshakes: 1, SignOps: 3, SignBatches: 2, SignMaxBatch: 2,
			HandshakeFailures: map[string]uint64{"backend": 2}},
	})
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(b)
	t.Cleanup(func() { s.Close() })
	code, out, errOut := ctlRun("stats", "--socket", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ctlCheckLines(t, "stats", out,
		"TLS  KIND       LISTEN          OPEN  HANDSHAKES  BYTES IN  BYTES OUT  FAILURES",
		"web  terminate  :8443           0     5           0         0          -",
		"api  originate  127.0.0.1:9080  0     1           0         0          backend=2",
	)
}

// configBackend is a controltest.Backend whose stats name the
// configuration file the gateway runs.
type configBackend struct {
	*controltest.Backend
	file string
}

func (b configBackend) Stats() gateway.Stats {
	st := b.Backend.Stats()
	st.Config = b.file
	return st
}

// fakeGatewayOf serves a controltest.Backend that says it runs file, on a
// fresh socket until the test ends.
func fakeGatewayOf(t *testing.T, file string) (string, *controltest.Backend) {
	t.Helper()
	path := controltest.SocketPath(t)
	b := controltest.New()
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(configBackend{b, file})
	t.Cleanup(func() { s.Close() })
	return path, b
}

// TestClientFindsSocket: the client commands take the socket from
// --socket, else from -c FILE's control_socket, else from $SLUICE_SOCKET,
// else the default; when the socket is not there the error says where its
// path came from, and a socket served by the gateway of another file is
// refused before anything is sent.
func TestClientFindsSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gw.toml")
	sock, b := fakeGatewayOf(t, file)
	if err := os.WriteFile(file, []byte("[gateway]\nworkers = 1\ncontrol_socket = \""+sock+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := controltest.SocketPath(t)

	for _, args := range [][]string{
		{"stats", "-c", file}, {"stats", "--config", file}, {"-c", file, "stats"}, {"--config", file, "sa", "list"},
		{"sa", "list", "-c", file}, {"tunnel", "-c", file, "list"},
		{"policy", "list", "-c", file}, {"ike", "list", "-c", file}, {"reload", "-c", file},
	} {
		if code, out, errOut := ctlRun(args...); code != 0 || out == "" {
			t.Errorf("%q: exit %d, %q, %q", args, code, out, errOut)
		}
	}
	if b.Calls("Reload") != 1 {
		t.Errorf("reload -c FILE: %d reloads", b.Calls("Reload"))
	}

	t.Setenv("SLUICE_SOCKET", sock)
	if code, _, errOut := ctlRun("sa", "list"); code != 0 {
		t.Errorf("sa list with $SLUICE_SOCKET: exit %d, %q", code, errOut)
	}
	// --socket comes first, then the file, then the environment.
	if code, _, errOut := ctlRun("sa", "list", "--socket", dead); code != ExitUsage ||
		!strings.HasPrefix(errOut, "sluice: cannot reach sluice at "+dead+" (--socket): is `sluice run` running?") {
		t.Errorf("--socket over $SLUICE_SOCKET: exit %d, %q", code, errOut)
	}
	other := filepath.Join(dir, "other.toml")
	if err := os.WriteFile(other, []byte("# comment\n[gateway]\ncontrol_socket = \""+dead+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := ctlRun("stats", "-c", other); code != ExitUsage ||
		!strings.HasPrefix(errOut, "sluice: cannot reach sluice at "+dead+" (control_socket of "+other+":3:18): is `sluice run` running?") {
		t.Errorf("-c over $SLUICE_SOCKET: exit %d, %q", code, errOut)
	}
	t.Setenv("SLUICE_SOCKET", dead)
	if code, _, errOut := ctlRun("stats"); code != ExitUsage ||
		!strings.HasPrefix(errOut, "sluice: cannot reach sluice at "+dead+" ($SLUICE_SOCKET): is `sluice run` running?") {
		t.Errorf("dead $SLUICE_SOCKET: exit %d, %q", code, errOut)
	}

	// The socket other.toml names is served by the gateway of gw.toml.
	if err := os.WriteFile(other, []byte("[gateway]\ncontrol_socket = \""+sock+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reloads := b.Calls("Reload")
	for _, args := range [][]string{{"reload", "-c", other}, {"stats", "-c", other}, {"sa", "list", "--socket", sock, "-c", other}} {
		code, out, errOut := ctlRun(args...)
		want := "sluice: the socket " + sock + " is served by the gateway of " + file + ", not " + other + "\n"
		if code != ExitUsage || out != "" || errOut != want {
			t.Errorf("%q: exit %d, %q, %q; want %q", args, code, out, errOut, want)
		}
	}
	if b.Calls("Reload") != reloads {
		t.Errorf("reload reached the gateway of another file")
	}
	// The same file by another name is the same file.
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := ctlRun("stats", "-c", link); code != 0 {
		t.Errorf("stats -c through a symlink: exit %d, %q", code, errOut)
	}

	// A file without control_socket means the default, as for sluice run.
	bare := filepath.Join(dir, "bare.toml")
	if err := os.WriteFile(bare, []byte("[gateway]\nworkers = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := ctlRun("stats", "-c", bare); code != ExitUsage ||
		!strings.HasPrefix(errOut, "sluice: cannot reach sluice at "+control.DefaultSocket+" (the default: "+bare+" sets no control_socket)") {
		t.Errorf("-c FILE without control_socket: exit %d, %q", code, errOut)
	}
	// A file that cannot be read, or whose control_socket is wrong, is an
	// error naming it.
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[gateway]\ncontrol_socket = 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		bad:                                "sluice: " + bad + ":2:18: gateway.control_socket: want a string, the path of the control socket, not integer\n",
		filepath.Join(dir, "none.toml"):    "no such file or directory",
		writeTemp(t, dir, "[gateway\n"):    ":1:",
		writeTemp(t, dir, "gateway = 3\n"): ": gateway: want a table [gateway], not integer",
	} {
		if code, _, errOut := ctlRun("stats", "-c", file); code != ExitUsage || !strings.Contains(errOut, want) {
			t.Errorf("-c %s: exit %d, %q, want %q", file, code, errOut, want)
		}
	}
}

func writeTemp(t *testing.T, dir, text string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "*.toml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// growingBackend is a controltest.Backend whose SAs' counters grow by
// 1000 packets and a megabyte at each read.
type growingBackend struct {
	*controltest.Backend
	mu    sync.Mutex
	reads uint64
}

func (b *growingBackend) Stats() gateway.Stats {
	st := b.Backend.Stats()
	b.mu.Lock()
	b.reads++
	n := b.reads
	b.mu.Unlock()
	for i := range st.SAs {
		st.SAs[i].Packets += 1000 * n
		st.SAs[i].Bytes += 1e6 * n
	}
	return st
}

// TestStatsWatchRates: stats --watch shows, from its second snapshot on,
// how fast the counters grow.
func TestStatsWatchRates(t *testing.T) {
	path := controltest.SocketPath(t)
	s, err := control.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(&growingBackend{Backend: controltest.New()})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Stop the watch once it has shown two snapshots.
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var out strings.Builder
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			out.Write(buf[:n])
			if strings.Count(out.String(), "--- ") >= 3 {
				cancel()
			}
			if err != nil {
				return
			}
		}
	}()
	var stderr bytes.Buffer
	code := Run(ctx, []string{"stats", "--watch", "--interval", "100ms", "--socket", path}, strings.NewReader(""), pw, &stderr)
	pw.Close()
	<-done
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	snaps := strings.Split(out.String(), "--- ")[1:]
	if len(snaps) < 2 {
		t.Fatalf("%d snapshots:\n%s", len(snaps), out.String())
	}
	if !strings.Contains(snaps[0], "to-b    out  a-to-b  0x00001001  1010") {
		t.Errorf("first snapshot without the totals:\n%s", snaps[0])
	}
	var row string
	for _, l := range strings.Split(snaps[1], "\n") {
		if strings.HasPrefix(l, "to-b    out  a-to-b") {
			row = l
		}
	}
	f := strings.Fields(row)
	if !strings.Contains(snaps[1], "PKTS/S  BITS/S") || len(f) != 8 || f[4] == "0" || f[4] == "-" || f[5] == "0" || f[5] == "-" {
		t.Errorf("second snapshot without rates:\n%s", snaps[1])
	}
	t.Logf("second snapshot:\n%s", snaps[1])
}

// TestApply: sluice apply sends a file (or standard input) with
// config.apply, under the file's path or --name, and prints the changes
// as reload does; a file the gateway refuses is its errors.
func TestApply(t *testing.T) {
	sock, b := fakeGateway(t)
	file := filepath.Join(t.TempDir(), "gw.toml")
	if err := os.WriteFile(file, []byte("[udp]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.SetReloadChanges([]string{"tunnel added tunnel=t2"})
	code, out, errOut := ctlRun("apply", file, "--socket", sock)
	if code != 0 || out != "configuration applied: 1 changes\n  tunnel added tunnel=t2\n" {
		t.Fatalf("apply: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = ctlRunCtx(context.Background(), "[rawesp]\n", "apply", "-", "--name", "fleet/gw-a", "--socket", sock)
	if code != 0 || !strings.HasPrefix(out, "configuration applied") {
		t.Fatalf("apply from stdin: exit %d, %q, %q", code, out, errOut)
	}
	got := b.Applies()
	if len(got) != 2 || got[0].Name != file || got[0].Text != "[udp]\n" || got[1].Name != "fleet/gw-a" || got[1].Text != "[rawesp]\n" {
		t.Fatalf("backend got %+v", got)
	}
	b.SetReloadErr(errors.New("fleet/gw-a:3:11: gateway.workers: want an integer 0..1024"))
	code, out, errOut = ctlRunCtx(context.Background(), "x", "apply", "-", "--name", "fleet/gw-a", "--socket", sock)
	if code != ExitUsage || out != "" || errOut != "sluice: fleet/gw-a:3:11: gateway.workers: want an integer 0..1024\n" {
		t.Fatalf("refused apply: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := ctlRun("apply", filepath.Join(t.TempDir(), "missing.toml"), "--socket", sock); code != ExitUsage || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
}
