package control

// The socket server:
//  1. Accept: one goroutine. A peer that is neither root nor our user is
//     closed at once; beyond MaxConns connections a client gets an error
//     line and is closed, so the server's goroutines and memory are bounded.
//     Refusals are logged at most one line per RefusalLogInterval for each
//     reason (refusals.go), so a flood of them does not flood the log.
//  2. Serve: one goroutine per connection reads a line (at most MaxRequest
//     bytes, within IdleTimeout), runs the operation on the Backend and
//     writes one line back (within WriteTimeout). Requests on a connection
//     are served in order.
//  3. Close: the listener and every connection are closed, the goroutines
//     are waited for, and the socket file is removed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/ike"
)

// Defaults of Options.
const (
	DefaultMaxConns = 16
	// DefaultMaxRequest fits a config.apply of MaxApplyConfig bytes,
	// JSON-escaped (a newline or a quote takes two bytes).
	DefaultMaxRequest   = 3 * MaxApplyConfig
	DefaultIdleTimeout  = 30 * time.Second
	DefaultWriteTimeout = 10 * time.Second

	DefaultRefusalLogInterval = 10 * time.Second
)

// Options tune a Server. The zero value is the defaults.
type Options struct {
	Log *slog.Logger // nil: discard
	// MaxConns is how many clients are served at once; more are refused
	// with an error line.
	MaxConns int
	// MaxRequest is the longest request line, newline included. A longer
	// one gets an error line and the connection is closed.
	MaxRequest int
	// IdleTimeout is how long the server waits for a whole request line;
	// a client that sends nothing, or too slowly, is disconnected.
	IdleTimeout time.Duration
	// WriteTimeout is how long a client may take to accept a response.
	WriteTimeout time.Duration
	// RefusalLogInterval is how often at most a line is logged about the
	// connections refused for one reason (another user's, too many): the
	// first refusal is logged, those in the next interval are counted and
	// told of in one summary line.
	RefusalLogInterval time.Duration
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.MaxConns <= 0 {
		r.MaxConns = DefaultMaxConns
	}
	if r.MaxRequest <= 0 {
		r.MaxRequest = DefaultMaxRequest
	}
	if r.IdleTimeout <= 0 {
		r.IdleTimeout = DefaultIdleTimeout
	}
	if r.WriteTimeout <= 0 {
		r.WriteTimeout = DefaultWriteTimeout
	}
	if r.RefusalLogInterval <= 0 {
		r.RefusalLogInterval = DefaultRefusalLogInterval
	}
	return r
}

// Server serves the control protocol on a Unix socket.
type Server struct {
	path string
	b    Backend
	opt  Options
	ln   *net.UnixListener
	file fs.FileInfo // the socket file we created
	sem  chan struct{}
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	// One log line per interval at most for each reason a connection is
	// refused.
	otherUser, tooMany *refusalLog

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// Listen claims the socket at path (see the package comment for its mode;
// a stale socket file is replaced, a live one is an error) and Serve starts
// answering on it. In between, clients that connect wait: a daemon claims
// its socket first, so that a second instance fails before it touches
// anything, and serves once its backend is up. opt may be nil.
func Listen(path string, opt *Options) (*Server, error) {
	ln, file, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	o := opt.withDefaults()
	return &Server{
		path: path, opt: o, ln: ln, file: file,
		sem:       make(chan struct{}, o.MaxConns),
		done:      make(chan struct{}),
		conns:     map[net.Conn]struct{}{},
		otherUser: newRefusalLog(o.Log, "control: connection refused", o.RefusalLogInterval),
		tooMany:   newRefusalLog(o.Log, "control: too many clients; connection refused", o.RefusalLogInterval),
	}, nil
}

// Serve starts serving b in the background. It may be called once; after
// Close it does nothing.
func (s *Server) Serve(b Backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == nil {
		panic("control: Serve with a nil Backend")
	}
	if s.b != nil {
		panic("control: Serve called twice")
	}
	s.b = b
	if s.closed {
		return
	}
	s.wg.Add(1)
	go s.acceptLoop()
	s.opt.Log.Info("control socket listening", "path", s.path)
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops the server: it closes the listener and every connection,
// waits for the requests being served to finish, and removes the socket
// file. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.otherUser.stop()
	s.tooMany.stop()
	removeIfSame(s.path, s.file)
	s.opt.Log.Info("control socket closed", "path", s.path)
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, most likely: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.opt.Log.Warn("control: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-s.done:
				return
			}
		}
		backoff = 0
		if err := checkPeer(c); err != nil {
			s.otherUser.refused("err", err)
			s.writeLine(c, fail("control: permission denied: the control socket is only for root and the user sluice runs as"))
			c.Close()
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.tooMany.refused("max", s.opt.MaxConns)
			s.writeLine(c, fail("control: too many clients (at most %d at once); try again", s.opt.MaxConns))
			c.Close()
			continue
		}
		if !s.track(c) {
			<-s.sem
			c.Close()
			return
		}
		go s.serveConn(c)
	}
}

