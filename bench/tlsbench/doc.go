// Package tlsbench is `sluice bench tls`: sluice's TLS gateway measured the
// way a user runs it (`sluice run -c FILE` with one [[tls]] listener and a
// static:DIR backend) against nginx configured by the benchmark with the
// same certificates and files, on loopback, in one command.
//
//	bench process                               server processes
//	Go client: full and resumed handshakes  --> sluice run (one per engine)
//	wrk (or the Go client): keep-alive GETs --> nginx -p TMP (one worker)
//	Go client: latency probes + RSA-4096 storm
//	/proc/PID/stat of every server process: utime+stime around each window
//
// A run is a list of groups (run.go). A group is a key type and a TLS
// version; its servers (nginx and sluice with each engine) run side by
// side on their own ports for the whole group, and each measurement
// repeats --repeat times, every server in turn, so that a change in the
// machine's load falls on all of them. The figure that compares systems is
// the server's CPU time per operation: client and servers share the
// machine's cores, so rates are bound by the client as much as by the
// server.
//
// Files: certs.go makes the keys, certificates and static files; nginx.go
// and sluice.go write the two configurations and start the servers;
// proc.go reads /proc; load.go is the Go load generator and wrk.go runs
// wrk; result.go and table.go are the JSON records and the table with the
// sluice/nginx ratios (the charts are package bench/chart's, drawn by
// sluice-plot from the JSON).
package tlsbench
