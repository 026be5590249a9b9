package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway"
)

var _ Backend = (*controltest.Backend)(nil)

const saTOML = `# one SA
[[sa]]
name = "b-to-a-new"
spi = 0x2002
encap = "udp"
esp = "aes128gcm16"
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`

// serve serves b on path.
func serve(t *testing.T, path string, b Backend) *Server {
	t.Helper()
	s, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(b)
	return s
}

// start serves b on a fresh socket and closes the server when the test ends.
func start(t *testing.T, b Backend, opt *Options) *Server {
	t.Helper()
	s, err := Listen(controltest.SocketPath(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(b)
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a client that speaks the protocol by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// roundTrip sends line and returns the decoded response.
func (r *rawConn) roundTrip(line string) Response {
	r.t.Helper()
	r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(r.c, line+"\n"); err != nil {
		r.t.Fatalf("write %q: %v", line, err)
	}
	return r.read()
}

func (r *rawConn) read() Response {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	data, err := r.rd.ReadBytes('\n')
	if err != nil {
		r.t.Fatalf("read: %v (got %q)", err, data)
	}
	var resp Response
	if err := json.Unmarshal(data, &resp); err != nil {
		r.t.Fatalf("response %q: %v", data, err)
	}
	return resp
}

// expectEOF waits for the server to close the connection.
func (r *rawConn) expectEOF(within time.Duration) {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(within))
	data, err := io.ReadAll(r.rd)
	// A server that closes with our request unread resets the connection.
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		r.t.Fatalf("connection not closed by the server within %v: %v (read %q)", within, err, data)
	}
}

func TestOps(t *testing.T) {
	b := controltest.New()
	s := start(t, b, nil)
	c := dial(t, s.Path())
	ctx := context.Background()

	sas, err := c.SAs(ctx)
	if err != nil || len(sas) != 2 || sas[0].Name != "a-to-b" || sas[1].SPI != 0x2001 || sas[1].Drops["replay"] != 2 {
		t.Fatalf("sa.list = %+v, %v", sas, err)
	}
	tuns, err := c.Tunnels(ctx)
	if err != nil || len(tuns) != 1 || tuns[0].Name != "to-b" || tuns[0].Remote[0] != "10.2.0.0/24" {
		t.Fatalf("tunnel.list = %+v, %v", tuns, err)
	}
	pols, err := c.Policies(ctx)
	if err != nil || len(pols) != 1 || pols[0].Tunnel != "to-b" {
		t.Fatalf("policy.list = %+v, %v", pols, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st.Dataplane.Workers) != 2 || st.Dataplane.Workers[0].Drops["no_route"] != 3 || len(st.SAs) != 2 {
		t.Fatalf("stats = %+v, %v", st, err)
	}

	res, err := c.AddSA(ctx, "to-b", "in", saTOML)
	if err != nil || res != (SAAddResult{Tunnel: "to-b", Dir: "in", Name: "b-to-a-new", SPI: 0x2002}) {
		t.Fatalf("sa.add = %+v, %v", res, err)
	}
	if sas, _ := c.SAs(ctx); len(sas) != 3 || sas[2].SPI != 0x2002 || sas[2].Direction != "in" {
		t.Fatalf("after sa.add: %+v", sas)
	}
	if err := c.DelSA(ctx, 0x2001); err != nil {
		t.Fatalf("sa.del: %v", err)
	}
	if sas, _ := c.SAs(ctx); len(sas) != 2 || sas[1].SPI != 0x2002 {
		t.Fatalf("after sa.del: %+v", sas)
	}
	var re *RemoteError
	if err := c.DelSA(ctx, 0x2001); !errors.As(err, &re) || re.Msg != "sad: no inbound SA with SPI 0x2001" {
		t.Fatalf("sa.del of a gone SA: %v", err)
	}

	if r, err := c.Reload(ctx); err != nil || b.Calls("Reload") != 1 || r.Changes == nil || len(r.Changes) != 0 {
		t.Fatalf("reload: %+v, %v, calls %d", r, err, b.Calls("Reload"))
	}
	changes := []string{"inbound SA installed tunnel=t sa=i spi=0x2001"}
	b.SetReloadChanges(changes)
	if r, err := c.Reload(ctx); err != nil || !slices.Equal(r.Changes, changes) {
		t.Fatalf("reload with changes: %+v, %v", r, err)
	}
	b.SetReloadErr(errors.New("gw.toml:3:11: gateway.workers: want 1..1024"))
	if _, err := c.Reload(ctx); err == nil || err.Error() != "gw.toml:3:11: gateway.workers: want 1..1024" {
		t.Fatalf("refused reload: %v", err)
	}
}

func TestEmptyListsAreArrays(t *testing.T) {
	s := start(t, &controltest.Backend{}, nil)
	r := dialRaw(t, s.Path())
	for _, op := range []string{OpSAList, OpTunnelList, OpPolicyList} {
		if resp := r.roundTrip(`{"op":"` + op + `"}`); !resp.OK || string(resp.Result) != "[]" {
			t.Errorf("%s: %+v, want result []", op, resp)
		}
	}
	resp := r.roundTrip(`{"op":"stats"}`)
	if want := `{"dataplane":{"workers":[],"receivers":[]},"sas":[],"tls":[]}`; !resp.OK || string(resp.Result) != want {
		t.Errorf("stats: %s, want %s", resp.Result, want)
	}
	if resp := r.roundTrip(`{"op":"reload","args":{}}`); !resp.OK || string(resp.Result) != `{"changes":[]}` {
		t.Errorf("reload: %+v", resp)
	}
}

func TestBadRequests(t *testing.T) {
	s := start(t, controltest.New(), nil)
	r := dialRaw(t, s.Path())
	addArgs := func(tunnel, dir, sa string) string {
		data, _ := json.Marshal(Request{Op: OpSAAdd, Args: mustJSON(SAAddArgs{Tunnel: tunnel, Dir: dir, SA: sa})})
		return string(data)
	}
	tests := []struct{ line, want string }{
		{`not json`, "control: bad request: malformed JSON at byte 2"},
		{`{"op":"stats"`, "control: bad request: malformed JSON: it ends early"},
		{`{"op":"stats"} {"op":"stats"}`, "control: bad request: trailing data after the JSON value"},
		{``, "control: empty request"},
		{`   `, "control: empty request"},
		{`null`, "control: request has no op (valid: sa.list, sa.add, sa.del, tunnel.list, policy.list, stats, reload, ike.list, ike.initiate, ike.terminate, ha.status, ha.handover, config.apply)"},
		{`{}`, "control: request has no op"},
		{`[1,2]`, "control: bad request: got JSON array, want an object"},
		{`{"op":5}`, "control: bad request: op: got JSON number, want a string"},
		{`{"op":"stats","extra":1}`, `control: bad request: unknown field "extra"`},
		{`{"op":"sa.flush"}`, `control: unknown op "sa.flush" (valid: sa.list, sa.add,`},
		{`{"op":"stats","args":{"x":1}}`, `control: stats: args: unknown field "x"`},
		{`{"OP":"stats"}`, `control: bad request: unknown field "OP" (field names are case-sensitive)`},
		{`{"op":"sa.flush","op":"stats"}`, `control: bad request: field "op" given twice`},
		{`{"op":"sa.del","args":{"SPI":12345}}`, `control: sa.del: args: unknown field "SPI" (field names are case-sensitive)`},
		{`{"op":"stats","args":7}`, `control: stats: args: got JSON number, want an object`},
		{`{"op":"sa.del"}`, "control: sa.del: args.spi is required"},
		{`{"op":"sa.del","args":{}}`, "control: sa.del: args.spi is required"},
		{`{"op":"sa.del","args":{"spi":"0x2001"}}`, "control: sa.del: args.spi: got JSON string, want an integer 0..4294967295"},
		{`{"op":"sa.del","args":{"spi":-1}}`, "control: sa.del: args.spi: got JSON number -1, want an integer"},
		{`{"op":"sa.del","args":{"spi":1.5}}`, "control: sa.del: args.spi: got JSON number 1.5, want an integer"},
		{`{"op":"sa.del","args":{"spi":4294967296}}`, "control: sa.del: args.spi: got JSON number 4294967296, want an integer"},
		{`{"op":"sa.del","args":[8193]}`, "control: sa.del: args: got JSON array, want an object"},
		{`{"op":"sa.del","args":{"spi":12345}}`, "sad: no inbound SA with SPI 0x3039"},
		{`{"op":"sa.add","args":{"tunnel":"to-b","dir":"in"}}`, "control: sa.add: args.sa is required"},
		{`{"op":"sa.add","args":{"tunnel":"to-b","dir":"in","sa":5}}`, "control: sa.add: args.sa: got JSON number, want a string"},
		{addArgs("", "in", saTOML), "control: sa.add: args.tunnel is required"},
		{addArgs("to-b", "up", saTOML), `control: sa.add: args.dir must be "in" or "out", not "up"`},
		{addArgs("to-x", "in", saTOML), `gateway: no tunnel "to-x"`},
		{addArgs("to-b", "in", "# nothing\n"), "control: sa.add: args.sa must hold exactly one [[sa]] table, not 0"},
		{addArgs("to-b", "in", saTOML+strings.Replace(saTOML, "0x2002", "0x2003", 1)[8:]), "sa.add:"},
		{addArgs("to-b", "in", strings.Replace(saTOML, `"aes128gcm16"`, `"aes128gcm"`, 1)), "sa.add:6:7: sa[1].esp: "},
		{addArgs("to-b", "in", "[[sa]\n"), "sa.add:1:"},
	}
	for _, tt := range tests {
		resp := r.roundTrip(tt.line)
		if resp.OK || !strings.HasPrefix(resp.Error, tt.want) || resp.Result != nil {
			t.Errorf("%s\n got %+v\nwant error starting %q", tt.line, resp, tt.want)
		}
	}
	// The connection survived every bad request.
	if resp := r.roundTrip(`{"op":"tunnel.list"}`); !resp.OK {
		t.Fatalf("after bad requests: %+v", resp)
	}
	// Several requests in one write are answered in order.
	r.c.Write([]byte("{\"op\":\"policy.list\"}\n{\"op\":\"nope\"}\r\n{\"op\":\"sa.list\"}\n"))
	if a, b, c := r.read(), r.read(), r.read(); !a.OK || b.OK || !c.OK || !strings.Contains(string(c.Result), "a-to-b") {
		t.Fatalf("pipelined: %+v %+v %+v", a, b, c)
	}
}

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

func TestOversizedRequest(t *testing.T) {
	s := start(t, controltest.New(), nil)
	r := dialRaw(t, s.Path())
	// Twice the limit of a string that never ends, then a newline: the
	// server stops reading at the limit, answers and hangs up.
	go func() {
		line := `{"op":"stats","args":{"x":"` + strings.Repeat("a", 2*DefaultMaxRequest) + "\"}}\n"
		r.c.Write([]byte(line))
	}()
	resp := r.read()
	if resp.OK || resp.Error != fmt.Sprintf("control: request longer than %d bytes; closing the connection", DefaultMaxRequest) {
		t.Fatalf("oversized: %+v", resp)
	}
	r.expectEOF(5 * time.Second)
	// The server is fine.
	if resp := dialRaw(t, s.Path()).roundTrip(`{"op":"stats"}`); !resp.OK {
		t.Fatalf("after an oversized request: %+v", resp)
	}
	// A request of the limit, newline included, is served.
	small := start(t, controltest.New(), &Options{MaxRequest: 64})
	r = dialRaw(t, small.Path())
	if resp := r.roundTrip(`{"op":"stats","args":{}}` + strings.Repeat(" ", 38)); !resp.OK {
		t.Fatalf("64-byte request: %+v", resp)
	}
	if resp := r.roundTrip(`{"op":"stats","args":{}}` + strings.Repeat(" ", 40)); resp.OK {
		t.Fatalf("65-byte request: %+v", resp)
	}
	r.expectEOF(5 * time.Second)
}

func TestIdleAndSlowClients(t *testing.T) {
	s := start(t, controltest.New(), &Options{IdleTimeout: 200 * time.Millisecond})
	// Silent: disconnected.
	idle := dialRaw(t, s.Path())
	t0 := time.Now()
	idle.expectEOF(5 * time.Second)
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("idle client dropped after %v, before the timeout", d)
	}
	// A byte every 50 ms: the line is not complete in time.
	slow := dialRaw(t, s.Path())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, ch := range `{"op":"stats"}` {
			if _, err := slow.c.Write([]byte(string(ch))); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	slow.expectEOF(5 * time.Second)
	<-done
	// Between requests the timeout starts again: requests 100 ms apart
	// for half again the timeout keep the connection. The timeout is a
	// second here, so that a loaded machine's late wake-ups (hundreds of
	// milliseconds) do not pass for it.
	s2 := start(t, controltest.New(), &Options{IdleTimeout: time.Second})
	r := dialRaw(t, s2.Path())
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		time.Sleep(100 * time.Millisecond)
		if resp := r.roundTrip(`{"op":"sa.list"}`); !resp.OK {
			t.Fatalf("%+v", resp)
		}
	}
}

// A client that never reads its responses is disconnected, not waited for.
func TestClientThatDoesNotRead(t *testing.T) {
	s := start(t, controltest.New(), &Options{WriteTimeout: 200 * time.Millisecond})
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.UnixConn).SetReadBuffer(4096)
	req := []byte(strings.Repeat(`{"op":"stats"}`+"\n", 1000))
	errc := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = c.Write(req)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Logf("writer stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept a connection that does not read")
	}
}

