package enginetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
)

// roundTripSizes are the nominal payload sizes (rounded up to whole blocks
// for CBC), each at an offset into its buffer: the edges of a block, a
// minimum-size packet, a full-size ESP payload, a jumbo one, and odd sizes
// starting at odd addresses.
var roundTripSizes = []struct{ n, off int }{
	{0, 0}, {1, 0}, {15, 0}, {16, 0}, {17, 0}, {64, 0}, {1420, 0}, {8192, 0},
	{1421, 3}, {64, 1}, {333, 7},
}

// Where the op's Tag is relative to its data (Dst on encryption, Src on
// decryption).
const (
	tagContiguous = iota // right after the data, as in an ESP packet
	tagGap               // in the same array, a few bytes after the data
	tagSeparate          // in an array of its own
)

type layout struct {
	inPlace bool
	tag     int
}

func (l layout) String() string {
	s := "out-of-place"
	if l.inPlace {
		s = "in-place"
	}
	return s + "/" + [...]string{"tag-contiguous", "tag-gap", "tag-separate"}[l.tag]
}

var layouts = []layout{
	{true, tagContiguous}, {true, tagGap}, {true, tagSeparate},
	{false, tagContiguous}, {false, tagGap}, {false, tagSeparate},
}

// arena is a buffer an op's slices point into. The engine may write only
// inside its windows; everything else, including the slack around the
// data, must come back unchanged.
type arena struct {
	buf, orig []byte
	win       [][2]int
}

func newArena(r *rand.Rand, n int) *arena { return &arena{buf: randBytes(r, n)} }

func (a *arena) allow(off, n int) { a.win = append(a.win, [2]int{off, off + n}) }

// seal records the arena's contents before the op runs.
func (a *arena) seal() { a.orig = append([]byte(nil), a.buf...) }

func (a *arena) check(t *testing.T, what string) {
	t.Helper()
outer:
	for i := range a.buf {
		if a.buf[i] == a.orig[i] {
			continue
		}
		for _, w := range a.win {
			if i >= w[0] && i < w[1] {
				continue outer
			}
		}
		t.Errorf("%s: engine wrote byte %d of a buffer of %d outside the op's Dst and Tag (windows %v)", what, i, len(a.buf), a.win)
		return
	}
}

// laidOut is an op built in a layout, with the arenas to check afterwards.
type laidOut struct {
	op     cryptodev.Op
	arenas []*arena
}

const slack = 7 // bytes after the last slice in every arena

// layEnc builds an encryption of smp's plaintext at offset off.
func layEnc(r *rand.Rand, smp *sample, off int, lay layout) *laidOut {
	n, icv := len(smp.pt), len(smp.tag)
	lo := &laidOut{}
	data, tag := layData(r, lo, n, icv, off, lay.tag)
	data.allow(off, n)
	dst := data.buf[off : off+n]
	src := dst
	if lay.inPlace {
		copy(dst, smp.pt)
	} else {
		sa := newArena(r, off+n+slack)
		copy(sa.buf[off:], smp.pt)
		src = sa.buf[off : off+n]
		lo.arenas = append(lo.arenas, sa)
	}
	lo.op = cryptodev.Op{Key: smp.key, Dir: cryptodev.Encrypt, Src: src, Dst: dst, Tag: tag}
	lo.finish(smp, true)
	return lo
}

// layDec builds a decryption of smp's ciphertext at offset off.
func layDec(r *rand.Rand, smp *sample, off int, lay layout) *laidOut {
	n, icv := len(smp.pt), len(smp.tag)
	lo := &laidOut{}
	data, tag := layData(r, lo, n, icv, off, lay.tag)
	src := data.buf[off : off+n]
	copy(src, smp.ct)
	copy(tag, smp.tag)
	dst := src
	if lay.inPlace {
		data.allow(off, n)
	} else {
		da := newArena(r, off+n+slack)
		da.allow(off, n)
		dst = da.buf[off : off+n]
		lo.arenas = append(lo.arenas, da)
	}
	lo.op = cryptodev.Op{Key: smp.key, Dir: cryptodev.Decrypt, Src: src, Dst: dst, Tag: tag}
	lo.finish(smp, false)
	return lo
}

// layData allocates the arena of the op's data (Dst on encryption, Src on
// decryption) and places the tag relative to it.
func layData(r *rand.Rand, lo *laidOut, n, icv, off, where int) (*arena, []byte) {
	const gap = 5
	var data *arena
	var tag []byte
	switch where {
	case tagContiguous:
		data = newArena(r, off+n+icv+slack)
		tag = data.buf[off+n : off+n+icv]
	case tagGap:
		data = newArena(r, off+n+gap+icv+slack)
		tag = data.buf[off+n+gap : off+n+gap+icv]
	default:
		data = newArena(r, off+n+slack)
		ta := newArena(r, 3+icv+slack)
		tag = ta.buf[3 : 3+icv]
		lo.arenas = append(lo.arenas, ta)
	}
	lo.arenas = append(lo.arenas, data)
	return data, tag
}

