package esp_test

// Benchmarks of ESP against the bare cipher, in the same run.
//
//	go test -run XXX -bench 'Seal|Open' -benchtime 1s ./esp/
//
// Each iteration processes one batch of 64 packets of the given inner size
// (tunnel mode, IPv4 in IPv4, soft engine); b.SetBytes counts inner bytes, so
// MB/s (and ns/pkt, and cpu-ns/pkt: the process's CPU time per packet,
// steadier on a shared machine) compare directly with the Bare* baselines,
// which seal (or open) the same number of same-sized payloads, in as many
// distinct buffers, with the cipher.AEAD (or AES-CBC + HMAC) directly.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
)

const benchBatch = 64

var (
	benchSizes = []int{64, 512, 1024, 1420}
	benchAlgs  = []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES256GCM16, cryptodev.ChaCha20Poly1305, cryptodev.AES128CBCSHA256}
)

func benchName(alg cryptodev.Alg, size int) string { return fmt.Sprintf("%v/%d", alg, size) }

func BenchmarkSeal(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, size := range benchSizes {
			b.Run(benchName(alg, size), func(b *testing.B) {
				out, _ := saPair(b, pairOpts{alg: alg, esn: true})
				q, _ := soft.New().NewQueue()
				pl := esp.NewPipeline(q)
				pool := packet.NewPool(benchBatch, 2048, 128)
				bufs := make([]*packet.Buf, benchBatch)
				pool.GetN(bufs)
				inner := ipPacket(false, size-28)
				for _, p := range bufs {
					p.Write(128, inner)
				}
				batch := esp.NewBatch(benchBatch)
				b.SetBytes(int64(size * benchBatch))
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for range b.N {
					batch.Reset(esp.Outbound, benchBatch)
					for i, p := range bufs {
						// The last round encrypted the inner header in place:
						// put it back (20 bytes) and reset the window.
						p.SetWindow(128, size)
						copy(p.Bytes()[:20], inner[:20])
						batch.Bufs[i], batch.SAs[i] = p, out
					}
					pl.Run(batch)
				}
				b.StopTimer()
				reportPerPacket(b, cpu0)
				if batch.Reasons[0] != esp.ReasonNone {
					b.Fatal(batch.Reasons[0])
				}
			})
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	h := newHarness(b)
	for _, alg := range benchAlgs {
		for _, size := range benchSizes {
			b.Run(benchName(alg, size), func(b *testing.B) {
				out, in := saPair(b, pairOpts{alg: alg, esn: true, window: -1})
				ct, r := h.seal(out, ipPacket(false, size-28))
				if r != esp.ReasonNone {
					b.Fatal(r)
				}
				q, _ := soft.New().NewQueue()
				pl := esp.NewPipeline(q)
				pool := packet.NewPool(benchBatch, 2048, 128)
				bufs := make([]*packet.Buf, benchBatch)
				pool.GetN(bufs)
				batch := esp.NewBatch(benchBatch)
				natt := []uint16{esp.NATTPort}
				b.SetBytes(int64(size * benchBatch))
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for range b.N {
					batch.Reset(esp.Inbound, benchBatch)
					for i, p := range bufs {
						p.Write(128, ct) // decryption is in place: start from the ciphertext
						esp.Parse(p.Bytes(), natt, &batch.Parsed[i])
						batch.Bufs[i], batch.SAs[i] = p, in
					}
					pl.Run(batch)
				}
				b.StopTimer()
				reportPerPacket(b, cpu0)
				if batch.Reasons[0] != esp.ReasonNone {
					b.Fatal(batch.Reasons[0])
				}
			})
		}
	}
}

// bareCipher seals or opens size-byte payloads with Go's crypto directly,
// the floor ESP is measured against.
type bareCipher struct {
	aead   cipher.AEAD
	cbcEnc cipher.BlockMode
	cbcDec cipher.BlockMode
	mac    func() []byte
	tag    [32]byte
}

func newBare(b *testing.B, alg cryptodev.Alg) *bareCipher {
	key := make([]byte, alg.Info().KeyLen)
	c := &bareCipher{}
	switch alg {
	case cryptodev.ChaCha20Poly1305:
		c.aead, _ = chacha20poly1305.New(key)
	case cryptodev.AES128CBCSHA256:
		blk, _ := aes.NewCipher(key)
		iv := make([]byte, 16)
		c.cbcEnc = cipher.NewCBCEncrypter(blk, iv)
		c.cbcDec = cipher.NewCBCDecrypter(blk, iv)
	default:
		blk, _ := aes.NewCipher(key)
		c.aead, _ = cipher.NewGCM(blk)
	}
	return c
}

func BenchmarkBareSeal(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, size := range benchSizes {
			b.Run(benchName(alg, size), func(b *testing.B) {
				c := newBare(b, alg)
				mac := hmac.New(sha256.New, make([]byte, 32))
				n := (size + 2 + 15) &^ 15 // payload + trailer, block aligned
				// As many distinct buffers as BenchmarkSeal's batch, in one
				// slab like a packet pool's: ESP seals 64 different packets,
				// so the baseline does not get to stay in L1 either.
				slab := make([]byte, benchBatch*2048)
				nonce, aad := make([]byte, 12), make([]byte, 8)
				b.SetBytes(int64(size * benchBatch))
				b.ReportAllocs()
				cpu0 := processCPU()
				for range b.N {
					for k := range benchBatch {
						buf := slab[k*2048 : k*2048+n+32]
						if c.aead != nil {
							c.aead.Seal(buf[:0], nonce, buf[:n], aad)
						} else {
							c.cbcEnc.CryptBlocks(buf[:n], buf[:n])
							mac.Reset()
							mac.Write(aad)
							mac.Write(buf[:n])
							mac.Sum(c.tag[:0])
						}
					}
				}
				b.StopTimer()
				reportPerPacket(b, cpu0)
			})
		}
	}
}