// track registers c and counts its goroutine; it reports false once the
// server is closed. Adding to wg under mu orders it before Close's Wait.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		<-s.sem
		s.wg.Done()
	}()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, min(4096, s.opt.MaxRequest)), s.opt.MaxRequest)
	for {
		c.SetReadDeadline(time.Now().Add(s.opt.IdleTimeout))
		if !sc.Scan() {
			switch err := sc.Err(); {
			case errors.Is(err, bufio.ErrTooLong):
				s.opt.Log.Warn("control: request too long; connection closed", "max", s.opt.MaxRequest)
				s.writeLine(c, fail("control: request longer than %d bytes; closing the connection", s.opt.MaxRequest))
			case errors.Is(err, os.ErrDeadlineExceeded):
				s.opt.Log.Debug("control: idle client disconnected", "timeout", s.opt.IdleTimeout)
			}
			return
		}
		if err := s.writeLine(c, s.handle(sc.Bytes())); err != nil {
			s.opt.Log.Debug("control: write", "err", err)
			return
		}
	}
}

// writeLine sends one response line within WriteTimeout.
func (s *Server) writeLine(c net.Conn, r Response) error {
	data, err := json.Marshal(r)
	if err != nil {
		data, _ = json.Marshal(fail("control: encoding the response: %v", err))
	}
	c.SetWriteDeadline(time.Now().Add(s.opt.WriteTimeout))
	_, err = c.Write(append(data, '\n'))
	return err
}

func fail(format string, args ...any) Response {
	return Response{Error: fmt.Sprintf(format, args...)}
}

// handle serves one request line. A panic in the backend becomes an error
// response: the control plane must not take the data plane down.
func (s *Server) handle(line []byte) (resp Response) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return fail("control: empty request: send one JSON object per line, e.g. {\"op\":\"stats\"}")
	}
	var req Request
	if err := decodeStrict(line, &req); err != nil {
		return fail("control: bad request: %s", describeJSONError("", err))
	}
	defer func() {
		if r := recover(); r != nil {
			s.opt.Log.Error("control: panic serving a request", "op", req.Op, "panic", r, "stack", string(debug.Stack()))
			resp = fail("control: %s: internal error (see the gateway's log)", req.Op)
		}
	}()
	result, err := s.dispatch(req)
	if err != nil {
		return Response{Error: err.Error()}
	}
	resp.OK = true
	if result != nil {
		data, err := json.Marshal(result)
		if err != nil {
			return fail("control: %s: encoding the result: %v", req.Op, err)
		}
		resp.Result = data
	}
	return resp
}

