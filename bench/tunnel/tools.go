package tunnel

// The outside tools a cell runs: iperf3 for TCP, ping for ICMP echo, and
// /proc for the CPU time of the gateways.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// iperfPort is the port of the iperf3 server in site B.
const iperfPort = 5201

// startIperfServer starts a one-off `iperf3 -s -1` in site B and waits
// until it listens. The server ends after one test, or when ctx ends (it
// is killed), or with this process (SIGKILL as its parent-death signal);
// wait returns once it has ended. It is not a lab process because a
// server stopped with SIGTERM exits with status 1, which Lab.Close would
// report as a failure. done is closed once the server has ended.
func startIperfServer(ctx context.Context, b *lab.Netns) (done <-chan struct{}, err error) {
	cmd := b.Command(ctx, "iperf3", "-s", "-1", "-p", strconv.Itoa(iperfPort))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: iperf3 -s: %w", err)
	}
	ended := make(chan struct{})
	go func() { cmd.Wait(); close(ended) }()
	err = lab.WaitFor(ctx, "iperf3 -s to listen", 10*time.Second, 0, func() (bool, error) {
		select {
		case <-ended:
			return false, fmt.Errorf("%w: iperf3 -s exited: %s", lab.ErrStop, strings.TrimSpace(out.String()))
		default:
		}
		return listening(cmd.Process.Pid, iperfPort)
	})
	if err != nil {
		cmd.Process.Kill()
		<-ended
		return nil, err
	}
	return ended, nil
}

// listening reports whether the network namespace of process pid has a TCP
// socket listening on port (from /proc/PID/net/tcp and tcp6).
func listening(pid, port int) (bool, error) {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" { // TCP_LISTEN
				return true, nil
			}
		}
	}
	return false, nil
}

// iperfSeconds is the whole seconds iperf3 -t takes for d (at least 1).
func iperfSeconds(d time.Duration) int { return max(1, int(math.Round(d.Seconds()))) }

// iperfTCP runs an iperf3 server in site B and a client in site A to dst
// for d with streams parallel streams, and returns the received Gbit/s.
func iperfTCP(ctx context.Context, a, b *lab.Netns, dst string, streams int, d time.Duration) (gbps float64, err error) {
	// The server ends after its one test, and is killed when the client
	// failed; either way the next one finds the port free.
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srvDone, err := startIperfServer(srvCtx, b)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err == nil {
			select {
			case <-srvDone:
			case <-time.After(2 * time.Second): // far more than a finished test's teardown takes
			}
		}
		stopServer()
		<-srvDone
	}()
	out, err := a.Exec(ctx, "iperf3", "-c", dst, "-p", strconv.Itoa(iperfPort), "-J",
		"-t", strconv.Itoa(iperfSeconds(d)), "-P", strconv.Itoa(streams), "--connect-timeout", "5000")
	bps, perr := parseIperf(out)
	if err != nil {
		if perr == nil || bps == 0 {
			return 0, fmt.Errorf("bench: iperf3 -c %s: %w", dst, err)
		}
	}
	if perr != nil {
		return 0, perr
	}
	return bps / 1e9, nil
}

// parseIperf reads the received bits per second from iperf3's JSON.
func parseIperf(out []byte) (float64, error) {
	var doc struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("bench: iperf3 -J output: %w", err)
	}
	if doc.Error != "" {
		return 0, fmt.Errorf("bench: iperf3: %s", doc.Error)
	}
	if doc.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("bench: iperf3 reported no received bits")
	}
	return doc.End.SumReceived.BitsPerSecond, nil
}

// pingRTT matches ping's summary: "rtt min/avg/max/mdev = 0.1/0.2/0.3/0.0 ms".
var pingRTT = regexp.MustCompile(`= ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms`)

// pingCount and pingInterval shape the ping of a cell: 1 s of echoes.
const (
	pingCount    = 100
	pingInterval = "0.01"
)

// pingAvg runs ping from site A to dst and returns the average round trip
// in milliseconds.
func pingAvg(ctx context.Context, a *lab.Netns, dst string) (float64, error) {
	out, err := a.Exec(ctx, "ping", "-q", "-n", "-c", strconv.Itoa(pingCount), "-i", pingInterval, "-w", "10", dst)
	avg, perr := parsePing(out)
	if perr != nil {
		return 0, errors.Join(err, perr)
	}
	return avg, nil
}

// parsePing returns the average of ping's summary line.
func parsePing(out []byte) (float64, error) {
	m := pingRTT.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("bench: no round trip in ping's output: %q", bytes.TrimSpace(out))
	}
	return strconv.ParseFloat(string(m[2]), 64)
}

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuTime returns the user and system CPU time process pid has used
// (utime + stime of /proc/PID/stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu time: %w", err)
	}
	return parseStat(b)
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line; the command name (field 2) may hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: /proc/PID/stat: no ')'")
	}
	sc := bufio.NewScanner(bytes.NewReader(b[i+1:]))
	sc.Split(bufio.ScanWords)
	var fs []string
	for sc.Scan() && len(fs) < 13 {
		fs = append(fs, sc.Text())
	}
	// After ')': state (3), ppid (4), ..., utime (14), stime (15).
	if len(fs) < 13 {
		return 0, errors.New("bench: /proc/PID/stat: too few fields")
	}
	ut, err1 := strconv.ParseUint(fs[11], 10, 64)
	st, err2 := strconv.ParseUint(fs[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: /proc/PID/stat: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// cpuOf returns the CPU time all of pids have used so far.
func cpuOf(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, p := range pids {
		t, err := cpuTime(p)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}
