package e2e_test

// Real traffic tools run inside the namespaces (iputils ping, iperf3), the
// kernel's drop counters there, and a capture of ESP on the wire.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/internal/lab"
)

// pingResult is what `ping -q` summarised.
type pingResult struct {
	Sent, Received int
	Min, Avg, Max  float64 // ms
}

func (r pingResult) String() string {
	return fmt.Sprintf("%d/%d received, rtt min/avg/max %.3f/%.3f/%.3f ms", r.Received, r.Sent, r.Min, r.Avg, r.Max)
}

var (
	pingCountRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTTRE   = regexp.MustCompile(`= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms`)
)

// ping sends count requests from ns to dst, one per interval, and says
// how many were answered. With more than one, it goes on pinging for
// pingTail and judges only the first count (pingAll): ping's own summary
// counts a reply as lost when it comes more than twice the largest round
// trip after the last request, which a loaded machine makes happen
// although nothing was lost. One request is judged by ping's summary
// (waitPing asks again until one is answered). A run that lost packets is
// not an error; one that printed no summary is.
func ping(ctx context.Context, ns *lab.Netns, dst netip.Addr, count int, interval time.Duration, extra ...string) (pingResult, error) {
	if count <= 1 {
		return pingSummary(ctx, ns, dst, count, interval, extra...)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*interval+pingTail+30*time.Second)
	defer cancel()
	r, _, err := pingAll(ctx, ns, dst, count, interval, extra...)
	if err != nil {
		err = fmt.Errorf("ping %s in %s: %w", dst, ns, err)
	}
	return r, err
}

// pingSummary runs `ping -n -q -c count -i interval -W 5 dst` in ns and
// reads its summary: exactly count requests, for a test that counts what
// they make elsewhere (drops by reason) and expects no answer.
func pingSummary(ctx context.Context, ns *lab.Netns, dst netip.Addr, count int, interval time.Duration, extra ...string) (pingResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*interval+30*time.Second)
	defer cancel()
	args := []string{"-n", "-q", "-c", strconv.Itoa(count), "-i", fmt.Sprintf("%.3f", interval.Seconds()), "-W", "5"}
	args = append(args, extra...)
	args = append(args, dst.String())
	out, err := ns.Command(ctx, "ping", args...).CombinedOutput()
	var r pingResult
	m := pingCountRE.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("ping %s in %s: %v: %s", dst, ns, err, strings.TrimSpace(string(out)))
	}
	r.Sent, _ = strconv.Atoi(string(m[1]))
	r.Received, _ = strconv.Atoi(string(m[2]))
	if m := pingRTTRE.FindSubmatch(out); m != nil {
		r.Min, _ = strconv.ParseFloat(string(m[1]), 64)
		r.Avg, _ = strconv.ParseFloat(string(m[2]), 64)
		r.Max, _ = strconv.ParseFloat(string(m[3]), 64)
	}
	return r, nil
}

