package config

import (
	"strings"
	"testing"
)

// childKey adds a line to the child of ikeConn (at line 15).
func childKey(line string) string {
	return strings.Replace(ikeConn(""), `name = "b-net"`, "name = \"b-net\"\n  "+line, 1)
}

// TestIKEHostileValues: timing values that would make the gateway spin
// (1 ns) or overflow, limits of 0, and malformed distinguished names are
// refused at their file, line and field (issue 16, defects 6, 7, 8, 14).
func TestIKEHostileValues(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		{"dpd_delay 1ns", ikeConn(`dpd_delay = "1ns"`) + ikeSecret, []wantErr{{5, "connection[1].dpd_delay", "below 1s"}}},
		{"dpd_delay huge", ikeConn(`dpd_delay = "1000h"`) + ikeSecret, []wantErr{{5, "connection[1].dpd_delay", "above 24h"}}},
		{"ike rekey_time 1ns", ikeConn(`rekey_time = "1ns"`) + ikeSecret, []wantErr{{5, "connection[1].rekey_time", "below 1s"}}},
		{"ike rekey_time huge", ikeConn(`rekey_time = "2000000h"`) + ikeSecret, []wantErr{{5, "connection[1].rekey_time", "above 8760h"}}},
		{"ike over_time 1ns", ikeConn(`over_time = "1ns"`) + ikeSecret, []wantErr{{5, "connection[1].over_time", "below 1s"}}},
		{"child rekey_time 1ns", childKey(`rekey_time = "1ns"`) + ikeSecret, []wantErr{{14, "connection[1].children[1].rekey_time", "below 1s"}}},
		{"child life_time 1ns", childKey(`life_time = "1ns"`) + ikeSecret, []wantErr{{14, "connection[1].children[1].life_time", "below 1s"}}},
		{"child rekey_time huge", childKey(`rekey_time = "2562047h"`) + ikeSecret, []wantErr{{14, "connection[1].children[1].rekey_time", "above 8760h"}}},
		{"retransmit_timeout 1ns", "[ike]\nretransmit_timeout = \"1ns\"\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.retransmit_timeout", "below 100ms"}}},
		{"retransmit_timeout huge", "[ike]\nretransmit_timeout = \"1h\"\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.retransmit_timeout", "above 1m0s"}}},
		{"max_child_sas 0", "[ike]\nmax_child_sas = 0\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.max_child_sas", "out of range"}}},
		{"block_threshold 0", "[ike]\nblock_threshold = 0\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.block_threshold", "out of range"}}},
		{"more children than max_child_sas", "[ike]\nmax_child_sas = 1\n" + strings.Replace(ikeConn(""), "  [[connection.children]]",
			"  [[connection.children]]\n  name = \"b-2\"\n  local_ts = [\"10.1.1.0/24\"]\n  remote_ts = [\"10.2.1.0/24\"]\n  [[connection.children]]", 1) + ikeSecret,
			[]wantErr{{14, "connection[1].children", "2 children, but one IKE SA carries at most 1 Child SAs (ike.max_child_sas: ike.max_child_sas, line 2)"}}},
		{"dn id", strings.Replace(ikeConn(""), `id = "b.example"`, `id = "CN=b.example, XYZ=1"`, 1) + ikeSecret,
			[]wantErr{{11, "connection[1].remote.id", `unknown attribute type "XYZ"`}}},
		{"dn id empty value", strings.Replace(ikeConn(""), `id = "a.example"`, `id = "C=CH, CN="`, 1) + ikeSecret,
			[]wantErr{{8, "connection[1].local.id", "empty value"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, parseGWErrors(t, tt.doc), tt.want)
		})
	}
}

// TestIKEBadHexPSKHidden: a pre-shared key that is not valid hex is
// refused without showing any of its characters (issue 16, defect 16).
func TestIKEBadHexPSKHidden(t *testing.T) {
	for _, secret := range []string{"0x00112233445566778899aabbccddeeZq", "0x00112233445566778899aabbccddeef", "0sAAAA*AAAAAAAAAAAAAAAAAAAAAA=="} {
		errs := parseGWErrors(t, ikeConn("")+strings.Replace(ikeSecret, "0x00112233445566778899aabbccddeeff", secret, 1))
		var msg string
		for _, e := range errs {
			if e.Field == "secret[1].secret" {
				msg = e.Msg
			}
		}
		if msg == "" {
			t.Fatalf("%s: no error at secret[1].secret: %v", secret, errs)
		}
		for _, leak := range []string{"Z", "q", "'", "U+", "*", "byte"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: the error %q shows %q of the secret", secret, msg, leak)
			}
		}
	}
}
