package failover

// A bench run, system after system, Options.Runs times each; every run
// builds its own lab (lab.HATopology), starts the system, waits until
// traffic flows, measures one kill -9 (measure.go) and removes everything.
// With sluice-ha among the systems, the steady-state throughput of one TCP
// stream through the owner is measured without and with a standby first.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicegw/sluice/bench"
	"github.com/sluicegw/sluice/ha"
	"github.com/sluicegw/sluice/internal/lab"
)

// Options shape a Run.
type Options struct {
	Systems []string
	// Runs is the kills per system.
	Runs int
	// Rate is the datagrams per second of each sequence-numbered flow.
	Rate int
	// TCPMbps is the rate of the paced TCP stream.
	TCPMbps float64
	// GiveUp bounds the wait for traffic after a kill: a run that reaches
	// it reports the gap as at least GiveUp.
	GiveUp time.Duration
	// DPDDelay is the liveness-check interval of the peer opposite
	// strongSwan (its dpd_delay).
	DPDDelay time.Duration
	// Throughput is the length of each steady-state TCP measurement (0:
	// none); ThroughputRepeat how many of each, the median reported.
	Throughput       time.Duration
	ThroughputRepeat int
	// GatewayArgv returns the command line of `sluice` with args.
	GatewayArgv func(args ...string) ([]string, error)
	Log         *slog.Logger
}

// Defaults of the options.
const (
	DefaultRuns       = 5
	DefaultRate       = 20000
	DefaultTCPMbps    = 20 // strongSwan's libipsec carries about 50 Mbit/s here
	DefaultGiveUp     = 60 * time.Second
	DefaultDPDDelay   = 10 * time.Second
	DefaultThroughput = 5 * time.Second
	DefaultTPRepeat   = 3
	// BenchName names the JSON document of --plot-style outputs.
	BenchName = "failover"
)

// Check checks the options.
func (o *Options) Check() error {
	if len(o.Systems) == 0 {
		return errors.New("--systems: name at least one system")
	}
	for _, s := range o.Systems {
		if !slices.Contains(Systems, s) {
			return fmt.Errorf("--systems: unknown system %q (want %s)", s, strings.Join(Systems, ", "))
		}
	}
	switch {
	case o.Runs < 1 || o.Runs > 1000:
		return fmt.Errorf("--runs %d: want 1 to 1000", o.Runs)
	case o.Rate < 100 || o.Rate > 200000:
		return fmt.Errorf("--rate %d: want 100 to 200000 datagrams a second", o.Rate)
	case o.TCPMbps < 1 || o.TCPMbps > 10000:
		return fmt.Errorf("--tcp-rate %g: want 1 to 10000 Mbit/s", o.TCPMbps)
	case o.GiveUp < 5*time.Second || o.GiveUp > 10*time.Minute:
		return fmt.Errorf("--give-up %v: want 5s to 10m", o.GiveUp)
	case o.DPDDelay < time.Second || o.DPDDelay > time.Hour:
		return fmt.Errorf("--dpd-delay %v: want 1s to 1h", o.DPDDelay)
	case o.Throughput < 0 || o.Throughput > 10*time.Minute:
		return fmt.Errorf("--throughput %v: want 0 (none) to 10m", o.Throughput)
	case o.Throughput > 0 && (o.ThroughputRepeat < 1 || o.ThroughputRepeat > 100):
		return fmt.Errorf("--throughput-repeat %d: want 1 to 100", o.ThroughputRepeat)
	}
	return nil
}

// Ordered returns the selected systems in the order they run.
func (o *Options) Ordered() []string {
	var ss []string
	for _, s := range Systems {
		if slices.Contains(o.Systems, s) {
			ss = append(ss, s)
		}
	}
	return ss
}

// Steps is the number of measured steps of a run.
func (o *Options) Steps() int {
	n := len(o.Systems) * o.Runs
	if o.throughput() {
		n += 2 * o.ThroughputRepeat
	}
	return n
}

