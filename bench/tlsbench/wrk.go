package tlsbench

// wrk as the request client: a C client on OpenSSL and epoll that costs
// the shared cores less per request than the Go client does, so that the
// servers get more of the machine. It is used for the keep-alive request
// rates when it is installed and the run asks for it (Options.Client).

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkThreads is wrk's thread count: one per core of this 2-core class of
// machine, as BASELINES.md measured with.
const wrkThreads = 2

// wrkSeconds is the whole seconds wrk runs for d (at least 1).
func wrkSeconds(d time.Duration) int { return max(1, int(math.Round(d.Seconds()))) }

// wrkArgs is the command line of a wrk run.
func wrkArgs(exe, url string, conns int, d time.Duration) []string {
	return []string{exe, "-t", strconv.Itoa(min(wrkThreads, conns)), "-c", strconv.Itoa(conns),
		"-d", strconv.Itoa(wrkSeconds(d)) + "s", "--timeout", "10s", url}
}

var (
	wrkTotal  = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(us|ms|s|m|h)\b`)
	wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// WrkResult is what one wrk run reports.
type WrkResult struct {
	Requests     uint64
	Elapsed      time.Duration
	SocketErrors string // "connect 0, read 0, write 0, timeout 0" when wrk printed it
}

// parseWrk reads wrk's summary. Any non-2xx response is an error.
func parseWrk(out []byte) (WrkResult, error) {
	var r WrkResult
	m := wrkTotal.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("tlsbench: no request count in wrk's output: %q", strings.TrimSpace(string(out)))
	}
	n, err := strconv.ParseUint(string(m[1]), 10, 64)
	if err != nil {
		return r, err
	}
	v, err := strconv.ParseFloat(string(m[2]), 64)
	if err != nil {
		return r, err
	}
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour}[string(m[3])]
	r.Requests, r.Elapsed = n, time.Duration(v*float64(unit))
	if m := wrkNon2xx.FindSubmatch(out); m != nil && string(m[1]) != "0" {
		return r, fmt.Errorf("tlsbench: wrk got %s responses that were not 2xx or 3xx", m[1])
	}
	if m := wrkSocket.FindSubmatch(out); m != nil {
		r.SocketErrors = strings.TrimPrefix(string(m[0]), "Socket errors: ")
	}
	if r.Requests == 0 || r.Elapsed <= 0 {
		return r, fmt.Errorf("tlsbench: wrk made no requests: %q", strings.TrimSpace(string(out)))
	}
	return r, nil
}

// runWrk runs wrk against url for d with conns connections, and returns
// its result and the server's CPU time (cpu) around it.
func runWrk(ctx context.Context, exe, url string, conns int, d time.Duration, cpu func() (time.Duration, error)) (WrkResult, time.Duration, error) {
	args := wrkArgs(exe, url, conns, d)
	c0, err := cpu()
	if err != nil {
		return WrkResult{}, 0, err
	}
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	c1, cerr := cpu()
	if err != nil {
		return WrkResult{}, 0, fmt.Errorf("tlsbench: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	if cerr != nil {
		return WrkResult{}, 0, cerr
	}
	r, err := parseWrk(out)
	return r, c1 - c0, err
}