// finish gives the op private copies of IV, AAD and AuthTrailer (checked
// unchanged afterwards), opens the tag window for encryption, and records
// the arenas.
func (lo *laidOut) finish(smp *sample, enc bool) {
	ia := &arena{buf: append([]byte(nil), smp.iv...)}
	aa := &arena{buf: append([]byte(nil), smp.aad...)}
	ta := &arena{buf: append([]byte(nil), smp.trailer...)}
	lo.op.IV, lo.op.AAD, lo.op.AuthTrailer = ia.buf, aa.buf, ta.buf
	lo.arenas = append(lo.arenas, ia, aa, ta)
	if enc {
		for _, a := range lo.arenas {
			if len(a.buf) > 0 && len(lo.op.Tag) > 0 && sameArray(a.buf, lo.op.Tag) {
				a.allow(offsetIn(a.buf, lo.op.Tag), len(lo.op.Tag))
			}
		}
	}
	for _, a := range lo.arenas {
		a.seal()
	}
}

// sameArray and offsetIn locate sub inside buf (sub is a reslice of buf).
func sameArray(buf, sub []byte) bool { return offsetIn(buf, sub) >= 0 }

func offsetIn(buf, sub []byte) int {
	for off := 0; off+len(sub) <= len(buf); off++ {
		if len(sub) > 0 && &buf[off] == &sub[0] {
			return off
		}
	}
	return -1
}

func (s *suite) testRoundTrip(t *testing.T) {
	e := s.engine(t)
	q := newQueue(t, e)
	r := newRand(10)
	for _, alg := range supported(e) {
		t.Run(alg.String(), func(t *testing.T) {
			key, m := newKey(t, e, alg, r)
			for _, lay := range layouts {
				t.Run(lay.String(), func(t *testing.T) { roundTrip(t, q, r, alg, key, m, lay) })
			}
			if isCBC(alg) {
				t.Run("partial-blocks", func(t *testing.T) { partialBlocks(t, q, r, alg, key) })
			}
		})
	}
}

// roundTrip encrypts every size in one batch and checks it against the
// reference, then decrypts the ciphertexts in a second batch.
func roundTrip(t *testing.T, q cryptodev.Queue, r *rand.Rand, alg cryptodev.Alg, key *cryptodev.Key, m material, lay layout) {
	var samples []*sample
	var encs, decs []*laidOut
	enc := cryptodev.NewBatch(len(roundTripSizes))
	for _, sz := range roundTripSizes {
		smp := newSample(alg, key, m, randBytes(r, payloadLen(alg, sz.n)), r)
		lo := layEnc(r, smp, sz.off, lay)
		samples = append(samples, smp)
		encs = append(encs, lo)
		enc.Ops = append(enc.Ops, lo.op)
	}
	runBatch(t, q, enc)
	for i, sz := range roundTripSizes {
		what := fmt.Sprintf("encrypt %d bytes at offset %d", len(samples[i].pt), sz.off)
		checkEnc(t, what, &enc.Ops[i], samples[i])
		for _, a := range encs[i].arenas {
			a.check(t, what)
		}
	}

	dec := cryptodev.NewBatch(len(roundTripSizes))
	for i, sz := range roundTripSizes {
		lo := layDec(r, samples[i], sz.off, lay)
		decs = append(decs, lo)
		dec.Ops = append(dec.Ops, lo.op)
	}
	runBatch(t, q, dec)
	for i, sz := range roundTripSizes {
		what := fmt.Sprintf("decrypt %d bytes at offset %d", len(samples[i].pt), sz.off)
		checkDec(t, what, &dec.Ops[i], samples[i])
		for _, a := range decs[i].arenas {
			a.check(t, what)
		}
	}
}

// partialBlocks checks that CBC payloads that are not whole blocks give
// StatusInvalid, in both directions.
func partialBlocks(t *testing.T, q cryptodev.Queue, r *rand.Rand, alg cryptodev.Alg, key *cryptodev.Key) {
	info := alg.Info()
	var ops []cryptodev.Op
	var sizes []int
	for _, sz := range roundTripSizes {
		if sz.n%16 == 0 {
			continue
		}
		for _, dir := range []cryptodev.Direction{cryptodev.Encrypt, cryptodev.Decrypt} {
			ops = append(ops, cryptodev.Op{Key: key, Dir: dir,
				Src: randBytes(r, sz.n), Dst: make([]byte, sz.n), Tag: make([]byte, info.ICVLen),
				IV: randBytes(r, info.IVLen), AAD: randBytes(r, 8)})
			sizes = append(sizes, sz.n)
		}
	}
	b := batchOf(ops)
	runBatch(t, q, b)
	for i := range b.Ops {
		if st := b.Ops[i].Status; st != cryptodev.StatusInvalid {
			t.Errorf("%s %s of %d bytes (not whole blocks): status %v, want invalid", alg, dirName(b.Ops[i].Dir), sizes[i], st)
		}
	}
}

func dirName(d cryptodev.Direction) string {
	switch d {
	case cryptodev.Encrypt:
		return "encrypt"
	case cryptodev.Decrypt:
		return "decrypt"
	}
	return fmt.Sprintf("direction(%d)", d)
}
