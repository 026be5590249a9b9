package pipe_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/pipe"
)

const headroom = 64

func bufs(t testing.TB, pool *packet.Pool, n int) []*packet.Buf {
	t.Helper()
	bs := make([]*packet.Buf, n)
	if pool.GetN(bs) != n {
		t.Fatal("pool exhausted")
	}
	return bs
}

func fill(b *packet.Buf, p []byte) {
	b.Reset(headroom)
	copy(b.Append(len(p)), p)
}

func TestTransfer(t *testing.T) {
	a, b := pipe.New(16)
	defer a.Close()
	pool := packet.NewPool(32, 2048, headroom)
	out, in := bufs(t, pool, 8), bufs(t, pool, 8)
	for i, o := range out[:5] {
		fill(o, linktest.ESP(1, uint32(i), 10*i))
	}
	if n, err := a.Write(out[:5]); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	// Read at each buffer's own offset.
	for i, b := range in {
		b.Reset(headroom + i)
	}
	n, err := b.Read(in)
	if n != 5 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	for i, p := range in[:n] {
		if !bytes.Equal(p.Bytes(), out[i].Bytes()) {
			t.Errorf("packet %d: got %x want %x", i, p.Bytes(), out[i].Bytes())
		}
		if p.Offset() != headroom+i {
			t.Errorf("packet %d at offset %d, want %d", i, p.Offset(), headroom+i)
		}
	}
	// And back the other way.
	if n, err := b.Write(in[:1]); n != 1 || err != nil {
		t.Fatalf("Write back = %d, %v", n, err)
	}
	if n, err := a.Read(out[:1]); n != 1 || err != nil || !bytes.Equal(out[0].Bytes(), in[0].Bytes()) {
		t.Fatalf("Read back = %d, %v", n, err)
	}
	sa, sb := a.Stats().Snapshot(), b.Stats().Snapshot()
	if sa.TxPackets != 5 || sb.RxPackets != 5 || sb.TxPackets != 1 || sa.RxPackets != 1 {
		t.Errorf("stats a=%+v b=%+v", sa, sb)
	}
	if sa.TxBytes != sb.RxBytes {
		t.Errorf("bytes: tx %d rx %d", sa.TxBytes, sb.RxBytes)
	}
}

// A full pipe drops and counts; it never blocks the writer nor grows.
func TestFullDrops(t *testing.T) {
	a, b := pipe.New(4)
	defer a.Close()
	pool := packet.NewPool(16, 256, headroom)
	out := bufs(t, pool, 10)
	for i, o := range out {
		fill(o, linktest.ESP(2, uint32(i), 4))
	}
	if n, err := a.Write(out); n != 10 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := b.(*pipe.End).Queued(); got != 4 {
		t.Fatalf("queued %d, want 4", got)
	}
	if s := a.Stats().Snapshot(); s.TxFull != 6 || s.TxPackets != 4 {
		t.Errorf("stats %+v, want 6 full drops and 4 sent", s)
	}
	in := bufs(t, pool, 6)
	n, err := b.Read(in)
	if n != 4 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	for i, p := range in[:n] {
		if !bytes.Equal(p.Bytes(), out[i].Bytes()) {
			t.Errorf("packet %d differs: the first four are kept", i)
		}
	}
}