// dispatch runs one operation and returns its result (nil for none).
func (s *Server) dispatch(req Request) (any, error) {
	log := s.opt.Log
	switch req.Op {
	case OpSAList, OpTunnelList, OpPolicyList, OpStats, OpReload, OpIKEList, OpHAStatus:
		if err := decodeArgs(req, &struct{}{}); err != nil {
			return nil, err
		}
	}
	switch req.Op {
	case "":
		return nil, fmt.Errorf("control: request has no op (valid: %s)", strings.Join(Ops, ", "))
	case OpSAList:
		return nonNil(s.b.SAs()), nil
	case OpTunnelList:
		return nonNil(s.b.Tunnels()), nil
	case OpPolicyList:
		return nonNil(s.b.Policies()), nil
	case OpStats:
		st := s.b.Stats()
		st.SAs = nonNil(st.SAs)
		st.Dataplane.Workers = nonNil(st.Dataplane.Workers)
		st.Dataplane.Receivers = nonNil(st.Dataplane.Receivers)
		st.TLS = nonNil(st.TLS)
		return st, nil
	case OpReload:
		// The backend logs the outcome.
		changes, err := s.b.Reload()
		if err != nil {
			return nil, err
		}
		return ReloadResult{Changes: nonNil(changes)}, nil
	case OpSAAdd:
		var a SAAddArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		sa, err := a.check()
		if err != nil {
			return nil, err
		}
		if err := s.b.AddSA(a.Tunnel, a.Dir, sa); err != nil {
			return nil, err
		}
		log.Info("control: SA added", "tunnel", a.Tunnel, "dir", a.Dir, "sa", sa.Name, "spi", ike.ESPSPI(sa.SPI))
		return SAAddResult{Tunnel: a.Tunnel, Dir: a.Dir, Name: sa.Name, SPI: sa.SPI}, nil
	case OpSADel:
		var a SADelArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.SPI == 0 {
			return nil, fmt.Errorf("control: sa.del: args.spi is required: the SPI of an inbound SA")
		}
		if err := s.b.DelSA(a.SPI); err != nil {
			return nil, err
		}
		log.Info("control: SA deleted", "spi", ike.ESPSPI(a.SPI))
		return SADelResult{SPI: a.SPI}, nil
	case OpIKEList:
		info := s.b.IKE()
		info.Connections = nonNil(info.Connections)
		return info, nil
	case OpIKEInit, OpIKETerm:
		var a IKEArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.Name == "" {
			return nil, fmt.Errorf("control: %s: args.name is required: the name of a [[connection]]", req.Op)
		}
		ctx, cancel := context.WithTimeout(context.Background(), IKETimeout)
		defer cancel()
		var err error
		if req.Op == OpIKEInit {
			err = s.b.InitiateIKE(ctx, a.Name)
		} else {
			err = s.b.TerminateIKE(ctx, a.Name)
		}
		if err != nil {
			return nil, err
		}
		log.Info("control: "+req.Op, "connection", a.Name)
		return IKEResult{Name: a.Name}, nil
	case OpApply:
		ab, ok := s.b.(ApplyBackend)
		if !ok {
			return nil, fmt.Errorf("control: %s: this gateway does not take configurations over the socket", req.Op)
		}
		var a ApplyArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		ring, err := a.check()
		if err != nil {
			return nil, err
		}
		// The backend logs the outcome; the text is never logged.
		changes, err := ab.Apply(a.Name, a.Config, ring)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(a.TicketKeys))
		for i, k := range a.TicketKeys {
			ids[i] = k.ID
		}
		log.Info("control: configuration applied", "name", a.Name, "bytes", len(a.Config), "ticket_keys", ids, "changes", len(changes))
		return ReloadResult{Changes: nonNil(changes)}, nil
	case OpHAStatus, OpHAHandover:
		hb, ok := s.b.(HABackend)
		var st ha.Status
		if ok {
			st, ok = hb.HAStatus()
		}
		if !ok {
			return nil, fmt.Errorf("control: %s: this gateway has no [ha] section", req.Op)
		}
		if req.Op == OpHAStatus {
			return st, nil
		}
		var a HAArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), HATimeout)
		defer cancel()
		if err := hb.HAHandover(ctx, a.Group); err != nil {
			return nil, err
		}
		log.Info("control: ha.handover", "group", a.Group)
		st, _ = hb.HAStatus()
		return st, nil
	}
	return nil, fmt.Errorf("control: unknown op %q (valid: %s)", req.Op, strings.Join(Ops, ", "))
}

// check validates sa.add's arguments and parses its SA.
func (a *SAAddArgs) check() (*config.SA, error) {
	switch {
	case a.Tunnel == "":
		return nil, errors.New("control: sa.add: args.tunnel is required")
	case a.Dir != "in" && a.Dir != "out":
		return nil, fmt.Errorf("control: sa.add: args.dir must be \"in\" or \"out\", not %q", a.Dir)
	case strings.TrimSpace(a.SA) == "":
		return nil, errors.New("control: sa.add: args.sa is required: the TOML text of one [[sa]] table")
	}
	sas, err := config.ParseSAs(OpSAAdd, []byte(a.SA))
	if err != nil {
		return nil, err
	}
	if len(sas) != 1 {
		return nil, fmt.Errorf("control: sa.add: args.sa must hold exactly one [[sa]] table, not %d", len(sas))
	}
	return &sas[0], nil
}

