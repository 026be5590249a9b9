package tlsbench

// nginx as a system under test: Debian's nginx, run in the foreground with
// a configuration this file writes (its own prefix, pid file, logs and
// temporary directories under the run's directory), one worker process so
// that its CPU time compares per core with sluice's, one server on its own
// port per key type and TLS version.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultNginx is where Debian installs nginx.
const DefaultNginx = "/usr/sbin/nginx"

// FindNginx returns the nginx executable: path if set, else nginx on PATH,
// else DefaultNginx.
func FindNginx(path string) (string, error) {
	if path != "" {
		return exec.LookPath(path)
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(DefaultNginx); err == nil {
		return DefaultNginx, nil
	}
	return "", fmt.Errorf("tlsbench: nginx: %w (Debian: apt-get install nginx)", errNotFound)
}

// NginxSite is one TLS server of an nginx configuration.
type NginxSite struct {
	Listen  string // 127.0.0.1:PORT
	Cert    CertFiles
	Version string // "1.2" or "1.3"
}

// NginxConfig returns an nginx configuration whose files all live under
// prefix: one worker, access log off, keep-alive connections kept for the
// whole run, and for each site a TLS server of the static files in www
// with only the site's TLS version and session tickets on (nginx makes
// the ticket keys at start; the server-side session cache stays off, as
// sluice has none).
func NginxConfig(prefix, www string, sites []NginxSite) string {
	var b strings.Builder
	p := func(s string) string { return filepath.Join(prefix, s) }
	fmt.Fprintf(&b, "# sluice bench tls: nginx, one worker\n")
	fmt.Fprintf(&b, "worker_processes 1;\n")
	fmt.Fprintf(&b, "pid %s;\n", p("nginx.pid"))
	fmt.Fprintf(&b, "error_log %s warn;\n", p("error.log"))
	fmt.Fprintf(&b, "events {\n    worker_connections 16384;\n}\n")
	fmt.Fprintf(&b, "http {\n")
	fmt.Fprintf(&b, "    access_log off;\n")
	fmt.Fprintf(&b, "    default_type application/octet-stream;\n")
	fmt.Fprintf(&b, "    keepalive_timeout 300s;\n")
	fmt.Fprintf(&b, "    keepalive_requests 100000000;\n")
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s;\n", d, p("tmp/"+d))
	}
	for _, s := range sites {
		fmt.Fprintf(&b, "    server {\n")
		fmt.Fprintf(&b, "        listen %s ssl;\n", s.Listen)
		fmt.Fprintf(&b, "        server_name %s;\n", ServerName)
		fmt.Fprintf(&b, "        ssl_certificate %s;\n", s.Cert.Cert)
		fmt.Fprintf(&b, "        ssl_certificate_key %s;\n", s.Cert.Key)
		fmt.Fprintf(&b, "        ssl_protocols TLSv%s;\n", s.Version)
		fmt.Fprintf(&b, "        ssl_session_tickets on;\n")
		fmt.Fprintf(&b, "        ssl_session_cache off;\n")
		fmt.Fprintf(&b, "        root %s;\n", www)
		fmt.Fprintf(&b, "        location / { }\n")
		fmt.Fprintf(&b, "    }\n")
	}
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// startNginx writes the configuration of site into dir/nginx-NAME and
// starts nginx on it in the foreground.
func startNginx(ctx context.Context, exe, dir, name string, m *Material, site NginxSite) (*proc, error) {
	prefix := filepath.Join(dir, "nginx-"+name)
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(NginxConfig(prefix, m.WWW, []NginxSite{site})), 0o644); err != nil {
		return nil, err
	}
	argv := []string{exe, "-p", prefix, "-c", conf, "-e", filepath.Join(prefix, "error.log"), "-g", "daemon off;"}
	// nginx writes its errors after -e to the same file as its stderr.
	return startProc(ctx, "nginx "+name, argv, nil, filepath.Join(prefix, "error.log"), site.Listen)
}
