package cli

// sluice run: the gateway daemon.
//
//  1. Load and check the configuration (errors name file:line:col; exit 2):
//     its engines are registered, the TLS sections' files can be read.
//  2. Claim the control socket, so that a second instance stops here,
//     before it creates anything.
//  3. Start the gateway, then serve the control socket and, if configured,
//     the Prometheus endpoint. A configuration with only TLS sections
//     starts a TLS-only gateway: no TUN device, ESP sockets or state
//     directory, so it runs without root (given a control socket it may
//     create).
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

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/gateway"
)

func init() {
	commands = append(commands, newRunCommand)
}

// runOptions are the flags of sluice run.
type runOptions struct {
	config string
	socket string
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

Exit status: 0 after a clean shutdown; 2 for a configuration with errors or
a gateway that cannot start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGateway(cmd.Context(), e, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.config, "config", "c", "", "gateway configuration file (TOML)")
	f.StringVar(&o.socket, "socket", "", "control socket path (default: the file's control_socket, else "+control.DefaultSocket+")")
	cmd.MarkFlagRequired("config")
	return cmd
}

// runGateway runs the gateway until ctx ends.
func runGateway(ctx context.Context, e *env, o *runOptions) error {
	cfg, err := config.LoadGateway(o.config)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	if err := cfg.CheckEngines(cryptodev.CheckEngine); err != nil {
		return withCode(ExitUsage, err)
	}
	if err := cfg.CheckTLSFiles(); err != nil {
		return withCode(ExitUsage, err)
	}
	level := new(slog.LevelVar)
	if err := setLogLevel(level, cfg.LogLevel); err != nil {
		return withCode(ExitUsage, fmt.Errorf("%s: gateway.log_level: %w", cfg.FieldPos("gateway.log_level"), err))
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))

	socket := o.socket
	if socket == "" {
		socket = cfg.ControlSocket
	}
	if socket == "" {
		socket = control.DefaultSocket
	}
	srv, err := control.Listen(socket, &control.Options{Log: log})
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
	gw, err := gateway.Start(context.WithoutCancel(ctx), cfg, log)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer gw.Close()
	backend := control.NewGatewayBackend(gw, log)
	backend.OnReload = func(cfg *config.Gateway) {
		if err := setLogLevel(level, cfg.LogLevel); err != nil {
			log.Warn("log level unchanged", "err", err)
		}
	}
	var metrics *control.MetricsServer
	if cfg.Metrics != "" {
		if metrics, err = control.ServeMetrics(cfg.Metrics, backend.Stats, log); err != nil {
			return withCode(ExitUsage, fmt.Errorf("%s: gateway.metrics: %w", cfg.FieldPos("gateway.metrics"), err))
		}
		defer metrics.Close()
	}
	srv.Serve(backend)
	log.Info("sluice running", "config", o.config, "socket", socket, "metrics", cfg.Metrics, "pid", os.Getpid())

	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading", "file", cfg.File)
			backend.Reload() // logs its outcome
		case <-ctx.Done():
			log.Info("shutting down")
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

// setLogLevel sets v from a configuration's log_level ("" is info).
func setLogLevel(v *slog.LevelVar, s string) error {
	if s == "" {
		s = config.DefaultLogLevel
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	v.Set(l)
	return nil
}
