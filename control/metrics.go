package control

// Prometheus metrics. The collector reads the gateway's counters at scrape
// time, so the data plane keeps no second set of counters and pays nothing
// between scrapes. Every series is labelled by what an operator names in
// the configuration (a tunnel, an IKE connection, a TLS listener), never by
// an SPI, so a rekey makes no new series; and every drop or failure reason
// is there at 0 from the first scrape.
//
//	sluice_build_info{version,commit,go,engines}            always 1
//
//	sluice_tunnel_packets_total{tunnel,direction}
//	sluice_tunnel_bytes_total{tunnel,direction}
//	sluice_tunnel_drops_total{tunnel,direction,reason}
//	sluice_tunnel_needs_rekey{tunnel,direction}
//	sluice_tunnel_state_failing{tunnel,direction}
//	sluice_tunnel_state_failures_total{tunnel,direction}
//	sluice_worker_sealed_total{worker}
//	sluice_worker_opened_total{worker}
//	sluice_worker_tx_packets_total{worker}
//	sluice_worker_tx_errors_total{worker}
//	sluice_worker_drops_total{worker,reason}
//	sluice_receiver_packets_total{receiver,side}
//	sluice_receiver_bytes_total{receiver,side}
//	sluice_receiver_drops_total{receiver,side,reason}
//
//	sluice_tls_accepted_total{listener}
//	sluice_tls_refused_total{listener}
//	sluice_tls_refused_per_source_total{listener}
//	sluice_tls_backend_failures_total{listener}
//	sluice_tls_dotfiles_refused_total{listener}
//	sluice_tls_open_connections{listener}
//	sluice_tls_handshakes_total{listener}
//	sluice_tls_handshake_failures_total{listener,reason}
//	sluice_tls_resumed_total{listener}
//	sluice_tls_bytes_total{listener,direction}
//	sluice_tls_idle_closed_total{listener}
//	sluice_tls_requests_total{listener}
//	sluice_tls_header_timeouts_total{listener}
//	sluice_tls_sign_queue_depth{listener}
//	sluice_tls_sign_ops_total{listener}
//	sluice_tls_sign_batches_total{listener}
//	sluice_tls_sign_max_batch{listener}
//
//	sluice_ike_packets_total{direction}
//	sluice_ike_retransmits_total{direction}
//	sluice_ike_exchanges_total{exchange,role}
//	sluice_ike_drops_total{reason}
//	sluice_ike_busy_total{reason}
//	sluice_ike_cookies_sent_total
//	sluice_ike_fragments_total{direction}
//	sluice_ike_reassembled_total
//	sluice_ike_failures_total{reason}
//	sluice_ike_sa_events_total{sa,event}
//	sluice_ike_events_total{event}
//	sluice_ike_sa_up{connection}
//	sluice_ike_connection_up{connection}
//	sluice_ike_child_installed{connection,child}
//	sluice_ike_pool_addresses{pool}
//	sluice_ike_pool_leased{pool,state}
//	sluice_ike_pool_free{pool}
//
// A tunnel is a [[tunnel]] or an IKE child, by its name; its counters sum
// all its SAs, retired ones included (gateway.TunnelStats). The TLS series
// are per [[tls]] listener and [[tls_origin]], named by the listener label.
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

	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/internal/buildinfo"
	"github.com/sluicegw/sluice/tls"
)

