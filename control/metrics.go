package control

// Prometheus metrics. The collector reads the gateway's counters at scrape
// time, so the data plane keeps no second set of counters and pays nothing
// between scrapes.
//
//	sluice_sa_packets_total{tunnel,sa,spi,direction}
//	sluice_sa_bytes_total{tunnel,sa,spi,direction}
//	sluice_sa_drops_total{tunnel,sa,spi,direction,reason}
//	sluice_sa_needs_rekey{tunnel,sa,spi,direction}
//	sluice_sa_state_failing{tunnel,sa,spi,direction}
//	sluice_sa_state_failures_total{tunnel,sa,spi,direction}
//	sluice_worker_sealed_total{worker}
//	sluice_worker_opened_total{worker}
//	sluice_worker_tx_packets_total{worker}
//	sluice_worker_tx_errors_total{worker}
//	sluice_worker_drops_total{worker,reason}
//	sluice_receiver_packets_total{receiver,side}
//	sluice_receiver_bytes_total{receiver,side}
//	sluice_receiver_drops_total{receiver,side,reason}
//	sluice_tls_accepted_total{listener}
//	sluice_tls_refused_total{listener}
//	sluice_tls_open_connections{listener}
//	sluice_tls_handshakes_total{listener}
//	sluice_tls_handshake_failures_total{listener,reason}
//	sluice_tls_resumed_total{listener}
//	sluice_tls_bytes_in_total{listener}
//	sluice_tls_bytes_out_total{listener}
//	sluice_tls_idle_closed_total{listener}
//	sluice_tls_requests_total{listener}
//	sluice_tls_header_timeouts_total{listener}
//	sluice_tls_sign_queue_depth{listener}
//	sluice_tls_sign_ops_total{listener}
//	sluice_tls_sign_batches_total{listener}
//	sluice_tls_sign_max_batch{listener}
//
//	sluice_ike_packets_total{direction}
//	sluice_ike_drops_total{reason}
//	sluice_ike_failures_total{reason}
//	sluice_ike_retransmits_total{direction}
//	sluice_ike_exchanges_total{event}
//	sluice_ike_connection_up{connection}
//
// The TLS series are per [[tls]] listener and [[tls_origin]], named by the
// listener label.
//
// plus the Go runtime's go_* and the process's process_* series.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicegw/sluice/gateway"
)

