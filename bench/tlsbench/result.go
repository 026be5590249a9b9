package tlsbench

import (
	"encoding/json"
	"io"
	"slices"

	"github.com/sluicegw/sluice/bench"
)

// The systems a bench compares.
const (
	Sluice = "sluice" // `sluice run` with one [[tls]] listener
	Nginx  = "nginx"  // Debian's nginx, one worker process
)

// Systems lists every system, in the order a group measures them.
var Systems = []string{Nginx, Sluice}

// The metrics, with their units (Units). Handshake and storm metrics have
// Size 0; request metrics the response body's bytes.
const (
	HSFull        = "hs_full"         // full handshakes per second (no session reuse)
	HSFullCPU     = "hs_full_cpu"     // server CPU µs per full handshake
	HSFullCores   = "hs_full_cores"   // cores the server kept busy meanwhile
	HSResumed     = "hs_resumed"      // resumed handshakes per second (session tickets)
	HSResumedCPU  = "hs_resumed_cpu"  // server CPU µs per resumed handshake
	HSResumedMiss = "hs_resumed_miss" // % of the handshakes offered a ticket that did not resume
	Req           = "req"             // responses per second on keep-alive connections
	ReqCPU        = "req_cpu"         // server CPU µs per request
	ReqMiBs       = "req_mibs"        // MiB/s of response bodies
	ReqGiBCPU     = "req_cpu_per_gib" // server CPU seconds per GiB of response bodies
	ReqCores      = "req_cores"       // cores the server kept busy meanwhile
	LatIdleP50    = "lat_idle_p50"    // µs, small requests on open connections, no handshakes
	LatIdleP99    = "lat_idle_p99"    // µs
	LatStormP50   = "lat_storm_p50"   // µs, the same during a storm of RSA-4096 full handshakes
	LatStormP99   = "lat_storm_p99"   // µs
	StormHS       = "storm_hs"        // RSA-4096 full handshakes per second during the storm
	StormCores    = "storm_cores"     // cores the server kept busy during the storm
	unitHS        = "hs/s"
	unitReq       = "req/s"
	unitUs        = "us"
	unitCores     = "cores"
	unitPercent   = "%"
	unitMiBs      = "MiB/s"
	unitSecPerGiB = "cpu-s/GiB"
)

// Units maps each metric to its unit.
var Units = map[string]string{
	HSFull: unitHS, HSFullCPU: unitUs, HSFullCores: unitCores,
	HSResumed: unitHS, HSResumedCPU: unitUs, HSResumedMiss: unitPercent,
	Req: unitReq, ReqCPU: unitUs, ReqMiBs: unitMiBs, ReqGiBCPU: unitSecPerGiB, ReqCores: unitCores,
	LatIdleP50: unitUs, LatIdleP99: unitUs, LatStormP50: unitUs, LatStormP99: unitUs,
	StormHS: unitHS, StormCores: unitCores,
}

// metricOrder is the order of a group's results and table rows.
var metricOrder = []string{HSFull, HSFullCPU, HSFullCores, HSResumed, HSResumedCPU, HSResumedMiss,
	Req, ReqCPU, ReqMiBs, ReqGiBCPU, ReqCores,
	LatIdleP50, LatIdleP99, LatStormP50, LatStormP99, StormHS, StormCores}

// Server names one server under test: a system and, for sluice, the
// engine that holds its private keys ("-" for nginx, which signs with its
// own OpenSSL).
type Server struct {
	System string `json:"system"`
	Engine string `json:"engine"`
}

// String is "nginx" or "sluice/ENGINE".
func (s Server) String() string {
	if s.Engine == "" || s.Engine == "-" {
		return s.System
	}
	return s.System + "/" + s.Engine
}

// Result is one number of a bench: the median over the repetitions of one
// metric of one server at one key type, TLS version and response size,
// with the smallest and largest repetition as its spread.
type Result struct {
	Server
	Key     string  `json:"key"`     // ecdsap256, rsa2048, rsa4096
	Version string  `json:"version"` // "1.2" or "1.3"
	Size    int     `json:"size"`    // response body bytes; 0 for handshakes and the storm
	Metric  string  `json:"metric"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Spread  Spread  `json:"spread"`
}

// Spread is the range of the repetitions a median was taken from.
type Spread = bench.Spread

// Document is the JSON output of `sluice bench tls`.
type Document struct {
	// Bench is "tls": what made the document, for sluice-plot.
	Bench   string    `json:"bench"`
	Env     bench.Env `json:"env"`
	Results []Result  `json:"results"`
	Ratios  []Ratio   `json:"ratios,omitempty"`
	Notes   []string  `json:"notes,omitempty"`
}

// BenchName is a Document's Bench.
const BenchName = "tls"

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

// sampleKey names the samples of one metric of one server at one size.
type sampleKey struct {
	server int
	size   int
	metric string
}

// collect turns a group's samples into results, by server, size and
// metricOrder.
func collect(servers []Server, key, version string, samples map[sampleKey][]float64) []Result {
	keys := make([]sampleKey, 0, len(samples))
	for k := range samples {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y sampleKey) int {
		if x.server != y.server {
			return x.server - y.server
		}
		if x.size != y.size {
			return x.size - y.size
		}
		return slices.Index(metricOrder, x.metric) - slices.Index(metricOrder, y.metric)
	})
	var rs []Result
	for _, k := range keys {
		v, sp := bench.Median(samples[k])
		rs = append(rs, Result{Server: servers[k.server], Key: key, Version: version, Size: k.size,
			Metric: k.metric, Value: v, Unit: Units[k.metric], Spread: sp})
	}
	return rs
}