var (
	tunnelLabels = []string{"tunnel", "direction"}
	workerLabels = []string{"worker"}
	rxLabels     = []string{"receiver", "side"}

	tunnelPackets = prometheus.NewDesc("sluice_tunnel_packets_total",
		"Packets the tunnel sealed (direction out) or opened and accepted (direction in), over all its SAs.", tunnelLabels, nil)
	tunnelBytes = prometheus.NewDesc("sluice_tunnel_bytes_total",
		"Plaintext bytes of the packets the tunnel sealed or opened.", tunnelLabels, nil)
	tunnelDrops = prometheus.NewDesc("sluice_tunnel_drops_total",
		"Packets of the tunnel's SAs dropped, by reason.", append(tunnelLabels[:2:2], "reason"), nil)
	tunnelNeedsRekey = prometheus.NewDesc("sluice_tunnel_needs_rekey",
		"1 when a current SA of the tunnel is near or at its sequence number or lifetime limit and needs a rekey.", tunnelLabels, nil)
	tunnelStateFailing = prometheus.NewDesc("sluice_tunnel_state_failing",
		"1 while a current SA of the tunnel cannot record its sequence-number reservation in the state directory (it drops its packets).", tunnelLabels, nil)
	tunnelStateFailures = prometheus.NewDesc("sluice_tunnel_state_failures_total",
		"Sequence-number reservations of the tunnel's SAs that could not be recorded in the state directory.", tunnelLabels, nil)

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
	tlsRefusedPerSource = prometheus.NewDesc("sluice_tls_refused_per_source_total",
		"Connections the TLS listener or origin refused because their source held max_conns_per_source.", tlsLabels, nil)
	tlsBackendFailures = prometheus.NewDesc("sluice_tls_backend_failures_total",
		"Connections whose backend could not be resolved or reached (not handshake failures).", tlsLabels, nil)
	tlsDotfilesRefused = prometheus.NewDesc("sluice_tls_dotfiles_refused_total",
		"Requests of the static: backend for a dotfile, answered 404 (serve_dotfiles = false).", tlsLabels, nil)
	tlsOpen = prometheus.NewDesc("sluice_tls_open_connections",
		"Connections of the TLS listener or origin open now.", tlsLabels, nil)
	tlsHandshakes = prometheus.NewDesc("sluice_tls_handshakes_total",
		"TLS handshakes completed, full and resumed.", tlsLabels, nil)
	tlsHandshakeFailures = prometheus.NewDesc("sluice_tls_handshake_failures_total",
		"TLS handshakes that failed, by reason.", append(tlsLabels[:1:1], "reason"), nil)
	tlsResumed = prometheus.NewDesc("sluice_tls_resumed_total",
		"TLS handshakes that resumed a session with a ticket.", tlsLabels, nil)
	tlsBytes = prometheus.NewDesc("sluice_tls_bytes_total",
		"Plaintext bytes carried from clients to the backend (direction in) and from the backend to clients (out).",
		append(tlsLabels[:1:1], "direction"), nil)
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
	ikeRetransmits = prometheus.NewDesc("sluice_ike_retransmits_total",
		"IKE requests retransmitted by us (tx) and by the peers, answered from the cache (rx).", []string{"direction"}, nil)
	ikeExchanges = prometheus.NewDesc("sluice_ike_exchanges_total",
		"IKE exchanges completed, by type: initiated by us and answered (role initiator), or by the peer and answered by us (responder).",
		[]string{"exchange", "role"}, nil)
	ikeDrops = prometheus.NewDesc("sluice_ike_drops_total",
		"IKE datagrams dropped, by reason.", []string{"reason"}, nil)
	ikeBusy = prometheus.NewDesc("sluice_ike_busy_total",
		"IKE work put off or refused while busy: a message for an IKE SA whose keys or signature are being computed (sa_computing; "+
			"the peer retransmits), one dropped at the limit of computations (crypto_full), a computation's result no longer "+
			"wanted (crypto_stale), a request not queued on a busy IKE SA (request_queue_full).", []string{"reason"}, nil)
	ikeCookies = prometheus.NewDesc("sluice_ike_cookies_sent_total",
		"IKE_SA_INIT requests answered with a cookie challenge (RFC 7296 section 2.6).", nil, nil)
	ikeFragments = prometheus.NewDesc("sluice_ike_fragments_total",
		"IKE fragments (RFC 7383) sent (tx) and received and kept (rx).", []string{"direction"}, nil)
	ikeReassembled = prometheus.NewDesc("sluice_ike_reassembled_total",
		"IKE messages reassembled from fragments (RFC 7383).", nil, nil)
	ikeFailures = prometheus.NewDesc("sluice_ike_failures_total",
		"IKE negotiations that failed, by reason.", []string{"reason"}, nil)
	ikeSAEvents = prometheus.NewDesc("sluice_ike_sa_events_total",
		"IKE SAs (sa ike) and Child SAs (sa child) established, rekeyed, added, expired and deleted; virtual IPs assigned from pools (sa vip).", []string{"sa", "event"}, nil)
	ikeEvents = prometheus.NewDesc("sluice_ike_events_total",
		"Other IKE events: liveness checks, restarts, rekey collisions, INITIAL_CONTACTs, NAT-keepalives, checks of a NAT mapping after a silence.", []string{"event"}, nil)
	ikeSAUp = prometheus.NewDesc("sluice_ike_sa_up",
		"1 while the IKE connection has an established IKE SA, else 0.", []string{"connection"}, nil)
	ikeUp = prometheus.NewDesc("sluice_ike_connection_up",
		"1 while the IKE connection has an established child installed, else 0.", []string{"connection"}, nil)
	ikeChildUp = prometheus.NewDesc("sluice_ike_child_installed",
		"1 while the IKE child has an SA pair installed, else 0.", []string{"connection", "child"}, nil)
	ikePoolSize = prometheus.NewDesc("sluice_ike_pool_addresses",
		"The addresses of the virtual IP pool.", []string{"pool"}, nil)
	ikePoolLeased = prometheus.NewDesc("sluice_ike_pool_leased",
		"Addresses of the virtual IP pool leased: held by an IKE SA (state online), or kept for an identity that left (state offline).",
		[]string{"pool", "state"}, nil)
	ikePoolFree = prometheus.NewDesc("sluice_ike_pool_free",
		"Addresses of the virtual IP pool that no lease holds or keeps.", []string{"pool"}, nil)

	haPeerUp = prometheus.NewDesc("sluice_ha_peer_up",
		"1 while the other member of the pair is heard, else 0.", nil, nil)
	haOwner = prometheus.NewDesc("sluice_ha_group_owner",
		"1 while this member owns the group (carries its traffic), else 0.", []string{"group"}, nil)
	haFenced = prometheus.NewDesc("sluice_ha_group_fenced",
		"1 while this member owns the group but has fenced it (cut off from its standby and the witness).", []string{"group"}, nil)
	haInSync = prometheus.NewDesc("sluice_ha_group_in_sync",
		"1 while the group's standby holds its state (on the owner: acknowledged the snapshot).", []string{"group"}, nil)
	haEpoch = prometheus.NewDesc("sluice_ha_group_epoch",
		"The group's epoch: it grows at every change of owner.", []string{"group"}, nil)
	haSyncLag = prometheus.NewDesc("sluice_ha_sync_lag_seconds",
		"Time from a sequence-number bound sent to the standby to its acknowledgement: the last one.", []string{"group"}, nil)
	haSyncLagMax = prometheus.NewDesc("sluice_ha_sync_lag_max_seconds",
		"The largest time from a bound sent to the standby to its acknowledgement.", []string{"group"}, nil)
	haTakeoverGap = prometheus.NewDesc("sluice_ha_takeover_gap_seconds",
		"At this member's last takeover of the group: the time since the owner's last frame.", []string{"group"}, nil)
	haEvents = prometheus.NewDesc("sluice_ha_events_total",
		"Events of the pair: takeovers, takeovers_blocked (the witness unreachable), handovers, fences, resyncs, "+
			"queue_overflows, stale_epoch, bad_frames, handshake_failures, connections, refused_sources (not from the peer's address).", []string{"event"}, nil)
)