// waitPing waits until one ping from ns to dst is answered: the tunnel is
// up end to end.
func waitPing(t *testing.T, ctx context.Context, ns *lab.Netns, dst netip.Addr, extra ...string) {
	t.Helper()
	start := time.Now()
	err := lab.WaitFor(ctx, fmt.Sprintf("a ping from %s to %s", ns, dst), firstPacket, 50*time.Millisecond, func() (bool, error) {
		r, err := ping(ctx, ns, dst, 1, 200*time.Millisecond, append([]string{"-W", "0.5"}, extra...)...)
		if err != nil {
			return false, err
		}
		return r.Received == 1, fmt.Errorf("no answer")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first ping %s -> %s answered after %v", ns, dst, time.Since(start).Round(time.Millisecond))
}

// mustPing runs count pings at interval and fails the test on any loss.
func mustPing(t *testing.T, ctx context.Context, what string, ns *lab.Netns, dst netip.Addr, count int, interval time.Duration, extra ...string) pingResult {
	t.Helper()
	r, err := ping(ctx, ns, dst, count, interval, extra...)
	if err != nil {
		t.Fatal(err)
	}
	measuref(t, "%s: ping -c %d -i %v: %v", what, count, interval, r)
	if r.Sent != count || r.Received != count {
		t.Errorf("%s: ping %s: %d of %d answered, want 0%% loss", what, dst, r.Received, r.Sent)
	}
	return r
}

// iperfResult is what an iperf3 client reported (-J).
type iperfResult struct {
	Mbps        float64 // received, Mbit/s
	SentMbps    float64
	Retransmits int     // TCP
	Packets     int     // UDP, received side's count of sent datagrams
	Lost        int     // UDP
	LostPercent float64 // UDP
	JitterMs    float64 // UDP
	Seconds     float64
}

// iperfJSON is the part of iperf3 -J output read here.
type iperfJSON struct {
	Error string `json:"error"`
	End   struct {
		SumSent struct {
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Packets       int     `json:"packets"`
			LostPackets   int     `json:"lost_packets"`
			LostPercent   float64 `json:"lost_percent"`
			JitterMs      float64 `json:"jitter_ms"`
		} `json:"sum_received"`
	} `json:"end"`
}

// iperfOptions shape one iperf3 run.
type iperfOptions struct {
	Seconds int    // default 3
	UDP     bool   // UDP instead of TCP
	Rate    string // UDP target rate (-b), default 50M
	Len     int    // UDP datagram payload (-l), default 1200
	Reverse bool   // -R: the server sends
	Bind    netip.Addr
	Port    int // default 5201
}

// iperf3 runs a one-off iperf3 server in server (listening on serverAddr)
// and a client in client that connects to it, and returns what the client
// reported.
func iperf3(ctx context.Context, l *lab.Lab, server *lab.Netns, serverAddr netip.Addr, client *lab.Netns, o iperfOptions) (iperfResult, error) {
	if o.Seconds <= 0 {
		o.Seconds = 3
	}
	if o.Port == 0 {
		o.Port = 5201
	}
	port := strconv.Itoa(o.Port)
	srv, err := l.Start(server, "iperf3 server in "+server.Name(), []string{"iperf3", "-s", "-1", "-p", port, "-B", serverAddr.String()}, nil)
	if err != nil {
		return iperfResult{}, err
	}
	// The server listens once ss shows it.
	err = lab.WaitFor(ctx, "iperf3 to listen in "+server.Name(), 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		if done, err := srv.Exited(); done {
			return false, fmt.Errorf("%w: iperf3 server exited: %v: %s", lab.ErrStop, err, srv.Output())
		}
		out, err := server.Exec(ctx, "ss", "-Hltn", "sport = :"+port)
		if err != nil {
			return false, err
		}
		return strings.Contains(string(out), ":"+port), nil
	})
	if err != nil {
		return iperfResult{}, err
	}
	args := []string{"-c", serverAddr.String(), "-p", port, "-t", strconv.Itoa(o.Seconds), "-J"}
	if o.Bind.IsValid() {
		args = append(args, "-B", o.Bind.String())
	}
	if o.UDP {
		if o.Rate == "" {
			o.Rate = "50M"
		}
		if o.Len == 0 {
			o.Len = 1200
		}
		args = append(args, "-u", "-b", o.Rate, "-l", strconv.Itoa(o.Len))
	}
	if o.Reverse {
		args = append(args, "-R")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(o.Seconds)*time.Second+30*time.Second)
	defer cancel()
	out, cerr := client.Command(cctx, "iperf3", args...).Output()
	var j iperfJSON
	if err := json.Unmarshal(out, &j); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 %s: %v (%v): %s", strings.Join(args, " "), cerr, err, out)
	}
	if j.Error != "" || cerr != nil {
		return iperfResult{}, fmt.Errorf("iperf3 %s: %v: %s; server: %s", strings.Join(args, " "), cerr, j.Error, srv.Output())
	}
	// The one-off server exits by itself once the test is over.
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
	}
	r := iperfResult{
		Mbps: j.End.SumReceived.BitsPerSecond / 1e6, SentMbps: j.End.SumSent.BitsPerSecond / 1e6,
		Retransmits: j.End.SumSent.Retransmits, Seconds: j.End.SumReceived.Seconds,
		Packets: j.End.SumReceived.Packets, Lost: j.End.SumReceived.LostPackets,
		LostPercent: j.End.SumReceived.LostPercent, JitterMs: j.End.SumReceived.JitterMs,
	}
	return r, nil
}

// mustIperf runs iperf3 and fails the test unless data arrived; it logs
// the numbers.
func mustIperf(t *testing.T, tb *testbed, what string, server *lab.Netns, serverAddr netip.Addr, client *lab.Netns, o iperfOptions) iperfResult {
	t.Helper()
	r, err := iperf3(tb.ctx, tb.lab, server, serverAddr, client, o)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if o.UDP {
		pps := 0.0
		if r.Seconds > 0 {
			pps = float64(r.Packets-r.Lost) / r.Seconds
		}
		measuref(t, "%s: iperf3 UDP -b %s -l %d: %.1f Mbit/s received (%.0f pps), %d/%d lost (%.3f%%), jitter %.3f ms",
			what, o.Rate, o.Len, r.Mbps, pps, r.Lost, r.Packets, r.LostPercent, r.JitterMs)
	} else {
		measuref(t, "%s: iperf3 TCP %ds: %.1f Mbit/s received (%.1f sent, %d retransmits)", what, o.Seconds, r.Mbps, r.SentMbps, r.Retransmits)
	}
	if r.Mbps <= 0 {
		t.Errorf("%s: iperf3 measured no throughput", what)
	}
	return r
}

