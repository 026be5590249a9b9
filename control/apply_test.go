package control

import (
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// key32 is a ticket key made of one byte repeated.
func key32(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// TestApplyArgs: config.apply hands the backend the name, the text and
// the ticket ring with its issuing key first; bad arguments are refused
// with errors that name the argument (and a key by its index and ID,
// never by its bytes), and the backend is not called.
func TestApplyArgs(t *testing.T) {
	b := controltest.New()
	s := start(t, b, nil)
	c := dial(t, s.Path())
	ctx := context.Background()
	b.SetReloadChanges([]string{"tunnel added tunnel=t"})
	r, err := c.Apply(ctx, ApplyArgs{Name: "fleet/gw-a", Config: "[udp]\n", TicketKeys: []TicketKey{
		{ID: "old", Key: key32(1)}, {ID: "new", Key: key32(2), Issue: true}, {ID: "next", Key: key32(3)},
	}})
	if err != nil || !slices.Equal(r.Changes, []string{"tunnel added tunnel=t"}) {
		t.Fatalf("apply: %+v, %v", r, err)
	}
	got := b.Applies()
	want := [][32]byte{[32]byte(key32(2)), [32]byte(key32(1)), [32]byte(key32(3))}
	if len(got) != 1 || got[0].Name != "fleet/gw-a" || got[0].Text != "[udp]\n" || !slices.Equal(got[0].TicketKeys, want) {
		t.Fatalf("backend got %+v", got)
	}
	// No keys: nil, the ring stays. No name: the op's.
	if _, err := c.Apply(ctx, ApplyArgs{Config: "[udp]\n"}); err != nil {
		t.Fatal(err)
	}
	if got := b.Applies(); len(got) != 2 || got[1].Name != "config.apply" || got[1].TicketKeys != nil {
		t.Fatalf("backend got %+v", got[1])
	}

	secret := bytes.Repeat([]byte{0xAB}, 31)
	keys := func(ks ...TicketKey) []TicketKey { return ks }
	many := make([]TicketKey, MaxTicketKeys+1)
	for i := range many {
		many[i] = TicketKey{ID: fmt.Sprint(i), Key: key32(byte(i)), Issue: i == 0}
	}
	tests := []struct {
		a    ApplyArgs
		want string
	}{
		{ApplyArgs{Name: "x\ny", Config: "a = 1"}, "args.name must be printable text"},
		{ApplyArgs{Name: "x\x1b[31m", Config: "a = 1"}, "args.name must be printable text"},
		{ApplyArgs{Name: strings.Repeat("n", MaxApplyName+1), Config: "a = 1"}, "args.name must be printable text of at most 256 bytes"},
		{ApplyArgs{Name: "n", Config: " \n"}, "args.config is required"},
		{ApplyArgs{Name: "n", Config: strings.Repeat("#", MaxApplyConfig+1)}, "args.config is 4194305 bytes, more than the 4194304"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "k", Key: secret, Issue: true})}, "args.ticket_keys[1] (id \"k\"): key is 31 bytes, want 32"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "", Key: key32(1), Issue: true})}, "args.ticket_keys[1].id must be printable text of 1 to 128 bytes"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "a\tb", Key: key32(1), Issue: true})}, "args.ticket_keys[1].id must be printable"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "k", Key: key32(1), Issue: true}, TicketKey{ID: "k", Key: key32(2)})}, "args.ticket_keys[2].id \"k\": two keys have that ID"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "a", Key: key32(1), Issue: true}, TicketKey{ID: "b", Key: key32(2), Issue: true})}, "args.ticket_keys[2] (id \"b\"): issue is set on two keys (and \"a\")"},
		{ApplyArgs{Config: "a", TicketKeys: keys(TicketKey{ID: "a", Key: key32(1)})}, "no key has issue set"},
		{ApplyArgs{Config: "a", TicketKeys: many}, "args.ticket_keys has 17 keys, more than 16"},
	}
	for _, tt := range tests {
		_, err := c.Apply(ctx, tt.a)
		var re *RemoteError
		if !errors.As(err, &re) || !strings.HasPrefix(re.Msg, "control: config.apply: ") || !strings.Contains(re.Msg, tt.want) {
			t.Errorf("apply %.60q: %v, want %q", tt.a.Name, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "abab") || strings.Contains(err.Error(), "q6ur")) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	if n := b.Calls("Apply"); n != 2 {
		t.Errorf("the backend was called %d times, want 2 (bad arguments never reach it)", n)
	}
	// Strict arguments, as every op's.
	raw := dialRaw(t, s.Path())
	if r := raw.roundTrip(`{"op":"config.apply","args":{"name":"n","config":"a","ticket_key":[]}}`); r.OK || !strings.Contains(r.Error, `unknown field "ticket_key"`) {
		t.Errorf("misspelt argument: %+v", r)
	}
	// A backend that takes no configurations says so.
	s2 := start(t, struct{ Backend }{b}, nil)
	if _, err := dial(t, s2.Path()).Apply(ctx, ApplyArgs{Config: "a"}); err == nil || !strings.Contains(err.Error(), "does not take configurations") {
		t.Errorf("backend without Apply: %v", err)
	}
}

