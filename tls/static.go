package tls

// The static: backend, a built-in HTTP/1.1 file server (RFC 9112) for
// benchmarks and simple sites.
//
// It is a hand-written loop rather than net/http because the issue's
// targets are per request CPU against nginx: net/http allocates a Request,
// a Header map and a response writer per request, runs its own bufio
// layers over the tls.Conn and writes headers and body as separate
// records; the minimal Go server measured in BASELINES.md (21 µs per 1 KB
// keep-alive response against nginx's 14 µs) is that. Here one goroutine
// per connection:
//
//  1. reads into a per-connection buffer (pooled, bounded at maxHeadLen:
//     a bigger head is refused) and parses the head in place;
//  2. maps the target to a file under the served directory through an
//     os.Root, which refuses ".." and symlinks leading out of it;
//  3. answers from the file cache: a small file's bytes and its fixed
//     header lines are kept, revalidated against the file's size and mtime
//     at most once per cacheRevalidate, so a cached response is one copy
//     into the write buffer and one Write (one TLS record for 1 KB);
//     bigger files are streamed through a pooled buffer. The cache is
//     bounded in bytes (cacheMaxBytes, names and overhead counted) and
//     evicts by CLOCK; names that do not exist are not cached, so a flood
//     of 404s costs a stat each and no memory;
//  4. keeps the connection for the next request (pipelined requests are
//     served from what is already buffered).
//
// Serving a cached file allocates nothing (TestStaticNoAllocs).
// Names with a component starting with '.' (".git/config", ".htpasswd")
// are answered 404 and counted unless the listener serves dotfiles; a
// first component ".well-known" (RFC 8615) is served.
// Deadlines: between requests the idle timeout applies, from a request's
// first byte to the end of its head the header timeout; both are moved
// only when a quarter stale, not per request.
//
// Not supported: request bodies (a request with one gets 400 and the
// connection is closed), Range and conditional requests (the whole file
// is sent), directory listings.

import (
	"bytes"
	"errors"
	"mime"
	"net"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	maxHeadLen      = 8 << 10  // the longest request head accepted
	writeBufLen     = 16 << 10 // one TLS record's worth of response
	cacheMaxFile    = 1 << 20  // files up to this size are cached
	cacheMaxBytes   = 64 << 20 // the cache's budget, in bytes (fileEntry.cost)
	cacheRevalidate = time.Second
	entryOverhead   = 256 // bytes an entry costs besides its contents
	httpTimeFormat  = "Mon, 02 Jan 2006 15:04:05 GMT"
)

// staticServer serves the files under one directory. It is safe for
// concurrent use by the connections of its listener.
type staticServer struct {
	dir  string
	root *os.Root

	// The file cache: entries by name, and the same entries in a ring
	// that the CLOCK hand sweeps to evict. bytes is the sum of their
	// cost(), kept within maxBytes.
	mu       sync.RWMutex
	cache    map[string]*fileEntry
	ring     []*fileEntry
	hand     int
	bytes    int64
	maxBytes int64
}

// fileEntry is one cached file. body and hdr are immutable; a changed
// file gets a new entry.
type fileEntry struct {
	key     string // the name asked for (the cache's key)
	file    string // the name under the served directory
	size    int64
	mtime   time.Time
	body    []byte // the whole file, or nil when streamed from disk
	hdr     []byte // "Content-Type: ...\r\nContent-Length: ...\r\nLast-Modified: ...\r\n"
	checked atomic.Int64
	used    atomic.Bool // served since the clock hand passed
	idx     int         // in staticServer.ring; -1 when not cached (under mu)
}

func newStaticServer(dir string) (*staticServer, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &staticServer{dir: dir, root: root, cache: make(map[string]*fileEntry), maxBytes: cacheMaxBytes}, nil
}

// httpConn is one connection's state, pooled between connections.
type httpConn struct {
	c        net.Conn
	raw      *net.TCPConn
	srv      *staticServer
	ctr      *counters
	idle     time.Duration
	headerTO time.Duration
	dotfiles bool // serve names with a component starting with '.'

	rbuf  []byte // maxHeadLen
	rn    int    // bytes in rbuf
	wbuf  []byte // writeBufLen
	name  []byte // the file name of the current request
	head  reqHead
	date  []byte
	dateS int64

	readDL     time.Time // the read deadline set now
	readDLHead bool      // readDL is a header timeout
	writeDL    time.Time
}

