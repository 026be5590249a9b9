package tls

// The request head of HTTP/1.1 (RFC 9112 sections 2 to 5), parsed in
// place for the static: backend.

import (
	"bytes"
	"errors"
	"strings"
)

var (
	errHeadIncomplete = errors.New("tls: http: request head incomplete")
	errBadRequest     = errors.New("tls: http: bad request")
)

// reqHead is a parsed request head. Method and Target alias the parsed
// bytes and are valid until they are overwritten.
type reqHead struct {
	method    []byte
	target    []byte
	minor     byte // HTTP/1.minor: 0 or 1
	keepAlive bool // the connection stays open after the response
	host      bool // a Host field was present
	bodyLen   int64
	chunked   bool // Transfer-Encoding was present
}

// parseRequestHead parses the request head at the start of b into h and
// returns its length, including the empty line that ends it. A prefix of
// a head gives errHeadIncomplete; a malformed one errBadRequest. Lines may
// end in CRLF or in a bare LF (RFC 9112 section 2.2); empty lines before
// the request line are skipped. It does not allocate.
func parseRequestHead(b []byte, h *reqHead) (int, error) {
	*h = reqHead{}
	off := 0
	// Leading empty lines.
	for {
		line, next, ok := nextLine(b, off)
		if !ok {
			return 0, errHeadIncomplete
		}
		if len(line) != 0 {
			break
		}
		off = next
		if off > 64 {
			return 0, errBadRequest
		}
	}
	line, off, _ := nextLine(b, off)
	// request-line = method SP request-target SP HTTP-version
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return 0, errBadRequest
	}
	h.method = line[:sp1]
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return 0, errBadRequest
	}
	h.target = rest[:sp2]
	ver := rest[sp2+1:]
	if len(ver) != 8 || string(ver[:7]) != "HTTP/1." || (ver[7] != '0' && ver[7] != '1') {
		return 0, errBadRequest
	}
	for _, c := range h.method {
		if !isTokenChar(c) {
			return 0, errBadRequest
		}
	}
	for _, c := range h.target {
		if c <= ' ' || c == 0x7f {
			return 0, errBadRequest
		}
	}
	h.minor = ver[7] - '0'
	h.keepAlive = h.minor == 1
	sawClose, sawKeep := false, false
	h.bodyLen = -1
	for {
		line, next, ok := nextLine(b, off)
		if !ok {
			return 0, errHeadIncomplete
		}
		off = next
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return 0, errBadRequest // also obs-fold: a line starting with SP
		}
		name := line[:colon]
		for _, c := range name {
			if !isTokenChar(c) {
				return 0, errBadRequest
			}
		}
		val := trimOWS(line[colon+1:])
		for _, c := range val {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return 0, errBadRequest
			}
		}
		switch {
		case bytes.EqualFold(name, []byte("host")):
			if h.host {
				return 0, errBadRequest
			}
			h.host = true
		case bytes.EqualFold(name, []byte("connection")):
			for len(val) > 0 {
				var tok []byte
				if i := bytes.IndexByte(val, ','); i >= 0 {
					tok, val = trimOWS(val[:i]), val[i+1:]
				} else {
					tok, val = trimOWS(val), nil
				}
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					sawClose = true
				case bytes.EqualFold(tok, []byte("keep-alive")):
					sawKeep = true
				}
			}
		case bytes.EqualFold(name, []byte("content-length")):
			if len(val) == 0 || len(val) > 18 {
				return 0, errBadRequest
			}
			var v int64
			for _, c := range val {
				if c < '0' || c > '9' {
					return 0, errBadRequest
				}
				v = v*10 + int64(c-'0')
			}
			if h.bodyLen >= 0 && h.bodyLen != v {
				return 0, errBadRequest
			}
			h.bodyLen = v
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			h.chunked = true
		}
	}
	if h.bodyLen < 0 {
		h.bodyLen = 0
	}
	if h.minor == 1 && !h.host {
		return 0, errBadRequest // RFC 9112 section 3.2
	}
	switch {
	case sawClose:
		h.keepAlive = false
	case sawKeep:
		h.keepAlive = true
	}
	return off, nil
}

// nextLine returns the line starting at off without its line ending, and
// the offset after that ending; ok is false when no line ending follows.
func nextLine(b []byte, off int) (line []byte, next int, ok bool) {
	i := bytes.IndexByte(b[off:], '\n')
	if i < 0 {
		return nil, 0, false
	}
	line = b[off : off+i]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, off + i + 1, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// isTokenChar reports whether c may appear in a token (RFC 9110 section
// 5.6.2).
func isTokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// cleanTarget turns a request target into a file name relative to the
// served directory, written to dst: the path only (query and fragment
// dropped, an absolute-form's scheme and authority too), percent-decoded,
// without its leading slash, with "index.html" appended to a directory
// path. It fails on a ".." segment, a NUL or backslash, an invalid escape
// and anything that is not a path. It does not allocate when dst has room.
func cleanTarget(dst, target []byte) ([]byte, error) {
	if i := bytes.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if len(target) > 0 && target[0] != '/' {
		// absolute-form: scheme "://" authority path
		i := bytes.Index(target, []byte("://"))
		if i <= 0 {
			return dst, errBadRequest
		}
		j := bytes.IndexByte(target[i+3:], '/')
		if j < 0 {
			target = []byte("/")
		} else {
			target = target[i+3+j:]
		}
	}
	if len(target) == 0 || target[0] != '/' {
		return dst, errBadRequest
	}
	dst = dst[:0]
	for i := 1; i < len(target); i++ {
		c := target[i]
		if c == '%' {
			if i+2 >= len(target) {
				return dst, errBadRequest
			}
			hi, ok1 := unhex(target[i+1])
			lo, ok2 := unhex(target[i+2])
			if !ok1 || !ok2 {
				return dst, errBadRequest
			}
			c = hi<<4 | lo
			i += 2
		}
		if c == 0 || c == '\\' {
			return dst, errBadRequest
		}
		if c == '/' && (len(dst) == 0 || dst[len(dst)-1] == '/') {
			continue // collapse "//" and the leading slash
		}
		dst = append(dst, c)
	}
	// Reject "." and ".." segments.
	for seg := dst; len(seg) > 0; {
		var s []byte
		if i := bytes.IndexByte(seg, '/'); i >= 0 {
			s, seg = seg[:i], seg[i+1:]
		} else {
			s, seg = seg, nil
		}
		if string(s) == ".." || string(s) == "." {
			return dst, errBadRequest
		}
	}
	if len(dst) == 0 || dst[len(dst)-1] == '/' {
		dst = append(dst, "index.html"...)
	}
	return dst, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
