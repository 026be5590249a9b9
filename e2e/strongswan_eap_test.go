package e2e_test

import (
	"os"
	"strings"
	"testing"
)

// TestStrongSwanEAP: strongSwan 5.9.8 as a road warrior authenticating
// with EAP to a sluice gateway ([connection.remote] auth = "eap-mschapv2"
// with a [[secret]] type = "eap", or auth = "eap-tls" with cacerts),
// sluice with its certificate; the Child SA comes up and ping and TCP go
// through it both ways. A wrong password is refused and the gateway goes
// on serving.
func TestStrongSwanEAP(t *testing.T) {
	for _, tc := range []struct {
		name, eap, eapID, password string
		wrong                      bool
	}{
		{name: "eap-mschapv2", eap: "eap-mschapv2", eapID: "carol", password: "carol's pw"},
		{name: "eap-mschapv2-wrong-password", eap: "eap-mschapv2", eapID: "carol", password: "not it", wrong: true},
		{name: "eap-tls", eap: "eap-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCharon(t)
			b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "pubkey", eap: tc.eap, eapID: tc.eapID,
				eapPassword: tc.password, gwPassword: "carol's pw"})
			if tc.wrong {
				out, err := b.ch.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20")
				if err == nil {
					t.Fatalf("strongSwan initiated with a wrong password:\n%s", out)
				}
				data, _ := os.ReadFile(b.ch.Log())
				if !strings.Contains(string(data), "received AUTHENTICATION_FAILED notify error") {
					t.Fatalf("charon did not log AUTHENTICATION_FAILED:\n%s", out)
				}
				// The gateway still answers its control socket and has no
				// Child SA.
				for _, c := range b.gw.ike().Connections {
					if len(c.Children) > 0 && c.Children[0].State == "installed" {
						t.Fatalf("a Child SA after a wrong password: %+v", c)
					}
				}
				return
			}
			ch := b.establish()
			b.traffic(tc.eap, true)
			b.checkCharonSPIs(ch)
			data, _ := os.ReadFile(b.ch.Log())
			if !strings.Contains(string(data), "authentication of '"+ssIDs[1]+"' with EAP successful") {
				t.Errorf("charon did not log sluice's EAP (MSK) AUTH as successful")
			}
		})
	}
}
