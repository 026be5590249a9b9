package cli

// The client commands: they talk to a running `sluice run` over its control
// socket (package control) and print what it says, as aligned tables or,
// with --json, as the protocol's JSON.
//
//	sluice sa list | sa add | sa del
//	sluice tunnel list
//	sluice policy list
//	sluice stats [--watch]
//	sluice reload
//	sluice apply FILE

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
)

func init() {
	commands = append(commands, newSACommand, newTunnelCommand, newPolicyCommand, newStatsCommand, newReloadCommand, newApplyCommand)
}

// minWatchInterval keeps stats --watch from hammering the gateway.
const minWatchInterval = 100 * time.Millisecond

// ctlClearScreen moves the cursor home and clears a terminal (ANSI).
const ctlClearScreen = "\x1b[H\x1b[2J"

// SocketEnv names the environment variable the client commands take the
// control socket's path from when neither --socket nor -c FILE names it.
const SocketEnv = "SLUICE_SOCKET"

// ctlOptions are the flags every client command has.
type ctlOptions struct {
	socket string // --socket
	config string // -c FILE: the gateway's configuration file
	json   bool
	output string // -o: "", "wide" or "json"
}

func ctlSocketFlag(cmd *cobra.Command, o *ctlOptions) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.socket, "socket", "", "control socket of the running gateway (default: -c FILE's control_socket, else $"+
		SocketEnv+", else "+control.DefaultSocket+")")
	f.StringVarP(&o.config, "config", "c", "", "the running gateway's configuration file: reach it at the file's control_socket")
}

// ctlJSONFlag gives a command that prints tables --json and -o.
func ctlJSONFlag(cmd *cobra.Command, o *ctlOptions) {
	cmd.Flags().BoolVar(&o.json, "json", false, "print the gateway's JSON instead of a table")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "wide: every column, none cut to fit "+strconv.Itoa(ctlWidth)+" columns; json: as --json")
}

// view checks -o and says how to print the tables.
func (o *ctlOptions) view() (ctlView, error) {
	switch o.output {
	case "":
	case "wide":
		return ctlView{wide: true}, nil
	case "json":
		o.json = true
	default:
		return ctlView{}, withCode(ExitUsage, fmt.Errorf("-o %q: want wide or json", o.output))
	}
	return ctlView{}, nil
}

// ctlSocket is the control socket a client command talks to, and where
// its path came from, for the errors.
type ctlSocket struct {
	path   string
	source string // "--socket", "$SLUICE_SOCKET", "control_socket of FILE:LINE:COL", ...
}

// socketPath finds the control socket: --socket, else the control_socket of
// -c FILE (the default when FILE sets none, as for sluice run), else
// $SLUICE_SOCKET, else the default.
func (o *ctlOptions) socketPath() (ctlSocket, error) {
	switch {
	case o.socket != "":
		return ctlSocket{o.socket, "--socket"}, nil
	case o.config != "":
		return configSocket(o.config)
	}
	if p := os.Getenv(SocketEnv); p != "" {
		return ctlSocket{p, "$" + SocketEnv}, nil
	}
	return ctlSocket{control.DefaultSocket, "the default; -c FILE, $" + SocketEnv + " or --socket name another"}, nil
}

// configSocket reads [gateway].control_socket from the configuration file
// at path, and only that: the client needs no more of the file, which a
// gateway may hold newer than the one it runs. The path is taken as sluice
// run takes it, relative to the working directory.
func configSocket(path string) (ctlSocket, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ctlSocket{}, err
	}
	doc, err := config.ParseDocument(path, data)
	if err != nil {
		return ctlSocket{}, err
	}
	dflt := ctlSocket{config.DefaultControlSocket, "the default: " + path + " sets no control_socket"}
	e := doc.Root.Lookup("gateway")
	if e == nil {
		return dflt, nil
	}
	gw, ok := e.Value.Table()
	if !ok {
		return ctlSocket{}, &config.Error{Pos: e.Value.Pos, Field: "gateway", Msg: "want a table [gateway], not " + e.Value.Kind.String()}
	}
	if e = gw.Lookup("control_socket"); e == nil {
		return dflt, nil
	}
	s, ok := e.Value.Str()
	if !ok || s == "" {
		what := e.Value.Kind.String()
		if ok {
			what = "an empty string"
		}
		return ctlSocket{}, &config.Error{Pos: e.Value.Pos, Field: "gateway.control_socket",
			Msg: "want a string, the path of the control socket, not " + what}
	}
	return ctlSocket{s, "control_socket of " + e.Value.Pos.String()}, nil
}

