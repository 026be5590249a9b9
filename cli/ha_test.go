package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ha"
)

func haStatus() *ha.Status {
	return &ha.Status{Name: "a",
		Members: []ha.MemberStatus{{Name: "a", Address: "10.9.1.1:4510", Self: true, Up: true},
			{Name: "b", Address: "10.9.2.1:4510", Up: true, LastHeard: time.Now()}},
		Groups: []ha.GroupStatus{{Name: "site", Role: "owner", Owner: "a", Standby: "b", Epoch: 3, Preference: 200, InSync: true,
			SyncLag: 250 * time.Microsecond, LastFailover: time.Now().Add(-time.Minute), LastGap: 41 * time.Millisecond}},
		Counters: ha.Counters{Takeovers: 2, Handovers: 1}}
}

// TestHAStatus: sluice ha status prints the members, the groups with
// their owner, standby, epoch and the last failover's gap, and the
// counters that are not zero; --json the status itself.
func TestHAStatus(t *testing.T) {
	sock, b := fakeGateway(t)
	b.SetHA(haStatus())
	code, out, errOut := ctlRun("ha", "status", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"MEMBER", "a  ", "self", "b  ", "up", "GROUP", "site", "owner", "yes", "41ms", "takeovers 2", "handovers 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("ha status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "fences") {
		t.Errorf("ha status shows a zero counter:\n%s", out)
	}
	code, out, _ = ctlRun("ha", "status", "--json", "--socket", sock)
	if code != 0 || !strings.Contains(out, `"role":"owner"`) && !strings.Contains(out, `"role": "owner"`) {
		t.Errorf("ha status --json: exit %d:\n%s", code, out)
	}
}

// TestHAHandoverCommand: sluice ha handover asks the gateway to hand its
// groups over and prints the status after; a gateway without [ha], or a
// group this member does not own, is an error.
func TestHAHandoverCommand(t *testing.T) {
	sock, b := fakeGateway(t)
	code, _, errOut := ctlRun("ha", "status", "--socket", sock)
	if code == 0 || !strings.Contains(errOut, "no [ha] section") {
		t.Errorf("ha status of a gateway without [ha]: exit %d: %s", code, errOut)
	}
	b.SetHA(haStatus())
	code, _, errOut = ctlRun("ha", "handover", "elsewhere", "--socket", sock)
	if code == 0 || !strings.Contains(errOut, "owns no such group") {
		t.Errorf("handover of a group not owned: exit %d: %s", code, errOut)
	}
	code, out, errOut := ctlRun("ha", "handover", "site", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "group site handed over") || !strings.Contains(out, "standby") {
		t.Errorf("ha handover:\n%s", out)
	}
	if st, _ := b.HAStatus(); st.Groups[0].Owner != "b" {
		t.Errorf("after the handover the backend's owner is %q", st.Groups[0].Owner)
	}
}