func BenchmarkBareOpen(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, size := range benchSizes {
			b.Run(benchName(alg, size), func(b *testing.B) {
				c := newBare(b, alg)
				mac := hmac.New(sha256.New, make([]byte, 32))
				n := (size + 2 + 15) &^ 15
				nonce, aad := make([]byte, 12), make([]byte, 8)
				ct := make([]byte, n+16)
				if c.aead != nil {
					ct = c.aead.Seal(ct[:0], nonce, make([]byte, n), aad)
				}
				slab := make([]byte, benchBatch*2048) // distinct buffers, as in BenchmarkSeal
				b.SetBytes(int64(size * benchBatch))
				b.ReportAllocs()
				cpu0 := processCPU()
				for range b.N {
					for k := range benchBatch {
						buf := slab[k*2048 : k*2048+len(ct)]
						copy(buf, ct) // as BenchmarkOpen does
						if c.aead != nil {
							if _, err := c.aead.Open(buf[:0], nonce, buf, aad); err != nil {
								b.Fatal(err)
							}
						} else {
							mac.Reset()
							mac.Write(aad)
							mac.Write(buf[:n])
							mac.Sum(c.tag[:0])
							c.cbcDec.CryptBlocks(buf[:n], buf[:n])
						}
					}
				}
				b.StopTimer()
				reportPerPacket(b, cpu0)
			})
		}
	}
}

// nullQueue is an engine queue that runs no crypto: every op succeeds and
// its data is left as it is. BenchmarkSealAround and BenchmarkOpenAround
// run ESP through it, so that what they measure is ESP around the cipher
// (Prepare, Finish, the pipeline and the SA lock), nothing else.
type nullQueue struct{ done []*cryptodev.Batch }

func (q *nullQueue) Submit(b *cryptodev.Batch) error {
	for i := range b.Ops {
		b.Ops[i].Status = cryptodev.StatusOK
	}
	q.done = append(q.done, b)
	return nil
}

func (q *nullQueue) Dequeue(bool) *cryptodev.Batch {
	if len(q.done) == 0 {
		return nil
	}
	b := q.done[0]
	q.done = append(q.done[:0], q.done[1:]...)
	return b
}

func (q *nullQueue) InFlight() int { return len(q.done) }
func (q *nullQueue) Close()        {}

// reportPerPacket reports the wall time and the process's CPU time per
// packet since cpu0, with the timer stopped.
func reportPerPacket(b *testing.B, cpu0 time.Duration) {
	pkts := float64(b.N * benchBatch)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pkts, "ns/pkt")
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/pkts, "cpu-ns/pkt")
}

// aroundAlgs are the suites whose ESP cost around the cipher is measured:
// an AEAD and a chained one (their Prepare differs in the IV and AAD).
var aroundAlgs = []cryptodev.Alg{cryptodev.AES128GCM16, cryptodev.AES128CBCSHA256}