func TestTooManyClients(t *testing.T) {
	b := controltest.New()
	b.Block = make(chan struct{})
	s := start(t, b, &Options{MaxConns: 4})
	var conns []*rawConn
	for range 4 {
		r := dialRaw(t, s.Path())
		r.c.Write([]byte(`{"op":"stats"}` + "\n"))
		conns = append(conns, r)
	}
	waitFor(t, "4 blocked calls", func() bool { return b.Calls("Stats") == 4 })
	extra := dialRaw(t, s.Path())
	if resp := extra.read(); resp.OK || resp.Error != "control: too many clients (at most 4 at once); try again" {
		t.Fatalf("fifth client: %+v", resp)
	}
	extra.expectEOF(5 * time.Second)
	close(b.Block)
	for _, r := range conns {
		if resp := r.read(); !resp.OK {
			t.Fatalf("%+v", resp)
		}
		r.c.Close()
	}
	// Slots are given back.
	waitFor(t, "a free slot", func() bool {
		c, err := Dial(context.Background(), s.Path())
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Stats(context.Background())
		return err == nil
	})
}

func TestConcurrentClients(t *testing.T) {
	b := controltest.New()
	s := start(t, b, &Options{MaxConns: 8})
	const clients, calls = 32, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	served, refused := 0, 0
	for i := range clients {
		wg.Go(func() {
			ctx := context.Background()
			c, err := Dial(ctx, s.Path())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for j := range calls {
				var err error
				switch (i + j) % 6 {
				case 0:
					_, err = c.SAs(ctx)
				case 1:
					_, err = c.Stats(ctx)
				case 2:
					_, err = c.Tunnels(ctx)
				case 3:
					_, err = c.Policies(ctx)
				case 4:
					spi := uint32(0x10000 + i*calls + j)
					_, err = c.AddSA(ctx, "to-b", "in", strings.Replace(saTOML, "0x2002", fmt.Sprint(spi), 1))
					if err == nil {
						err = c.DelSA(ctx, spi)
					}
				case 5:
					err = c.Call(ctx, "bogus", nil, nil)
					if err != nil && strings.Contains(err.Error(), "unknown op") {
						err = nil
					}
				}
				var re *RemoteError
				if errors.As(err, &re) && strings.Contains(re.Msg, "too many clients") {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				if err != nil {
					t.Errorf("client %d call %d: %v", i, j, err)
					return
				}
			}
			mu.Lock()
			served++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d clients served, %d refused", served, refused)
	if served+refused != clients || served < 8 {
		t.Errorf("served %d, refused %d of %d", served, refused, clients)
	}
	if sas := b.SAs(); len(sas) != 2 {
		t.Errorf("SAs left: %+v", sas)
	}
}

func TestBackendPanic(t *testing.T) {
	b := controltest.New()
	b.Panic = "Stats"
	s := start(t, b, nil)
	r := dialRaw(t, s.Path())
	if resp := r.roundTrip(`{"op":"stats"}`); resp.OK || resp.Error != "control: stats: internal error (see the gateway's log)" {
		t.Fatalf("%+v", resp)
	}
	if resp := r.roundTrip(`{"op":"sa.list"}`); !resp.OK {
		t.Fatalf("after a panic: %+v", resp)
	}
}

func TestSocketFile(t *testing.T) {
	base := controltest.SocketPath(t)
	path := filepath.Join(filepath.Dir(base), "run", "sluice", "s.sock")
	s, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want socket 0600", fi.Mode())
	}
	for _, d := range []string{filepath.Dir(path), filepath.Dir(filepath.Dir(path))} {
		if di, err := os.Stat(d); err != nil || di.Mode().Perm() != 0o700 {
			t.Errorf("directory %s: %v %v, want 0700", d, di.Mode(), err)
		}
	}

	// A second server on a claimed socket is refused, even before the
	// first serves; clients that connected meanwhile are answered once it
	// does.
	if _, err := Listen(path, nil); err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("second Listen: %v", err)
	}
	early := dial(t, path)
	time.AfterFunc(100*time.Millisecond, func() { s.Serve(controltest.New()) })
	if _, err := early.SAs(context.Background()); err != nil {
		t.Fatalf("first server after a second Listen: %v", err)
	}
	s.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}

	// A socket nobody answers on (its server died) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	s, err = Listen(path, nil)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	s.Serve(controltest.New())
	if _, err := dial(t, path).Tunnels(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A server whose file was replaced by a newer server leaves it alone.
	os.Remove(path)
	s2 := serve(t, path, controltest.New())
	s.Close()
	if _, err := dial(t, path).Tunnels(context.Background()); err != nil {
		t.Fatalf("newer server after the older one closed: %v", err)
	}
	s2.Close()

	// A file that is not a socket is not touched.
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, nil); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "precious" {
		t.Fatalf("regular file changed: %q", data)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	b := controltest.New()
	b.Block = make(chan struct{})
	path := controltest.SocketPath(t)
	s := serve(t, path, b)
	// Clients in every state: idle, half a request, served, and one whose
	// request is still in the backend when Close starts.
	idle := dialRaw(t, path)
	half := dialRaw(t, path)
	half.c.Write([]byte(`{"op":`))
	busy := dialRaw(t, path)
	busy.c.Write([]byte(`{"op":"reload"}` + "\n"))
	waitFor(t, "the blocked reload", func() bool { return b.Calls("Reload") == 1 })
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	idle.expectEOF(5 * time.Second)
	half.expectEOF(5 * time.Second)
	select {
	case <-closed:
		t.Fatal("Close returned while a request was being served")
	case <-time.After(50 * time.Millisecond):
	}
	close(b.Block)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left: %v", err)
	}
	if _, err := Dial(context.Background(), path); err == nil {
		t.Fatal("dial after Close succeeded")
	}
	for _, r := range []*rawConn{idle, half, busy} {
		r.c.Close()
	}
	waitFor(t, fmt.Sprintf("goroutines back to %d", before), func() bool { return runtime.NumGoroutine() <= before })
}

func TestClientErrors(t *testing.T) {
	path := controltest.SocketPath(t)
	_, err := Dial(context.Background(), path)
	var de *DialError
	if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), "cannot reach sluice at "+path+": is `sluice run` running?") {
		t.Fatalf("dial without a server: %v", err)
	}

	b := controltest.New()
	b.Block = make(chan struct{})
	defer close(b.Block)
	s := start(t, b, nil)
	c := dial(t, s.Path())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := c.Stats(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its deadline: %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("cancelled call took %v", d)
	}
	if _, err := c.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "connection unusable after an earlier error: context deadline exceeded") {
		t.Fatalf("call after a timed-out call: %v", err)
	}
	c = dial(t, s.Path())
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Reload(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("timed out waiting for %s\n%s", what, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseBeforeServe(t *testing.T) {
	path := controltest.SocketPath(t)
	s, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := dialRaw(t, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Serve(controltest.New()) // does nothing
	waiting.expectEOF(5 * time.Second)
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left: %v", err)
	}
}

// A flood of connections beyond MaxConns is logged in at most one line per
// RefusalLogInterval, and the lines count every refusal.
func TestTooManyClientsFloodLogged(t *testing.T) {
	const interval = 200 * time.Millisecond
	rec := &logRecorder{}
	b := controltest.New()
	b.Block = make(chan struct{})
	s := start(t, b, &Options{MaxConns: 1, Log: slog.New(rec), RefusalLogInterval: interval})
	// Before the server's Close (cleanups run last first), which waits for
	// the blocked call.
	t.Cleanup(func() { close(b.Block) })
	held := dialRaw(t, s.Path())
	held.c.Write([]byte(`{"op":"stats"}` + "\n"))
	waitFor(t, "a blocked call", func() bool { return b.Calls("Stats") == 1 })
	begin := time.Now()
	const n = 50
	for range n {
		extra := dialRaw(t, s.Path())
		if resp := extra.read(); resp.OK || !strings.Contains(resp.Error, "too many clients") {
			t.Fatalf("extra client: %+v", resp)
		}
		extra.c.Close()
	}
	elapsed := time.Since(begin)
	// The summary comes when the interval is over, without waiting for
	// another refusal or for Close.
	var lines []slog.Record
	count := func() int64 {
		lines = rec.records("control: too many clients", slog.LevelWarn)
		sum := int64(0)
		for _, r := range lines {
			// A summary tells of several refusals, any other line of one.
			if v := attr(r, "refused"); v.Kind() == slog.KindInt64 {
				sum += v.Int64()
			} else {
				sum++
			}
		}
		return sum
	}
	waitFor(t, "every refusal logged", func() bool { return count() == n })
	if max := 2 + int(elapsed/interval); len(lines) > max {
		t.Fatalf("%d refusals in %v logged as %d lines, want at most %d (one per %v)", n, elapsed, len(lines), max, interval)
	}
}

// TestStatsTLSKeys: the stats reply carries each TLS listener's counters
// under these keys, which scripts and `sluice stats --json` users read.
func TestStatsTLSKeys(t *testing.T) {
	s := start(t, controltest.New(), nil)
	resp := dialRaw(t, s.Path()).roundTrip(`{"op":"stats"}`)
	var st struct {
		TLS []map[string]json.RawMessage `json:"tls"`
	}
	if !resp.OK || json.Unmarshal(resp.Result, &st) != nil || len(st.TLS) != 1 {
		t.Fatalf("stats: %+v", resp)
	}
	var keys []string
	for k := range st.TLS[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"accepted", "backend_failures", "bytes_in", "bytes_out", "dotfiles_refused", "handshake_failures", "handshakes", "header_timeouts", "idle_closed", "kind", "listen",
		"name", "open", "refused", "refused_per_source", "requests", "resumed", "sign_batches", "sign_max_batch", "sign_ops", "sign_queue_depth"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %q\nwant %q", keys, want)
	}
	if got := string(st.TLS[0]["handshake_failures"]); got != `{"protocol":1,"timeout":1}` {
		t.Errorf("handshake_failures %s", got)
	}
}

// TestIKEOps: ike.list, ike.initiate and ike.terminate reach the backend;
// an unknown connection and a missing name are errors.
func TestIKEOps(t *testing.T) {
	b := controltest.New()
	b.SetIKE(&gateway.IKEInfo{Connections: []gateway.IKEConnInfo{{Name: "site-b", State: "established"}}, Stats: map[string]uint64{"rx_packets": 4}})
	s := start(t, b, nil)
	c := dial(t, s.Path())
	ctx := context.Background()
	info, err := c.IKE(ctx)
	if err != nil || len(info.Connections) != 1 || info.Connections[0].Name != "site-b" || info.Stats["rx_packets"] != 4 {
		t.Fatalf("ike.list = %+v, %v", info, err)
	}
	if err := c.InitiateIKE(ctx, "site-b"); err != nil {
		t.Errorf("ike.initiate: %v", err)
	}
	if err := c.TerminateIKE(ctx, "site-b"); err != nil {
		t.Errorf("ike.terminate: %v", err)
	}
	if err := c.InitiateIKE(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `no IKE connection "nope"`) {
		t.Errorf("ike.initiate of an unknown connection: %v", err)
	}
	if err := c.TerminateIKE(ctx, ""); err == nil || !strings.Contains(err.Error(), "args.name is required") {
		t.Errorf("ike.terminate without a name: %v", err)
	}
	if st, err := c.Stats(ctx); err != nil || st.IKE == nil || st.IKE.Stats["rx_packets"] != 4 {
		t.Errorf("stats with IKE: %+v, %v", st.IKE, err)
	}
	if b.Calls("InitiateIKE") != 2 || b.Calls("TerminateIKE") != 1 {
		t.Errorf("calls: initiate %d, terminate %d", b.Calls("InitiateIKE"), b.Calls("TerminateIKE"))
	}
}