var (
	saLabels     = []string{"tunnel", "sa", "spi", "direction"}
	workerLabels = []string{"worker"}
	rxLabels     = []string{"receiver", "side"}

	saPackets = prometheus.NewDesc("sluice_sa_packets_total",
		"Packets the SA sealed (direction out) or opened and accepted (direction in).", saLabels, nil)
	saBytes = prometheus.NewDesc("sluice_sa_bytes_total",
		"Plaintext bytes of the packets the SA sealed or opened.", saLabels, nil)
	saDrops = prometheus.NewDesc("sluice_sa_drops_total",
		"Packets of the SA dropped, by reason.", append(saLabels[:len(saLabels):len(saLabels)], "reason"), nil)
	saNeedsRekey = prometheus.NewDesc("sluice_sa_needs_rekey",
		"1 when the SA is near or at its sequence number or lifetime limit and needs a rekey.", saLabels, nil)
	saStateFailing = prometheus.NewDesc("sluice_sa_state_failing",
		"1 while the SA cannot record its sequence-number reservation in the state directory (it drops its packets).", saLabels, nil)
	saStateFailures = prometheus.NewDesc("sluice_sa_state_failures_total",
		"Sequence-number reservations of the SA that could not be recorded in the state directory.", saLabels, nil)

	workerSealed = prometheus.NewDesc("sluice_worker_sealed_total",
		"Packets the data-plane worker encrypted.", workerLabels, nil)
	workerOpened = prometheus.NewDesc("sluice_worker_opened_total",
		"Packets the data-plane worker decrypted and accepted.", workerLabels, nil)
	workerTx = prometheus.NewDesc("sluice_worker_tx_packets_total",
		"Packets the data-plane worker wrote to a link.", workerLabels, nil)
	workerTxErrors = prometheus.NewDesc("sluice_worker_tx_errors_total",
		"Packets a link refused to send for the worker.", workerLabels, nil)
	workerDrops = prometheus.NewDesc("sluice_worker_drops_total",
		"Packets the data-plane worker dropped, by reason.", append(workerLabels[:1:1], "reason"), nil)

	rxPackets = prometheus.NewDesc("sluice_receiver_packets_total",
		"Packets a receive goroutine read (side plain: from the TUN device; esp: from the network).", rxLabels, nil)
	rxBytes = prometheus.NewDesc("sluice_receiver_bytes_total",
		"Bytes a receive goroutine read.", rxLabels, nil)
	rxDrops = prometheus.NewDesc("sluice_receiver_drops_total",
		"Packets a receive goroutine dropped before handing them to a worker, by reason.", append(rxLabels[:2:2], "reason"), nil)

	tlsLabels = []string{"listener"}

	tlsAccepted = prometheus.NewDesc("sluice_tls_accepted_total",
		"Connections the TLS listener or origin accepted.", tlsLabels, nil)
	tlsRefused = prometheus.NewDesc("sluice_tls_refused_total",
		"Connections the TLS listener or origin refused at its max_conns.", tlsLabels, nil)
	tlsOpen = prometheus.NewDesc("sluice_tls_open_connections",
		"Connections of the TLS listener or origin open now.", tlsLabels, nil)
	tlsHandshakes = prometheus.NewDesc("sluice_tls_handshakes_total",
		"TLS handshakes completed, full and resumed.", tlsLabels, nil)
	tlsHandshakeFailures = prometheus.NewDesc("sluice_tls_handshake_failures_total",
		"TLS handshakes that failed, by reason.", append(tlsLabels[:1:1], "reason"), nil)
	tlsResumed = prometheus.NewDesc("sluice_tls_resumed_total",
		"TLS handshakes that resumed a session with a ticket.", tlsLabels, nil)
	tlsBytesIn = prometheus.NewDesc("sluice_tls_bytes_in_total",
		"Plaintext bytes carried from clients to the backend.", tlsLabels, nil)
	tlsBytesOut = prometheus.NewDesc("sluice_tls_bytes_out_total",
		"Plaintext bytes carried from the backend to clients.", tlsLabels, nil)
	tlsIdleClosed = prometheus.NewDesc("sluice_tls_idle_closed_total",
		"Connections closed by the idle timeout.", tlsLabels, nil)
	tlsRequests = prometheus.NewDesc("sluice_tls_requests_total",
		"Requests the static: backend answered.", tlsLabels, nil)
	tlsHeaderTimeouts = prometheus.NewDesc("sluice_tls_header_timeouts_total",
		"Connections the static: backend closed in the middle of a request head (header_timeout; also idle-closed).", tlsLabels, nil)
	tlsSignQueue = prometheus.NewDesc("sluice_tls_sign_queue_depth",
		"Handshake signatures waiting for the engine now.", tlsLabels, nil)
	tlsSignOps = prometheus.NewDesc("sluice_tls_sign_ops_total",
		"Handshake signatures the engine made.", tlsLabels, nil)
	tlsSignBatches = prometheus.NewDesc("sluice_tls_sign_batches_total",
		"Batches of handshake signatures submitted to the engine (sign_ops / sign_batches is the mean batch).", tlsLabels, nil)
	tlsSignMaxBatch = prometheus.NewDesc("sluice_tls_sign_max_batch",
		"The largest batch of handshake signatures submitted to the engine.", tlsLabels, nil)

	ikePackets = prometheus.NewDesc("sluice_ike_packets_total",
		"IKE datagrams received (rx) and sent (tx, retransmissions included).", []string{"direction"}, nil)
	ikeDrops = prometheus.NewDesc("sluice_ike_drops_total",
		"IKE datagrams dropped, by reason (ike.Stats).", []string{"reason"}, nil)
	ikeFailures = prometheus.NewDesc("sluice_ike_failures_total",
		"IKE negotiations that failed, by reason.", []string{"reason"}, nil)
	ikeRetransmits = prometheus.NewDesc("sluice_ike_retransmits_total",
		"IKE requests retransmitted by us (tx) and by the peers, answered from the cache (rx).", []string{"direction"}, nil)
	ikeExchanges = prometheus.NewDesc("sluice_ike_exchanges_total",
		"IKE SAs and Child SAs established, rekeyed and deleted, and the other events the endpoint counts.", []string{"event"}, nil)
	ikeUp = prometheus.NewDesc("sluice_ike_connection_up",
		"1 while the IKE connection has an established child installed, else 0.", []string{"connection"}, nil)
)

