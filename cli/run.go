package cli

// sluice run: the gateway daemon.
//
//  1. Load and check the configuration (errors name file:line:col; exit 2):
//     its engines are registered, the TLS and IKE files can be read and
//     hold what they should, the addresses it binds are this host's
//     (loadChecked, which is all that `sluice check` runs).
//  2. Claim the control socket, so that a second instance stops here,
//     before it creates anything.
//  3. Start the gateway, then serve the control socket and, if configured,
//     the Prometheus endpoint, and tell systemd it is ready (Type=notify).
//     A configuration with only TLS sections starts a TLS-only gateway: no
//     TUN device, ESP sockets or state directory, so it runs without root
//     (given a control socket it may create).
//  4. Until ctx ends (SIGINT, SIGTERM): SIGHUP, like the control socket's
//     reload, re-reads the file and applies it; a file that does not load,
//     or a change that needs a restart, is logged and the running
//     configuration stays.
//  5. Shut down in the reverse order: the control socket, metrics, then
//     the gateway, which drains the data plane and zeroes the keys.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/logging"
)

func init() {
	commands = append(commands, newRunCommand, newCheckCommand)
}

// runOptions are the flags of sluice run.
type runOptions struct {
	config string
	socket string
	check  bool
}

func newRunCommand(e *env) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run -c FILE [--socket PATH]",
		Short: "Run the gateway",
		Long: `Run the gateway that configuration FILE describes, until SIGINT or SIGTERM.

The control socket (--socket, else the file's control_socket, else
` + control.DefaultSocket + `) serves the sa, tunnel, policy, stats and
reload commands; metrics = "host:port" in [gateway] serves Prometheus
metrics at /metrics. A FILE with only [[tls]] and [[tls_origin]] sections
runs a TLS-only gateway, which needs no root: no TUN device, no ESP sockets,
no state directory. SIGHUP or "sluice reload" re-reads FILE and applies the
changes without dropping traffic; a file with errors is refused, logged, and
the running configuration stays. Logs go to stderr.

With --check, only check FILE as "sluice check" does, and exit.

Exit status: 0 after a clean shutdown; 2 for a configuration with errors or
a gateway that cannot start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.check {
				return checkGateway(e, o)
			}
			return runGateway(cmd.Context(), e, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.config, "config", "c", "", "gateway configuration file (TOML)")
	f.StringVar(&o.socket, "socket", "", "control socket path (default: the file's control_socket, else "+control.DefaultSocket+")")
	f.BoolVar(&o.check, "check", false, "check the configuration as sluice check does, and exit")
	cmd.MarkFlagRequired("config")
	return cmd
}

func newCheckCommand(e *env) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "check -c FILE [--socket PATH]",
		Short: "Check a configuration as sluice run would, without starting anything",
		Long: `Check the configuration FILE the way "sluice run" checks it before it
changes anything, and more of what starting it would find: its syntax and
values, the engines it names, the TLS certificates and keys, the IKE
certificates and the private keys that go with them, that every local
address it names is one of this host's, the state directory and the
control socket's directory. It creates, binds and writes nothing, so it
can check a file for a running gateway before "sluice reload" (as nginx -t
does). What only a start finds out (a port another process holds, a TUN
device name in use) is left to it.

Algorithms FILE names that RFC 8247 discourages (sha1, prfsha1, modp1024,
modp1536 in proposals; the defaults hold none) are warnings on standard
error, with their file, line and field, not errors; sluice run logs them
at WARN when it starts.

Exit status: 0 when FILE would start; 2 with each error found, with its
file, line and field.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return checkGateway(e, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.config, "config", "c", "", "gateway configuration file (TOML)")
	f.StringVar(&o.socket, "socket", "", "control socket path to check (default: the file's control_socket, else "+control.DefaultSocket+")")
	cmd.MarkFlagRequired("config")
	return cmd
}

// loadChecked loads o.config and makes every check that changes nothing
// on the system, as run makes them before it starts and check makes
// them alone. Warnings go to warn (nil: discarded; run's start warns
// again). It returns the configuration and the control socket's path.
func loadChecked(o *runOptions, warn *slog.Logger) (*config.Gateway, string, error) {
	cfg, err := config.LoadGateway(o.config)
	if err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	if err := cfg.CheckEngines(cryptodev.CheckEngine); err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	if err := cfg.CheckTLSFiles(); err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	if err := setLogLevels(logging.NewLevels(slog.LevelInfo), cfg); err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	if err := gateway.Check(cfg, warn); err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	if warn != nil {
		for _, w := range cfg.Warnings() { // weak algorithms the file names
			warn.Warn(w.Error())
		}
	}
	socket := o.socket
	if socket == "" {
		socket = cfg.ControlSocket
	}
	if socket == "" {
		socket = control.DefaultSocket
	}
	if err := control.CheckSocketDir(socket); err != nil {
		return nil, "", withCode(ExitUsage, err)
	}
	return cfg, socket, nil
}

