package ike_test

// strongSwan 5.9.8 as each native client: charon initiates with the
// proposals a native client sends (in strongSwan's keywords, those that
// it has), sluice answers with the defaults of package config (and, where
// the operator would write them, weak proposals), and the Child SA's keys
// must be charon's. native_test.go offers the same suites transform for
// transform in memory; this checks the algorithms against another
// implementation, the weak ones (HMAC-SHA-1, PRF-HMAC-SHA-1, MODP 1024)
// included, and Android's KE of a group sluice does not have (MODP 4096,
// answered with INVALID_KE_PAYLOAD).

import (
	"testing"

	"github.com/sluicegw/sluice/config"
)

func TestStrongSwanNativeSuites(t *testing.T) {
	android := "aes256-aes192-aes128-sha512-sha384-sha256-prfsha512-prfsha384-prfsha256-prfsha1-modp4096-curve25519-modp3072-modp2048," +
		"chacha20poly1305-aes256gcm16-aes256gcm12-aes256gcm8-aes192gcm16-aes128gcm16-aes128gcm12-aes128gcm8-prfsha512-prfsha384-prfsha256-prfsha1-modp4096-curve25519-modp3072-modp2048"
	for _, c := range []struct {
		name                 string
		charonIKE, charonESP string
		sluiceIKE            string // "" for the defaults
		wantIKE, wantESP     string
		invalidKE            uint64 // INVALID_KE_PAYLOAD answers sluice sends
	}{
		{"apple", "aes256-sha256-modp2048,aes256-sha256-ecp256,aes256-sha256-modp1536,aes128-sha1-modp1024,3des-sha1-modp1024",
			"aes256-sha256,aes128-sha1,3des-sha1", "", "aes256-sha256-prfsha256-modp2048", "aes256-sha256", 0},
		{"android", android, "aes256-aes192-aes128-sha512-sha384-sha256,aes256gcm16-aes256gcm12-aes192gcm16-aes128gcm16-aes128gcm8",
			"", "aes256gcm16-prfsha384-x25519", "aes256gcm16", 1},
		{"windows-set", "aes256-sha256-modp2048", "aes256gcm16", "", "aes256-sha256-prfsha256-modp2048", "aes256gcm16", 0},
		{"ios9-modp1024-written", "aes256-sha256-modp1024,3des-sha1-modp1024", "aes256-sha256",
			config.DefaultIKEProposals + ",aes256-sha256-modp1024", "aes256-sha256-prfsha256-modp1024", "aes256-sha256", 0},
		{"sha1-written", "aes256-sha1-modp1024", "aes256-sha256", "aes256-sha1-modp1024", "aes256-sha1-prfsha1-modp1024", "aes256-sha256", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ikeP := c.sluiceIKE
			if ikeP == "" {
				ikeP = config.DefaultIKEProposals
			}
			b := newBedVars(t, ikeP, config.DefaultESPProposals, nil, nil, map[string]string{"IKE": c.charonIKE, "ESP": c.charonESP})
			if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
				t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
			}
			child := b.waitChild(t, 1, "the Child SA")
			k := charonChild(t, b.ctx, b.c.Log(), child)
			checkKeys(t, child, k, false, c.wantESP)
			sas := b.ep.IKESAs()
			if len(sas) != 1 || sas[0].Suite != c.wantIKE {
				t.Errorf("IKE SAs %+v, want one of %s", sas, c.wantIKE)
			}
			if n := b.ep.Stats().InvalidKE; n != c.invalidKE {
				t.Errorf("%d INVALID_KE_PAYLOAD, want %d", n, c.invalidKE)
			}
			t.Logf("%s: charon's Child SA %s, sluice's IKE SA %s", c.name, k.proposal, sas[0].Suite)
		})
	}
}