// ikeFailureReasons are the ike.Stats counters (snake_case) that count
// failed negotiations; the other rx_ ones count dropped datagrams.
var ikeFailureReasons = map[string]bool{
	"auth_failed": true, "no_proposal_chosen": true, "ts_unacceptable": true, "invalid_ke": true,
	"timeouts": true, "temp_failures": true, "peers_dead": true,
}

// Collector is a prometheus.Collector over a gateway's counters. Stats is
// called once per scrape, from the scraping goroutine.
type Collector struct {
	stats func() gateway.Stats
}

// NewCollector returns a collector that reads stats at every scrape.
func NewCollector(stats func() gateway.Stats) *Collector { return &Collector{stats: stats} }

// Describe sends the descriptors of every series the collector makes.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{saPackets, saBytes, saDrops, saNeedsRekey, saStateFailing, saStateFailures,
		workerSealed, workerOpened, workerTx, workerTxErrors, workerDrops, rxPackets, rxBytes, rxDrops,
		tlsAccepted, tlsRefused, tlsOpen, tlsHandshakes, tlsHandshakeFailures, tlsResumed, tlsBytesIn, tlsBytesOut,
		tlsIdleClosed, tlsRequests, tlsHeaderTimeouts, tlsSignQueue, tlsSignOps, tlsSignBatches, tlsSignMaxBatch,
		ikePackets, ikeDrops, ikeFailures, ikeRetransmits, ikeExchanges, ikeUp} {
		ch <- d
	}
}