// ikeSeries says which family, and which labels, each ike.Stats counter
// (by its snake_case name, gateway.IKEStatsMap) goes to. A counter not
// listed is an event (sluice_ike_events_total).
var ikeSeries = map[string]struct {
	desc   *prometheus.Desc
	labels []string
}{
	"rx_packets":     {ikePackets, []string{"rx"}},
	"tx_packets":     {ikePackets, []string{"tx"}},
	"rx_retransmits": {ikeRetransmits, []string{"rx"}},
	"tx_retransmits": {ikeRetransmits, []string{"tx"}},

	"ike_sa_init_initiated":     {ikeExchanges, []string{"IKE_SA_INIT", "initiator"}},
	"ike_sa_init_answered":      {ikeExchanges, []string{"IKE_SA_INIT", "responder"}},
	"ike_auth_initiated":        {ikeExchanges, []string{"IKE_AUTH", "initiator"}},
	"ike_auth_answered":         {ikeExchanges, []string{"IKE_AUTH", "responder"}},
	"create_child_sa_initiated": {ikeExchanges, []string{"CREATE_CHILD_SA", "initiator"}},
	"create_child_sa_answered":  {ikeExchanges, []string{"CREATE_CHILD_SA", "responder"}},
	"informational_initiated":   {ikeExchanges, []string{"INFORMATIONAL", "initiator"}},
	"informational_answered":    {ikeExchanges, []string{"INFORMATIONAL", "responder"}},

	// RFC 9242, one per additional key exchange (RFC 9370).
	"ike_intermediate_initiated": {ikeExchanges, []string{"IKE_INTERMEDIATE", "initiator"}},
	"ike_intermediate_answered":  {ikeExchanges, []string{"IKE_INTERMEDIATE", "responder"}},

	"rx_queue_full":       {ikeDrops, []string{"queue_full"}},
	"rx_malformed":        {ikeDrops, []string{"malformed"}},
	"rx_no_marker":        {ikeDrops, []string{"no_marker"}},
	"rx_unknown_spi":      {ikeDrops, []string{"unknown_spi"}},
	"rx_out_of_window":    {ikeDrops, []string{"out_of_window"}},
	"rx_unexpected":       {ikeDrops, []string{"unexpected"}},
	"rx_integrity_failed": {ikeDrops, []string{"integrity_failed"}},
	"rx_half_open_limit":  {ikeDrops, []string{"half_open_limit"}},
	"rx_blocked":          {ikeDrops, []string{"blocked"}},
	"rx_bad_cookie":       {ikeDrops, []string{"bad_cookie"}},
	"rx_unsupported_crit": {ikeDrops, []string{"unsupported_crit"}},
	"rx_frag_invalid":     {ikeDrops, []string{"frag_invalid"}},
	"rx_frag_duplicate":   {ikeDrops, []string{"frag_duplicate"}},
	"rx_frag_too_large":   {ikeDrops, []string{"frag_too_large"}},
	"rx_frag_timeout":     {ikeDrops, []string{"frag_timeout"}},

	"rx_busy":            {ikeBusy, []string{"sa_computing"}},
	"crypto_busy":        {ikeBusy, []string{"crypto_full"}},
	"crypto_stale":       {ikeBusy, []string{"crypto_stale"}},
	"request_queue_full": {ikeBusy, []string{"request_queue_full"}},
	"cookies_sent":       {ikeCookies, nil},
	"tx_fragments":       {ikeFragments, []string{"tx"}},
	"rx_fragments":       {ikeFragments, []string{"rx"}},
	"rx_reassembled":     {ikeReassembled, nil},

	"auth_failed":          {ikeFailures, []string{"auth_failed"}},
	"no_proposal_chosen":   {ikeFailures, []string{"no_proposal_chosen"}},
	"ts_unacceptable":      {ikeFailures, []string{"ts_unacceptable"}},
	"invalid_ke":           {ikeFailures, []string{"invalid_ke"}},
	"timeouts":             {ikeFailures, []string{"timeout"}},
	"temp_failures":        {ikeFailures, []string{"temporary_failure"}},
	"peers_dead":           {ikeFailures, []string{"peer_dead"}},
	"child_sa_limit":       {ikeFailures, []string{"child_sa_limit"}},
	"restart_child_failed": {ikeFailures, []string{"restart_child_failed"}},
	"add_ke_failed":        {ikeFailures, []string{"add_ke_failed"}},
	"vip_exhausted":        {ikeFailures, []string{"vip_exhausted"}},
	"vip_refused":          {ikeFailures, []string{"vip_refused"}},
	"mobike_refused":       {ikeFailures, []string{"mobike_refused"}},
	"routability_failed":   {ikeFailures, []string{"routability_failed"}},

	"ike_sa_established":   {ikeSAEvents, []string{"ike", "established"}},
	"adopted":              {ikeSAEvents, []string{"ike", "adopted"}},
	"ike_sa_rekeyed":       {ikeSAEvents, []string{"ike", "rekeyed"}},
	"ike_sa_expired":       {ikeSAEvents, []string{"ike", "expired"}},
	"deleted":              {ikeSAEvents, []string{"ike", "deleted"}},
	"child_sa_established": {ikeSAEvents, []string{"child", "established"}},
	"child_sa_rekeyed":     {ikeSAEvents, []string{"child", "rekeyed"}},
	"child_sa_added":       {ikeSAEvents, []string{"child", "added"}},
	"child_sa_expired":     {ikeSAEvents, []string{"child", "expired"}},
	"vip_assigned":         {ikeSAEvents, []string{"vip", "assigned"}},
	"mobike_updates":       {ikeSAEvents, []string{"ike", "moved"}},
	"nat_peer_moved":       {ikeSAEvents, []string{"ike", "nat_moved"}},
	"routability_checked":  {ikeSAEvents, []string{"ike", "routability_checked"}},
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
	for _, d := range []*prometheus.Desc{tunnelPackets, tunnelBytes, tunnelDrops, tunnelNeedsRekey, tunnelStateFailing, tunnelStateFailures,
		workerSealed, workerOpened, workerTx, workerTxErrors, workerDrops, rxPackets, rxBytes, rxDrops,
		tlsAccepted, tlsRefused, tlsRefusedPerSource, tlsBackendFailures, tlsDotfilesRefused, tlsOpen, tlsHandshakes, tlsHandshakeFailures, tlsResumed, tlsBytes,
		tlsIdleClosed, tlsRequests, tlsHeaderTimeouts, tlsSignQueue, tlsSignOps, tlsSignBatches, tlsSignMaxBatch,
		ikePackets, ikeRetransmits, ikeExchanges, ikeDrops, ikeBusy, ikeCookies, ikeFragments, ikeReassembled,
		ikeFailures, ikeSAEvents, ikeEvents, ikeSAUp, ikeUp, ikeChildUp, ikePoolSize, ikePoolLeased, ikePoolFree,
		haPeerUp, haOwner, haFenced, haInSync, haEpoch, haSyncLag, haSyncLagMax, haTakeoverGap, haEvents} {
		ch <- d
	}
}

