// Package ikebench measures IKE SA setups per second with a responder
// under load: sluice's gateway (`sluice run`) and strongSwan's charon
// (kernel-libipsec, its default thread pool), each in a network namespace
// of its own, opposite one load generator in a third.
//
// The load generator is sluice's package ike as an initiator, the same
// code for both responders: Concurrency workers, each with a source
// address of its own (so that no address holds more than one half-open
// IKE SA, below both responders' default per-address limit of 5), run
// IKE_SA_INIT, IKE_AUTH and its Child SA for one road warrior after
// another. Every road warrior is an ike.Endpoint of its own with its own
// pair of UDP ports (portTransport maps them to the responder's 500 and
// 4500), its own identity and its own inner address, as road warriors
// behind NATs are: the responder sees Count distinct peers. The SAs stay
// up until the responder is measured.
//
// Per responder: setups per second (completed setups over the time from
// the first request to the last completion), setups per CPU-second of the
// responder's processes (utime+stime from /proc around the load), p50 and
// p99 of the setup latency (Initiate to its Child SA), and its resident
// memory per IKE SA (VmRSS after the load minus before, over the SAs).
// A setup counts only when the initiator has its Child SA; at the end the
// responder must show that many Child SAs installed (sluice: inbound SAs
// in its SAD; charon: INSTALLED children in swanctl --list-sas), and the
// difference is reported as failures.
package ikebench
