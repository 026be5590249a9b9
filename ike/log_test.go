package ike

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logBuffer collects log lines from both endpoints of a pair.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the lines holding every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all && line != "" {
			out = append(out, line)
		}
	}
	return out
}

// debugPair is newPair with both endpoints logging at level into one
// buffer, each line saying its side.
func debugPair(t *testing.T, pa, pb *Peer, level slog.Level) (*pair, *logBuffer) {
	var buf logBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
	p := newPair(t, pa, pb, func(a, b *Config) {
		a.Log, b.Log = log.With("side", "a"), log.With("side", "b")
	})
	return p, &buf
}

// TestDebugTellsTheNegotiation: at debug, the log tells an IKE
// negotiation's story as charon's `ike 2` does: each message with its
// exchange and payloads, the proposals chosen, NAT detection, the
// identities and authentication methods, the traffic selectors proposed
// and narrowed, and the Child SA's SPIs, spelled one way; and no key.
func TestDebugTellsTheNegotiation(t *testing.T) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	p, log := debugPair(t, pa, pb, slog.LevelDebug)
	ca, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	cb := p.respChild(t)
	var keys [][]byte
	p.a.mu.Lock()
	for _, sa := range p.a.sas {
		k := sa.keys
		keys = append(keys, k.D, k.Ai, k.Ar, k.Ei, k.Er, k.Pi, k.Pr)
	}
	p.a.mu.Unlock()
	keys = append(keys, ca.InKey, ca.OutKey, cb.InKey, cb.OutKey, pa.PSK)
	spis := fmt.Sprintf("spi_i=0x%016x spi_r=0x%016x", ca.IKESPIi, ca.IKESPIr)
	for _, want := range [][]string{
		{"side=a", `msg="ike: initiating"`, "proposals=aes128-sha256-prfsha256-x25519", "dh=x25519"},
		{"side=a", `msg="ike: sending"`, "exchange=IKE_SA_INIT", "msgid=0", "response=false", `payloads="SA KE Nonce N(NAT_DETECTION_SOURCE_IP) N(NAT_DETECTION_DESTINATION_IP)`},
		{"side=b", `msg="ike: received"`, "exchange=IKE_SA_INIT", "remote=192.0.2.1:500"},
		{"side=b", `msg="ike: IKE proposal chosen"`, "suite=aes128-sha256-prfsha256-x25519"},
		{"side=b", `msg="ike: NAT detection"`, "local_behind_nat=false", "remote_behind_nat=false", "encap=false"},
		{"side=b", `msg="ike: sending"`, "exchange=IKE_SA_INIT", "response=true"},
		{"side=a", `msg="ike: IKE proposal chosen"`, fmt.Sprintf("spi_i=0x%016x", ca.IKESPIi), "suite=aes128-sha256-prfsha256-x25519"},
		{"side=a", `msg="ike: NAT detection"`},
		{"side=a", `msg="ike: authenticating"`, "local_id=a@example.net", "remote_id=b.example.net", `auth="pre-shared key"`, "ts_local=10.1.0.0/16", "ts_remote=10.2.0.0/16", fmt.Sprintf("child_spi=0x%08x", ca.InSPI)},
		{"side=a", `msg="ike: sending"`, "exchange=IKE_AUTH", "msgid=1", `payloads="IDi IDr AUTH N(INITIAL_CONTACT) N(MOBIKE_SUPPORTED) SA TSi TSr"`},
		{"side=b", `msg="ike: received"`, "exchange=IKE_AUTH", spis},
		{"side=b", `msg="ike: peer authenticated"`, "remote_id=a@example.net", `auth="pre-shared key"`},
		{"side=b", `msg="ike: ESP proposal chosen"`, "suite=aes128gcm16", "ts_i_proposed=10.1.0.0/16", "ts_i=10.1.0.0/24", "ts_r=10.2.0.0/16"},
		{"side=b", `msg="ike: Child SA established"`, fmt.Sprintf("in_spi=0x%08x out_spi=0x%08x", cb.InSPI, cb.OutSPI), "suite=aes128gcm16", "ts_remote=10.1.0.0/24"},
		{"side=a", `msg="ike: received"`, "exchange=IKE_AUTH", "response=true", `payloads="IDr AUTH N(MOBIKE_SUPPORTED) SA TSi TSr"`},
		{"side=a", `msg="ike: peer authenticated"`, "remote_id=b.example.net"},
		{"side=a", `msg="ike: Child SA established"`, fmt.Sprintf("in_spi=0x%08x out_spi=0x%08x", ca.InSPI, ca.OutSPI)},
	} {
		if len(log.lines(want...)) == 0 {
			t.Errorf("no line with %q", want)
		}
	}
	if err := p.a.Delete(ctx(t), ca); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(log.lines("side=b", `msg="ike: peer deleted the IKE SA"`)) == 1 })
	if len(log.lines("side=a", `msg="ike: sending"`, "exchange=INFORMATIONAL", "payloads=D(IKE)")) == 0 {
		t.Error("no line for the Delete sent")
	}
	out := log.String()
	for _, k := range keys {
		if len(k) < 4 {
			continue
		}
		if strings.Contains(out, hex.EncodeToString(k)) || strings.Contains(out, string(k)) {
			t.Errorf("key material %x in the log", k)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// TestFailuresLogAtWarn: a refused negotiation is a WARN on both sides,
// with the reason.
func TestFailuresLogAtWarn(t *testing.T) {
	for _, c := range []struct {
		name       string
		tweak      func(pa, pb *Peer)
		ikeB, espB string
		a, b       []string
	}{
		{"psk", func(pa, pb *Peer) { pb.PSK = []byte("other") }, "aes128-sha256-x25519", "aes128gcm16",
			[]string{"negotiation failed", "AUTHENTICATION_FAILED"}, []string{"AUTH does not verify", "remote_id=a@example.net"}},
		{"ike-proposal", nil, "aes256-sha384-x25519", "aes128gcm16",
			[]string{"negotiation failed", "NO_PROPOSAL_CHOSEN"}, []string{"no IKE proposal chosen", "offered=aes128-sha256-prfsha256-x25519", "ours=aes256-sha384-prfsha384-x25519"}},
		{"esp-proposal", nil, "aes128-sha256-x25519", "aes256gcm16",
			[]string{"negotiation failed", "NO_PROPOSAL_CHOSEN"}, []string{"no ESP proposal chosen", "offered=aes128gcm16-noesn"}},
		{"ts", func(pa, pb *Peer) { pb.RemoteTS = pb.LocalTS }, "aes128-sha256-x25519", "aes128gcm16",
			[]string{"negotiation failed", "TS_UNACCEPTABLE"}, []string{"traffic selectors unacceptable", "ts_i=10.1.0.0/16"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", c.ikeB, c.espB)
			if c.tweak != nil {
				c.tweak(pa, pb)
			}
			p, log := debugPair(t, pa, pb, slog.LevelInfo)
			if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil {
				t.Fatal("negotiated")
			}
			waitFor(t, func() bool { return len(log.lines("side=b", "level=WARN")) > 0 })
			if len(log.lines(append([]string{"side=a", "level=WARN"}, c.a...)...)) != 1 {
				t.Errorf("initiator: no WARN with %q", c.a)
			}
			if len(log.lines(append([]string{"side=b", "level=WARN"}, c.b...)...)) != 1 {
				t.Errorf("responder: no WARN with %q", c.b)
			}
			if n := len(log.lines("level=INFO", "fail")); n != 0 {
				t.Errorf("%d failures at INFO", n)
			}
			if t.Failed() {
				t.Log(log.String())
			}
		})
	}
}