var httpConnPool = sync.Pool{New: func() any {
	return &httpConn{rbuf: make([]byte, maxHeadLen), wbuf: make([]byte, writeBufLen), name: make([]byte, 0, 256), date: make([]byte, 0, 32)}
}}

// serveConn serves requests on c until the client closes, an error, or a
// timeout. The caller closes c.
func (s *staticServer) serveConn(c net.Conn, idle, headerTO time.Duration, dotfiles bool, ctr *counters) {
	hc := httpConnPool.Get().(*httpConn)
	hc.c, hc.srv, hc.ctr, hc.idle, hc.headerTO, hc.dotfiles = c, s, ctr, idle, headerTO, dotfiles
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		hc.raw, _ = tc.NetConn().(*net.TCPConn) // for cork
	}
	for hc.serveOne() {
	}
	hc.c, hc.raw, hc.srv, hc.ctr, hc.rn = nil, nil, nil, nil, 0
	hc.readDL, hc.writeDL, hc.readDLHead, hc.dateS = time.Time{}, time.Time{}, false, 0
	httpConnPool.Put(hc)
}

var errHeadTooLong = errors.New("tls: http: request head too long")

// serveOne reads one request and answers it; it reports whether the
// connection stays open for another.
func (hc *httpConn) serveOne() bool {
	n, err := hc.readHead()
	if err != nil {
		switch err {
		case errBadRequest:
			hc.writeError(400, "Bad Request")
		case errHeadTooLong:
			hc.writeError(431, "Request Header Fields Too Large")
		}
		return false
	}
	h := &hc.head
	hc.ctr.bytesIn.Add(uint64(n))
	keep := h.keepAlive
	if h.bodyLen > 0 || h.chunked {
		hc.writeError(400, "Bad Request")
		return false
	}
	isHead := string(h.method) == "HEAD"
	if !isHead && string(h.method) != "GET" {
		hc.consume(n)
		return hc.writeStatus(405, "Method Not Allowed", keep, false, "Allow: GET, HEAD\r\n") && keep
	}
	hc.name, err = cleanTarget(hc.name[:0], h.target)
	if err != nil {
		hc.writeError(400, "Bad Request")
		return false
	}
	if !hc.dotfiles && hiddenName(hc.name) {
		hc.ctr.dotfiles.Add(1)
		hc.consume(n)
		return hc.writeStatus(404, "Not Found", keep, isHead, "") && keep
	}
	// h's slices alias rbuf: done with them before consume.
	ent := hc.srv.lookup(hc.name)
	hc.consume(n)
	if ent == nil {
		return hc.writeStatus(404, "Not Found", keep, isHead, "") && keep
	}
	return hc.writeFile(ent, isHead, keep) && keep
}

// hiddenName reports whether a cleaned name (no leading slash, no "."
// or ".." components) has a component starting with '.', other than a
// first component ".well-known" (RFC 8615's well-known URIs, which ACME
// and others need served).
func hiddenName(name []byte) bool {
	first := true
	for seg := name; len(seg) > 0; first = false {
		s := seg
		if i := bytes.IndexByte(seg, '/'); i >= 0 {
			s, seg = seg[:i], seg[i+1:]
		} else {
			seg = nil
		}
		if len(s) > 0 && s[0] == '.' && !(first && string(s) == ".well-known") {
			return true
		}
	}
	return false
}

// consume drops the first n bytes of the read buffer (a served request).
func (hc *httpConn) consume(n int) {
	hc.rn = copy(hc.rbuf, hc.rbuf[n:hc.rn])
}

// readHead reads until rbuf holds a whole request head and parses it into
// hc.head.
func (hc *httpConn) readHead() (int, error) {
	var start time.Time
	for {
		if hc.rn > 0 {
			n, err := parseRequestHead(hc.rbuf[:hc.rn], &hc.head)
			if err != errHeadIncomplete {
				return n, err
			}
			if hc.rn == len(hc.rbuf) {
				return 0, errHeadTooLong
			}
		}
		now := time.Now()
		if hc.rn == 0 {
			// Between requests: the idle timeout, moved when a quarter
			// stale.
			if hc.readDLHead || hc.readDL.Sub(now) < hc.idle*3/4 {
				hc.readDL, hc.readDLHead = now.Add(hc.idle), false
				hc.c.SetReadDeadline(hc.readDL)
			}
		} else if !hc.readDLHead {
			// Inside a head: the header timeout, from its first byte.
			if start.IsZero() {
				start = now
			}
			if dl := start.Add(hc.headerTO); dl.Before(hc.readDL) || hc.readDL.IsZero() {
				hc.readDL = dl
				hc.c.SetReadDeadline(dl)
			}
			hc.readDLHead = true
		}
		k, err := hc.c.Read(hc.rbuf[hc.rn:])
		if k > 0 && hc.rn == 0 {
			start = now
		}
		hc.rn += k
		if err != nil {
			if k > 0 {
				continue // parse what came with the error first
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				hc.ctr.idleClosed.Add(1)
				if hc.rn > 0 {
					hc.ctr.headerTimeouts.Add(1)
				}
			}
			return 0, err
		}
	}
}