// BenchmarkSealAround measures outbound ESP without the cipher, in
// ns/pkt: tunnel mode, IPv4 in IPv4 (as ESP) and in IPv4 UDP (NAT-T),
// ESN on, batches of 64 packets of one SA; cpu-ns/pkt is the process's
// CPU time per packet, steadier than ns/pkt on a shared machine.
//
//	go test -run XXX -bench Around -benchtime 1s ./esp/
func BenchmarkSealAround(b *testing.B) {
	for _, alg := range aroundAlgs {
		for _, encap := range []esp.Encap{esp.EncapNone, esp.EncapUDP} {
			for _, size := range []int{64, 1420} {
				b.Run(fmt.Sprintf("%v/%v/%d", alg, encap, size), func(b *testing.B) {
					out, _ := saPair(b, pairOpts{alg: alg, encap: encap, esn: true})
					pl := esp.NewPipeline(&nullQueue{})
					pl.SocketChecksums = true
					pool := packet.NewPool(benchBatch, 2048, 128)
					bufs := make([]*packet.Buf, benchBatch)
					pool.GetN(bufs)
					inner := ipPacket(false, size-28)
					for _, p := range bufs {
						p.Write(128, inner)
					}
					batch := esp.NewBatch(benchBatch)
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := processCPU()
					for range b.N {
						batch.Reset(esp.Outbound, benchBatch)
						for i, p := range bufs {
							p.SetWindow(128, size) // the inner packet, untouched by the null cipher
							batch.Bufs[i], batch.SAs[i] = p, out
						}
						pl.Run(batch)
					}
					b.StopTimer()
					if batch.Reasons[0] != esp.ReasonNone {
						b.Fatal(batch.Reasons[0])
					}
					reportPerPacket(b, cpu0)
				})
			}
		}
	}
}

// BenchmarkOpenAround measures inbound ESP without the cipher, in ns/pkt,
// Parse included, anti-replay on: 64 packets sealed by the null cipher
// (their payload is plaintext) are opened again and again in place, each
// round with the next 64 sequence numbers.
func BenchmarkOpenAround(b *testing.B) {
	for _, alg := range aroundAlgs {
		for _, encap := range []esp.Encap{esp.EncapNone, esp.EncapUDP} {
			for _, size := range []int{64, 1420} {
				b.Run(fmt.Sprintf("%v/%v/%d", alg, encap, size), func(b *testing.B) {
					out, in := saPair(b, pairOpts{alg: alg, encap: encap, esn: true, window: 1024})
					pl := esp.NewPipeline(&nullQueue{})
					pool := packet.NewPool(benchBatch, 2048, 128)
					bufs := make([]*packet.Buf, benchBatch)
					pool.GetN(bufs)
					inner := ipPacket(false, size-28)
					batch := esp.NewBatch(benchBatch)
					batch.Reset(esp.Outbound, benchBatch)
					for i, p := range bufs {
						p.Write(128, inner)
						batch.Bufs[i], batch.SAs[i] = p, out
					}
					pl.Run(batch)
					for i := range bufs {
						if batch.Reasons[i] != esp.ReasonNone {
							b.Fatal(batch.Reasons[i])
						}
					}
					ctOff, ctLen := bufs[0].Offset(), bufs[0].Len()
					espOff := packet.IPv4MinHeader
					if encap == esp.EncapUDP {
						espOff += packet.UDPHeader
					}
					natt := []uint16{esp.NATTPort}
					seq := uint32(0)
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := processCPU()
					for range b.N {
						batch.Reset(esp.Inbound, benchBatch)
						for i, p := range bufs {
							// The null cipher and tunnel mode leave the
							// bytes in place: put the window back.
							p.SetWindow(ctOff, ctLen)
							seq++
							binary.BigEndian.PutUint32(p.Bytes()[espOff+4:], seq)
							batch.Reasons[i] = esp.Parse(p.Bytes(), natt, &batch.Parsed[i])
							batch.Bufs[i], batch.SAs[i] = p, in
						}
						pl.Run(batch)
					}
					b.StopTimer()
					if batch.Reasons[0] != esp.ReasonNone {
						b.Fatal(batch.Reasons[0])
					}
					reportPerPacket(b, cpu0)
				})
			}
		}
	}
}
