// Package ipsecmb is a synchronous cryptodev engine on Intel's Multi-Buffer
// Crypto for IPsec library (intel-ipsec-mb, Debian libipsec-mb-dev), the
// library VPP and DPDK use for software crypto. It is built only with the
// build tag ipsecmb (and cgo); without it the package is empty and the
// default build stays pure Go.
//
// Each Queue and each Processor owns one multi-buffer manager, initialised
// for the best architecture the CPU supports (Engine.Arch says which). A
// batch costs one cgo call: Go fills a C array of op descriptors with the
// addresses of the ops' data, which lies in pinned memory (package packet
// pins its arenas for their life; other memory is pinned with a
// runtime.Pinner for the length of the call). C calls the library's
// direct single-buffer functions for AES-GCM (the job manager has no
// multi-buffer lanes for GCM and only adds its checks, queue and copies:
// about 25 ns per op at 64 bytes) and submits one job per op, then
// flushes, for the other suites. Keys are expanded once, in C memory (AES key schedules, GCM
// hash keys, HMAC inner and outer states), and zeroed on Destroy.
//
// Suites: AES-GCM-128/192/256, ChaCha20-Poly1305, AES-CBC with
// HMAC-SHA-256/384/512 and NULL with HMAC-SHA-256. A chained suite's ICV
// covers AAD || IV || ciphertext, which the library hashes from one
// buffer: ops whose AAD, IV and data are not laid out that way in memory
// (ESP's layout, encrypted in place) or that carry ESN high bits after the
// ciphertext run on Go's code (package soft) instead, as do AEAD ops with
// more than 16 bytes of AAD.
package ipsecmb