// ctlDial connects to the gateway at the socket o names. A socket that
// is not there is an error that says where its path came from.
func ctlDial(ctx context.Context, o *ctlOptions) (*control.Client, ctlSocket, error) {
	sock, err := o.socketPath()
	if err != nil {
		return nil, sock, withCode(ExitUsage, err)
	}
	c, err := control.Dial(ctx, sock.path)
	if err != nil {
		var de *control.DialError
		if errors.As(err, &de) {
			de.Source = sock.source
		}
		return nil, sock, withCode(ExitUsage, err)
	}
	return c, sock, nil
}

// ctlCall runs one request against the gateway at the socket o names. A
// socket nobody answers on, and an error the gateway answers with, exit
// with status 2. With -c FILE, a gateway that runs another file is refused
// before fn sends anything.
func ctlCall(ctx context.Context, o *ctlOptions, fn func(*control.Client) error) error {
	c, sock, err := ctlDial(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	if o.config != "" {
		st, err := c.Stats(ctx)
		if err == nil {
			err = checkServes(st, sock.path, o.config)
		}
		if err != nil {
			return withCode(ExitUsage, err)
		}
	}
	if err := fn(c); err != nil {
		return withCode(ExitUsage, err)
	}
	return nil
}

// ctlStats reads the gateway's counters, as ctlCall would, in one request:
// the -c FILE check uses the answer.
func ctlStats(ctx context.Context, o *ctlOptions) (gateway.Stats, error) {
	c, sock, err := ctlDial(ctx, o)
	if err != nil {
		return gateway.Stats{}, err
	}
	defer c.Close()
	st, err := c.Stats(ctx)
	if err == nil && o.config != "" {
		err = checkServes(st, sock.path, o.config)
	}
	if err != nil {
		return gateway.Stats{}, withCode(ExitUsage, err)
	}
	return st, nil
}

// checkServes returns an error if the stats st, read from the socket
// sock, are not those of the gateway of file. A gateway that does not say
// which file it runs (one started from no file, or an older sluice)
// passes.
func checkServes(st gateway.Stats, sock, file string) error {
	if st.Config == "" || sameFile(st.Config, file) {
		return nil
	}
	return fmt.Errorf("the socket %s is served by the gateway of %s, not %s", sock, st.Config, file)
}

// sameFile reports whether the paths a and b name one file: the same
// inode when both exist, else the same absolute path.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// group is a command that only holds subcommands.
func ctlGroup(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
}

func newSACommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := ctlGroup("sa", "List, add and delete the SAs of the running gateway")
	ctlSocketFlag(cmd, o)

	list := &cobra.Command{
		Use:   "list [-o wide] [--json]",
		Short: "List the SAs: each tunnel's outbound SA, then its inbound ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := o.view()
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				sas, err := c.SAs(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, sas)
				}
				return printSAs(e.stdout, sas, v)
			})
		},
	}
	ctlJSONFlag(list, o)

	var tunnel, dir string
	add := &cobra.Command{
		Use:   "add --tunnel T --dir in|out FILE",
		Short: "Install the SA of FILE (one [[sa]] table) on a running tunnel",
		Long: `Install the SA that FILE describes (an SA file with exactly one [[sa]] table;
- is stdin) on tunnel T. --dir in adds an inbound SA next to the tunnel's
others, as a rekey does before the peer switches; --dir out switches the
tunnel's outbound SA, and the old one is reclaimed once its packets have
left. The SA lasts until a reload whose file does not list it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir != "in" && dir != "out" {
				return withCode(ExitUsage, fmt.Errorf("--dir must be in or out, not %q", dir))
			}
			text, err := readSAFile(e, args[0])
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				r, err := c.AddSA(cmd.Context(), tunnel, dir, text)
				if err != nil {
					return err
				}
				name := ""
				if r.Name != "" {
					name = " " + r.Name
				}
				if r.Dir == "out" {
					fmt.Fprintf(e.stdout, "tunnel %s now sends with SA%s (SPI %s)\n", r.Tunnel, name, ctlSPI(r.SPI))
				} else {
					fmt.Fprintf(e.stdout, "tunnel %s now also receives with SA%s (SPI %s)\n", r.Tunnel, name, ctlSPI(r.SPI))
				}
				return nil
			})
		},
	}
	add.Flags().StringVar(&tunnel, "tunnel", "", "name of the tunnel")
	add.Flags().StringVar(&dir, "dir", "", "in (add an inbound SA) or out (switch the outbound SA)")
	add.MarkFlagRequired("tunnel")
	add.MarkFlagRequired("dir")

	var spi uint32
	del := &cobra.Command{
		Use:   "del --spi N",
		Short: "Delete an inbound SA",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				if err := c.DelSA(cmd.Context(), spi); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "deleted the inbound SA with SPI %s\n", ctlSPI(spi))
				return nil
			})
		},
	}
	del.Flags().Uint32Var(&spi, "spi", 0, "SPI of the inbound SA (decimal or 0x hex)")
	del.MarkFlagRequired("spi")

	cmd.AddCommand(list, add, del)
	return cmd
}

// readSAFile reads an SA file and checks it holds one SA, so that its
// errors name the user's file; the gateway checks it again.
func readSAFile(e *env, path string) (string, error) {
	var r io.Reader = e.stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", withCode(ExitUsage, err)
		}
		defer f.Close()
		r, name = f, path
	}
	// The request carrying it must fit in one control line.
	limit := 1 << 19
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return "", withCode(ExitUsage, err)
	}
	if len(data) > limit {
		return "", withCode(ExitUsage, fmt.Errorf("%s: longer than %d bytes: not an SA file of one SA", name, limit))
	}
	sas, err := config.ParseSAs(name, data)
	if err != nil {
		return "", withCode(ExitUsage, err)
	}
	if len(sas) != 1 {
		return "", withCode(ExitUsage, fmt.Errorf("%s: want exactly one [[sa]] table, found %d", name, len(sas)))
	}
	return string(data), nil
}

func newTunnelCommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := ctlGroup("tunnel", "Show the tunnels of the running gateway")
	ctlSocketFlag(cmd, o)
	list := &cobra.Command{
		Use:   "list [-o wide] [--json]",
		Short: "List the tunnels",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := o.view()
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				ts, err := c.Tunnels(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, ts)
				}
				return printTunnels(e.stdout, ts, v)
			})
		},
	}
	ctlJSONFlag(list, o)
	cmd.AddCommand(list)
	return cmd
}

func newPolicyCommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := ctlGroup("policy", "Show the security policies of the running gateway")
	ctlSocketFlag(cmd, o)
	list := &cobra.Command{
		Use:   "list [-o wide] [--json]",
		Short: "List the policies in order; the first that matches a packet decides",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := o.view()
			if err != nil {
				return err
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				ps, err := c.Policies(cmd.Context())
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, ps)
				}
				return printPolicies(e.stdout, ps, v)
			})
		},
	}
	ctlJSONFlag(list, o)
	cmd.AddCommand(list)
	return cmd
}

func newReloadCommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make the running gateway re-read its configuration file",
		Long: `Make the running gateway re-read its configuration file and apply the
changes without dropping traffic, as SIGHUP does, and print each change.
The running SAs become the file's, whatever sa add and sa del changed
since: an SA the file names and the gateway lacks is installed, one it
does not name is removed (inbound SAs after a drain time). A file with
errors is refused, with each error's file:line:col, and the running
configuration stays; so does a change that needs a restart (workers,
engines, [tun], [udp], [rawesp], control_socket, metrics). A gateway that
was sent a configuration with apply refuses reload until it restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				r, err := c.Reload(cmd.Context())
				if err != nil {
					return err
				}
				if len(r.Changes) == 0 {
					fmt.Fprintln(e.stdout, "configuration reloaded: nothing changed")
					return nil
				}
				fmt.Fprintf(e.stdout, "configuration reloaded: %d changes\n", len(r.Changes))
				for _, c := range r.Changes {
					fmt.Fprintln(e.stdout, "  "+c)
				}
				return nil
			})
		},
	}
	ctlSocketFlag(cmd, o)
	return cmd
}

func newApplyCommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	var name string
	cmd := &cobra.Command{
		Use:   "apply FILE|- [--name NAME]",
		Short: "Send the running gateway a whole configuration to apply, as reload does",
		Long: `Send the running gateway the configuration in FILE (- reads standard
input) over its control socket (config.apply) and print each change. The
gateway reads it as the file NAME (default: FILE's path), so errors say
NAME:line:col and relative paths in it are taken from NAME's directory,
then applies it as reload applies the file it started from, without
dropping traffic; a text with errors, or a change that needs a restart,
is refused and the running configuration stays.

From the first configuration applied, the gateway runs it and refuses
reload (its file lacks what was applied) until it restarts. An agent
that keeps secrets off the disk calls the same operation through the Go
client (control.Client.Apply), with the TLS session ticket key ring.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, n, err := readApplyFile(e, args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = n
			}
			return ctlCall(cmd.Context(), o, func(c *control.Client) error {
				r, err := c.Apply(cmd.Context(), control.ApplyArgs{Name: name, Config: text})
				if err != nil {
					return err
				}
				if len(r.Changes) == 0 {
					fmt.Fprintln(e.stdout, "configuration applied: nothing changed")
					return nil
				}
				fmt.Fprintf(e.stdout, "configuration applied: %d changes\n", len(r.Changes))
				for _, c := range r.Changes {
					fmt.Fprintln(e.stdout, "  "+c)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the name the gateway reads the text under, in errors and for relative paths (default: FILE's path)")
	ctlSocketFlag(cmd, o)
	return cmd
}

// readApplyFile reads a configuration to apply, at most
// control.MaxApplyConfig bytes, and returns it with the name it goes
// under by default: the file's absolute path, or "stdin".
func readApplyFile(e *env, path string) (string, string, error) {
	var r io.Reader = e.stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", "", withCode(ExitUsage, err)
		}
		defer f.Close()
		r, name = f, path
		if abs, err := filepath.Abs(path); err == nil {
			name = abs
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, control.MaxApplyConfig+1))
	if err != nil {
		return "", "", withCode(ExitUsage, err)
	}
	if len(data) > control.MaxApplyConfig {
		return "", "", withCode(ExitUsage, fmt.Errorf("%s: longer than %d bytes, the most a configuration may have", name, control.MaxApplyConfig))
	}
	return string(data), name, nil
}

func newStatsCommand(e *env) *cobra.Command {
	o := &ctlOptions{}
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats [--watch [--interval 1s]] [-o wide] [--json]",
		Short: "Show the counters of the running gateway",
		Long: `Show the counters of the running gateway: per worker, per receive
goroutine and per SA, each drop with its reason; then per TLS listener and
origin: connections, handshakes (resumed among them, failures by reason),
plaintext bytes each way, and its engine's signing queue (signatures,
batches, mean and largest batch, waiting now).