func TestBadInput(t *testing.T) {
	a, b := pipe.New(8)
	defer a.Close()
	// Oversize packet: dropped on Write.
	big := packet.NewBuf(make([]byte, pktio.MaxPacket+100), 0, pktio.MaxPacket+1)
	if n, err := a.Write([]*packet.Buf{big}); n != 1 || err != nil {
		t.Fatalf("Write oversize = %d, %v", n, err)
	}
	if s := a.Stats().Snapshot(); s.TxInvalid != 1 || s.TxPackets != 0 {
		t.Errorf("oversize: %+v", s)
	}
	// A packet longer than the reader's buffer: dropped on Read, and the
	// next one is delivered into the same buffer.
	long := packet.NewBuf(make([]byte, 600), 0, 600)
	short := packet.NewBuf(make([]byte, 100), 0, 100)
	if _, err := a.Write([]*packet.Buf{long, short}); err != nil {
		t.Fatal(err)
	}
	small := packet.NewBuf(make([]byte, 300), 10, 0)
	n, err := b.Read([]*packet.Buf{small})
	if n != 1 || err != nil || small.Len() != 100 {
		t.Fatalf("Read = %d, %v, len %d", n, err, small.Len())
	}
	if s := b.Stats().Snapshot(); s.RxShort != 1 || s.RxPackets != 1 {
		t.Errorf("short: %+v", s)
	}
	// A buffer whose window still holds an old packet: Read fills it
	// from its data offset regardless.
	stale := packet.NewBuf(make([]byte, 200), 10, 190)
	if _, err := a.Write([]*packet.Buf{short}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Read([]*packet.Buf{stale}); n != 1 || err != nil || stale.Len() != 100 || stale.Offset() != 10 {
		t.Fatalf("Read into a stale buffer = %d, %v, window %d+%d", n, err, stale.Offset(), stale.Len())
	}
	// No buffers at all.
	if _, err := b.Read(nil); !errors.Is(err, pktio.ErrShortBuffer) {
		t.Errorf("Read(nil) = %v", err)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	a, b := pipe.New(4)
	defer b.Close()
	linktest.CheckClose(t, a, headroom)
}

// Closing one end: the other end reads what was queued, then ErrClosed,
// and its writes fail; a reader blocked on the other end is woken.
func TestClosePeer(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pipe.New(4)
	pool := packet.NewPool(8, 256, headroom)
	out := bufs(t, pool, 1)
	fill(out[0], []byte("queued"))
	if _, err := a.Write(out); err != nil {
		t.Fatal(err)
	}
	a.Close()
	in := bufs(t, pool, 2)
	if n, err := b.Read(in); n != 1 || err != nil || string(in[0].Bytes()) != "queued" {
		t.Fatalf("Read after peer close = %d, %v", n, err)
	}
	if _, err := b.Read(in); !errors.Is(err, pktio.ErrClosed) {
		t.Fatalf("second Read = %v, want ErrClosed", err)
	}
	if _, err := b.Write(out); !errors.Is(err, pktio.ErrClosed) {
		t.Fatalf("Write to closed peer = %v, want ErrClosed", err)
	}

	// A reader blocked on b when a closes.
	a, b = pipe.New(4)
	defer b.Close()
	errc := make(chan error, 1)
	go func() { _, err := b.Read(in); errc <- err }()
	linktest.WaitFor(t, "Read to block", func() bool { return linktest.Blocked("pipe_test.TestClosePeer.func") })
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, pktio.ErrClosed) {
			t.Fatalf("blocked Read = %v", err)
		}
	case <-time.After(linktest.Timeout):
		t.Fatal("peer Close did not unblock Read")
	}
}

// A reader and a writer running at once (run with -race): every packet is
// either delivered in order or counted as a full drop.
func TestConcurrent(t *testing.T) {
	a, b := pipe.New(64)
	const total = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pool := packet.NewPool(32, 256, headroom)
		out := bufs(t, pool, 32)
		for seq := 0; seq < total; {
			k := min(32, total-seq)
			for i := range k {
				fill(out[i], linktest.ESP(3, uint32(seq+i), 16))
			}
			if _, err := a.Write(out[:k]); err != nil {
				t.Error(err)
				return
			}
			seq += k
		}
		a.Close()
	}()
	pool := packet.NewPool(32, 256, headroom)
	in := bufs(t, pool, 32)
	got, last := 0, -1
	for {
		for _, b := range in {
			b.Reset(headroom)
		}
		n, err := b.Read(in)
		if errors.Is(err, pktio.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:n] {
			seq := int(p.Bytes()[4])<<24 | int(p.Bytes()[5])<<16 | int(p.Bytes()[6])<<8 | int(p.Bytes()[7])
			if seq <= last {
				t.Fatalf("packet %d after %d: out of order", seq, last)
			}
			last = seq
		}
		got += n
	}
	wg.Wait()
	s := a.Stats().Snapshot()
	if uint64(got) != s.TxPackets || s.TxPackets+s.TxFull != total {
		t.Errorf("read %d; writer stats %+v", got, s)
	}
}

// Read and Write do not allocate per packet once each slot has held a
// packet of the size in use.
func TestAllocs(t *testing.T) {
	a, b := pipe.New(64)
	defer a.Close()
	pool := packet.NewPool(128, 2048, headroom)
	out, in := bufs(t, pool, 64), bufs(t, pool, 64)
	for i, o := range out {
		fill(o, linktest.ESP(4, uint32(i), 1400))
	}
	round := func() {
		if _, err := a.Write(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			for _, p := range in {
				p.Reset(headroom)
			}
			n, err := b.Read(in)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round() // warm up: grow the slots
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, len(out))
	}
}

func BenchmarkPipe(b *testing.B) {
	for _, size := range []int{64, 512, 1420} {
		b.Run(sizeName(size), func(b *testing.B) {
			x, y := pipe.New(64)
			defer x.Close()
			pool := packet.NewPool(128, 2048, headroom)
			out, in := bufs(b, pool, 64), bufs(b, pool, 64)
			for i, o := range out {
				fill(o, linktest.ESP(5, uint32(i), size-8))
			}
			b.SetBytes(int64(size * len(out)))
			b.ReportAllocs()
			for b.Loop() {
				x.Write(out)
				for got := 0; got < len(out); {
					for _, p := range in {
						p.Reset(headroom)
					}
					n, _ := y.Read(in)
					got += n
				}
			}
		})
	}
}

func sizeName(n int) string {
	return string(rune('0'+n/1000%10)) + string(rune('0'+n/100%10)) + string(rune('0'+n/10%10)) + string(rune('0'+n%10))
}
