package cli

// sluice ike list|initiate|terminate: the IKE connections of the running
// gateway, through the control socket.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
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
		Use:   "list [-o wide] [--json]",
		Short: "List the IKE connections (state, suite, identities), their children (SPIs, suite, bytes) and the IKE counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := o.view()
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				info, err := c.IKE(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, info)
				}
				return printIKE(e.stdout, info, v)
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

// printIKE prints a table of the connections (state, the IKE SA's
// negotiated suite, both identities), a table of their children (the
// installed pair's SPIs, ESP suite and bytes each way, and for each road
// warrior the identity it proved), each connection's last error, the
// virtual IP pools, then the counters that are not zero.
func printIKE(w io.Writer, info gateway.IKEInfo, v ctlView) error {
	if len(info.Connections) == 0 {
		fmt.Fprintln(w, "no IKE connections")
		return printIKEStats(w, info.Stats)
	}
	t := newTable(w, v.wide, cutCol("CONNECTION"), col("STATE"), wideCol("LOCAL"), col("REMOTE"), wideCol("IKE PEER"),
		wideCol("LOCAL ID"), cutCol("REMOTE ID"), cutCol("IKE SUITE"), wideCol("IKE SPIS"), wideCol("ROLE"), wideCol("AGE"),
		wideCol("PROPOSALS"))
	now := time.Now()
	for _, c := range info.Connections {
		spis, role := "-", "-"
		if c.IKESPIi != "" {
			spis = c.IKESPIi + "_i " + c.IKESPIr + "_r"
			role = "responder"
			if c.IKEInitiator {
				role = "initiator"
			}
		}
		t.row(c.Name, c.State, c.Local, c.Remote, ctlOrDash(c.IKERemote), ctlOrDash(c.LocalID), ctlOrDash(c.RemoteID),
			ctlOrDash(c.IKESuite), spis, role, ctlAge(now, c.IKEEstablished), ctlOrDash(c.Proposal))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	// Each road warrior's row (its tunnel "<child>/<virtual IP>") names
	// the identity its IKE SA proved, which its connection's row, one of
	// many IKE SAs', cannot: the column is there by default when one is
	// listed (the ESP suite, the same for all of them as a rule, goes to
	// -o wide then, to keep 100 columns), else with -o wide.
	idCol, suiteCol := wideCol("REMOTE ID"), col("ESP SUITE")
	for _, c := range info.Connections {
		for _, ch := range c.Children {
			if ch.Tunnel != "" && ch.Tunnel != ch.Name {
				idCol, suiteCol = cutCol("REMOTE ID"), wideCol("ESP SUITE")
			}
		}
	}
	t = newTable(w, v.wide, cutCol("CHILD"), wideCol("CONNECTION"), col("STATE"), idCol, wideCol("START"), col("IN SPI"), col("OUT SPI"),
		suiteCol, wideCol("ESN"), wideCol("ENCAP"), wideCol("PEER"), wideCol("LOCAL TS"), wideCol("REMOTE TS"),
		col("BYTES IN"), col("BYTES OUT"), wideCol("PACKETS IN"), wideCol("PACKETS OUT"), col("AGE"), wideCol("REKEY"), wideCol("LIFE"))
	for _, c := range info.Connections {
		for _, ch := range c.Children {
			in, out := "-", "-"
			if ch.InSPI != 0 {
				in, out = ctlSPI(ch.InSPI), ctlSPI(ch.OutSPI)
			}
			name := ch.Name
			if ch.Tunnel != "" {
				name = ch.Tunnel // a road warrior's: "<child>/<virtual IP>"
			}
			t.row(name, c.Name, ch.State, ctlOrDash(ch.RemoteID), ch.StartAction, in, out, ctlOrDash(ch.Suite), yesNo(ch.ESN), yesNo(ch.Encap),
				ctlOrDash(ch.PeerAddr), ctlList(ch.LocalTS), ctlList(ch.RemoteTS), ctlU64(ch.BytesIn), ctlU64(ch.BytesOut),
				ctlU64(ch.PacketsIn), ctlU64(ch.PacketsOut), ctlAge(now, ch.Established), ch.RekeyTime, ch.LifeTime)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, c := range info.Connections {
		if c.Error != "" {
			fmt.Fprintf(w, "\n%s: last error: %s\n", c.Name, c.Error)
		}
	}
	if len(info.Pools) > 0 {
		fmt.Fprintln(w)
		t = newTable(w, v.wide, cutCol("POOL"), col("SIZE"), col("ONLINE"), col("OFFLINE"), col("FREE"))
		for _, p := range info.Pools {
			t.row(p.Name, strconv.Itoa(p.Size), strconv.Itoa(p.Online), strconv.Itoa(p.Offline), strconv.Itoa(p.Free))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return printIKEStats(w, info.Stats)
}

// ctlAge is how long ago t was, to the second, or "-" for none.
func ctlAge(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
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
