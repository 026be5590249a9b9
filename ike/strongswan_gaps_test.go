package ike_test

// Issue 20 item 5 against strongSwan 5.9.8's charon (the beds of
// strongswan_test.go): deleting one Child SA of two (RFC 7296 section
// 1.4.1) and reauthentication (section 2.8.3) with charon as responder.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// twoChildBed is a bed whose connection has two children, "net" (the
// IKE_AUTH one) and "net2" (10.1.1.0/24 === 10.2.1.0/24), with tweak
// applied to sluice's peer too, and extra variables for charon's
// templates.
func twoChildBed(t *testing.T, tweak func(*ike.Peer, *ike.Config), extra map[string]string) *bed {
	t.Helper()
	ss2, sl2 := netip.MustParsePrefix("10.1.1.0/24"), netip.MustParsePrefix("10.2.1.0/24")
	vars := map[string]string{"LocalTS2": ss2.String(), "RemoteTS2": sl2.String()}
	for k, v := range extra {
		vars[k] = v
	}
	b := newBedVars(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, func(p *ike.Peer, c *ike.Config) {
		p.ChildName = "net"
		p.Children = []ike.Child{{Name: "net2", LocalTS: []netip.Prefix{sl2}, RemoteTS: []netip.Prefix{ss2}}}
		if tweak != nil {
			tweak(p, c)
		}
	}, vars)
	if err := b.c.Netns().AddAddr("lo", netip.PrefixFrom(ss2.Addr().Next(), 32)); err != nil {
		t.Fatal(err)
	}
	return b
}

// charonSAs waits until swanctl --list-sas satisfies ok.
func (b *bed) charonSAs(t *testing.T, what string, ok func(out string) bool) string {
	t.Helper()
	var last string
	err := lab.WaitFor(b.ctx, what, 15*time.Second, 50*time.Millisecond, func() (bool, error) {
		out, err := b.c.Swanctl(b.ctx, "--list-sas")
		last = out
		return err == nil && ok(out), err
	})
	if err != nil {
		t.Fatalf("%v\n%s\n(sluice stats %+v)", err, last, b.ep.Stats())
	}
	return last
}