// Collect reads the counters and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	// A tunnel is listed once per direction; a registry would refuse a
	// scrape with a duplicate series, so a second listing is skipped.
	seen := map[[2]string]bool{}
	for _, t := range st.Tunnels {
		key := [2]string{t.Tunnel, t.Direction}
		if seen[key] {
			continue
		}
		seen[key] = true
		l := key[:]
		counter(tunnelPackets, t.Packets, l...)
		counter(tunnelBytes, t.Bytes, l...)
		for _, r := range withZeros(t.Drops, gateway.DropReasons(t.Direction)) {
			counter(tunnelDrops, t.Drops[r], t.Tunnel, t.Direction, r)
		}
		gauge(tunnelNeedsRekey, b2u(t.NeedsRekey), l...)
		gauge(tunnelStateFailing, b2u(t.StateFailing), l...)
		counter(tunnelStateFailures, t.StateFailures, l...)
	}
	dpReasons := dataplane.ReasonNames()
	for _, w := range st.Dataplane.Workers {
		i := strconv.Itoa(w.Index)
		counter(workerSealed, w.Sealed, i)
		counter(workerOpened, w.Opened, i)
		counter(workerTx, w.TxPackets, i)
		counter(workerTxErrors, w.TxErrors, i)
		for _, r := range withZeros(w.Drops, dpReasons) {
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
		for _, reason := range withZeros(r.Drops, dpReasons) {
			counter(rxDrops, r.Drops[reason], idx, side, reason)
		}
	}
	tlsSeen := map[string]bool{} // names are unique; a reload under the read must not fail the scrape
	for _, l := range st.TLS {
		if tlsSeen[l.Name] {
			continue
		}
		tlsSeen[l.Name] = true
		counter(tlsAccepted, l.Accepted, l.Name)
		counter(tlsRefused, l.Refused, l.Name)
		counter(tlsRefusedPerSource, l.RefusedPerSource, l.Name)
		counter(tlsBackendFailures, l.BackendFailures, l.Name)
		counter(tlsDotfilesRefused, l.DotfilesRefused, l.Name)
		gauge(tlsOpen, l.Open, l.Name)
		counter(tlsHandshakes, l.Handshakes, l.Name)
		for _, r := range withZeros(l.HandshakeFailures, tls.FailureReasons()) {
			counter(tlsHandshakeFailures, l.HandshakeFailures[r], l.Name, r)
		}
		counter(tlsResumed, l.Resumed, l.Name)
		counter(tlsBytes, l.BytesIn, l.Name, "in")
		counter(tlsBytes, l.BytesOut, l.Name, "out")
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
	if st.HA != nil {
		collectHA(ch, st.HA)
	}
}

// collectIKE sends the IKE series: each counter of ike.Stats in its family
// (ikeSeries), each connection's and child's state, and each virtual IP
// pool's occupancy.
func collectIKE(info *gateway.IKEInfo, counter, gauge func(d *prometheus.Desc, v uint64, labels ...string)) {
	for _, k := range sortedKeys(info.Stats) {
		if s, ok := ikeSeries[k]; ok {
			counter(s.desc, info.Stats[k], s.labels...)
		} else {
			counter(ikeEvents, info.Stats[k], k)
		}
	}
	seen := map[string]bool{}
	for _, c := range info.Connections {
		if seen[c.Name] {
			continue
		}
		seen[c.Name] = true
		gauge(ikeSAUp, b2u(c.IKESPIi != ""), c.Name)
		gauge(ikeUp, b2u(c.State == "established"), c.Name)
		children := map[string]bool{}
		for _, ch := range c.Children {
			if !children[ch.Name] {
				children[ch.Name] = true
				gauge(ikeChildUp, b2u(ch.State == "installed"), c.Name, ch.Name)
			}
		}
	}
	pools := map[string]bool{}
	for _, p := range info.Pools {
		if pools[p.Name] {
			continue
		}
		pools[p.Name] = true
		gauge(ikePoolSize, uint64(p.Size), p.Name)
		gauge(ikePoolLeased, uint64(p.Online), p.Name, "online")
		gauge(ikePoolLeased, uint64(p.Offline), p.Name, "offline")
		gauge(ikePoolFree, uint64(p.Free), p.Name)
	}
}

// collectHA sends the pair's series (sluice_ha_*).
func collectHA(ch chan<- prometheus.Metric, st *ha.Status) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	up := false
	for _, m := range st.Members {
		up = up || (!m.Self && m.Up)
	}
	gauge(haPeerUp, float64(b2u(up)))
	for _, g := range st.Groups {
		gauge(haOwner, float64(b2u(g.Role == "owner")), g.Name)
		gauge(haFenced, float64(b2u(g.Fenced)), g.Name)
		gauge(haInSync, float64(b2u(g.InSync)), g.Name)
		gauge(haEpoch, float64(g.Epoch), g.Name)
		gauge(haSyncLag, g.SyncLag.Seconds(), g.Name)
		gauge(haSyncLagMax, g.SyncLagMax.Seconds(), g.Name)
		gauge(haTakeoverGap, g.LastGap.Seconds(), g.Name)
	}
	c := st.Counters
	for _, e := range []struct {
		name string
		n    uint64
	}{
		{"takeovers", c.Takeovers}, {"takeovers_blocked", c.TakeoversBlocked}, {"handovers", c.Handovers},
		{"fences", c.Fences}, {"resyncs", c.Resyncs}, {"queue_overflows", c.QueueOverflows}, {"stale_epoch", c.StaleEpoch},
		{"bad_frames", c.BadFrames}, {"handshake_failures", c.HandshakeFailures}, {"connections", c.Connections},
		{"refused_sources", c.RefusedSources},
	} {
		ch <- prometheus.MustNewConstMetric(haEvents, prometheus.CounterValue, float64(e.n), e.name)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// withZeros returns the keys of m and the names in always, sorted and
// each once: a reason is shown from the first scrape, before it counts.
func withZeros(m map[string]uint64, always []string) []string {
	keys := make([]string, 0, len(m)+len(always))
	for k := range m {
		keys = append(keys, k)
	}
	for _, k := range always {
		if _, ok := m[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func sortedKeys(m map[string]uint64) []string { return withZeros(m, nil) }

// buildInfo is sluice_build_info: 1, labelled with what the binary is.
func buildInfo(in buildinfo.Info) prometheus.Collector {
	commit := in.Commit
	if in.Modified {
		commit += "+dirty"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "Always 1; the labels say what the running binary is: its version, commit, Go toolchain and crypto engines.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": commit, "go": in.GoVersion,
			"engines": strings.Join(in.Engines, ",")},
	})
	g.Set(1)
	return g
}

// NewRegistry returns a registry with the gateway's collector and the Go
// runtime and process collectors.
func NewRegistry(stats func() gateway.Stats) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(stats),
		buildInfo(buildinfo.Get()),
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
