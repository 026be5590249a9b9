package ike

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/ike/eap"
)

// rawEAPAnswers are the EAP clients of TestEAPRefusalLogged, by the name
// of the initiator's peer ("eapraw-..."): each answers the responder's
// EAP Request with the packet it returns.
var rawEAPAnswers sync.Map // string -> func(eap.Packet) []byte

// rawEAPClient is an initiator's EAP task for peers named "eapraw-...":
// it answers each EAP Request of the responder (the real EAP server of
// task_eap.go) with what rawEAPAnswers says.
type rawEAPClient struct {
	answer func(eap.Packet) []byte
	req    []byte // the last Request, to answer in our next round
}

func init() {
	onLocalAuthEAP(func(p *Peer) bool { return strings.HasPrefix(p.Name, "eapraw-") })
	registerTask(IKE_AUTH, orderEAP, func(sa *ikeSA) task {
		if !sa.initiator || !strings.HasPrefix(sa.peer.Name, "eapraw-") {
			return nil
		}
		f, _ := rawEAPAnswers.Load(sa.peer.Name)
		return &rawEAPClient{answer: f.(func(eap.Packet) []byte)}
	})
}

func (t *rawEAPClient) build(x *exchange) taskStatus {
	if t.req != nil {
		p, err := eap.Parse(t.req)
		t.req = nil
		if err == nil {
			x.add(&EAP{Data: t.answer(p)})
		}
	}
	return taskMore
}

func (t *rawEAPClient) process(x *exchange) taskStatus {
	if p, ok := find[*EAP](x.in, nil); ok {
		t.req = append([]byte(nil), p.Data...)
	}
	return taskMore
}

// TestEAPRefusalLogged: each way an EAP session fails at the responder
// (a Nak for a method not configured, a Response of the wrong type or
// identifier, too many rounds, an EAP-TLS message over the size cap, a
// TLS handshake that fails) refuses IKE_AUTH with AUTHENTICATION_FAILED
// and writes exactly one WARN line with the reason and the identity the
// peer gave (issue 28 defect 10).
func TestEAPRefusalLogged(t *testing.T) {
	ca := newTestCA(t)
	key := genKey(t, "p256")
	cert := ca.issue(t, "b.example.net", key.Public())
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	identity := func(p eap.Packet) []byte {
		return eap.Packet{Code: eap.CodeResponse, Identifier: p.Identifier, Type: eap.TypeIdentity, Data: []byte("mallory")}.Marshal()
	}
	// then answers the Identity Request with "mallory" and any other
	// Request with f's.
	then := func(f func(eap.Packet) []byte) func(eap.Packet) []byte {
		return func(p eap.Packet) []byte {
			if p.Type == eap.TypeIdentity {
				return identity(p)
			}
			return f(p)
		}
	}
	resp := func(p eap.Packet, typ eap.Type, data ...byte) []byte {
		return eap.Packet{Code: eap.CodeResponse, Identifier: p.Identifier, Type: typ, Data: data}.Marshal()
	}
	for _, c := range []struct {
		name   string
		method eap.Type
		rounds int
		answer func(eap.Packet) []byte
		want   string // in the error
	}{
		{"nak for a method not configured", eap.TypeMSCHAPv2, 0,
			then(func(p eap.Packet) []byte { return resp(p, eap.TypeNak, byte(eap.TypeMD5)) }), "none configured"},
		{"response of another type", eap.TypeMSCHAPv2, 0,
			then(func(p eap.Packet) []byte { return resp(p, eap.TypeIdentity, 'x') }), "Response of type Identity to a EAP-MSCHAPv2 Request"},
		{"wrong identifier", eap.TypeMSCHAPv2, 0,
			then(func(p eap.Packet) []byte { p.Identifier++; return resp(p, eap.TypeMSCHAPv2, 2) }), "Response identifier"},
		{"too many rounds", eap.TypeMSCHAPv2, 1,
			then(func(p eap.Packet) []byte { return resp(p, eap.TypeMSCHAPv2, 2) }), "more than 1 rounds"},
		{"EAP-TLS message over the cap", eap.TypeTLS, 0,
			then(func(p eap.Packet) []byte { return resp(p, eap.TypeTLS, 0x80|0x40, 0x00, 0x01, 0x00, 0x01, 22) }), "more than 65536"},
		{"EAP-TLS handshake error", eap.TypeTLS, 0,
			then(func(p eap.Packet) []byte { return resp(p, eap.TypeTLS, 0, 22, 3, 3, 0, 1, 0xff) }), "EAP-TLS handshake"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
			pa.Name = "eapraw-" + strings.ReplaceAll(c.name, " ", "-")
			rawEAPAnswers.Store(pa.Name, c.answer)
			t.Cleanup(func() { rawEAPAnswers.Delete(pa.Name) })
			pb.RemoteID = Identity{} // a road warrior's connection
			e := &eap.Config{Methods: []eap.Type{c.method}, MaxRounds: c.rounds}
			switch c.method {
			case eap.TypeMSCHAPv2:
				e.Password = func(id string) ([]byte, bool) { return []byte("pw"), id == "carol" }
			case eap.TypeTLS:
				e.TLS = &tls.Config{ClientCAs: pool, Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}}
			}
			pb.EAP = e
			var buf logBuffer
			p := newPair(t, pa, pb, func(_, b *Config) {
				b.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			if _, err := p.a.Initiate(ctx(t), pa.Name); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
				t.Fatalf("Initiate: %v, want AUTHENTICATION_FAILED", err)
			}
			warns := buf.lines("level=WARN")
			if len(warns) != 1 || len(buf.lines("level=WARN", `msg="ike: EAP failed; AUTHENTICATION_FAILED"`, "eap_id=mallory",
				"remote_id=a@example.net", "method="+c.method.String(), c.want)) != 1 {
				t.Fatalf("WARN lines %q, want one with eap_id=mallory and %q", warns, c.want)
			}
			t.Log(warns[0])
			if s := p.b.Stats(); s.AuthFailed != 1 {
				t.Fatalf("AuthFailed %d", s.AuthFailed)
			}
		})
	}
}
