package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kubeconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/fleet/agent"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// ZoneLabel is the Node label the agent reads its zone from.
const ZoneLabel = corev1.LabelTopologyZone

// agentOptions are the agent's flags.
type agentOptions struct {
	Gateway, Namespace, Pool string
	ControlSocket            string
	NodeAddress              string
	HADir                    string
	BootstrapFile            string
	StateDir                 string
	PollInterval             time.Duration
	ResyncInterval           time.Duration
	// BootstrapOnly makes the agent write the bootstrap file and exit
	// (the DaemonSet's init container), keeping its Lease; BootstrapWait
	// is how long it waits for a partner to name in [ha] before it
	// writes a bootstrap without one.
	BootstrapOnly bool
	BootstrapWait time.Duration
}

func newAgentCommand(stderr io.Writer) *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Drive the sluice gateway on this node from its GatewayAssignment",
		Long: `agent runs beside ` + "`sluice run`" + ` on a gateway node. It holds the gateway's
membership Lease, watches the gateway's GatewayAssignment (and only it),
renders the gateway's configuration from the Tunnels, TLSListeners and
Secrets it names, applies it over the control socket, and reports what the
gateway runs in the assignment's status. The flags default to the
environment the DaemonSet sets from the downward API.

The pod's own account (sluice-agent) only reads the Node, creates the
Lease and requests a token for this node's account, sluice-agent-<node>,
which reads and writes the rest: the controller grants that account this
node's Lease, assignment and the Secrets the assignment names, and no
other (see deploy/base/rbac.yaml).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), o, newLogger(stderr))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Gateway, "gateway", env("NODE_NAME", ""), "this gateway's name, its node's ($NODE_NAME)")
	f.StringVar(&o.Namespace, "namespace", env("POD_NAMESPACE", ""), "the pool's namespace ($POD_NAMESPACE)")
	f.StringVar(&o.Pool, "pool", env("SLUICE_POOL", ""), "the GatewayPool this gateway is a member of ($SLUICE_POOL)")
	f.StringVar(&o.ControlSocket, "control-socket", env("SLUICE_SOCKET", control.DefaultSocket), "the gateway's control socket ($SLUICE_SOCKET)")
	f.StringVar(&o.NodeAddress, "node-address", env("NODE_IP", ""), "this node's address, for the sync channel; default the Node's InternalIP ($NODE_IP)")
	f.StringVar(&o.HADir, "ha-dir", env("SLUICE_HA_DIR", "/run/sluice/creds"), "a memory-backed directory for the sync channel's and listeners' credentials ($SLUICE_HA_DIR)")
	f.StringVar(&o.BootstrapFile, "bootstrap-file", env("SLUICE_BOOTSTRAP", ""), "where to write the configuration the gateway starts with (no secrets; for `sluice run --config`), \"\" for none ($SLUICE_BOOTSTRAP)")
	f.StringVar(&o.StateDir, "state-dir", env("SLUICE_STATE_DIR", ""), "the gateway's state directory, \"\" for its default ($SLUICE_STATE_DIR)")
	f.DurationVar(&o.PollInterval, "poll-interval", agent.DefaultPollInterval, "how often to read the gateway's child SAs (and find a restarted gateway)")
	f.DurationVar(&o.ResyncInterval, "resync-interval", agent.DefaultResyncInterval, "how often to read the Tunnels and Secrets again without a change of the assignment (a rotated Secret is applied within it)")
	f.BoolVar(&o.BootstrapOnly, "bootstrap-only", false, "write --bootstrap-file once this gateway is assigned (with its partner in [ha], waiting up to --bootstrap-wait for one), then exit, keeping the Lease: the DaemonSet's init container, before `sluice run` starts on the file")
	f.DurationVar(&o.BootstrapWait, "bootstrap-wait", 30*time.Second, "with --bootstrap-only, how long to wait for a partner before writing a bootstrap without [ha] (a lone member)")
	return cmd
}

// scheme knows the built-in kinds and sluice.io's.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

func runAgent(ctx context.Context, o agentOptions, log *slog.Logger) error {
	for _, r := range []struct{ flag, val string }{{"--gateway", o.Gateway}, {"--namespace", o.Namespace}, {"--pool", o.Pool}} {
		if r.val == "" {
			return usageError{fmt.Errorf("agent: %s is required", r.flag)}
		}
	}
	cfg, err := kubeconfig.GetConfig()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return runAgentWith(ctx, cfg, o, log)
}

// runAgentWith runs the agent against the API server cfg reaches.
func runAgentWith(ctx context.Context, cfg *rest.Config, o agentOptions, log *slog.Logger) error {
	if o.BootstrapOnly && o.BootstrapFile == "" {
		return errors.New("agent: --bootstrap-only needs --bootstrap-file (or $SLUICE_BOOTSTRAP)")
	}
	// The configuration names its files by absolute paths: the gateway
	// would take relative ones from the applied text's name.
	for _, p := range []*string{&o.HADir, &o.StateDir, &o.BootstrapFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		*p = abs
	}
	s, err := scheme()
	if err != nil {
		return err
	}
	// The pod's account (cfg) reads the Node and creates the Lease; the
	// node's own account (nodeCfg) reads and writes the rest.
	mapper, err := agent.PodMapper(cfg)
	if err != nil {
		return err
	}
	podClient, err := client.New(cfg, client.Options{Scheme: s, Mapper: mapper})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	nodeCfg, err := agent.NodeConfig(cfg, o.Namespace, o.Gateway)
	if err != nil {
		return err
	}
	c, err := client.New(nodeCfg, client.Options{Scheme: s, Mapper: mapper})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var node corev1.Node
	if err := podClient.Get(ctx, client.ObjectKey{Name: o.Gateway}, &node); err != nil {
		return fmt.Errorf("agent: read Node %s (its zone and address): %w", o.Gateway, err)
	}
	addr, err := nodeAddress(o.NodeAddress, &node)
	if err != nil {
		return err
	}
	cache, err := agent.NewAssignmentCache(nodeCfg, mapper, s, o.Namespace, o.Gateway)
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Config{
		Client: c, LeaseCreator: podClient, Assignments: cache, Gateway: o.Gateway, Namespace: o.Namespace, Pool: o.Pool,
		Zone: node.Labels[ZoneLabel], NodeAddress: addr, Dir: o.HADir,
		ControlSocket: o.ControlSocket, BootstrapFile: o.BootstrapFile, StateDir: o.StateDir, Dial: agent.ControlDialer(o.ControlSocket), Log: log,
		PollInterval: o.PollInterval, ResyncInterval: o.ResyncInterval, KeepLease: o.BootstrapOnly,
	})
	if err != nil {
		return err
	}
	if err := a.WakeOn(ctx, cache); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cache.Start(ctx) }()
	// The agent starts without waiting for the watch to sync: it creates
	// the Lease first, and the controller makes the node's account, which
	// the watch reads as, once the Lease exists. Its reads of the
	// assignment wait for the sync.
	log.Info("agent started", "gateway", o.Gateway, "namespace", o.Namespace, "pool", o.Pool, "address", addr, "zone", node.Labels[ZoneLabel])
	runErr := make(chan error, 1)
	go func() {
		if o.BootstrapOnly {
			runErr <- bootstrapOnly(ctx, a, o, log)
		} else {
			runErr <- a.Run(ctx)
		}
	}()
	select {
	case err = <-runErr:
		cancel()
		<-errc
		return err
	case cerr := <-errc:
		cancel()
		err = <-runErr
		if cerr != nil {
			return fmt.Errorf("agent: assignment watch: %w", cerr)
		}
		return err
	}
}

// bootstrapOnly runs the agent until it has written the bootstrap file,
// with [ha] in it or after o.BootstrapWait without, and returns.
func bootstrapOnly(ctx context.Context, a *agent.Agent, o agentOptions, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case err := <-runErr:
			return fmt.Errorf("agent: stopped before the bootstrap file was written: %w", err)
		case <-t.C:
		}
		data, err := os.ReadFile(o.BootstrapFile)
		if err != nil {
			continue
		}
		paired := bytes.Contains(data, []byte("\n[ha]\n"))
		if paired || time.Since(start) >= o.BootstrapWait {
			log.Info("bootstrap file written", "file", o.BootstrapFile, "ha", paired)
			cancel()
			<-runErr
			return nil
		}
	}
}

// nodeAddress is flag's address, or the Node's InternalIP.
func nodeAddress(flag string, node *corev1.Node) (netip.Addr, error) {
	if flag != "" {
		a, err := netip.ParseAddr(flag)
		if err != nil {
			return netip.Addr{}, usageError{fmt.Errorf("agent: --node-address %q is not an IP address", flag)}
		}
		return a, nil
	}
	for _, na := range node.Status.Addresses {
		if na.Type == corev1.NodeInternalIP {
			if a, err := netip.ParseAddr(na.Address); err == nil {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("agent: Node %s has no InternalIP: give --node-address or $NODE_IP", node.Name)
}