// kernelCounters are the drop counters of the kernel in a namespace that
// sluice's own counters cannot see: the TUN device's queue (tx_dropped:
// packets the kernel routed into the TUN that the gateway did not read in
// time), the UDP and raw sockets' receive buffers, and TCP's view of
// reordering (TcpExt).
type kernelCounters map[string]uint64

// readKernelCounters reads them in ns.
func readKernelCounters(ctx context.Context, ns *lab.Netns) kernelCounters {
	k := kernelCounters{}
	out, err := ns.Exec(ctx, "sh", "-c", "cat /proc/net/snmp /proc/net/snmp6 /proc/net/netstat; "+
		"echo TunTxDropped $(cat /sys/class/net/"+tunName+"/statistics/tx_dropped); "+
		"echo RawDrops $(cat /proc/net/raw /proc/net/raw6 | awk 'NR>1 && $NF ~ /^[0-9]+$/ {s += $NF} END {print s+0}')")
	if err != nil {
		return k
	}
	lines := strings.Split(string(out), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && (f[0] == "Udp:" || f[0] == "TcpExt:") && i+1 < len(lines):
			// A header line, then a value line.
			v := strings.Fields(lines[i+1])
			if len(v) != len(f) || v[1] == f[1] {
				continue
			}
			for j := 1; j < len(f); j++ {
				switch f[j] {
				case "RcvbufErrors", "SndbufErrors", "InErrors", "TCPOFOQueue", "TCPSACKReorder", "TCPTSReorder", "TCPLostRetransmit":
					k[strings.TrimSuffix(f[0], ":")+f[j]], _ = strconv.ParseUint(v[j], 10, 64)
				}
			}
		case len(f) == 2 && (f[0] == "Udp6RcvbufErrors" || f[0] == "Udp6SndbufErrors" || f[0] == "Udp6InErrors" || f[0] == "TunTxDropped" || f[0] == "RawDrops"):
			k[f[0]], _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	return k
}

// since is what grew from before to k, without the counters that did not.
func (k kernelCounters) since(before kernelCounters) kernelCounters {
	d := kernelCounters{}
	for name, v := range k {
		if v > before[name] {
			d[name] = v - before[name]
		}
	}
	return d
}

// espCapture records the ESP packets of one SPI that arrive from one
// address on an interface: their IV (the 8 bytes after the ESP header,
// hex) and the start of their ciphertext.
type espCapture struct {
	fd      int
	mu      sync.Mutex
	seen    map[string]string
	repeats int // packets whose IV was seen before in the same take
	stop    chan struct{}
	done    chan struct{}
}

// captureESP starts capturing, on ifname in ns, the ESP in UDP from src
// with the SPI.
func captureESP(ns *lab.Netns, ifname string, src netip.Addr, spi uint32) (*espCapture, error) {
	c := &espCapture{seen: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{}), fd: -1}
	proto := htons(unix.ETH_P_IP)
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		c.fd = fd
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("capture on %s in %s: %w", ifname, ns, err)
	}
	// Room for a flood's worth of packets while the reader catches up.
	unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	go c.loop(src.As4(), spi)
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *espCapture) loop(src [4]byte, spi uint32) {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue // the receive timeout, to look at stop again
		}
		p := buf[:n]
		if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_UDP || [4]byte(p[12:16]) != src {
			continue
		}
		ihl := int(p[0]&0x0f) * 4
		if len(p) < ihl+8+8+8+16 || binary.BigEndian.Uint16(p[ihl+2:]) != 4500 {
			continue
		}
		esp := p[ihl+8:]
		if binary.BigEndian.Uint32(esp) != spi {
			continue
		}
		iv := hex.EncodeToString(esp[8:16])
		c.mu.Lock()
		if _, ok := c.seen[iv]; ok {
			c.repeats++
		}
		c.seen[iv] = hex.EncodeToString(esp[16:24])
		c.mu.Unlock()
	}
}

// take returns what was captured since the last take, and how many of
// those packets repeated an IV seen earlier in it.
func (c *espCapture) take() map[string]string {
	m, _ := c.takeRepeats()
	return m
}

// count is how many packets were captured since the last take.
func (c *espCapture) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen) + c.repeats
}

func (c *espCapture) takeRepeats() (map[string]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, r := c.seen, c.repeats
	c.seen, c.repeats = map[string]string{}, 0
	return m, r
}

func (c *espCapture) close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	unix.Close(c.fd)
}
