// Package tunnel is `sluice bench tunnel`: a tunnel measured end to end
// the way a user runs it, against wireguard-go and against the bare link,
// on one topology of network namespaces, in one command.
//
//	ns A                                                      ns B
//	10.1.k.1 -- gateway A ===== WAN veth ===== gateway B -- 10.2.k.1
//	            192.0.2.1/24             192.0.2.2/24
//	iperf3 -c, ping, UDP flood,                      iperf3 -s, UDP echo,
//	latency probes                                   flood sink
//
// Tunnel k carries 10.1.k.0/24 to 10.2.k.0/24. The gateways are `sluice
// run` daemons (ESP in UDP, the defaults a user gets) or wireguard-go
// daemons; for plain veth the traffic goes to B's WAN address.
//
// A run is a list of cells (system, engine, algorithm, workers, tunnels).
// Each cell builds its own lab (internal/lab), measures --repeat times and
// removes everything (see run.go for the steps); a result is the median
// of one metric with its spread. Table and JSON are in table.go and
// result.go (the charts are package bench/chart's, drawn by sluice-plot
// from the JSON); the built-in UDP traffic in traffic.go; iperf3,
// ping and /proc in tools.go; the two daemons in sluice.go and
// wireguard.go.
//
// Root is needed (namespaces, veth, TUN), and iperf3 and ping.
package tunnel
