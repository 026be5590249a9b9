package cli

// sluice ha status|handover: the hot-standby pair of the running gateway
// ([ha]), through the control socket.

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/ha"
)

func init() {
	commands = append(commands, newHACommand)
}

func newHACommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := ctlGroup("ha", "Show the hot-standby pair of the running gateway, and hand its groups to the standby")
	ctlSocketFlag(cmd, o)
	status := &cobra.Command{
		Use:   "status [-o wide] [--json]",
		Short: "Show the members, each group's owner, standby, epoch and sync lag, the last failover and its gap, and the counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := o.view()
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				st, err := c.HAStatus(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, st)
				}
				return printHA(e.stdout, st, v)
			})
		},
	}
	ctlJSONFlag(status, o)
	handover := &cobra.Command{
		Use:   "handover [GROUP]",
		Short: "Hand GROUP (every group this member owns, without one) to the standby, with exact state: no packet lost, no new negotiation",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := ""
			if len(args) == 1 {
				group = args[0]
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				st, err := c.HAHandover(cmd.Context(), group)
				if err != nil {
					return err
				}
				what := "every group this member owned"
				if group != "" {
					what = "group " + group
				}
				fmt.Fprintf(e.stdout, "%s handed over\n", what)
				return printHA(e.stdout, st, ctlView{})
			})
		},
	}
	cmd.AddCommand(status, handover)
	return cmd
}

// printHA prints the members, then the groups, then the counters that are
// not zero.
func printHA(w io.Writer, st ha.Status, v ctlView) error {
	now := time.Now()
	t := newTable(w, v.wide, cutCol("MEMBER"), col("ADDRESS"), col("STATE"), col("LAST HEARD"))
	for _, m := range st.Members {
		state := "down"
		switch {
		case m.Self:
			state = "self"
		case m.Up:
			state = "up"
		}
		heard := "-"
		if !m.Self && !m.LastHeard.IsZero() {
			heard = now.Sub(m.LastHeard).Round(time.Millisecond).String() + " ago"
		}
		t.row(m.Name, m.Address, state, heard)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, v.wide, cutCol("GROUP"), col("ROLE"), col("OWNER"), col("STANDBY"), col("EPOCH"), col("SYNC"),
		col("LAG"), wideCol("LAG MAX"), wideCol("PREF"), col("LAST FAILOVER"), col("GAP"))
	for _, g := range st.Groups {
		sync := "no"
		switch {
		case g.Fenced:
			sync = "fenced"
		case g.InSync:
			sync = "yes"
		}
		last, gap := "-", "-"
		if !g.LastFailover.IsZero() {
			last = ctlAge(now, g.LastFailover) + " ago"
			gap = g.LastGap.Round(time.Millisecond).String()
		}
		t.row(g.Name, g.Role, ctlOrDash(g.Owner), ctlOrDash(g.Standby), fmt.Sprint(g.Epoch), sync,
			haLag(g.SyncLag), haLag(g.SyncLagMax), fmt.Sprint(g.Preference), last, gap)
	}
	if err := t.flush(); err != nil {
		return err
	}
	c := st.Counters
	counts := []struct {
		name string
		n    uint64
	}{
		{"takeovers", c.Takeovers}, {"takeovers_blocked", c.TakeoversBlocked}, {"handovers", c.Handovers},
		{"fences", c.Fences}, {"connections", c.Connections}, {"resyncs", c.Resyncs}, {"queue_overflows", c.QueueOverflows},
		{"stale_epoch", c.StaleEpoch}, {"bad_frames", c.BadFrames}, {"handshake_failures", c.HandshakeFailures},
	}
	first := true
	for _, k := range counts {
		if k.n == 0 {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintf(w, "%s %d\n", k.name, k.n)
	}
	return nil
}

func haLag(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Microsecond).String()
}
