// Package bench is sluice's benchmark harness: the code behind
// `sluice bench crypto` and `sluice bench esp`, with result types, a table
// and a JSON form.
//
// Every measurement has the same shape:
//
//  1. Setup (not timed): the engine is opened, keys are expanded, every
//     buffer, batch and op is allocated, and for decapsulation the
//     ciphertexts are made.
//  2. Warm-up: the measuring goroutines (threads, or ESP workers) start
//     together and run for a short while, so that sched's workers are awake
//     and the caches and branch predictors are warm.
//  3. Window: the coordinator reads every goroutine's completion counters,
//     sleeps for the duration, and reads them again; the rate is the
//     difference over the wall time between the two reads. Each goroutine
//     publishes its counters after every batch it completes, so a window is
//     exact to one batch per goroutine at each end.
//  4. Stop and drain: the goroutines stop, dequeue what they still have in
//     flight, and the engine is closed.
//
// The measured loops (one step per batch) allocate nothing in steady state
// for symmetric suites and ESP; the tests prove it with
// testing.AllocsPerRun. Signatures allocate inside Go's crypto packages.
//
// Every crypto run can carry its own baseline: the "raw" pseudo-engine calls
// cipher.AEAD (or AES-CBC and HMAC) directly on the same buffers, with no
// engine, queue or batch in between, and the ESP benchmark's raw rows seal
// or open the very payload bytes ESP would, without ESP.
//
// Definitions used in the tables:
//
//   - crypto size: the bytes encrypted per op (AAD and tag excluded); CBC
//     suites encrypt the size rounded up to the 16-byte block, and MB/s still
//     counts the nominal size. MB is 10^6 bytes, as openssl speed counts.
//   - ESP size: the inner IP packet (IPv4 + UDP + payload) in bytes; Gbit/s
//     counts inner packet bits, not the outer ESP packet nor Ethernet
//     framing, so encapsulation and decapsulation rows compare directly.
//   - imix: the classic "simple IMIX" of 7:4:1 packets of 64, 576 and 1500
//     IP bytes (mean 354.33 bytes), interleaved in a fixed 12-packet cycle.
package bench