The tables fit 100 columns: -o wide adds the columns left out (TLS
refusals, idle closes, resumptions, requests and the signing queue) and
cuts no names; --json has everything.

--watch shows them again every --interval until interrupted: on a terminal
it redraws the screen; otherwise it prints one snapshot after another (with
--json, one JSON object per line). From the second snapshot on, the
counters of packets, bytes (as bits), handshakes and drops show their rate
per second since the snapshot before (the totals are in -o wide and
--json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("interval") && !watch {
				return withCode(ExitUsage, errors.New("--interval needs --watch"))
			}
			if interval < minWatchInterval {
				return withCode(ExitUsage, fmt.Errorf("--interval %v: want at least %v", interval, minWatchInterval))
			}
			v, err := o.view()
			if err != nil {
				return err
			}
			if !watch {
				st, err := ctlStats(cmd.Context(), o)
				if err != nil {
					return err
				}
				if o.json {
					return ctlPrintJSON(e.stdout, st)
				}
				return printStats(e.stdout, st, v)
			}
			return watchStats(cmd.Context(), e, o, v, interval)
		},
	}
	ctlSocketFlag(cmd, o)
	ctlJSONFlag(cmd, o)
	cmd.Flags().BoolVar(&watch, "watch", false, "show the counters again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between snapshots with --watch")
	return cmd
}

