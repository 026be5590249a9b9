package cli

// sluice ike list|initiate|terminate: the IKE connections of the running
// gateway, through the control socket.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/gateway"
)

func init() {
	commands = append(commands, newIKECommand)
}

func newIKECommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := ctlGroup("ike", "List, initiate and terminate the IKE connections of the running gateway")
	ctlSocketFlag(cmd, o)
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the IKE connections, their SAs (state, SPIs, suites, lifetimes) and the IKE counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				info, err := c.IKE(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, info)
				}
				return printIKE(e.stdout, info)
			})
		},
	}
	ctlJSONFlag(list, o)
	initiate := &cobra.Command{
		Use:   "initiate NAME",
		Short: "Negotiate the [[connection]] NAME now and wait for its child to be installed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				if err := c.InitiateIKE(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "connection %s established\n", args[0])
				return nil
			})
		},
	}
	terminate := &cobra.Command{
		Use:   "terminate NAME",
		Short: "Delete the IKE SA of the [[connection]] NAME and its child, telling the peer; it stays down until initiated",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				if err := c.TerminateIKE(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "connection %s terminated\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(list, initiate, terminate)
	return cmd
}

// printIKE prints one row per child with its connection, then the
// counters that are not zero.
func printIKE(w io.Writer, info gateway.IKEInfo) error {
	t := newCtlTable(w, "CONNECTION", "STATE", "LOCAL", "REMOTE", "IKE SPIS", "CHILD", "CHILD STATE", "START",
		"IN SPI", "OUT SPI", "SUITE", "ESN", "ENCAP", "PEER", "LOCAL TS", "REMOTE TS", "AGE", "REKEY", "LIFE", "ERROR")
	for _, c := range info.Connections {
		spis := "-"
		if c.IKESPIi != "" {
			spis = c.IKESPIi + "_i " + c.IKESPIr + "_r"
		}
		for _, ch := range c.Children {
			in, out, age := "-", "-", "-"
			if ch.InSPI != 0 {
				in, out = ctlSPI(ch.InSPI), ctlSPI(ch.OutSPI)
			}
			if !ch.Established.IsZero() {
				age = time.Since(ch.Established).Round(time.Second).String()
			}
			t.row(c.Name, c.State, c.Local, c.Remote, spis, ch.Name, ch.State, ch.StartAction, in, out, ctlOrDash(ch.Suite),
				yesNo(ch.ESN), yesNo(ch.Encap), ctlOrDash(ch.PeerAddr), ctlList(ch.LocalTS), ctlList(ch.RemoteTS), age,
				ch.RekeyTime, ch.LifeTime, ctlOrDash(c.Error))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printIKEStats(w, info.Stats)
}

// printIKEStats prints the endpoint's counters that are not zero, on one
// line: "ike: rx_packets=12 tx_packets=12 ...".
func printIKEStats(w io.Writer, st map[string]uint64) error {
	var parts []string
	for _, k := range sortedStatKeys(st) {
		if st[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, st[k]))
		}
	}
	if len(parts) == 0 {
		parts = []string{"no IKE traffic yet"}
	}
	_, err := fmt.Fprintf(w, "\nike: %s\n", strings.Join(parts, " "))
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sortedStatKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
