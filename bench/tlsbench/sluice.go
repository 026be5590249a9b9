package tlsbench

// sluice as a system under test: `sluice run -c FILE` with a TLS-only
// configuration (the contract of the TLS gateway: one [[tls]] listener, backend
// static:DIR, the engine of the server), as a user would write it: only
// what the bench varies is set, the rest is the gateway's defaults.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicegw/sluice/config"
)

// SluiceSite is what one sluice server serves.
type SluiceSite struct {
	Listen  string // 127.0.0.1:PORT
	Cert    CertFiles
	Version string // "1.2" or "1.3"
	Engine  string // the engine holding the key
	WWW     string // the static files
	// StateDir is the gateway's state directory (a TLS-only gateway keeps
	// nothing there; it is set so that no run touches /var/lib/sluice).
	StateDir string
}

// SluiceConfig returns the gateway configuration of s.
func SluiceConfig(s SluiceSite) ([]byte, error) {
	f := &config.File{
		Gateway: config.FileGateway{LogLevel: "warn", StateDir: s.StateDir},
		TLS: []config.FileTLS{{Name: "bench", Listen: s.Listen, Backend: "static:" + s.WWW, Engine: s.Engine,
			Versions: []string{s.Version}, SessionTickets: new(true),
			Certs: []config.FileTLSCert{{Cert: s.Cert.Cert, Key: s.Cert.Key}}}},
	}
	text, err := f.Encode()
	if err != nil {
		return nil, fmt.Errorf("tlsbench: %w", err)
	}
	head := fmt.Sprintf("# sluice bench tls: one TLS listener, engine %s, TLS %s\n\n", s.Engine, s.Version)
	return append([]byte(head), text...), nil
}

// startSluice writes the configuration of site into dir/sluice-NAME and
// starts argv("run", "-c", FILE, "--socket", SOCK) with env (GOMAXPROCS,
// when the run sets it).
func startSluice(ctx context.Context, argv func(args ...string) ([]string, error), env []string, dir, name string, site SluiceSite) (*proc, error) {
	if argv == nil {
		return nil, fmt.Errorf("tlsbench: no way to start sluice (SluiceArgv is not set)")
	}
	sub := filepath.Join(dir, "sluice-"+name)
	site.StateDir = filepath.Join(sub, "state")
	if err := os.MkdirAll(site.StateDir, 0o700); err != nil {
		return nil, err
	}
	file := filepath.Join(sub, "gateway.toml")
	text, err := SluiceConfig(site)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, text, 0o600); err != nil {
		return nil, err
	}
	if _, err := config.ParseGateway(file, text); err != nil {
		return nil, fmt.Errorf("tlsbench: the generated configuration of sluice %s: %w", name, err)
	}
	args, err := argv("run", "-c", file, "--socket", filepath.Join(sub, "control.sock"))
	if err != nil {
		return nil, err
	}
	return startProc(ctx, "sluice "+name, args, env, filepath.Join(sub, "gateway.log"), site.Listen)
}
