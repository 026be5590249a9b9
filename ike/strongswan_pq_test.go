package ike_test

// Post-quantum additional key exchanges (RFC 9370) against strongSwan
// 5.9.8, which has neither ML-KEM nor RFC 9370 (both came with strongSwan
// 6): sluice configured with "x25519-ke1_mlkem768" first and plain
// "x25519" second must fall back to the second with it in both roles,
// exactly as before. sluice to sluice with ML-KEM is in
// intermediate_e2e_test.go.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

func TestStrongSwanAddKEFallback(t *testing.T) {
	const ssProps = "aes256gcm16-prfsha384-x25519,aes128-sha256-modp2048"
	const slProps = "aes256gcm16-prfsha384-x25519-ke1_mlkem768,aes256gcm16-prfsha384-x25519"
	for _, role := range []string{"initiator", "responder"} {
		t.Run("sluice-"+role, func(t *testing.T) {
			lab.RequireCharon(t)
			b := newBed(t, ssProps, "aes128gcm16", nil, func(p *ike.Peer, _ *ike.Config) {
				ps, err := ike.ParseProposals(ike.ProtoIKE, slProps)
				if err != nil {
					t.Fatal(err)
				}
				p.IKE = ps
			})
			var child *ike.ChildSA
			if role == "initiator" {
				ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
				var err error
				child, err = b.ep.Initiate(ctx, "strongswan")
				cancel()
				if err != nil {
					t.Fatalf("sluice initiating: %v (stats %+v)", err, b.ep.Stats())
				}
			} else {
				if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
					t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
				}
				child = b.waitChild(t, 1, "sluice's Child SA")
			}
			sa := b.oneIKESA(t)
			if sa.Suite != "aes256gcm16-prfsha384-x25519" {
				t.Errorf("IKE suite %q, want the proposal without ke1_mlkem768", sa.Suite)
			}
			checkKeys(t, child, charonChild(t, b.ctx, b.c.Log(), child), role == "initiator", "aes128gcm16")
			s := b.ep.Stats()
			if s.NoProposalChosen != 0 || s.RxMalformed+s.RxIntegrityFailed != 0 {
				t.Errorf("stats %+v", s)
			}
			t.Logf("%s: IKE %s with strongSwan 5.9.8 (sluice's proposals %s)", role, sa.Suite, slProps)
			if data, err := os.ReadFile(b.c.Log()); err == nil {
				for _, l := range strings.Split(string(data), "\n") {
					if strings.Contains(l, "received proposals") || strings.Contains(l, "selected proposal") {
						t.Logf("charon: %s", strings.TrimSpace(l[strings.Index(l, "]")+1:]))
					}
				}
			}
		})
	}
}