// lookup returns the cache entry of a file name, loading or revalidating
// it; nil means 404. A hit takes the read lock and marks the entry used.
func (s *staticServer) lookup(name []byte) *fileEntry {
	s.mu.RLock()
	ent := s.cache[string(name)]
	s.mu.RUnlock()
	now := time.Now().UnixNano()
	if ent == nil || now-ent.checked.Load() >= int64(cacheRevalidate) {
		return s.load(string(name), ent, now)
	}
	if !ent.used.Load() {
		ent.used.Store(true)
	}
	return ent
}

// load (re)reads a file into the cache and returns its entry, or nil if
// there is no such file. old is the cached entry to revalidate. Misses are
// not cached: a name asked for before its file exists is served as soon
// as it does, and names that do not exist cost no memory.
func (s *staticServer) load(key string, old *fileEntry, now int64) *fileEntry {
	name := key
	fi, err := s.root.Stat(name)
	if err == nil && fi.IsDir() {
		name = path.Join(name, "index.html")
		fi, err = s.root.Stat(name)
	}
	if err != nil || !fi.Mode().IsRegular() {
		if old != nil {
			s.mu.Lock()
			s.removeLocked(old)
			s.mu.Unlock()
		}
		return nil
	}
	if old != nil && old.size == fi.Size() && old.mtime.Equal(fi.ModTime()) {
		old.checked.Store(now)
		old.used.Store(true)
		return old
	}
	ent := &fileEntry{key: key, file: name, size: fi.Size(), mtime: fi.ModTime(), idx: -1}
	ent.checked.Store(now)
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	ent.hdr = []byte("Content-Type: " + ctype + "\r\nContent-Length: " + strconv.FormatInt(ent.size, 10) +
		"\r\nLast-Modified: " + ent.mtime.UTC().Format(httpTimeFormat) + "\r\n")
	if ent.size <= cacheMaxFile {
		if b, err := s.root.ReadFile(name); err == nil && int64(len(b)) == ent.size {
			ent.body = b
		}
	}
	s.mu.Lock()
	s.storeLocked(ent)
	s.mu.Unlock()
	return ent
}

// cost is what an entry counts against the cache's budget: its body,
// header lines and names, and a fixed overhead for the entry and its map
// and ring slots.
func (e *fileEntry) cost() int64 {
	return int64(len(e.body)+len(e.hdr)+len(e.key)+len(e.file)) + entryOverhead
}

// storeLocked puts ent in the cache, replacing the entry of its name and
// evicting entries not used since the clock hand last passed them until
// ent fits the budget. An entry bigger than the whole budget is used but
// not kept. The caller holds s.mu for writing.
func (s *staticServer) storeLocked(ent *fileEntry) {
	if cur := s.cache[ent.key]; cur != nil {
		s.removeLocked(cur)
	}
	c := ent.cost()
	if c > s.maxBytes {
		return
	}
	for s.bytes+c > s.maxBytes && len(s.ring) > 0 {
		s.evictLocked()
	}
	ent.idx = len(s.ring)
	s.ring = append(s.ring, ent)
	s.cache[ent.key] = ent
	s.bytes += c
}

// evictLocked removes one entry by the CLOCK algorithm: the hand clears
// the used mark of each entry it passes and evicts the first one found
// unmarked (at most one turn of the ring). A hit only sets a mark, so it
// needs no write lock, where an LRU list would take one per request.
func (s *staticServer) evictLocked() {
	for {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		e := s.ring[s.hand]
		if e.used.Swap(false) {
			s.hand++
			continue
		}
		s.removeLocked(e)
		return
	}
}

