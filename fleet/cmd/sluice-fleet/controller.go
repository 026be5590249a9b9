package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
	kubeconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/sluicegw/sluice/fleet/controller"
)

// controllerOptions are the controller's flags.
type controllerOptions struct {
	Namespace               string // "" watches every namespace
	LeaderElection          bool
	LeaderElectionNamespace string
	MetricsAddr             string
	HealthAddr              string
}

func newControllerCommand(stderr io.Writer) *cobra.Command {
	var o controllerOptions
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Place tunnels and listeners on the pools' gateways (leader-elected)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd.Context(), o, newLogger(stderr))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", env("WATCH_NAMESPACE", ""), "the namespace to watch, \"\" for all ($WATCH_NAMESPACE)")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect one active controller among the replicas")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", env("POD_NAMESPACE", ""), "the namespace of the leader-election Lease ($POD_NAMESPACE)")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "where the metrics endpoint listens, \"0\" for none")
	f.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081", "where the health probes listen")
	return cmd
}

// runController runs the controller until ctx ends: fleet/controller's
// manager, with the flags' options.
func runController(ctx context.Context, o controllerOptions, log *slog.Logger) error {
	cfg, err := kubeconfig.GetConfig()
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	mgr, _, err := controller.NewManager(cfg, controller.Options{
		Namespace: o.Namespace, LeaderElection: o.LeaderElection, LeaderElectionNamespace: o.LeaderElectionNamespace,
		MetricsAddr: o.MetricsAddr, ProbeAddr: o.HealthAddr,
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	log.Info("controller starting", "namespace", o.Namespace, "leader-elect", o.LeaderElection)
	return mgr.Start(ctx)
}
