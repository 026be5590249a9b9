package tls

// Real clients against a real listener: openssl s_client and curl.

import (
	"bytes"
	"context"
	gotls "crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// siteFixture is a listener with two certificates (SNI), a static site, a
// client CA and a client certificate.
type siteFixture struct {
	dir, www   string
	ca, cliCA  *testCA
	a, b, cli  Cert
	s          *Service
	addr, port string
}

func newSite(t *testing.T, eng, kt string, mod func(*ListenerConfig)) *siteFixture {
	t.Helper()
	f := &siteFixture{dir: t.TempDir()}
	f.www = filepath.Join(f.dir, "www")
	os.Mkdir(f.www, 0o755)
	os.WriteFile(filepath.Join(f.www, "index.html"), []byte("<p>hello</p>\n"), 0o644)
	f.ca = newCA(t, f.dir, "root")
	f.cliCA = newCA(t, f.dir, "clients")
	f.a = f.ca.issue(t, f.dir, "alpha", kt, false, "alpha.test")
	f.b = f.ca.issue(t, f.dir, "beta", kt, false, "beta.test", "*.wild.test")
	f.cli = f.cliCA.issue(t, f.dir, "client", kt, true)
	lc := ListenerConfig{
		Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{f.a, f.b}, Engine: eng,
		Backend: "static:" + f.www, SessionTickets: true, ALPN: []string{"h2x", "http/1.1"},
	}
	if mod != nil {
		mod(&lc)
	}
	f.s = startService(t, Config{Listeners: []ListenerConfig{lc}})
	f.addr = addrOf(t, f.s, "web")
	_, f.port, _ = net.SplitHostPort(f.addr)
	return f
}

// sClient runs openssl s_client with args, sending stdin, and returns its
// output (stdout and stderr).
func sClient(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openssl", append([]string{"s_client", "-ign_eof"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Run() // a refused handshake exits non-zero; the output says why
	return out.String()
}

func TestOpenSSLClient(t *testing.T) {
	needTool(t, "openssl")
	for _, eng := range testEngines {
		for _, kt := range keyTypes {
			t.Run(eng+"/"+kt, func(t *testing.T) {
				f := newSite(t, eng, kt, nil)
				req := "GET / HTTP/1.0\r\n\r\n"
				base := []string{"-connect", f.addr, "-CAfile", f.ca.file, "-verify_return_error"}
				for _, tc := range []struct{ sni, cn string }{
					{"alpha.test", "alpha"}, {"beta.test", "beta"}, {"x.wild.test", "beta"},
					{"other.test", "alpha"}, {"a.b.wild.test", "alpha"},
				} {
					out := sClient(t, req, append(base, "-servername", tc.sni)...)
					if !strings.Contains(out, "CN = "+tc.cn+"\n") && !strings.Contains(out, "CN="+tc.cn+"\n") {
						t.Errorf("SNI %s: want CN %s:\n%s", tc.sni, tc.cn, out)
					}
				}
				for _, v := range []string{"-tls1_2", "-tls1_3"} {
					out := sClient(t, req, append(base, "-servername", "alpha.test", v, "-alpn", "http/1.1,foo")...)
					want := map[string]string{"-tls1_2": "TLSv1.2", "-tls1_3": "TLSv1.3"}[v]
					if !strings.Contains(out, "Protocol  : "+want) && !strings.Contains(out, "New, "+want) {
						t.Errorf("%s: want %s:\n%s", v, want, out)
					}
					if !strings.Contains(out, "ALPN protocol: http/1.1") {
						t.Errorf("%s: no ALPN:\n%s", v, out)
					}
					if !strings.Contains(out, "<p>hello</p>") {
						t.Errorf("%s: no content:\n%s", v, out)
					}
				}
				// Resumption by ticket, both versions.
				for _, v := range []string{"-tls1_2", "-tls1_3"} {
					sess := filepath.Join(f.dir, "sess"+v)
					out := sClient(t, req, append(base, "-servername", "alpha.test", v, "-sess_out", sess)...)
					if !strings.Contains(out, "<p>hello</p>") {
						t.Fatalf("%s: first connection:\n%s", v, out)
					}
					out = sClient(t, req, append(base, "-servername", "alpha.test", v, "-sess_in", sess)...)
					if !strings.Contains(out, "Reused, TLSv") {
						t.Errorf("%s: not resumed:\n%s", v, out)
					}
				}
				st := statsOf(t, f.s, "web")
				if st.Resumed != 2 {
					t.Errorf("Resumed %d, want 2: %+v", st.Resumed, st)
				}
			})
		}
	}
}

func TestMTLS(t *testing.T) {
	needTool(t, "openssl")
	for _, eng := range testEngines {
		for _, kt := range keyTypes {
			t.Run(eng+"/"+kt, func(t *testing.T) {
				var f *siteFixture
				dir := t.TempDir()
				cliCA := newCA(t, dir, "clients")
				cli := cliCA.issue(t, dir, "client", kt, true)
				f = newSite(t, eng, kt, func(lc *ListenerConfig) {
					lc.ClientAuth = ClientAuthRequire
					lc.ClientCA = cliCA.file
				})
				req := "GET / HTTP/1.0\r\n\r\n"
				for _, v := range []string{"-tls1_2", "-tls1_3"} {
					base := []string{"-connect", f.addr, "-CAfile", f.ca.file, "-servername", "alpha.test", v}
					out := sClient(t, req, append(base, "-cert", cli.CertFile, "-key", cli.KeyFile)...)
					if !strings.Contains(out, "<p>hello</p>") {
						t.Errorf("%s with a client certificate:\n%s", v, out)
					}
					out = sClient(t, req, base...)
					if strings.Contains(out, "<p>hello</p>") {
						t.Errorf("%s without a client certificate was served:\n%s", v, out)
					}
					// A certificate from another CA is refused too.
					out = sClient(t, req, append(base, "-cert", f.cli.CertFile, "-key", f.cli.KeyFile)...)
					if strings.Contains(out, "<p>hello</p>") {
						t.Errorf("%s with a foreign client certificate was served:\n%s", v, out)
					}
				}
				waitFor(t, "client_cert failures", func() bool {
					return statsOf(t, f.s, "web").HandshakeFailures["client_cert"] == 4
				})
				// Go's client with the certificate.
				pair, err := gotls.LoadX509KeyPair(cli.CertFile, cli.KeyFile)
				if err != nil {
					t.Fatal(err)
				}
				c, err := goClient(t, f.addr, "alpha.test", f.ca, func(c *gotls.Config) { c.Certificates = []gotls.Certificate{pair} })
				if err != nil {
					t.Fatal(err)
				}
				if r := httpGet(t, c, "/"); !strings.Contains(r, "hello") {
					t.Fatal(r)
				}
			})
		}
	}
}

func TestCurlStatic(t *testing.T) {
	needTool(t, "curl")
	for _, eng := range testEngines {
		t.Run(eng, func(t *testing.T) {
			f := newSite(t, eng, "ecdsa", nil)
			big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: streamed
			os.WriteFile(filepath.Join(f.www, "big.bin"), big, 0o644)
			os.Mkdir(filepath.Join(f.www, "sub"), 0o755)
			os.WriteFile(filepath.Join(f.www, "sub", "a.txt"), []byte("sub file\n"), 0o644)
			url := "https://alpha.test:" + f.port
			curl := func(args ...string) string {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, "curl", append([]string{"-sS", "--cacert", f.ca.file,
					"--resolve", "alpha.test:" + f.port + ":127.0.0.1"}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("curl %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			if got := curl(url + "/"); got != "<p>hello</p>\n" {
				t.Errorf("GET /: %q", got)
			}
			if got := curl(url + "/sub/a.txt?x=1"); got != "sub file\n" {
				t.Errorf("GET /sub/a.txt: %q", got)
			}
			if got := curl("-o", "/dev/null", "-w", "%{http_code}", url+"/missing"); got != "404" {
				t.Errorf("GET /missing: %q", got)
			}
			if got := curl("-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url+"/"); got != "405" {
				t.Errorf("POST /: %q", got)
			}
			if got := curl("--path-as-is", "-o", "/dev/null", "-w", "%{http_code}", url+"/../etc/passwd"); got != "400" {
				t.Errorf("GET /../etc/passwd: %q", got)
			}
			if got := curl("-I", url+"/sub/a.txt"); !strings.Contains(got, "Content-Length: 9\r\n") {
				t.Errorf("HEAD: %q", got)
			}
			// Two URLs on one keep-alive connection, one of them big.
			out := curl("-o", filepath.Join(f.dir, "b1"), url+"/big.bin", "-o", filepath.Join(f.dir, "b2"), url+"/", "-w", "%{num_connects}")
			if got, _ := os.ReadFile(filepath.Join(f.dir, "b1")); !bytes.Equal(got, big) {
				t.Errorf("big.bin: %d bytes", len(got))
			}
			if !strings.HasSuffix(out, "0") {
				t.Errorf("second request did not reuse the connection: %q", out)
			}
			st := statsOf(t, f.s, "web")
			if st.Requests < 4 {
				t.Errorf("stats: %+v", st)
			}
		})
	}
}