// removeLocked drops e from the cache if it is still there. The caller
// holds s.mu for writing.
func (s *staticServer) removeLocked(e *fileEntry) {
	if e.idx < 0 || s.cache[e.key] != e {
		return
	}
	last := len(s.ring) - 1
	s.ring[e.idx] = s.ring[last]
	s.ring[e.idx].idx = e.idx
	s.ring[last] = nil
	s.ring = s.ring[:last]
	delete(s.cache, e.key)
	s.bytes -= e.cost()
	e.idx = -1
}

// startResponse writes the status line and the common header lines into
// wbuf and returns them.
func (hc *httpConn) startResponse(code int, reason string, keep bool) []byte {
	now := time.Now()
	if s := now.Unix(); s != hc.dateS {
		hc.dateS = s
		hc.date = now.UTC().AppendFormat(hc.date[:0], httpTimeFormat)
	}
	if hc.writeDL.Sub(now) < hc.idle*3/4 {
		hc.writeDL = now.Add(hc.idle)
		hc.c.SetWriteDeadline(hc.writeDL)
	}
	b := append(hc.wbuf[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, reason...)
	b = append(b, "\r\nServer: sluice\r\nDate: "...)
	b = append(b, hc.date...)
	b = append(b, "\r\n"...)
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	} else if hc.head.minor == 0 {
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	return b
}

// writeStatus answers with a short text body naming the status (only its
// header lines for a HEAD request).
func (hc *httpConn) writeStatus(code int, reason string, keep, isHead bool, extra string) bool {
	b := hc.startResponse(code, reason, keep)
	b = append(b, extra...)
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(reason)+1), 10)
	b = append(b, "\r\n\r\n"...)
	if !isHead {
		b = append(b, reason...)
		b = append(b, '\n')
	}
	return hc.write(b)
}

// writeError answers a request the connection does not survive.
func (hc *httpConn) writeError(code int, reason string) {
	hc.writeStatus(code, reason, false, false, "")
}

func (hc *httpConn) write(b []byte) bool {
	n, err := hc.c.Write(b)
	hc.ctr.bytesOut.Add(uint64(n))
	return err == nil
}

// writeFile answers 200 with ent's file.
func (hc *httpConn) writeFile(ent *fileEntry, isHead, keep bool) bool {
	hc.ctr.requests.Add(1)
	b := hc.startResponse(200, "OK", keep)
	b = append(b, ent.hdr...)
	b = append(b, "\r\n"...)
	if isHead {
		return hc.write(b)
	}
	if ent.body != nil {
		// Fill the first record, then write the rest from the cache.
		k := copy(hc.wbuf[len(b):cap(hc.wbuf)], ent.body)
		if !hc.write(hc.wbuf[:len(b)+k]) {
			return false
		}
		if k == len(ent.body) {
			return true
		}
		hc.cork(true)
		defer hc.cork(false)
		return hc.write(ent.body[k:])
	}
	return hc.streamFile(b, ent)
}

// streamFile writes the header in b and then a file too big for the cache.
func (hc *httpConn) streamFile(b []byte, ent *fileEntry) bool {
	f, err := hc.srv.root.Open(ent.file)
	if err != nil {
		// Gone since the lookup: the header is not written yet.
		hc.writeStatus(404, "Not Found", false, false, "")
		return false
	}
	defer f.Close()
	hc.cork(true)
	defer hc.cork(false)
	if !hc.write(b) {
		return false
	}
	bp := splicePool.Get().(*[]byte)
	defer splicePool.Put(bp)
	left := ent.size
	for left > 0 {
		k, err := f.Read((*bp)[:min(int64(len(*bp)), left)])
		if k > 0 {
			if !hc.write((*bp)[:k]) {
				return false
			}
			left -= int64(k)
		}
		if err != nil {
			break
		}
	}
	// A file that shrank leaves the response short: the client must not
	// reuse the connection.
	return left == 0
}

// cork sets TCP_CORK around a response of many records, so that the
// kernel sends full segments rather than one per 16 KB record: on
// loopback, 1 MB responses took about 5% less CPU per byte with it (a
// noisy measurement on a shared machine). Uncorking sends the tail.
func (hc *httpConn) cork(on bool) {
	if hc.raw == nil {
		return
	}
	v := 0
	if on {
		v = 1
	}
	rc, err := hc.raw.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, v) })
}

// cacheSize returns the number of cached entries and their bytes.
func (s *staticServer) cacheSize() (int, int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.cache), s.bytes
}
