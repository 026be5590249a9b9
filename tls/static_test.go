package tls

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// memConn is an in-memory net.Conn that returns the same request forever
// and discards what is written.
type memConn struct {
	req     []byte
	off     int
	written int
}

func (c *memConn) Read(b []byte) (int, error) {
	n := copy(b, c.req[c.off:])
	c.off = (c.off + n) % len(c.req)
	return n, nil
}
func (c *memConn) Write(b []byte) (int, error)      { c.written += len(b); return len(b), nil }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

func TestStaticNoAllocs(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "1k.html"), []byte(strings.Repeat("x", 1024)), 0o644)
	os.WriteFile(filepath.Join(dir, "64k.bin"), []byte(strings.Repeat("y", 64<<10)), 0o644)
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	for _, path := range []string{"/1k.html", "/64k.bin", "/missing"} {
		conn := &memConn{req: []byte("GET " + path + " HTTP/1.1\r\nHost: example.test\r\nUser-Agent: test\r\nAccept: */*\r\n\r\n")}
		var ctr counters
		hc := httpConnPool.Get().(*httpConn)
		hc.c, hc.srv, hc.ctr, hc.idle, hc.headerTO = conn, srv, &ctr, time.Minute, time.Second
		if !hc.serveOne() {
			t.Fatal("connection not kept")
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if !hc.serveOne() {
				t.Fatal("connection not kept")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per request", path, allocs)
		}
	}
}

func BenchmarkStatic1K(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "1k.html"), []byte(strings.Repeat("x", 1024)), 0o644)
	srv, _ := newStaticServer(dir)
	defer srv.root.Close()
	conn := &memConn{req: []byte("GET /1k.html HTTP/1.1\r\nHost: example.test\r\n\r\n")}
	var ctr counters
	hc := httpConnPool.Get().(*httpConn)
	hc.c, hc.srv, hc.ctr, hc.idle, hc.headerTO = conn, srv, &ctr, time.Minute, time.Second
	b.ReportAllocs()
	for b.Loop() {
		hc.serveOne()
	}
}