// applySite is a TLS-only gateway run by a GatewayBackend behind a
// control socket: a [[tls]] listener with session tickets serving a file.
type applySite struct {
	dir, addr, file string
	ca              *certgen.CA
	g               *gateway.Gateway
	b               *GatewayBackend
	c               *Client
}

func newApplySite(t *testing.T) *applySite {
	t.Helper()
	s := &applySite{dir: t.TempDir()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	ln.Close()
	if s.ca, err = certgen.NewCA("control test CA"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ca.IssueFiles(s.dir, "site", false, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.dir, "www"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "www", "hello.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.file = filepath.Join(s.dir, "boot.toml")
	if err := os.WriteFile(s.file, []byte(s.text("")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadGateway(s.file)
	if err != nil {
		t.Fatal(err)
	}
	if s.g, err = gateway.Start(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.g.Close() })
	s.b = NewGatewayBackend(s.g, nil)
	s.c = dial(t, start(t, s.b, nil).Path())
	return s
}

// text is the site's configuration with extra appended; its paths are
// relative, to the directory of the file or of the applied name.
func (s *applySite) text(extra string) string {
	return fmt.Sprintf("[gateway]\nengine = \"soft\"\nstate_dir = %q\n\n[[tls]]\nname = \"web\"\nlisten = %q\nbackend = \"static:www\"\n  [[tls.cert]]\n  cert = \"site.pem\"\n  key = \"site.key\"\n%s",
		filepath.Join(s.dir, "state"), s.addr, extra)
}

// apply applies the site's text with extra and keys, under a name in the
// site's directory.
func (s *applySite) apply(t *testing.T, extra string, keys ...TicketKey) {
	t.Helper()
	if _, err := s.c.Apply(context.Background(), ApplyArgs{Name: filepath.Join(s.dir, "applied"), Config: s.text(extra), TicketKeys: keys}); err != nil {
		t.Fatal(err)
	}
}

// get fetches /hello.txt with the client session cache cache and reports
// whether the handshake resumed a session.
func (s *applySite) get(t *testing.T, cache cryptotls.ClientSessionCache) bool {
	t.Helper()
	conn, err := cryptotls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr,
		&cryptotls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1", ClientSessionCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /hello.txt HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	// Reading to the end takes in the ticket the server sent after its
	// handshake (TLS 1.3).
	resp, err := io.ReadAll(conn)
	if err != nil || !bytes.HasPrefix(resp, []byte("HTTP/1.1 200")) {
		t.Fatalf("GET: %q, %v", resp, err)
	}
	return conn.ConnectionState().DidResume
}

// TestApplyTicketKeys: with a ring applied, a client resumes across a ring
// change that keeps the key its ticket was issued under (accept-only now),
// and not once that key left the ring; an apply without keys keeps the
// ring.
func TestApplyTicketKeys(t *testing.T) {
	s := newApplySite(t)
	k1 := TicketKey{ID: "k1", Key: key32(1), Issue: true}
	k2 := TicketKey{ID: "k2", Key: key32(2), Issue: true}
	s.apply(t, "", k1)
	a, b := cryptotls.NewLRUClientSessionCache(4), cryptotls.NewLRUClientSessionCache(4)
	if s.get(t, a) || s.get(t, b) {
		t.Fatal("a first connection resumed")
	}
	// k2 issues, k1 still accepts: a resumes (and takes a ticket under k2).
	k1.Issue = false
	s.apply(t, "", k1, k2)
	if !s.get(t, a) {
		t.Fatal("no resumption with the ticket's key accept-only in the ring")
	}
	// An apply without keys leaves the ring: a's new ticket is k2's.
	s.apply(t, "")
	if !s.get(t, a) {
		t.Fatal("no resumption after an apply without keys (the ring was dropped)")
	}
	// k1 gone: b, whose ticket is k1's, does a full handshake.
	s.apply(t, "", k2)
	if s.get(t, b) {
		t.Fatal("resumed with a ticket whose key left the ring")
	}
	if !s.get(t, a) {
		t.Fatal("no resumption with the issuing key")
	}
	// A listener the apply adds uses the ring from its first handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr2 := ln.Addr().String()
	ln.Close()
	s.apply(t, fmt.Sprintf("\n[[tls]]\nname = \"web2\"\nlisten = %q\nbackend = \"static:www\"\n  [[tls.cert]]\n  cert = \"site.pem\"\n  key = \"site.key\"\n", addr2))
	first := s.addr
	s.addr = addr2
	if !s.get(t, a) {
		t.Error("the added listener did not resume a ticket issued under the ring by the other")
	}
	s.addr = first
}

// TestApplyGateway: an applied text is parsed as a file of its name
// (errors name it, with line and field, and never show a secret's
// value), then applied as a reload; afterwards a reload, which would
// re-read the file the gateway started from, is refused.
func TestApplyGateway(t *testing.T) {
	s := newApplySite(t)
	ctx := context.Background()
	if _, err := s.b.Reload(); err != nil {
		t.Fatalf("reload of the boot file: %v", err)
	}
	const psk = "0xC0FFEEnotHexAtAll"
	bad := []struct{ extra, want string }{
		{"\n[udp]\nlisten = \"nonsense\"\n", "agent/gw-a:14:10: udp.listen: "},
		{"\n[[secret]]\ntype = \"ike\"\nids = [\"a\", \"b\"]\nsecret = \"" + psk + "\"\n", "agent/gw-a:13:1: secret: "},
		{"\n[[secret]]\ntype = \"ike\"\nsecret = \"" + psk + "\n", "agent/gw-a:15:30: invalid TOML"},
		{"\n[[secret]]\ntype = \"ike\"\nsecret = " + psk + "\n", "agent/gw-a:15:18: invalid TOML"},
	}
	for _, tt := range bad {
		_, err := s.c.Apply(ctx, ApplyArgs{Name: "agent/gw-a", Config: s.text(tt.extra)})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("apply of %q: %v, want %q", tt.extra, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), "C0FFEE") {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	// Refused applies leave reload as it was.
	if _, err := s.b.Reload(); err != nil {
		t.Fatalf("reload after refused applies: %v", err)
	}
	r, err := s.c.Apply(ctx, ApplyArgs{Name: filepath.Join(s.dir, "applied"), Config: s.text("\n[[tls_origin]]\nname = \"o\"\nlisten = \"127.0.0.1:0\"\nbackend = \"tls://127.0.0.1:1\"\n")})
	if err != nil || len(r.Changes) == 0 {
		t.Fatalf("apply: %+v, %v", r, err)
	}
	if st := s.g.Stats(); len(st.TLS) != 2 || st.TLS[1].Name != "o" {
		t.Errorf("after the apply: %+v", st.TLS)
	}
	if s.g.Config().File != filepath.Join(s.dir, "applied") {
		t.Errorf("running configuration's name %q", s.g.Config().File)
	}
	_, err = s.c.Reload(ctx)
	if err == nil || !strings.Contains(err.Error(), "applied over the control socket (config.apply of \""+filepath.Join(s.dir, "applied")+"\")") || !strings.Contains(err.Error(), s.file) {
		t.Fatalf("reload after an apply: %v", err)
	}
	if st := s.g.Stats(); len(st.TLS) != 2 {
		t.Errorf("the refused reload changed the TLS sections: %+v", st.TLS)
	}
}
