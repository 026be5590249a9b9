package ike

import (
	"fmt"
	"testing"
)

// TestManyChildren: one IKE SA carries 20 Child SAs with the default
// configuration, as strongSwan's does; a limit of 8 refused the ninth
// with NO_ADDITIONAL_SAS (issue 16, defect 7).
func TestManyChildren(t *testing.T) {
	const n = 20
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	pa.ChildName, pb.ChildName = "net", "net"
	for i := 1; i < n; i++ {
		a, b := fmt.Sprintf("10.%d.1.0/24", 100+i), fmt.Sprintf("10.%d.2.0/24", 100+i)
		name := fmt.Sprintf("c%d", i)
		pa.Children = append(pa.Children, Child{Name: name, LocalTS: prefixes(a), RemoteTS: prefixes(b)})
		pb.Children = append(pb.Children, Child{Name: name, LocalTS: prefixes(b), RemoteTS: prefixes(a)})
	}
	p := newPair(t, pa, pb, nil)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if _, err := p.a.InitiateChild(ctx(t), "to-b", fmt.Sprintf("c%d", i)); err != nil {
			t.Fatalf("child %d of %d: %v", i+1, n, err)
		}
	}
	waitFor(t, func() bool { return len(childSPIs(p.b)) == n })
	if l := p.a.IKESAs(); len(l) != 1 || len(l[0].Children) != n {
		t.Fatalf("a's IKE SAs %+v", l)
	}
	if s := p.b.Stats(); s.ChildSALimit != 0 || s.ChildSAAdded != n-1 {
		t.Fatalf("b's stats %+v", s)
	}
}