// TestStrongSwanDeleteChild: of a connection's two Child SAs, one is
// deleted alone with an INFORMATIONAL (section 1.4.1), by sluice
// (Endpoint.DeleteChild) and by charon (swanctl --terminate --child):
// the other stays installed on both sides on the same IKE SA and still
// rekeys with keys matching charon's.
func TestStrongSwanDeleteChild(t *testing.T) {
	for _, by := range []string{"sluice", "charon"} {
		t.Run("by-"+by, func(t *testing.T) {
			lab.RequireCharon(t)
			b := twoChildBed(t, nil, nil)
			first, err := b.ep.Initiate(b.ctx, "strongswan")
			if err != nil {
				t.Fatal(err)
			}
			second, err := b.ep.InitiateChild(b.ctx, "strongswan", "net2")
			if err != nil {
				t.Fatal(err)
			}
			before := b.oneIKESA(t)
			b.charonSAs(t, "charon to list both children", func(out string) bool {
				return strings.Contains(out, "net: #") && strings.Contains(out, "net2: #")
			})
			if by == "sluice" {
				dctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
				err = b.ep.DeleteChild(dctx, second)
				cancel()
				if err != nil {
					t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
				}
			} else if out, err := b.c.Swanctl(b.ctx, "--terminate", "--child", "net2", "--timeout", "20"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			err = lab.WaitFor(b.ctx, "sluice to report net2 deleted", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
				_, del := b.counts()
				return del >= 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			b.mu.Lock()
			deleted := append([]*ike.ChildSA(nil), b.deleted...)
			b.mu.Unlock()
			if len(deleted) != 1 || deleted[0] != second {
				t.Fatalf("sluice deleted %v, want net2's Child SA alone", deleted)
			}
			out := b.charonSAs(t, "charon to keep net and drop net2", func(out string) bool {
				return strings.Contains(out, "net: #") && !strings.Contains(out, "net2: #") &&
					strings.Count(out, "INSTALLED, TUNNEL") == 1 && strings.Count(out, "interop: #") == 1
			})
			if !strings.Contains(out, fmt.Sprintf("%08x", first.InSPI)) || !strings.Contains(out, fmt.Sprintf("%016x", before.SPIi)) {
				t.Fatalf("charon's SAs are not sluice's IKE SA and net:\n%s", out)
			}
			after := b.oneIKESA(t)
			if after.SPIi != before.SPIi || len(after.Children) != 1 || after.Children[0] != first {
				t.Fatalf("sluice's IKE SA after the delete %+v", after)
			}
			// net still carries keys: it rekeys with charon.
			fresh, err := b.ep.Rekey(b.ctx, first)
			if err != nil {
				t.Fatal(err)
			}
			checkKeys(t, fresh, charonChild(t, b.ctx, b.c.Log(), fresh), true, "aes128gcm16")
			s := b.ep.Stats()
			t.Logf("sluice stats: %+v", s)
			if s.Deleted != 0 || s.IKESAEstablished != 1 || s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestStrongSwanReauth: sluice, initiator of an IKE SA with two Child
// SAs with charon, reauthenticates at its ReauthTime (section 2.8.3):
// a new IKE SA with IKE_SA_INIT and IKE_AUTH, net2 again with
// CREATE_CHILD_SA, then the old IKE SA deleted. charon ends with the new
// IKE SA alone, both children installed on it with keys matching
// sluice's; sluice reported each child again before its old Child SA
// went.
func TestStrongSwanReauth(t *testing.T) {
	lab.RequireCharon(t)
	b := twoChildBed(t, func(p *ike.Peer, _ *ike.Config) { p.ReauthTime = 3 * time.Second }, nil)
	if _, err := b.ep.Initiate(b.ctx, "strongswan"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ep.InitiateChild(b.ctx, "strongswan", "net2"); err != nil {
		t.Fatal(err)
	}
	before := b.oneIKESA(t)
	start := time.Now()
	err := lab.WaitFor(b.ctx, "sluice to reauthenticate", 20*time.Second, 10*time.Millisecond, func() (bool, error) {
		s := b.ep.Stats()
		l := b.ep.IKESAs()
		return s.IKESAEstablished == 2 && s.Deleted == 1 && len(l) == 1 && len(l[0].Children) == 2, nil
	})
	if err != nil {
		t.Fatalf("%v (stats %+v, IKE SAs %+v)", err, b.ep.Stats(), b.ep.IKESAs())
	}
	t.Logf("reauthenticated %v after the IKE SA was up", time.Since(start).Round(time.Millisecond))
	after := b.oneIKESA(t)
	if after.SPIi == before.SPIi || after.SPIr == before.SPIr {
		t.Fatalf("IKE SPIs unchanged: %016x/%016x", after.SPIi, after.SPIr)
	}
	b.charonHasIKESA(t, after)
	out := b.charonSAs(t, "charon to list net and net2 on the new IKE SA", func(out string) bool {
		return strings.Contains(out, "net: #") && strings.Contains(out, "net2: #") && strings.Count(out, "INSTALLED, TUNNEL") == 2
	})
	for _, c := range after.Children {
		if !strings.Contains(out, fmt.Sprintf("%08x", c.InSPI)) {
			t.Fatalf("charon does not list sluice's %s Child SA %08x:\n%s", c.Child, c.InSPI, out)
		}
		checkKeys(t, c, charonChild(t, b.ctx, b.c.Log(), c), true, "aes128gcm16")
	}
	b.mu.Lock()
	est, del := b.established, b.deleted
	if len(est) != 4 || len(del) != 2 || del[0] != est[0] || del[1] != est[1] || est[2].Child != "" && est[2].Child != "net" || est[3].Child != "net2" {
		t.Errorf("established %v, deleted %v: want net, net2, then net, net2 again, then the first two deleted", est, del)
	}
	b.mu.Unlock()
	// The first IKE_AUTH carries INITIAL_CONTACT, the reauthentication's
	// does not (charon would drop the old IKE SA at once).
	data, err := os.ReadFile(b.c.Log())
	if err != nil {
		t.Fatal(err)
	}
	auths, contacts := 0, 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "parsed IKE_AUTH request") {
			auths++
			if strings.Contains(l, "N(INIT_CONTACT)") {
				contacts++
			}
		}
	}
	if auths != 2 || contacts != 1 {
		t.Errorf("charon parsed %d IKE_AUTH requests, %d with INITIAL_CONTACT; want 2 and 1", auths, contacts)
	}
	s := b.ep.Stats()
	t.Logf("sluice stats: %+v", s)
	if s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow+s.AuthFailed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestStrongSwanReauthByCharon: charon, initiator of an IKE SA with two
// Child SAs with sluice, reauthenticates at its reauth_time with
// make_before_break = yes: sluice, the responder, answers the new
// IKE_SA_INIT and IKE_AUTH and the CREATE_CHILD_SA for net2 while it keeps
// the old IKE SA, then the old IKE SA's Delete; it ends with the new IKE
// SA alone, both children on it with keys matching charon's, each child
// reported again before its old Child SA went.
func TestStrongSwanReauthByCharon(t *testing.T) {
	lab.RequireCharon(t)
	b := twoChildBed(t, nil, map[string]string{"ReauthTime": "4s", "MakeBeforeBreak": "yes"})
	for _, child := range []string{"net", "net2"} {
		if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", child, "--timeout", "20"); err != nil {
			t.Fatalf("charon initiating %s: %v\n%s (sluice stats %+v)", child, err, out, b.ep.Stats())
		}
	}
	b.waitChild(t, 2, "sluice to report net and net2")
	before := b.oneIKESA(t)
	err := lab.WaitFor(b.ctx, "charon to reauthenticate", 20*time.Second, 10*time.Millisecond, func() (bool, error) {
		s := b.ep.Stats()
		l := b.ep.IKESAs()
		return s.IKESAEstablished == 2 && s.Deleted == 1 && len(l) == 1 && len(l[0].Children) == 2, nil
	})
	if err != nil {
		t.Fatalf("%v (stats %+v, IKE SAs %+v)", err, b.ep.Stats(), b.ep.IKESAs())
	}
	after := b.oneIKESA(t)
	if after.SPIi == before.SPIi || after.Initiator {
		t.Fatalf("IKE SA after charon's reauthentication %+v (before %016x)", after, before.SPIi)
	}
	b.charonHasIKESA(t, after)
	for _, c := range after.Children {
		checkKeys(t, c, charonChild(t, b.ctx, b.c.Log(), c), false, "aes128gcm16")
	}
	b.mu.Lock()
	est, del := b.established, b.deleted
	if len(est) != 4 || len(del) != 2 || !((del[0] == est[0] && del[1] == est[1]) || (del[0] == est[1] && del[1] == est[0])) {
		t.Errorf("established %v, deleted %v: want net, net2, then both again, then the first two deleted", est, del)
	}
	b.mu.Unlock()
	s := b.ep.Stats()
	t.Logf("sluice stats: %+v", s)
	if s.InitialContacts != 0 || s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow+s.AuthFailed != 0 {
		t.Errorf("stats %+v", s)
	}
}
