// Command sluice-fleet runs a sluice fleet on Kubernetes: `sluice-fleet
// controller` places tunnels and listeners on gateway nodes, `sluice-fleet
// agent` runs beside `sluice run` on each gateway node and drives it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "sluice-fleet:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a mistake on the command line (exit code 2).
type usageError struct{ error }

func newRootCommand(stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice-fleet",
		Short:         "Run a fleet of sluice gateways on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newAgentCommand(stderr), newControllerCommand(stderr))
	return root
}

// newLogger returns the commands' logger, and makes it controller-runtime's.
func newLogger(stderr io.Writer) *slog.Logger {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	return log
}

// env returns the environment variable name's value, or def.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
