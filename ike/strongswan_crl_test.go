package ike_test

import (
	"context"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestStrongSwanCRL: charon initiates to sluice with a certificate that
// sluice's CRL lists, and sluice refuses it (charon reads
// AUTHENTICATION_FAILED); with a CRL that lists another certificate,
// under revocation strict, the same certificate is accepted. The CRLs
// are made by the test CA (crypto/x509.CreateRevocationList) and given to
// the Endpoint through SetPeers, as a reload would.
func TestStrongSwanCRL(t *testing.T) {
	b := newBed(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", &certAuth{sluiceKey: "p256", charonKey: "p256"}, nil)
	now := time.Now()
	crl := func(revoked ...*x509.Certificate) []*x509.RevocationList {
		der, err := b.creds.issuer.CRL(now.Unix(), now.Add(-time.Minute), now.Add(time.Hour), revoked...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ike.ParseCRLs(der)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	setCRLs := func(crls []*x509.RevocationList, policy ike.Revocation) {
		p := *b.cfg.Peers[0]
		p.CRLs, p.Revocation = crls, policy
		if err := b.ep.SetPeers([]*ike.Peer{&p}); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Revoked: charon's IKE_AUTH request is refused.
	setCRLs(crl(b.creds.charon), ike.RevocationRelaxed)
	out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20")
	if err == nil {
		t.Fatalf("charon established with a revoked certificate:\n%s", out)
	}
	if s := b.ep.Stats(); s.AuthFailed != 1 || s.IKESAEstablished != 0 {
		t.Fatalf("sluice: AuthFailed %d, IKE SAs established %d, want 1 and 0", s.AuthFailed, s.IKESAEstablished)
	}
	err = lab.WaitFor(b.ctx, "charon to log AUTHENTICATION_FAILED", 5*time.Second, 20*time.Millisecond, func() (bool, error) {
		data, err := os.ReadFile(b.c.Log())
		return strings.Contains(string(data), "received AUTHENTICATION_FAILED notify error"), err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// 2. The CRL lists another certificate; strict finds the status of
	// charon's known (not revoked) and lets it pass.
	other, err := b.creds.issuer.Certify(ike.GenKey(t, "p256").Public(), []string{"other@interop.sluice"})
	if err != nil {
		t.Fatal(err)
	}
	setCRLs(crl(other), ike.RevocationStrict)
	if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
		t.Fatalf("charon initiating with a valid certificate: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
	}
	b.waitChild(t, 1, "the Child SA of the valid certificate")
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if out, err := b.c.Swanctl(ctx, "--list-sas"); err != nil || !strings.Contains(out, "ESTABLISHED") {
		t.Fatalf("charon's SAs: %v\n%s", err, out)
	}
	if s := b.ep.Stats(); s.AuthFailed != 1 || s.IKESAEstablished != 1 {
		t.Errorf("sluice: AuthFailed %d, IKE SAs established %d, want 1 and 1", s.AuthFailed, s.IKESAEstablished)
	}
}
