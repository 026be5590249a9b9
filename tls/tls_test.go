package tls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStaticGoClient(t *testing.T) {
	for _, eng := range testEngines {
		for _, kt := range keyTypes {
			t.Run(eng+"/"+kt, func(t *testing.T) {
				dir := t.TempDir()
				www := filepath.Join(dir, "www")
				os.Mkdir(www, 0o755)
				os.WriteFile(filepath.Join(www, "index.html"), []byte("hello\n"), 0o644)
				ca := newCA(t, dir, "root")
				cert := ca.issue(t, dir, "site", kt, false, "site.test")
				s := startService(t, Config{Listeners: []ListenerConfig{{
					Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Engine: eng,
					Backend: "static:" + www, SessionTickets: true,
				}}})
				c, err := goClient(t, addrOf(t, s, "web"), "site.test", ca, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp := httpGet(t, c, "/")
				if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(resp, "\r\n\r\nhello\n") {
					t.Fatalf("response %q", resp)
				}
				resp = httpGet(t, c, "/nope")
				if !strings.HasPrefix(resp, "HTTP/1.1 404 ") {
					t.Fatalf("response %q", resp)
				}
				st := statsOf(t, s, "web")
				if st.Handshakes != 1 || st.SignOps != 1 || st.SignBatches != 1 || st.Open != 1 || st.Requests != 1 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}
