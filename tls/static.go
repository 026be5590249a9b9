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
//     bigger files are streamed through a pooled buffer;
//  4. keeps the connection for the next request (pipelined requests are
//     served from what is already buffered).
//
// Serving a cached file allocates nothing (TestStaticNoAllocs).
// Deadlines: between requests the idle timeout applies, from a request's
// first byte to the end of its head the header timeout; both are moved
// only when a quarter stale, not per request.
//
// Not supported: request bodies (a request with one gets 400 and the
// connection is closed), Range and conditional requests (the whole file
// is sent), directory listings.

import (
	"errors"
	"mime"
	"net"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	maxHeadLen      = 8 << 10  // the longest request head accepted
	writeBufLen     = 16 << 10 // one TLS record's worth of response
	cacheMaxFile    = 1 << 20  // files up to this size are cached
	cacheMaxBytes   = 64 << 20 // the cache's total budget
	cacheRevalidate = time.Second
	httpTimeFormat  = "Mon, 02 Jan 2006 15:04:05 GMT"
)

// staticServer serves the files under one directory. It is safe for
// concurrent use by the connections of its listener.
type staticServer struct {
	dir  string
	root *os.Root

	mu    sync.RWMutex
	cache map[string]*fileEntry
	bytes int64 // total body bytes in cache
}

// fileEntry is one cached file. body and hdr are immutable; a changed
// file gets a new entry.
type fileEntry struct {
	file    string // the name under the served directory
	size    int64
	mtime   time.Time
	body    []byte // the whole file, or nil when streamed from disk
	hdr     []byte // "Content-Type: ...\r\nContent-Length: ...\r\nLast-Modified: ...\r\n"
	checked atomic.Int64
}

func newStaticServer(dir string) (*staticServer, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &staticServer{dir: dir, root: root, cache: make(map[string]*fileEntry)}, nil
}

// httpConn is one connection's state, pooled between connections.
type httpConn struct {
	c        net.Conn
	srv      *staticServer
	ctr      *counters
	idle     time.Duration
	headerTO time.Duration

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
func (s *staticServer) serveConn(c net.Conn, idle, headerTO time.Duration, ctr *counters) {
	hc := httpConnPool.Get().(*httpConn)
	hc.c, hc.srv, hc.ctr, hc.idle, hc.headerTO = c, s, ctr, idle, headerTO
	for hc.serveOne() {
	}
	hc.c, hc.srv, hc.ctr, hc.rn = nil, nil, nil, 0
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
		ok := hc.writeStatus(405, "Method Not Allowed", keep, "Allow: GET, HEAD\r\n")
		hc.consume(n)
		return ok && keep
	}
	hc.name, err = cleanTarget(hc.name[:0], h.target)
	if err != nil {
		hc.writeError(400, "Bad Request")
		return false
	}
	// h's slices alias rbuf: done with them before consume.
	ent := hc.srv.lookup(hc.name)
	hc.consume(n)
	if ent == nil {
		return hc.writeStatus(404, "Not Found", keep, "") && keep
	}
	return hc.writeFile(ent, isHead, keep) && keep
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
// it; nil means 404.
func (s *staticServer) lookup(name []byte) *fileEntry {
	s.mu.RLock()
	ent := s.cache[string(name)]
	s.mu.RUnlock()
	now := time.Now().UnixNano()
	if ent != nil && now-ent.checked.Load() < int64(cacheRevalidate) {
		return ent
	}
	return s.load(string(name), ent, now)
}

// load (re)reads a file into the cache. old is the entry to revalidate.
func (s *staticServer) load(key string, old *fileEntry, now int64) *fileEntry {
	name := key
	fi, err := s.root.Stat(name)
	if err == nil && fi.IsDir() {
		name = path.Join(name, "index.html")
		fi, err = s.root.Stat(name)
	}
	if err != nil || !fi.Mode().IsRegular() {
		if old != nil {
			s.drop(key, old)
		}
		return nil
	}
	if old != nil && old.size == fi.Size() && old.mtime.Equal(fi.ModTime()) {
		old.checked.Store(now)
		return old
	}
	ent := &fileEntry{file: name, size: fi.Size(), mtime: fi.ModTime()}
	ent.checked.Store(now)
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	ent.hdr = []byte("Content-Type: " + ctype + "\r\nContent-Length: " + strconv.FormatInt(ent.size, 10) +
		"\r\nLast-Modified: " + ent.mtime.UTC().Format(httpTimeFormat) + "\r\n")
	if ent.size <= cacheMaxFile {
		s.mu.RLock()
		room := s.bytes+ent.size <= cacheMaxBytes
		s.mu.RUnlock()
		if room {
			if b, err := s.root.ReadFile(name); err == nil && int64(len(b)) == ent.size {
				ent.body = b
			}
		}
	}
	s.mu.Lock()
	if cur := s.cache[key]; cur != nil {
		s.bytes -= int64(len(cur.body))
	}
	if ent.body != nil && s.bytes+ent.size > cacheMaxBytes {
		ent.body = nil
	}
	s.bytes += int64(len(ent.body))
	s.cache[key] = ent
	s.mu.Unlock()
	return ent
}

func (s *staticServer) drop(name string, old *fileEntry) {
	s.mu.Lock()
	if s.cache[name] == old {
		delete(s.cache, name)
		s.bytes -= int64(len(old.body))
	}
	s.mu.Unlock()
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

// writeStatus answers with a short text body naming the status.
func (hc *httpConn) writeStatus(code int, reason string, keep bool, extra string) bool {
	b := hc.startResponse(code, reason, keep)
	b = append(b, extra...)
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(reason)+1), 10)
	b = append(b, "\r\n\r\n"...)
	if string(hc.head.method) != "HEAD" {
		b = append(b, reason...)
		b = append(b, '\n')
	}
	return hc.write(b)
}

// writeError answers a request the connection does not survive.
func (hc *httpConn) writeError(code int, reason string) {
	hc.head.method = nil
	hc.writeStatus(code, reason, false, "")
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
		return k == len(ent.body) || hc.write(ent.body[k:])
	}
	return hc.streamFile(b, ent)
}

// streamFile writes the header in b and then a file too big for the cache.
func (hc *httpConn) streamFile(b []byte, ent *fileEntry) bool {
	f, err := hc.srv.root.Open(ent.file)
	if err != nil {
		// Gone since the lookup: the header is not written yet.
		return hc.writeStatus(404, "Not Found", false, "") && false
	}
	defer f.Close()
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