func (o *Options) throughput() bool {
	return o.Throughput > 0 && slices.ContainsFunc(o.Systems, func(s string) bool { return strings.HasPrefix(s, SluiceHA) })
}

// Estimate is a rough length of the run: each kill about 8 s with the
// set-up, strongSwan's up to the bound.
func (o *Options) Estimate() time.Duration {
	var d time.Duration
	for _, s := range o.Systems {
		per := 8 * time.Second
		if s == StrongSwanRestart {
			per = 10*time.Second + o.GiveUp
		}
		d += time.Duration(o.Runs) * per
	}
	if o.throughput() {
		d += time.Duration(2*o.ThroughputRepeat) * (o.Throughput + 5*time.Second)
	}
	return d
}

// Observer follows a run, from Run's goroutine.
type Observer interface {
	Step(label string)
	StepDone()
	Note(msg string)
	// SystemDone delivers a system's samples and their summary.
	SystemDone(s Summary, samples []Sample)
}

// Run runs the bench. It returns the document with what was measured even
// when a run failed; the error says which.
func Run(ctx context.Context, o Options, obs Observer) (*Document, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	doc := &Document{Env: bench.CurrentEnv()}
	doc.Options.Runs, doc.Options.Rate, doc.Options.TCPMbps = o.Runs, o.Rate, o.TCPMbps
	doc.Options.GiveUp, doc.Options.DPD = o.GiveUp.Seconds(), o.DPDDelay.Seconds()
	var errs []error
	if o.throughput() {
		tp, err := runThroughput(ctx, &o, obs)
		if err != nil {
			errs = append(errs, fmt.Errorf("throughput: %w", err))
		} else {
			doc.Throughput = tp
		}
	}
	for _, sys := range o.Ordered() {
		var ss []Sample
		for i := 1; i <= o.Runs && ctx.Err() == nil; i++ {
			obs.Step(fmt.Sprintf("%s, kill %d of %d", sys, i, o.Runs))
			s, err := runOnce(ctx, &o, sys)
			obs.StepDone()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s, run %d: %w", sys, i, err))
				obs.Note(fmt.Sprintf("%s, run %d failed: %v", sys, i, firstLine(err)))
				continue
			}
			s.System, s.Run = sys, i
			ss = append(ss, s)
		}
		doc.Samples = append(doc.Samples, ss...)
		if len(ss) > 0 {
			sum := Summarize(sys, ss)
			doc.Summaries = append(doc.Summaries, sum)
			obs.SystemDone(sum, ss)
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	return doc, errors.Join(errs...)
}

// firstLine is an error's first line (the rest are logs).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// runOnce builds a bed, starts sys, and measures one kill.
func runOnce(ctx context.Context, o *Options, sys string) (s Sample, err error) {
	b, err := newBed(ctx, o)
	defer func() {
		if err != nil && b.topo != nil {
			err = fmt.Errorf("%w%s", err, b.logs())
		}
		if cerr := b.lab.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err != nil {
		return s, err
	}
	switch sys {
	case SluiceRestart:
		return b.sluiceRestart()
	case SluiceHA:
		return b.sluiceHA(kill)
	case SluiceHASilent:
		return b.sluiceHA(silent)
	case SluiceHandover:
		return b.sluiceHA(handover)
	case StrongSwanRestart:
		return b.strongSwanRestart()
	}
	return s, fmt.Errorf("bench: unknown system %q", sys)
}

// waitTraffic waits until an echo (ping) from the host reaches the remote
// host through the tunnel.
func (b *bed) waitTraffic(timeout time.Duration) error {
	t := b.topo
	return lab.WaitFor(b.ctx, "a ping through the tunnel", timeout, 100*time.Millisecond, func() (bool, error) {
		_, err := t.Host.Exec(b.ctx, "ping", "-c", "1", "-W", "1", "-q", t.RemoteAddr.String())
		return err == nil, err
	})
}

// sluiceRestart: gateway a alone with the virtual addresses, killed and
// started again at once from the same configuration and state directory,
// as a supervisor would.
func (b *bed) sluiceRestart() (Sample, error) {
	gw, peer := b.staticConfigs()
	if err := b.topo.AddVIPs(b.ctx, b.topo.A); err != nil {
		return Sample{}, err
	}
	if err := b.run(b.peer, peer); err != nil {
		return Sample{}, err
	}
	a := b.gw[0]
	if err := b.run(a, gw); err != nil {
		return Sample{}, err
	}
	if err := b.waitTraffic(upWait); err != nil {
		return Sample{}, err
	}
	return b.measure(a, func() (*daemon, error) {
		a.proc.Kill()
		return a, b.restart(a)
	})
}

// startHA starts the peer and both members with [ha] (a preferred) and
// waits until a owns the group with b in sync and traffic flows.
func (b *bed) startHA() error {
	t := b.topo
	gw, peer := b.staticConfigs()
	creds, err := b.haCreds()
	if err != nil {
		return err
	}
	if err := b.run(b.peer, peer); err != nil {
		return err
	}
	for i, m := range []struct {
		me, other *lab.HAGateway
		pref      int
	}{{t.A, t.B, 200}, {t.B, t.A, 100}} {
		f := *gw
		f.HA = b.topo.HAConfig(m.me, m.other, m.pref, creds)
		if err := b.run(b.gw[i], &f); err != nil {
			return err
		}
	}
	if err := t.WaitVIP(b.ctx, t.A, upWait); err != nil {
		return err
	}
	for i, role := range []string{"owner", "standby"} {
		d := b.gw[i]
		err := lab.WaitFor(b.ctx, "gateway "+d.name+" to be "+role+" in sync", upWait, 20*time.Millisecond, func() (bool, error) {
			st, err := b.haStatus(d)
			if err != nil {
				return false, err
			}
			return hasRole(st, role), fmt.Errorf("groups %+v", st.Groups)
		})
		if err != nil {
			return err
		}
	}
	return b.waitTraffic(upWait)
}

// haEnd is how the owner's ownership ends in sluiceHA.
type haEnd int

const (
	kill     haEnd = iota // SIGKILL
	silent                // cut off the network, then SIGKILL
	handover              // sluice ha handover
)

// sluiceHA: gateways a (preferred, the owner) and b (the standby) with
// [ha]; a is killed and b takes the tunnel over. The disruption ends when
// the wan router's neighbour entry for the virtual address is b's MAC
// (b's gratuitous ARP): the killed process leaves the address on a's
// interface, as a crashed daemon does on its box, as e2e's
// TestHAFailover has it. With silent, a is first cut off the wan and
// the sync link (lab.HATopology.Isolate), so that b learns of its death
// only by missing heartbeats; with handover, a is not killed but hands
// the group over (`sluice ha handover`). Takeover is the gap b's `sluice
// ha status` reports.
func (b *bed) sluiceHA(how haEnd) (Sample, error) {
	if err := b.startHA(); err != nil {
		return Sample{}, err
	}
	t := b.topo
	mac, err := t.B.NS.LinkMAC(lab.HAWANIf)
	if err != nil {
		return Sample{}, err
	}
	s, err := b.measure(b.gw[0], func() (*daemon, error) {
		switch how {
		case silent:
			if err := t.Isolate(b.ctx, t.A); err != nil {
				return nil, err
			}
			b.gw[0].proc.Kill()
		case handover:
			if _, err := b.cli(b.gw[0], "ha", "handover"); err != nil {
				return nil, err
			}
		default:
			b.gw[0].proc.Kill()
		}
		return b.gw[1], lab.WaitFor(b.ctx, "the wan router to follow the address to b", b.o.GiveUp, 2*time.Millisecond, func() (bool, error) {
			got, _, err := t.WAN.Neighbour(t.WANVIP.Addr())
			return err == nil && got.String() == mac.String(), fmt.Errorf("%v, %v", got, err)
		})
	})
	if err != nil {
		return s, err
	}
	st, err := b.haStatus(b.gw[1])
	if err != nil {
		return s, err
	}
	for _, g := range st.Groups {
		if g.Role == "owner" {
			s.Takeover = g.LastGap
		}
	}
	return s, nil
}

// strongSwanRestart: charon in gateway a (responder) opposite a sluice
// peer that initiates and checks liveness every DPDDelay; charon is
// killed and started again at once with its configuration; the peer must
// find the old IKE SA dead and negotiate again.
func (b *bed) strongSwanRestart() (Sample, error) {
	t := b.topo
	if err := t.AddVIPs(b.ctx, t.A); err != nil {
		return Sample{}, err
	}
	psk := hexKey(16)
	if err := b.startCharon(psk); err != nil {
		return Sample{}, err
	}
	if err := b.run(b.peer, b.ikePeerConfig(psk)); err != nil {
		return Sample{}, err
	}
	if err := b.waitTraffic(upWait); err != nil {
		return Sample{}, err
	}
	return b.measure(nil, func() (*daemon, error) {
		b.ch.Kill()
		return nil, b.startCharon(psk)
	})
}

// runThroughput measures one TCP stream from the host to the remote host
// through gateway a, Throughput long, ThroughputRepeat times: with a alone
// (no [ha]) and with a owning the group and b its standby.
func runThroughput(ctx context.Context, o *Options, obs Observer) (*Throughput, error) {
	tp := &Throughput{Repeat: o.ThroughputRepeat, Seconds: o.Throughput.Seconds()}
	for _, with := range []bool{false, true} {
		var rs []float64
		err := func() (err error) {
			b, err := newBed(ctx, o)
			defer func() {
				if err != nil && b.topo != nil {
					err = fmt.Errorf("%w%s", err, b.logs())
				}
				b.lab.Close()
			}()
			if err != nil {
				return err
			}
			if with {
				err = b.startHA()
			} else {
				gw, peer := b.staticConfigs()
				if err = b.topo.AddVIPs(ctx, b.topo.A); err == nil {
					err = b.run(b.peer, peer)
				}
				if err == nil {
					err = b.run(b.gw[0], gw)
				}
				if err == nil {
					err = b.waitTraffic(upWait)
				}
			}
			if err != nil {
				return err
			}
			t := b.topo
			addr := fmt.Sprintf("%s:%d", t.RemoteAddr, portTCP)
			ln, err := t.Remote.Listen("tcp", addr)
			if err != nil {
				return err
			}
			defer ln.Close()
			for i := range o.ThroughputRepeat {
				obs.Step(fmt.Sprintf("throughput %s a standby, %d of %d", map[bool]string{false: "without", true: "with"}[with], i+1, o.ThroughputRepeat))
				r, err := lab.TCPStream(ctx, ln, func(ctx context.Context) (net.Conn, error) { return t.Host.Dial(ctx, "tcp", addr) }, o.Throughput)
				obs.StepDone()
				if err != nil {
					return err
				}
				rs = append(rs, r.Mbps())
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
		sort.Float64s(rs)
		m := rs[len(rs)/2]
		if with {
			tp.With = m
		} else {
			tp.Without = m
		}
	}
	return tp, nil
}

// haStatus is d's `sluice ha status --json`.
func (b *bed) haStatus(d *daemon) (ha.Status, error) {
	var st ha.Status
	out, err := b.cli(d, "ha", "status", "--json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("bench: sluice ha status --json: %w: %s", err, lab.Tail(out, 3))
	}
	return st, nil
}

// hasRole says whether st shows a group in which the member has role and
// is in sync (an owner with a standby that holds its state, a standby
// that holds it).
func hasRole(st ha.Status, role string) bool {
	for _, g := range st.Groups {
		if g.Role == role && g.InSync {
			return true
		}
	}
	return false
}
