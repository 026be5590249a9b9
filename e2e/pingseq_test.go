package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/lab"
)

// Counting lost pings across rekeys. ping's own count is not enough: after
// its last request it waits only twice the largest round-trip time seen
// (iputils: -W applies only when nothing was answered), so a reply held up
// longer than that at the end of a run counts as lost although it arrived
// (captures showed every packet of such runs delivered, the last few late
// behind a lane stalled for 100-200 ms). -w does not help: with it ping
// sends more requests until it has count answers. So the pinger reads
// ping's line per reply and judges only the requests it sent at least a
// tail (a second) before it stopped: those not answered by then are lost.

// pingTail is how long after a request its reply may come and still count.
const pingTail = time.Second

var pingReplyRE = regexp.MustCompile(`icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms`)

// pinger is a ping running in a namespace until stopped.
type pinger struct {
	cmd      *exec.Cmd
	interval time.Duration
	out      lockedBuffer
	done     chan error
}

// startPinger starts ping from ns to dst, one request per interval, until
// stop or ctx ends, or count requests (0: no limit); extra are more of
// ping's options.
func startPinger(ctx context.Context, ns *lab.Netns, dst netip.Addr, interval time.Duration, count int, extra ...string) (*pinger, error) {
	args := []string{"-n", "-i", fmt.Sprintf("%.3f", interval.Seconds()), "-W", "5"}
	if count > 0 {
		args = append(args, "-c", strconv.Itoa(count))
	}
	args = append(args, extra...)
	p := &pinger{cmd: ns.Command(ctx, "ping", append(args, dst.String())...), interval: interval, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("ping %s in %s: %w", dst, ns, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// stop interrupts ping (it prints its summary) and judges the requests
// sent at least pingTail before: Sent counts them, Received those of them
// answered, lost lists the others' sequence numbers.
func (p *pinger) stop() (r pingResult, lost []int, err error) {
	p.cmd.Process.Signal(os.Interrupt)
	return p.wait()
}

// wait waits for ping to end by itself (a count) and judges as stop does.
func (p *pinger) wait() (r pingResult, lost []int, err error) {
	werr := <-p.done
	out := p.out.String()
	m := pingCountRE.FindStringSubmatch(out)
	if m == nil {
		return r, nil, fmt.Errorf("ping: %v: %s", werr, lab.Tail(strings.TrimSpace(out), 10))
	}
	sent, _ := strconv.Atoi(m[1])
	judged := sent - int(pingTail/p.interval)
	seen := map[int]bool{}
	var sum float64
	for _, m := range pingReplyRE.FindAllStringSubmatch(out, -1) {
		seq, _ := strconv.Atoi(m[1])
		rtt, _ := strconv.ParseFloat(m[2], 64)
		if seq > judged || seen[seq] {
			continue
		}
		if len(seen) == 0 || rtt < r.Min {
			r.Min = rtt
		}
		seen[seq] = true
		r.Max, sum = max(r.Max, rtt), sum+rtt
	}
	if len(seen) > 0 {
		r.Avg = sum / float64(len(seen))
	}
	for seq := 1; seq <= judged; seq++ {
		if !seen[seq] {
			lost = append(lost, seq)
		}
	}
	r.Sent, r.Received = max(judged, 0), len(seen)
	return r, lost, nil
}

// pingAll sends n pings from ns to dst at interval, then pingTail more,
// and reports the first n: a reply up to pingTail late counts. extra are
// more of ping's options.
func pingAll(ctx context.Context, ns *lab.Netns, dst netip.Addr, n int, interval time.Duration, extra ...string) (pingResult, []int, error) {
	p, err := startPinger(ctx, ns, dst, interval, n+int(pingTail/interval), extra...)
	if err != nil {
		return pingResult{}, nil, err
	}
	return p.wait()
}

// pingRun is what pingAll returned, for a channel.
type pingRun struct {
	r    pingResult
	lost []int
	err  error
}

// lockedBuffer is a bytes.Buffer that a command writes while a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
