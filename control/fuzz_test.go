package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/control/controltest"
)

// fuzzMaxRequest is the server's MaxRequest in FuzzRequests: small, so that
// the fuzzer reaches the too-long path as well as the decoder.
const fuzzMaxRequest = 1024

// errPrefix is how every error line starts: the package that refused the
// request, or, for the TOML of sa.add, the position in it.
var errPrefix = regexp.MustCompile(`^(control|sad|gateway|config): |^sa\.add:[0-9]+:[0-9]+: `)

// FuzzRequests sends arbitrary bytes, as request lines, to a control server
// that serves a controltest.Backend over its socket, and checks what a
// client is promised: each line gets one response line, in order, that is
// a well-formed reply (ok with a result, or an error that says who refused
// it); only a line longer than MaxRequest ends the connection, with an
// error line; no request makes the server log an error (a recovered
// panic); and the server answers a valid request afterwards, on the same
// connection or a new one. The seed corpus is testdata/fuzz/FuzzRequests.
//
//	go test -run '^$' -fuzz '^FuzzRequests$' -fuzztime 60s ./control/
func FuzzRequests(f *testing.F) {
	for _, s := range []string{
		`{"op":"sa.list"}`,
		`{"op":"stats","args":{}}` + "\n" + `{"op":"tunnel.list","args":null}`,
		`{"op":"sa.del","args":{"spi":8193}}`,
		`{"op":"sa.add","args":{"tunnel":"to-b","dir":"in","sa":` + string(mustJSON(saTOML)) + `}}`,
		`{"op":"sa.add","args":{"tunnel":"to-b","dir":"out","sa":"[[sa]]\nspi = 1\n"}}`,
		`{"op":"reload"}` + "\r\n" + `{"op":"policy.list"}`,
		`{"op":"sa.list","args":{"x":1}}`,
		`{"op":"config.apply","args":{"name":"n","config":"[udp]\n","ticket_keys":[{"id":"k","key":"AAAA","issue":true}]}}`,
		`{"op":"sa.del","args":{"spi":-1}}`,
		`{"op":"nope"} {}`,
		`[1,2,3]`,
		"\n\n \t\n",
		strings.Repeat("x", fuzzMaxRequest) + "\n" + `{"op":"stats"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &logRecorder{}
		s := start(t, controltest.New(), &Options{Log: slog.New(rec), MaxRequest: fuzzMaxRequest})
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		const probe = `{"op":"stats"}`
		// Write while reading: the server answers as it reads, and a
		// client that only writes would block it on a full socket.
		go func() {
			c.Write(slices.Concat(data, []byte("\n"+probe+"\n")))
		}()
		rd := bufio.NewReader(c)
		closed := false
		for _, line := range requestLines(data) {
			if len(line)+1 > fuzzMaxRequest {
				resp := readResponse(t, rd)
				if resp.OK || !strings.HasPrefix(resp.Error, "control: request longer than") {
					t.Fatalf("a %d-byte line got %+v, want the too-long error", len(line), resp)
				}
				expectClosed(t, rd)
				closed = true
				break
			}
			checkResponse(t, line, readResponse(t, rd))
		}
		if closed {
			// The server goes on serving others.
			c2, err := net.Dial("unix", s.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			c2.Write([]byte(probe + "\n"))
			rd = bufio.NewReader(c2)
		}
		if resp := readResponse(t, rd); !resp.OK || len(resp.Result) == 0 {
			t.Fatalf("stats after the fuzz input: %+v", resp)
		}
		if errs := rec.records("", slog.LevelError); len(errs) > 0 {
			t.Fatalf("the server logged an error: %v", errs)
		}
	})
}

// requestLines splits what FuzzRequests sends before its probe into lines,
// as the server's scanner does (a final "\r" stays: its length counts).
func requestLines(data []byte) [][]byte {
	return bytes.Split(data, []byte("\n"))
}

// readResponse reads one line and decodes it strictly as a Response.
func readResponse(t *testing.T, rd *bufio.Reader) Response {
	t.Helper()
	line, err := rd.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no response line: %v (read %q)", err, line)
	}
	var resp Response
	if err := decodeStrict(line, &resp); err != nil {
		t.Fatalf("response %q is not a Response: %v", line, err)
	}
	if resp.OK == (resp.Error != "") || !resp.OK && resp.Result != nil {
		t.Fatalf("response %q is neither a result nor an error", line)
	}
	return resp
}

// expectClosed checks that the server closed the connection.
func expectClosed(t *testing.T, rd *bufio.Reader) {
	t.Helper()
	rest, err := io.ReadAll(rd)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) || len(rest) > 0 {
		t.Fatalf("connection not closed after the too-long error: %v (read %q)", err, rest)
	}
}

// checkResponse checks resp against the request line it answers.
func checkResponse(t *testing.T, line []byte, resp Response) {
	t.Helper()
	var req Request
	loose := json.Unmarshal(bytes.TrimSpace(line), &req) == nil
	if !resp.OK {
		for l := range strings.SplitSeq(resp.Error, "\n") {
			if !errPrefix.MatchString(l) {
				t.Fatalf("request %q: error line %q does not say who refused it", line, l)
			}
		}
		if loose && decodeStrict(bytes.TrimSpace(line), &Request{}) == nil && !slices.Contains(Ops, req.Op) &&
			!strings.Contains(resp.Error, "op") {
			t.Fatalf("request %q with op %q: error %q does not name the op", line, req.Op, resp.Error)
		}
		return
	}
	// Accepted: the line is a request for an operation that exists, and
	// the result is there for each that has one.
	if !loose || !slices.Contains(Ops, req.Op) {
		t.Fatalf("request %q accepted: %+v", line, resp)
	}
	if resp.Result == nil {
		t.Fatalf("request %q: no result", line)
	}
	switch req.Op {
	case OpReload:
		var r ReloadResult
		if decodeStrict(resp.Result, &r) != nil || r.Changes == nil {
			t.Fatalf("request %q: result %s", line, resp.Result)
		}
	case OpSAAdd:
		var a SAAddArgs
		var r SAAddResult
		if json.Unmarshal(req.Args, &a) != nil || decodeStrict(resp.Result, &r) != nil || r.Tunnel != a.Tunnel || r.Dir != a.Dir {
			t.Fatalf("request %q: result %s", line, resp.Result)
		}
	case OpSADel:
		var a SADelArgs
		var r SADelResult
		if json.Unmarshal(req.Args, &a) != nil || decodeStrict(resp.Result, &r) != nil || r.SPI != a.SPI || r.SPI == 0 {
			t.Fatalf("request %q: result %s", line, resp.Result)
		}
	}
}
