package tunnel

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sluicegw/sluice/bench"
)

// The systems a bench compares.
const (
	Veth      = "veth"         // the namespaces' veth alone: the ceiling
	Sluice    = "sluice"       // two `sluice run` gateways, ESP in UDP
	WireGuard = "wireguard-go" // two wireguard-go daemons
)

// Systems lists every system, in the order a bench runs them.
var Systems = []string{Veth, Sluice, WireGuard}

// The metrics of a cell, with their units. Size-independent metrics have
// Size 0; the UDP flood metrics have the inner IP packet size.
const (
	TCP1        = "tcp1"         // Gbit/s, one TCP stream (iperf3)
	TCP4        = "tcp4"         // Gbit/s, four TCP streams (iperf3 -P 4)
	TCP1PerCPU  = "tcp1_per_cpu" // Gbit per CPU-second of both gateways, during tcp1
	TCP4PerCPU  = "tcp4_per_cpu" // the same during tcp4
	UDPRate     = "udp_gbps"     // Gbit/s of UDP payload received, flood
	UDPPPS      = "udp_pps"      // packets per second received, flood
	UDPLoss     = "udp_loss"     // % of the packets sent that were not received
	UDPPerCPU   = "udp_per_cpu"  // Gbit (payload received) per CPU-second of both gateways
	PingAvg     = "ping_avg"     // ms, ICMP echo (ping) average round trip
	LatP50      = "lat_p50"      // µs, UDP echo round trip at a fixed rate
	LatP99      = "lat_p99"      // µs
	LatP999     = "lat_p999"     // µs
	LatLoss     = "lat_loss"     // % of the probes unanswered
	GatewayCPU  = "cpu_cores"    // cores both gateways kept busy during tcp1
	unitGbps    = "Gbit/s"
	unitPPS     = "pps"
	unitPercent = "%"
	unitPerCPU  = "Gbit/cpu-s"
	unitMs      = "ms"
	unitUs      = "us"
	unitCores   = "cores"
)

// Units maps each metric to its unit.
var Units = map[string]string{
	TCP1: unitGbps, TCP4: unitGbps, TCP1PerCPU: unitPerCPU, TCP4PerCPU: unitPerCPU,
	UDPRate: unitGbps, UDPPPS: unitPPS, UDPLoss: unitPercent, UDPPerCPU: unitPerCPU,
	PingAvg: unitMs, LatP50: unitUs, LatP99: unitUs, LatP999: unitUs, LatLoss: unitPercent,
	GatewayCPU: unitCores,
}

// Cell names one configuration under test: a system with its engine,
// algorithm, ESP link, tunnel count and workers. Fields that do not apply
// are empty (or 0): veth has no algorithm, wireguard-go no engine and
// neither a link, and Workers 0 is the system's default.
type Cell struct {
	System  string `json:"system"`
	Encap   string `json:"encap"`  // "udp" for both tunnels, "-" for veth
	Engine  string `json:"engine"` // sluice's crypto engine; "-" otherwise
	Alg     string `json:"alg"`
	Tunnels int    `json:"tunnels"`
	Workers int    `json:"workers"` // 0: the default (sluice: one per core)
	// Link is sluice's [udp] link (LinkAuto, LinkSocket, LinkXDP); ""
	// for the other systems.
	Link string `json:"link,omitempty"`
	// LinkGot is the link both gateways reported once up: "socket", or
	// "xdp" with its AF_XDP mode ("xdp copy native"); "A ...; B ..."
	// when they differ. It is set on the results, not on the cells a run
	// starts from.
	LinkGot string `json:"link_got,omitempty"`
}

// The values of Cell.Link: sluice's [udp] link.
const (
	LinkAuto   = "auto"   // AF_XDP where it loads, the UDP sockets otherwise (the default)
	LinkSocket = "socket" // the UDP sockets (recvmmsg/sendmmsg)
	LinkXDP    = "xdp"    // AF_XDP, or the gateway does not start
)

// Links lists the values of Cell.Link.
var Links = []string{LinkAuto, LinkSocket, LinkXDP}

// WithTunnels returns c with n tunnels.
func (c Cell) WithTunnels(n int) Cell {
	c.Tunnels = n
	return c
}

// String is a short label: "sluice soft aes128gcm16 xdp x10 w2".
func (c Cell) String() string {
	s := c.System
	if c.Engine != "" && c.Engine != "-" {
		s += " " + c.Engine
	}
	if c.Alg != "" && c.Alg != "-" {
		s += " " + c.Alg
	}
	if c.Link != "" {
		s += " " + c.Link
	}
	if c.Tunnels > 1 {
		s += fmt.Sprintf(" x%d", c.Tunnels)
	}
	if c.Workers > 0 {
		s += fmt.Sprintf(" w%d", c.Workers)
	}
	return s
}

// Result is one number of a bench: the median over the repetitions of one
// metric of one cell (at one size), with the smallest and largest
// repetition as its spread.
type Result struct {
	Cell
	Size   int     `json:"size"` // inner IP packet bytes of a UDP flood; 0 for the others
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Spread Spread  `json:"spread"`
}

// Spread is the range of the repetitions a median was taken from.
type Spread = bench.Spread

// Document is the JSON output of `sluice bench tunnel`.
type Document struct {
	// Bench is "tunnel": what made the document, for sluice-plot.
	Bench   string   `json:"bench"`
	Results []Result `json:"results"`
	Ratios  []Ratio  `json:"ratios,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// BenchName is a Document's Bench.
const BenchName = "tunnel"

// WriteJSON writes d, indented, with a final newline.
func (d *Document) WriteJSON(w io.Writer) error {
	if d.Bench == "" {
		d.Bench = BenchName
	}
	if d.Results == nil {
		d.Results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