// Collect reads the counters and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// The same SA may be listed twice for a moment while the SAD changes
	// under the read; a registry refuses a scrape with a duplicate series.
	seen := map[[4]string]bool{}
	for _, sa := range st.SAs {
		key := [4]string{sa.Tunnel, sa.Name, fmt.Sprintf("0x%08x", sa.SPI), sa.Direction}
		if seen[key] {
			continue
		}
		seen[key] = true
		l := key[:]
		counter(saPackets, sa.Packets, l...)
		counter(saBytes, sa.Bytes, l...)
		for _, r := range sortedKeys(sa.Drops) {
			counter(saDrops, sa.Drops[r], append(l[:4:4], r)...)
		}
		rekey := 0.0
		if sa.NeedsRekey {
			rekey = 1
		}
		ch <- prometheus.MustNewConstMetric(saNeedsRekey, prometheus.GaugeValue, rekey, l...)
		failing := 0.0
		if sa.StateFailing {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(saStateFailing, prometheus.GaugeValue, failing, l...)
		counter(saStateFailures, sa.StateFailures, l...)
	}
	for _, w := range st.Dataplane.Workers {
		i := strconv.Itoa(w.Index)
		counter(workerSealed, w.Sealed, i)
		counter(workerOpened, w.Opened, i)
		counter(workerTx, w.TxPackets, i)
		counter(workerTxErrors, w.TxErrors, i)
		for _, r := range sortedKeys(w.Drops) {
			counter(workerDrops, w.Drops[r], i, r)
		}
	}
	for i, r := range st.Dataplane.Receivers {
		side := "esp"
		if r.Plain {
			side = "plain"
		}
		idx := strconv.Itoa(i)
		counter(rxPackets, r.Packets, idx, side)
		counter(rxBytes, r.Bytes, idx, side)
		for _, reason := range sortedKeys(r.Drops) {
			counter(rxDrops, r.Drops[reason], idx, side, reason)
		}
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	tlsSeen := map[string]bool{} // names are unique; a reload under the read must not fail the scrape
	for _, l := range st.TLS {
		if tlsSeen[l.Name] {
			continue
		}
		tlsSeen[l.Name] = true
		counter(tlsAccepted, l.Accepted, l.Name)
		counter(tlsRefused, l.Refused, l.Name)
		gauge(tlsOpen, l.Open, l.Name)
		counter(tlsHandshakes, l.Handshakes, l.Name)
		for _, r := range sortedKeys(l.HandshakeFailures) {
			counter(tlsHandshakeFailures, l.HandshakeFailures[r], l.Name, r)
		}
		counter(tlsResumed, l.Resumed, l.Name)
		counter(tlsBytesIn, l.BytesIn, l.Name)
		counter(tlsBytesOut, l.BytesOut, l.Name)
		counter(tlsIdleClosed, l.IdleClosed, l.Name)
		counter(tlsRequests, l.Requests, l.Name)
		counter(tlsHeaderTimeouts, l.HeaderTimeouts, l.Name)
		gauge(tlsSignQueue, l.SignQueueDepth, l.Name)
		counter(tlsSignOps, l.SignOps, l.Name)
		counter(tlsSignBatches, l.SignBatches, l.Name)
		gauge(tlsSignMaxBatch, l.SignMaxBatch, l.Name)
	}
	if st.IKE != nil {
		collectIKE(st.IKE, counter, gauge)
	}
}

// collectIKE sends the IKE series: each counter of ike.Stats in one
// family by what it counts.
func collectIKE(info *gateway.IKEInfo, counter, gauge func(d *prometheus.Desc, v uint64, labels ...string)) {
	for _, k := range sortedKeys(info.Stats) {
		v := info.Stats[k]
		switch {
		case k == "rx_packets":
			counter(ikePackets, v, "rx")
		case k == "tx_packets":
			counter(ikePackets, v, "tx")
		case k == "rx_retransmits":
			counter(ikeRetransmits, v, "rx")
		case k == "tx_retransmits":
			counter(ikeRetransmits, v, "tx")
		case ikeFailureReasons[k]:
			counter(ikeFailures, v, k)
		case strings.HasPrefix(k, "rx_"):
			counter(ikeDrops, v, strings.TrimPrefix(k, "rx_"))
		default:
			counter(ikeExchanges, v, k)
		}
	}
	seen := map[string]bool{}
	for _, c := range info.Connections {
		if seen[c.Name] {
			continue
		}
		seen[c.Name] = true
		up := uint64(0)
		if c.State == "established" {
			up = 1
		}
		gauge(ikeUp, up, c.Name)
	}
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NewRegistry returns a registry with the gateway's collector and the Go
// runtime and process collectors.
func NewRegistry(stats func() gateway.Stats) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(stats),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// MetricsServer serves /metrics over HTTP.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// ServeMetrics listens on addr ("host:port"; port 0 picks one) and serves
// the registry of NewRegistry(stats) at /metrics. The listen error, if any,
// is returned here, not later.
func ServeMetrics(addr string, stats func() gateway.Stats, log *slog.Logger) (*MetricsServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("control: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(NewRegistry(stats), promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       10 * time.Second,
	}))
	m := &MetricsServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return m, nil
}

// Addr returns the address the server listens on.
func (m *MetricsServer) Addr() net.Addr { return m.ln.Addr() }

// Close stops the server, letting scrapes in progress finish for up to a
// second. It is idempotent.
func (m *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if err != nil {
		err = m.srv.Close()
	}
	<-m.done
	return err
}
