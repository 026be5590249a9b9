package ike

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike/eap"
)

// TestEAPIdentity: what EAP proved is bound to what the connection
// requires (defect 3 of issue 28): with eap_id, an EAP-TLS certificate
// must name it (subject DN by value, or a DNS, email or IP
// subjectAltName); with eap_id = "%any", the identity proven (the
// certificate, or the EAP-MSCHAPv2 user) must be the connection's remote
// id when it has one; the identity returned is the proven one.
func TestEAPIdentity(t *testing.T) {
	ca := newTestCA(t)
	key := genKey(t, "p256")
	carol := ca.issue(t, "carol@example.net", key.Public())
	alice := ca.issue(t, "alice@example.net", key.Public())
	host := ca.issue(t, "alice.example.net", key.Public())
	// A DN subject with UTF8String values (as openssl writes them), and
	// a certificate with an empty subject and only an email name.
	dn, err := ca.ca.CertifySubject(key.Public(), utf8Name(t, "alice"), []string{"alice-dn.example.net"})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := ca.ca.CertifySubject(key.Public(), mustMarshal(t, pkix.RDNSequence{}), []string{"dave@example.net"})
	if err != nil {
		t.Fatal(err)
	}
	subject := func(c *x509.Certificate) string { return Identity{Type: IDDERASN1, Data: c.RawSubject}.String() }
	for _, c := range []struct {
		name     string
		eapID    string // "" for %any
		remoteID string
		user     string
		leaf     *x509.Certificate
		want     string // the identity proven, "" for a refusal
	}{
		{"eap_id, another user's certificate", "alice@example.net", "", "", carol, ""},
		{"eap_id, the user's certificate", "alice@example.net", "", "", alice, subject(alice)},
		{"eap_id as a DNS name", "alice.example.net", "", "", host, subject(host)},
		{"eap_id as a DNS name, another user's", "alice.example.net", "", "", carol, ""},
		{"eap_id as a DN, by value", "CN=alice", "", "", dn, "CN=alice"},
		{"eap_id as a DN, another user's", "CN=carol@example.net", "", "", dn, ""},
		{"eap_id wins over the remote id", "alice@example.net", "carol@example.net", "", alice, subject(alice)},
		{"%any, remote id, another user's certificate", "", "alice@example.net", "", carol, ""},
		{"%any, remote id, the user's certificate", "", "alice@example.net", "", alice, subject(alice)},
		{"%any, no remote id: any certificate of the CA", "", "", "", carol, subject(carol)},
		{"empty subject: the name matched", "dave@example.net", "", "", empty, "dave@example.net"},
		{"empty subject, %any: its email name", "", "", "", empty, "dave@example.net"},
		{"MSCHAPv2, %any, remote id, another user", "", "carol", "dave", nil, ""},
		{"MSCHAPv2, %any, remote id, the user", "", "carol", "carol", nil, "carol"},
		{"MSCHAPv2, %any, no remote id", "", "", "dave", nil, "dave"},
		{"nothing proven", "", "", "", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Peer{EAP: &eap.Config{Identity: c.eapID}}
			if c.remoteID != "" {
				p.RemoteID = ParseIdentity(c.remoteID)
			}
			id, err := eapIdentity(p, c.user, c.leaf)
			switch {
			case c.want == "" && err == nil:
				t.Fatalf("proven %v, want a refusal", id)
			case c.want != "" && err != nil:
				t.Fatalf("%v, want %s", err, c.want)
			case c.want != "" && id.String() != c.want:
				t.Fatalf("proven %v, want %s", id, c.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAuthRefusalLogged: each refused IKE_AUTH (a wrong PSK, an
// identity no connection has, a certificate from another CA, a
// certificate that does not name the identity) writes exactly one WARN
// line with the reason and the identity tried.
func TestAuthRefusalLogged(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	for _, c := range []struct {
		name  string
		tweak func(t *testing.T, a, b *Peer)
		want  []string
	}{
		{"wrong PSK", func(t *testing.T, a, b *Peer) { a.PSK = []byte("not the secret") },
			[]string{`msg="ike: initiator's AUTH does not verify; AUTHENTICATION_FAILED"`, "remote_id=a@example.net", `err="ike: PSK AUTH does not verify"`}},
		{"unknown identity", func(t *testing.T, a, b *Peer) { a.LocalID = ParseIdentity("mallory@example.net") },
			[]string{`msg="ike: no connection for the initiator's identity; AUTHENTICATION_FAILED"`, "remote_id=mallory@example.net", "err="}},
		{"certificate from another CA", func(t *testing.T, a, b *Peer) {
			k := genKey(t, "p256")
			a.Signer, a.Certificates = k, []*x509.Certificate{other.issue(t, "a@example.net", k.Public())}
			b.RemoteCAs = []*x509.Certificate{ca.cert}
		}, []string{"does not verify; AUTHENTICATION_FAILED", "remote_id=a@example.net", "certificate signed by unknown authority"}},
		{"certificate for another identity", func(t *testing.T, a, b *Peer) {
			k := genKey(t, "p256")
			a.Signer, a.Certificates = k, []*x509.Certificate{ca.issue(t, "carol@example.net", k.Public())}
			b.RemoteCAs = []*x509.Certificate{ca.cert}
		}, []string{"does not verify; AUTHENTICATION_FAILED", "remote_id=a@example.net", "does not name a@example.net"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			c.tweak(t, pa, pb)
			var buf logBuffer
			p := newPair(t, pa, pb, func(_, b *Config) {
				b.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
				t.Fatalf("Initiate: %v, want AUTHENTICATION_FAILED", err)
			}
			lines := buf.lines("level=WARN")
			if len(lines) != 1 || len(buf.lines(append([]string{"level=WARN"}, c.want...)...)) != 1 {
				t.Fatalf("WARN lines %q, want one with %q", lines, c.want)
			}
			t.Log(lines[0])
		})
	}
}

// TestAuthRefusalLogBounded: a stranger's stream of refused IKE_AUTH
// requests writes a bounded number of WARN lines (authLogBurst while
// the responder's clock stands still), every refusal counted; once the
// clock moves on, the next line says how many were held back.
func TestAuthRefusalLogBounded(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.PSK = []byte("not the secret")
	clk := newFakeClock()
	var buf logBuffer
	p := newPair(t, pa, pb, func(_, b *Config) {
		b.clock = clk
		b.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	const n = authLogBurst + 10
	for range n {
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
			t.Fatal("Initiate with a wrong PSK succeeded")
		}
	}
	if s := p.b.Stats(); s.AuthFailed != n {
		t.Fatalf("AuthFailed %d, want %d", s.AuthFailed, n)
	}
	if got := len(buf.lines("level=WARN", "AUTHENTICATION_FAILED")); got != authLogBurst {
		t.Fatalf("%d WARN lines for %d refusals, want %d", got, n, authLogBurst)
	}
	clk.Advance(time.Second)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
		t.Fatal("Initiate with a wrong PSK succeeded")
	}
	if got := buf.lines("level=WARN", "AUTHENTICATION_FAILED", fmt.Sprintf("suppressed=%d", n-authLogBurst)); len(got) != 1 {
		t.Fatalf("no line saying %d were held back:\n%s", n-authLogBurst, buf.String())
	}
}