// check validates config.apply's arguments (Name defaults to
// "config.apply") and returns the ticket key ring, issuing key first, or
// nil when there are no keys. Errors name keys by index and ID, never by
// their bytes.
func (a *ApplyArgs) check() ([][32]byte, error) {
	if a.Name == "" {
		a.Name = OpApply
	}
	switch {
	case len(a.Name) > MaxApplyName || !printable(a.Name):
		return nil, fmt.Errorf("control: config.apply: args.name must be printable text of at most %d bytes (the name errors in the configuration are reported under)", MaxApplyName)
	case len(a.Config) > MaxApplyConfig:
		return nil, fmt.Errorf("control: config.apply: args.config is %d bytes, more than the %d a configuration may have", len(a.Config), MaxApplyConfig)
	case strings.TrimSpace(a.Config) == "":
		return nil, errors.New("control: config.apply: args.config is required: the TOML text of a whole gateway configuration")
	case len(a.TicketKeys) > MaxTicketKeys:
		return nil, fmt.Errorf("control: config.apply: args.ticket_keys has %d keys, more than %d", len(a.TicketKeys), MaxTicketKeys)
	}
	if len(a.TicketKeys) == 0 {
		return nil, nil
	}
	ring := make([][32]byte, 0, len(a.TicketKeys))
	seen := map[string]bool{}
	issuing := -1
	for i, k := range a.TicketKeys {
		at := fmt.Sprintf("args.ticket_keys[%d]", i+1)
		switch {
		case k.ID == "" || len(k.ID) > MaxTicketKeyID || !printable(k.ID):
			return nil, fmt.Errorf("control: config.apply: %s.id must be printable text of 1 to %d bytes", at, MaxTicketKeyID)
		case seen[k.ID]:
			return nil, fmt.Errorf("control: config.apply: %s.id %q: two keys have that ID", at, k.ID)
		case len(k.Key) != 32:
			return nil, fmt.Errorf("control: config.apply: %s (id %q): key is %d bytes, want 32", at, k.ID, len(k.Key))
		case k.Issue && issuing >= 0:
			return nil, fmt.Errorf("control: config.apply: %s (id %q): issue is set on two keys (and %q): at most one key issues tickets", at, k.ID, a.TicketKeys[issuing].ID)
		}
		seen[k.ID] = true
		if k.Issue {
			issuing = i
		}
	}
	if issuing < 0 {
		return nil, errors.New("control: config.apply: args.ticket_keys: no key has issue set: one key must issue tickets (the others only accept them)")
	}
	ring = append(ring, [32]byte(a.TicketKeys[issuing].Key))
	for i, k := range a.TicketKeys {
		if i != issuing {
			ring = append(ring, [32]byte(k.Key))
		}
	}
	return ring, nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// decodeArgs decodes req.Args into v, strictly; absent or null args decode
// as the zero value.
func decodeArgs(req Request, v any) error {
	if len(req.Args) == 0 {
		return nil
	}
	if err := decodeStrict(req.Args, v); err != nil {
		return fmt.Errorf("control: %s: %s", req.Op, describeJSONError("args", err))
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// object fields and trailing data. encoding/json matches field names
// without regard to case and lets a repeated key override the first; the
// protocol does not: a top-level key must be a field's name exactly, once.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return exactKeys(data, v)
}

// exactKeys checks the keys of the JSON object data (already decoded into
// the struct v without error) against v's field names: each must be one
// exactly, and appear once.
func exactKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // null: nothing to check
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if !hasJSONField(t, key) {
			return fmt.Errorf("json: unknown field %q (field names are case-sensitive)", key)
		}
		if seen[key] {
			return fmt.Errorf("json: field %q given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// hasJSONField reports whether struct type t has a field whose JSON name is
// exactly name.
func hasJSONField(t reflect.Type, name string) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return true
		}
	}
	return false
}

// describeJSONError says what was wrong with a JSON value in terms of its
// fields: "args.spi: got string, want an integer 0..4294967295".
func describeJSONError(prefix string, err error) string {
	join := func(field string) string {
		switch {
		case prefix == "":
			return field
		case field == "":
			return prefix
		}
		return prefix + "." + field
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		where := join(te.Field)
		if where != "" {
			where += ": "
		}
		return fmt.Sprintf("%sgot JSON %s, want %s", where, te.Value, jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: it ends early"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if prefix != "" {
		msg = prefix + ": " + msg
	}
	return msg
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Uint32:
		return "an integer 0..4294967295"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Uint, reflect.Int32, reflect.Uint16, reflect.Uint8:
		return "an integer in range of " + t.Kind().String()
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}
