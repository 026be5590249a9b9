// Package failover is `sluice bench failover`: how long the traffic of a
// site-to-site tunnel stops when its gateway dies (kill -9), for a sluice
// pair with a hot standby ([ha], issue 18), for one sluice gateway
// restarted at once by its supervisor, and for strongSwan restarted with
// its peer negotiating again, in one command on one topology.
//
// The topology is internal/lab's HATopology: a wan router, gateways a and
// b behind the virtual addresses 192.0.2.10 (wan) and 10.1.0.1 (lan), a
// host behind the lan router, and a peer (a sluice) with a host behind
// it. Every run builds it anew, starts the system, sends
// sequence-numbered UDP both ways between the hosts (lab.SeqFlow, 20,000
// datagrams a second each way by default) and a paced TCP stream, kills
// the gateway that carries the tunnel, and measures from the receivers:
// the gap (the longest run of lost datagrams, in send time) each way, the
// datagrams lost, the TCP stall (the longest time the stream's receiver
// read nothing), and the peer's packets the new owner refused as replays.
// Results are summed up per system with nearest-rank percentiles
// (result.go); the steady-state throughput of one TCP stream with and
// without a standby is measured when sluice-ha runs.
//
// Root is needed (namespaces), nft, ping, and for strongswan-restart
// strongSwan's charon and swanctl (see internal/lab/charon.go).
package failover
