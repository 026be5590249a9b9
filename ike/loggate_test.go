package ike

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestNoProposalWarnBounded: a stranger's IKE_SA_INIT flood with
// proposals the responder refuses writes ten WARN lines, then one a
// second with how many it held back; each line names what was offered.
func TestNoProposalWarnBounded(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes256-sha384-x25519", "aes128gcm16")
	fc := newFakeClock()
	var buf logBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newPair(t, pa, pb, func(a, b *Config) { a.clock, b.clock, b.Log = fc, fc, log })
	for range 30 {
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
			t.Fatal("negotiated")
		}
	}
	if n := len(buf.lines("no IKE proposal chosen", "offered=aes128-sha256-prfsha256-x25519")); n != 10 {
		t.Fatalf("%d WARN lines for 30 refusals, want 10\n%s", n, buf.String())
	}
	fc.Advance(time.Second)
	if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
		t.Fatal("negotiated")
	}
	if n := len(buf.lines("no IKE proposal chosen", "suppressed=20")); n != 1 {
		t.Fatalf("no line saying 20 were held back\n%s", buf.String())
	}
	if got := p.b.Stats().NoProposalChosen; got != 31 {
		t.Errorf("NoProposalChosen %d, want 31: every refusal counted", got)
	}
}

// TestRekeyRefusalsLog: a CREATE_CHILD_SA whose proposals the responder
// refuses is a WARN naming the offer and ours, as IKE_AUTH's is.
func TestRekeyRefusalsLog(t *testing.T) {
	pa, pb := childPeers(t)
	pa.Children[0].ESP = mustProps(t, ProtoESP, "chacha20poly1305")
	var buf logBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newPair(t, pa, pb, func(a, b *Config) { b.Log = log })
	if _, err := p.a.InitiateChild(ctx(t), "to-b", "second"); err == nil {
		t.Fatal("negotiated")
	}
	waitFor(t, func() bool { return len(buf.lines("level=WARN", "CREATE_CHILD_SA")) > 0 })
	if len(buf.lines("level=WARN", "no ESP proposal chosen for the peer's CREATE_CHILD_SA", "offered=chacha20poly1305-noesn", "ours=aes128gcm16-noesn")) != 1 {
		t.Errorf("no WARN with the offer and ours\n%s", buf.String())
	}
}

// TestProposalsAttrBounded: an SA payload of thousands of transforms is
// named up to a bound, the rest counted.
func TestProposalsAttrBounded(t *testing.T) {
	var ts []Transform
	for i := range 1000 {
		ts = append(ts, Transform{Type: TransformEncr, ID: uint16(1000 + i)})
	}
	ps := []Proposal{{Num: 1, Protocol: ProtoIKE, Transforms: ts[:200]}, {Num: 2, Protocol: ProtoIKE, Transforms: ts[200:]}}
	s := proposalsAttr(ps).LogValue().String()
	if strings.Count(s, "encr#") != maxLoggedTransforms || !strings.HasSuffix(s, ",...(744 more transforms)") {
		t.Errorf("%d named, ends %q", strings.Count(s, "encr#"), s[len(s)-40:])
	}
}
