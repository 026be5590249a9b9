package gateway

// Check: what Start would find wrong with a configuration, found without
// changing the system (`sluice check`, `sluice run --check`, like nginx -t).

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/sluicegw/sluice/config"
)

// Check reports what would keep cfg from starting, beyond what loading
// it found: the IKE connections' certificates and the private keys that
// go with them, the local addresses that sockets bind (IKE connections'
// local_addrs, the ESP and TLS listen addresses: each must be one of
// this host's; a static tunnel's local address need not be, as behind a
// NAT), and the state directory. It creates, binds and writes nothing,
// so it may run beside the gateway it checks; what only a start finds out
// (a port another process holds, a TUN name in use, an engine that fails
// to open) it leaves to Start. Errors name the file, line and field;
// warnings (a key file others may read) go to log.
func Check(cfg *config.Gateway, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	at := func(field, format string, args ...any) {
		add(&config.Error{Pos: cfg.FieldPos(field), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !cfg.TLSOnly() && cfg.StateDir != "" {
		if fi, err := os.Stat(cfg.StateDir); err == nil && !fi.IsDir() {
			at("gateway.state_dir", "%s is not a directory", cfg.StateDir)
		}
	}
	for i := range cfg.Connections {
		_, _, _, err := ikeCredentials(cfg, i, log)
		add(err)
	}
	own, err := hostAddrs()
	if err != nil {
		return fmt.Errorf("gateway: the host's addresses: %w", err)
	}
	// A virtual address of an [ha] group is bound by the ESP and IKE
	// sockets while another member holds it (IP_FREEBIND); the raw ESP
	// socket and the TLS listeners do not follow it.
	local := func(field string, a netip.Addr, followsVIP bool) {
		a = a.Unmap()
		if grp := cfg.HAGroupOf(a); grp != "" {
			if !followsVIP {
				at(field, "%v is a virtual address of [ha] group %q, which this socket cannot follow "+
					"from member to member (listen on the unspecified address instead)", a, grp)
			}
			return
		}
		if a.IsValid() && !a.IsUnspecified() && !own[a] {
			at(field, "%v is not an address of this host", a)
		}
	}
	if cfg.UDP != nil {
		local("udp.listen", cfg.UDP.Listen.Addr(), true)
	}
	if cfg.RawESP != nil {
		local("rawesp.listen", cfg.RawESP.Listen, false)
	}
	for i := range cfg.Connections {
		local(config.ConnectionField(i)+".local_addrs", cfg.Connections[i].Local, true)
	}
	for i := range cfg.TLS {
		local(fmt.Sprintf("tls[%d].listen", i+1), listenHost(cfg.TLS[i].Listen), false)
	}
	for i := range cfg.TLSOrigins {
		local(fmt.Sprintf("tls_origin[%d].listen", i+1), listenHost(cfg.TLSOrigins[i].Listen), false)
	}
	return errors.Join(errs...)
}

// hostAddrs is the set of this host's (this network namespace's)
// addresses.
func hostAddrs() (map[netip.Addr]bool, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	own := map[netip.Addr]bool{}
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil {
			own[p.Addr().Unmap()] = true
		}
	}
	return own, nil
}

// listenHost is the address of a "host:port" listen string, or the zero
// Addr for a name or an empty host.
func listenHost(listen string) netip.Addr {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return netip.Addr{}
	}
	a, _ := netip.ParseAddr(host)
	return a
}

// needCap adds to err, when it is a refused permission, the capability
// that would allow the operation: sluice runs as root or, as its systemd
// unit runs it, as a user with CAP_NET_ADMIN, CAP_NET_RAW and
// CAP_NET_BIND_SERVICE.
func needCap(err error, capability string) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("%w (needs root or %s)", err, capability)
	}
	return err
}