// watchStats shows a snapshot every interval until ctx ends. Each snapshot
// is read on a connection of its own, so the watch outlives the server's
// idle timeout whatever the interval.
func watchStats(ctx context.Context, e *env, o *ctlOptions, v ctlView, interval time.Duration) error {
	term := ctlIsTerminal(e.stdout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev *gateway.Stats
	var prevAt time.Time
	for {
		st, err := ctlStats(ctx, o)
		at := time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		// Rates from the second snapshot on, over the time between the
		// two reads.
		if prev != nil {
			v.rates = &ctlRates{prev: *prev, dt: at.Sub(prevAt)}
		}
		prev, prevAt = &st, at
		var b strings.Builder
		switch {
		case o.json:
			err = ctlPrintJSONLine(&b, st)
		case term:
			b.WriteString(ctlClearScreen)
			fmt.Fprintf(&b, "sluice stats, every %v%s: %s\n\n", interval, watchWhat(v), at.Format(time.TimeOnly))
			err = printStats(&b, st, v)
		default:
			fmt.Fprintf(&b, "--- %s%s\n", at.Format(time.RFC3339), watchWhat(v))
			err = printStats(&b, st, v)
			b.WriteString("\n")
		}
		if err != nil {
			return err
		}
		if _, err := io.WriteString(e.stdout, b.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchWhat says over what time a snapshot's rates are, or that it shows
// totals.
func watchWhat(v ctlView) string {
	if v.rates == nil {
		return " (totals; rates per second from the next snapshot)"
	}
	return fmt.Sprintf(" (rates per second over the last %v)", v.rates.dt.Round(time.Millisecond))
}

// ctlIsTerminal reports whether w is a terminal.
func ctlIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func ctlPrintJSON(w io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

func ctlPrintJSONLine(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

func ctlSPI(spi uint32) string { return fmt.Sprintf("0x%08x", spi) }

func ctlU64(v uint64) string { return strconv.FormatUint(v, 10) }

// dropsString is "reason=n reason=n", by reason, or "-".
func ctlDrops(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "-"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func ctlSum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func ctlList(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func ctlOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ctlView is how a command prints its tables: wide (-o wide) shows every
// column whole; rates, set by stats --watch from its second snapshot on,
// shows rates per second in place of the totals of the counters (the
// totals move to -o wide).
type ctlView struct {
	wide  bool
	rates *ctlRates
}

// ctlRates are the snapshot before the one shown and the time between
// the two.
type ctlRates struct {
	prev gateway.Stats
	dt   time.Duration
}

// per is the rate of a counter that went from prev to cur; found is false
// when the previous snapshot did not have it.
func (r *ctlRates) per(cur, prev uint64, found bool) string {
	if !found || cur < prev || r.dt <= 0 {
		return "-"
	}
	return ctlRate(float64(cur-prev)/r.dt.Seconds(), true)
}

// bits is the rate of a byte counter, in bits per second.
func (r *ctlRates) bits(cur, prev uint64, found bool) string {
	return r.per(8*cur, 8*prev, found)
}

// counterCols are the columns of a counter: its total, or with rates its
// rate (rate names it), the total only with -o wide.
func (v ctlView) counterCols(name, rate string) []ctlCol {
	if v.rates == nil {
		return []ctlCol{col(name)}
	}
	return []ctlCol{wideCol(name), col(rate)}
}

// counter is the cells of counterCols: the total, and with rates the rate
// fn computes.
func (v ctlView) counter(total uint64, rate func(*ctlRates) string) []string {
	if v.rates == nil {
		return []string{ctlU64(total)}
	}
	return []string{ctlU64(total), rate(v.rates)}
}

// dropCols are the columns of a drop counter by reason: with rates, the
// drops per second of all reasons, then the totals by reason.
func (v ctlView) dropCols() []ctlCol {
	if v.rates == nil {
		return []ctlCol{cutCol("DROPS")}
	}
	return []ctlCol{col("DROPS/S"), cutCol("DROPS")}
}

func (v ctlView) drops(cur, prev map[string]uint64, found bool) []string {
	if v.rates == nil {
		return []string{ctlDrops(cur)}
	}
	return []string{v.rates.per(ctlSum(cur), ctlSum(prev), found), ctlDrops(cur)}
}

func cols(groups ...[]ctlCol) []ctlCol {
	var out []ctlCol
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func cells(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func printSAs(w io.Writer, sas []gateway.SAInfo, v ctlView) error {
	if len(sas) == 0 {
		_, err := fmt.Fprintln(w, "no SAs")
		return err
	}
	t := newTable(w, v.wide, cutCol("TUNNEL"), col("DIR"), cutCol("NAME"), col("SPI"), col("ALG"), wideCol("MODE"),
		wideCol("ENCAP"), wideCol("ENGINE"), col("FLAGS"), col("PACKETS"), col("BYTES"), cutCol("DROPS"))
	for _, s := range sas {
		var flags []string
		if s.ESN {
			flags = append(flags, "esn")
		}
		if s.NeedsRekey {
			flags = append(flags, "rekey")
		}
		t.row(ctlOrDash(s.Tunnel), s.Direction, ctlOrDash(s.Name), ctlSPI(s.SPI), s.Alg, s.Mode, s.Encap, ctlOrDash(s.Engine),
			ctlList(flags), ctlU64(s.Packets), ctlU64(s.Bytes), ctlDrops(s.Drops))
	}
	return t.flush()
}

func printTunnels(w io.Writer, ts []gateway.TunnelInfo, v ctlView) error {
	if len(ts) == 0 {
		_, err := fmt.Fprintln(w, "no tunnels")
		return err
	}
	t := newTable(w, v.wide, cutCol("NAME"), wideCol("LOCAL"), col("PEER"), col("ENCAP"), col("MTU"), wideCol("WORKER"),
		cutCol("OUT"), cutCol("IN"), cutCol("REMOTE"))
	for _, tn := range ts {
		t.row(tn.Name, tn.Local, tn.Peer, tn.Encap, strconv.Itoa(tn.MTU), strconv.Itoa(tn.Worker), ctlOrDash(tn.Out),
			ctlList(tn.In), ctlList(tn.Remote))
	}
	return t.flush()
}

func printPolicies(w io.Writer, ps []gateway.PolicyInfo, v ctlView) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintln(w, "no policies: route-based mode (each tunnel's remote prefixes)")
		return err
	}
	t := newTable(w, v.wide, col("#"), cutCol("NAME"), cutMin("SELECTOR", 40), col("ACTION"), cutCol("TUNNEL"))
	for i, p := range ps {
		t.row(strconv.Itoa(i+1), ctlOrDash(p.Name), p.Selector, p.Action, ctlOrDash(p.Tunnel))
	}
	return t.flush()
}

// printStats prints the workers, the receivers and the SAs, each table with
// a total row where one adds up, then the TLS listeners. A TLS-only
// gateway (no workers, no SAs) has only the TLS table.
func printStats(w io.Writer, st gateway.Stats, v ctlView) error {
	if len(st.Dataplane.Workers) == 0 && len(st.Dataplane.Receivers) == 0 && len(st.SAs) == 0 && len(st.TLS) > 0 {
		return printTLSTable(w, st.TLS, v)
	}
	if err := printESPStats(w, st, v); err != nil {
		return err
	}
	if l := st.ESPLink; l != nil {
		fmt.Fprintln(w, espLinkLine(l))
	}
	if st.IKE != nil {
		if err := printIKEStats(w, st.IKE.Stats); err != nil {
			return err
		}
	}
	if len(st.TLS) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return printTLSTable(w, st.TLS, v)
}

// espLinkLine says which link carries ESP in UDP ([udp] link), and what
// each kind of link moved.
func espLinkLine(l *gateway.ESPLinkInfo) string {
	s := "\nESP link: " + l.Kind
	if l.Kind == "xdp" {
		s += fmt.Sprintf(" (%s) on %s, %d queue(s)", l.Mode, l.Interface, l.Queues)
	}
	s += fmt.Sprintf(", [udp] link = %q", l.Config)
	if l.Why != "" {
		s += "; " + l.Why
	}
	if x := l.XDP; x != nil {
		s += fmt.Sprintf("\n  AF_XDP   rx %d tx %d packets; not delivered rx %d, dropped tx %d, handed to the sockets %d", x.RxPackets, x.TxPackets, x.RxDrops, x.TxDrops, l.Fallbacks)
	}
	u := l.Socket
	s += fmt.Sprintf("\n  sockets  rx %d tx %d packets; not delivered rx %d (IKE, keepalives, drops), dropped tx %d", u.RxPackets, u.TxPackets, u.RxDrops, u.TxDrops)
	return s
}

// printTLSStats prints the TLS table with every column, for sluice demo
// tls, whose point is the signing queue's columns.
func printTLSStats(w io.Writer, ls []gateway.TLSInfo) error {
	return printTLSTable(w, ls, ctlView{wide: true})
}

// printTLSTable prints one row per TLS listener and origin: connections,
// handshakes, plaintext bytes, the signing queue of its engine (signatures,
// batches, the mean and largest batch, waiting now) and failed handshakes
// by reason.
func printTLSTable(w io.Writer, ls []gateway.TLSInfo, v ctlView) error {
	t := newTable(w, v.wide, cols(
		[]ctlCol{cutCol("TLS"), col("KIND"), cutCol("LISTEN"), col("OPEN"), wideCol("ACCEPTED"), wideCol("REFUSED"), wideCol("IDLE CLOSED")},
		v.counterCols("HANDSHAKES", "HS/S"), []ctlCol{wideCol("RESUMED")},
		v.counterCols("BYTES IN", "IN BIT/S"), v.counterCols("BYTES OUT", "OUT BIT/S"),
		[]ctlCol{wideCol("REQUESTS"), wideCol("SIGNS"), wideCol("BATCHES"), wideCol("MEAN BATCH"), wideCol("MAX BATCH"), wideCol("QUEUE"),
			cutCol("FAILURES")})...)
	for _, l := range ls {
		mean := "-"
		if l.SignBatches > 0 {
			mean = strconv.FormatFloat(float64(l.SignOps)/float64(l.SignBatches), 'f', 1, 64)
		}
		var p gateway.TLSInfo
		found := false
		if v.rates != nil {
			for _, q := range v.rates.prev.TLS {
				if q.Name == l.Name && q.Kind == l.Kind {
					p, found = q, true
				}
			}
		}
		t.row(cells(
			[]string{l.Name, l.Kind, l.Listen, ctlU64(l.Open), ctlU64(l.Accepted), ctlU64(l.Refused), ctlU64(l.IdleClosed)},
			v.counter(l.Handshakes, func(r *ctlRates) string { return r.per(l.Handshakes, p.Handshakes, found) }),
			[]string{ctlU64(l.Resumed)},
			v.counter(l.BytesIn, func(r *ctlRates) string { return r.bits(l.BytesIn, p.BytesIn, found) }),
			v.counter(l.BytesOut, func(r *ctlRates) string { return r.bits(l.BytesOut, p.BytesOut, found) }),
			[]string{ctlU64(l.Requests), ctlU64(l.SignOps), ctlU64(l.SignBatches), mean, ctlU64(l.SignMaxBatch), ctlU64(l.SignQueueDepth),
				ctlDrops(l.HandshakeFailures)})...)
	}
	return t.flush()
}

// printESPStats prints the data plane's tables: workers, receivers, SAs.
func printESPStats(w io.Writer, st gateway.Stats, v ctlView) error {
	var prev gateway.Stats
	if v.rates != nil {
		prev = v.rates.prev
	}
	t := newTable(w, v.wide, cols([]ctlCol{col("WORKER")}, v.counterCols("SEALED", "SEALED/S"), v.counterCols("OPENED", "OPENED/S"),
		v.counterCols("TX", "TX/S"), []ctlCol{col("TX ERRORS")}, v.dropCols())...)
	var sum, prevSum workerSum
	for _, ws := range st.Dataplane.Workers {
		var p dataplane.WorkerStats
		found := false
		for _, q := range prev.Dataplane.Workers {
			if q.Index == ws.Index {
				p, found = q, true
			}
		}
		t.row(cells([]string{strconv.Itoa(ws.Index)},
			v.counter(ws.Sealed, func(r *ctlRates) string { return r.per(ws.Sealed, p.Sealed, found) }),
			v.counter(ws.Opened, func(r *ctlRates) string { return r.per(ws.Opened, p.Opened, found) }),
			v.counter(ws.TxPackets, func(r *ctlRates) string { return r.per(ws.TxPackets, p.TxPackets, found) }),
			[]string{ctlU64(ws.TxErrors)}, v.drops(ws.Drops, p.Drops, found))...)
		sum.add(ws.Sealed, ws.Opened, ws.TxPackets, ws.TxErrors, ws.Drops)
	}
	for _, ws := range prev.Dataplane.Workers {
		prevSum.add(ws.Sealed, ws.Opened, ws.TxPackets, ws.TxErrors, ws.Drops)
	}
	if len(st.Dataplane.Workers) > 1 {
		found := len(prev.Dataplane.Workers) == len(st.Dataplane.Workers)
		t.row(cells([]string{"total"},
			v.counter(sum.n[0], func(r *ctlRates) string { return r.per(sum.n[0], prevSum.n[0], found) }),
			v.counter(sum.n[1], func(r *ctlRates) string { return r.per(sum.n[1], prevSum.n[1], found) }),
			v.counter(sum.n[2], func(r *ctlRates) string { return r.per(sum.n[2], prevSum.n[2], found) }),
			[]string{ctlU64(sum.n[3])}, v.drops(sum.drops, prevSum.drops, found))...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, v.wide, cols([]ctlCol{col("RECEIVER"), col("SIDE")}, v.counterCols("PACKETS", "PKTS/S"),
		v.counterCols("BYTES", "BITS/S"), v.dropCols())...)
	for i, rx := range st.Dataplane.Receivers {
		side := "esp"
		if rx.Plain {
			side = "plain"
		}
		var p dataplane.RxStats
		found := false
		for j, q := range prev.Dataplane.Receivers {
			if q.Name == rx.Name && q.Plain == rx.Plain && (rx.Name != "" || i == j) {
				p, found = q, true
			}
		}
		t.row(cells([]string{strconv.Itoa(i), side},
			v.counter(rx.Packets, func(r *ctlRates) string { return r.per(rx.Packets, p.Packets, found) }),
			v.counter(rx.Bytes, func(r *ctlRates) string { return r.bits(rx.Bytes, p.Bytes, found) }),
			v.drops(rx.Drops, p.Drops, found))...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(st.SAs) == 0 {
		_, err := fmt.Fprintln(w, "no SAs")
		return err
	}
	t = newTable(w, v.wide, cols([]ctlCol{cutCol("TUNNEL"), col("DIR"), cutCol("SA"), col("SPI")},
		v.counterCols("PACKETS", "PKTS/S"), v.counterCols("BYTES", "BITS/S"), v.dropCols())...)
	var failing []gateway.SAInfo
	for _, s := range st.SAs {
		var p gateway.SAInfo
		found := false
		for _, q := range prev.SAs {
			if q.Direction == s.Direction && q.SPI == s.SPI && q.Tunnel == s.Tunnel {
				p, found = q, true
			}
		}
		t.row(cells([]string{ctlOrDash(s.Tunnel), s.Direction, ctlOrDash(s.Name), ctlSPI(s.SPI)},
			v.counter(s.Packets, func(r *ctlRates) string { return r.per(s.Packets, p.Packets, found) }),
			v.counter(s.Bytes, func(r *ctlRates) string { return r.bits(s.Bytes, p.Bytes, found) }),
			v.drops(s.Drops, p.Drops, found))...)
		if s.StateFailing {
			failing = append(failing, s)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	// A state directory that cannot be written stops SAs: say so below
	// the table, where it cannot be missed.
	for _, s := range failing {
		if _, err := fmt.Fprintf(w, "\nSTATE FAILING: SA %s (%s, spi %s) cannot record its sequence-number reservation and drops its packets: %s (%d failures)\n",
			ctlOrDash(s.Name), s.Direction, ctlSPI(s.SPI), s.StateError, s.StateFailures); err != nil {
			return err
		}
	}
	return nil
}

// workerSum adds up the workers' counters.
type workerSum struct {
	n     [4]uint64
	drops map[string]uint64
}

func (s *workerSum) add(sealed, opened, tx, txErr uint64, drops map[string]uint64) {
	for i, v := range []uint64{sealed, opened, tx, txErr} {
		s.n[i] += v
	}
	if s.drops == nil {
		s.drops = map[string]uint64{}
	}
	for k, v := range drops {
		s.drops[k] += v
	}
}
