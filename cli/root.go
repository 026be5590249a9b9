// Package cli holds sluice's subcommands. Each command is a function of its
// arguments and streams, so tests run them without a process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/internal/buildinfo"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitDropped = 1 // --strict and at least one packet was dropped
	ExitUsage   = 2 // bad arguments or bad input
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode marks err with the exit status the process should end with.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// env is what every command gets: its streams.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// commands lists the constructors of the top-level subcommands; each file
// adds its own in an init function.
var commands []func(*env) *cobra.Command

// Run runs the command line args and returns the process exit status.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "sluice:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitUsage
}

// newRoot builds the command tree on e's streams.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "sluice: a userspace IPsec (ESP) and TLS gateway",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `sluice version` prints.
		Version: buildinfo.Get().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return withCode(ExitUsage, err) })
	for _, mk := range commands {
		root.AddCommand(mk(e))
	}
	return root
}

// Root returns the command tree with discarded streams, for tools that
// document it (man pages, shell completion: internal/gendocs).
func Root() *cobra.Command {
	return newRoot(&env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard})
}

func init() {
	commands = append(commands, func(e *env) *cobra.Command {
		var asJSON bool
		c := &cobra.Command{
			Use:   "version",
			Short: "Print the version, commit, Go toolchain, build tags and engines linked in",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				in := buildinfo.Get()
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(in)
				}
				fmt.Fprintln(e.stdout, in)
				return nil
			},
		}
		c.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON")
		return c
	})
}