// checkGateway is sluice check: loadChecked, and a line saying what the
// file holds.
func checkGateway(e *env, o *runOptions) error {
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	cfg, _, err := loadChecked(o, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: configuration OK (%d tunnels, %d IKE connections, %d TLS listeners, %d TLS origins)\n",
		o.config, len(cfg.Tunnels), len(cfg.Connections), len(cfg.TLS), len(cfg.TLSOrigins))
	return nil
}

// runGateway runs the gateway until ctx ends.
func runGateway(ctx context.Context, e *env, o *runOptions) error {
	cfg, socket, err := loadChecked(o, nil)
	if err != nil {
		return err
	}
	levels := logging.NewLevels(slog.LevelInfo)
	setLogLevels(levels, cfg) // checked by loadChecked
	journal := false
	if f, ok := e.stderr.(*os.File); ok {
		journal = logging.OnJournal(f)
	}
	root := slog.New(logging.NewHandler(e.stderr, logging.Options{
		JSON: cfg.LogFormat == config.LogFormatJSON, Journal: journal, Levels: levels,
	}))
	log, ctlLog := root.With(logging.Key, "gateway"), root.With(logging.Key, "control")
	for _, w := range cfg.Warnings() { // weak algorithms the file names
		log.Warn(w.Error())
	}
	srv, err := control.Listen(socket, &control.Options{Log: ctlLog})
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer srv.Close()

	// SIGHUP's default action ends the process: catch it before anything
	// else starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// The gateway stops when Close says so, after draining, not when ctx
	// ends: ctx only starts the shutdown.
	gw, err := gateway.Start(context.WithoutCancel(ctx), cfg, root)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer gw.Close()
	backend := control.NewGatewayBackend(gw, ctlLog)
	backend.OnReload = func(cfg *config.Gateway) {
		// The gateway's reload lists the level changes it applies here.
		if err := setLogLevels(levels, cfg); err != nil {
			log.Warn("log levels unchanged", "err", err)
		}
	}
	var metrics *control.MetricsServer
	if cfg.Metrics != "" {
		if metrics, err = control.ServeMetrics(cfg.Metrics, backend.Stats, ctlLog); err != nil {
			return withCode(ExitUsage, fmt.Errorf("%s: gateway.metrics: %w", cfg.FieldPos("gateway.metrics"), err))
		}
		defer metrics.Close()
	}
	srv.Serve(backend)
	log.Info("sluice running", "config", o.config, "socket", socket, "metrics", cfg.Metrics, "pid", os.Getpid())
	notify(log, daemon.SdNotifyReady)

	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading", "file", cfg.File)
			notify(log, daemon.SdNotifyReloading)
			backend.Reload() // logs its outcome
			notify(log, daemon.SdNotifyReady)
		case <-ctx.Done():
			log.Info("shutting down")
			notify(log, daemon.SdNotifyStopping)
			// A member of a pair hands what it owns to the standby first,
			// with exact state: a rolling restart loses nothing.
			if gw.HAStandbyUp() {
				hctx, cancel := context.WithTimeout(context.Background(), control.HATimeout)
				if err := gw.HAHandover(hctx, ""); err != nil {
					log.Error("handover to the standby at shutdown failed; its takeover follows instead", "err", err)
				} else {
					log.Info("groups handed over to the standby")
				}
				cancel()
			}
			srv.Close()
			if metrics != nil {
				metrics.Close()
			}
			if err := gw.Close(); err != nil {
				log.Error("gateway close", "err", err)
			}
			return nil
		}
	}
}

// notify tells systemd (a Type=notify service: packaging/systemd) that
// the gateway is ready, reloading or stopping, through $NOTIFY_SOCKET;
// without one it does nothing. A failed notification is logged: systemd
// would otherwise time the start out without saying why.
func notify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notification failed", "state", state, "err", err)
	}
}

// setLogLevels sets levels from a configuration's log_level and
// log_levels: each subsystem's level (config.Gateway.LevelOf), and
// log_level for lines of no subsystem.
func setLogLevels(levels *logging.Levels, cfg *config.Gateway) error {
	for _, sub := range append([]string{""}, config.LogSubsystems...) {
		field, name := "gateway.log_level", cfg.LevelOf(sub)
		if sub != "" && cfg.LogLevels[sub] != "" {
			field = "gateway.log_levels." + sub
		}
		l, err := logging.ParseLevel(name)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		levels.Set(sub, l)
	}
	return nil
}
