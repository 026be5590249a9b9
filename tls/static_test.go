package tls

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
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
		// A 404 is not cached (TestStaticMissesNotCached): it costs a
		// stat, whose name and error allocate, and nothing that stays.
		limit := 0.0
		if path == "/missing" {
			limit = 8
		}
		if allocs > limit {
			t.Errorf("%s: %v allocations per request (want at most %v)", path, allocs, limit)
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

// TestStaticPipelined sends several requests in one write and reads the
// answers in order.
func TestStaticPipelined(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("aaa"), 0o644)
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "index.html"), []byte("<d>"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "escape"))
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	client, server := net.Pipe()
	var ctr counters
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.serveConn(server, time.Minute, time.Second, false, &ctr)
		server.Close()
	}()
	reqs := "GET /missing HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /a.txt HTTP/1.1\r\nHost: a\r\n\r\n" +
		"POST /a.txt HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /escape HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /d/ HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET /d HTTP/1.0\r\n\r\n"
	go client.Write([]byte(reqs))
	want := []struct{ status, body string }{
		{"404", "Not Found\n"}, {"200", "aaa"}, {"405", "Method Not Allowed\n"}, {"404", "Not Found\n"}, {"200", "<d>"}, {"200", "<d>"},
	}
	for i, w := range want {
		r := readResponse(t, client)
		if !strings.HasPrefix(r, "HTTP/1.1 "+w.status+" ") || !strings.HasSuffix(r, "\r\n\r\n"+w.body) {
			t.Fatalf("response %d: %q", i, r)
		}
		if i == len(want)-1 && !strings.Contains(r, "Connection: close\r\n") {
			t.Fatalf("HTTP/1.0 without keep-alive: %q", r)
		}
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection open after an HTTP/1.0 response")
	}
	<-done
}

// TestStaticCacheInvalidation: a changed file is served anew once the
// cache revalidates it.
func TestStaticCacheInvalidation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	os.WriteFile(p, []byte("one"), 0o644)
	srv, _ := newStaticServer(dir)
	defer srv.root.Close()
	if e := srv.lookup([]byte("f.txt")); e == nil || string(e.body) != "one" {
		t.Fatal("first lookup")
	}
	os.WriteFile(p, []byte("second"), 0o644)
	// Age the entry instead of waiting for cacheRevalidate.
	srv.cache["f.txt"].checked.Store(0)
	if e := srv.lookup([]byte("f.txt")); e == nil || string(e.body) != "second" || !strings.Contains(string(e.hdr), "Content-Length: 6\r\n") {
		t.Fatalf("after a change: %+v", e)
	}
	os.Remove(p)
	srv.cache["f.txt"].checked.Store(0)
	if e := srv.lookup([]byte("f.txt")); e != nil {
		t.Fatal("a removed file is still served")
	}
}

// TestStaticMissesNotCached: requests for many distinct missing names
// leave the cache as it was (issue 16, defect 9: 16,384 names raised the
// RSS by 283 MB and filled the cache for good).
func TestStaticMissesNotCached(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("aaa"), 0o644)
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	if srv.lookup([]byte("a.txt")) == nil {
		t.Fatal("a.txt not found")
	}
	n0, b0 := srv.cacheSize()
	for i := range 20000 {
		if srv.lookup([]byte("missing-"+strconv.Itoa(i))) != nil {
			t.Fatal("a missing name found")
		}
	}
	if n, b := srv.cacheSize(); n != n0 || b != b0 {
		t.Fatalf("cache grew from %d entries (%d bytes) to %d (%d bytes) on misses", n0, b0, n, b)
	}
}

// TestStaticFileAfterMiss: a file created after its name was asked for
// (and after many other misses) is served at once, and cached.
func TestStaticFileAfterMiss(t *testing.T) {
	dir := t.TempDir()
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	for i := range 16384 { // the old cap on entries
		srv.lookup([]byte("missing-" + strconv.Itoa(i)))
	}
	if srv.lookup([]byte("new.txt")) != nil {
		t.Fatal("new.txt found before it exists")
	}
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644)
	e := srv.lookup([]byte("new.txt"))
	if e == nil || string(e.body) != "new" {
		t.Fatalf("a file created after a 404 is not served: %+v", e)
	}
	srv.mu.RLock()
	cached := srv.cache["new.txt"] == e
	srv.mu.RUnlock()
	if !cached {
		t.Fatal("a file created after a 404 is served but not cached")
	}
}

// TestStaticCacheEviction: the cache keeps within its byte budget by
// evicting entries, and new files keep being cached once it is full.
func TestStaticCacheEviction(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("z", 1000)
	for i := range 50 {
		os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), []byte(body), 0o644)
	}
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	srv.maxBytes = 10_000
	for i := range 50 {
		name := "f" + strconv.Itoa(i)
		e := srv.lookup([]byte(name))
		if e == nil || string(e.body) != body {
			t.Fatalf("%s: not served from memory: %+v", name, e)
		}
		if _, b := srv.cacheSize(); b > srv.maxBytes {
			t.Fatalf("after %s: %d bytes cached, budget %d", name, b, srv.maxBytes)
		}
		srv.mu.RLock()
		cached := srv.cache[name] == e
		srv.mu.RUnlock()
		if !cached {
			t.Fatalf("%s not cached in a full cache: nothing was evicted", name)
		}
	}
	n, b := srv.cacheSize()
	if n < 5 || b < srv.maxBytes/2 {
		t.Fatalf("cache holds %d entries, %d bytes: it should keep what fits", n, b)
	}
}

// TestStaticDotfiles: names with a component starting with '.' are 404
// and counted unless the listener serves dotfiles; /.well-known/ is
// served (issue 16: .git/config and .htpasswd were served).
func TestStaticDotfiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{".git/config", ".htpasswd", "a/.env", ".well-known/acme-challenge/tok", ".well-known/.hidden", "a/b.txt"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("secret"), 0o644)
	}
	srv, err := newStaticServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.root.Close()
	for _, dotfiles := range []bool{false, true} {
		client, server := net.Pipe()
		var ctr counters
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.serveConn(server, time.Minute, time.Second, dotfiles, &ctr)
			server.Close()
		}()
		cases := []struct {
			target string
			hidden bool // 404 unless dotfiles
		}{
			{"/.git/config", true},
			{"/.htpasswd", true},
			{"/a/.env", true},
			{"/%2egit/config", true},
			{"/a/%2Eenv", true},
			{"/.well-known/acme-challenge/tok", false},
			{"/.well-known/.hidden", true},
			{"/a/b.txt", false},
		}
		var reqs string
		for _, c := range cases {
			reqs += "GET " + c.target + " HTTP/1.1\r\nHost: a\r\n\r\n"
		}
		go client.Write([]byte(reqs))
		refused := 0
		for _, c := range cases {
			r := readResponse(t, client)
			want := "200"
			if c.hidden && !dotfiles {
				want = "404"
				refused++
			}
			if !strings.HasPrefix(r, "HTTP/1.1 "+want+" ") {
				t.Errorf("dotfiles %v: GET %s: %q, want %s", dotfiles, c.target, r, want)
			}
		}
		client.Close()
		<-done
		if got := ctr.dotfiles.Load(); got != uint64(refused) {
			t.Errorf("dotfiles %v: %d counted, want %d", dotfiles, got, refused)
		}
	}
}
