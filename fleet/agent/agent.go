// Package agent is the node agent of a sluice fleet: it runs beside
// `sluice run` on each gateway node and drives that gateway from the
// Kubernetes API.
//
// The agent
//
//  1. holds the gateway's membership Lease (lease.go): renewed every few
//     seconds, deleted on shutdown, which hands the gateway's tunnels to
//     its partner;
//  2. watches only its own GatewayAssignment (by name, so that a change to
//     another gateway's does not wake it), and reads the Tunnels,
//     TLSListeners and Secrets it names: in a cluster as its node's own
//     ServiceAccount, which may read those and no others (identity.go);
//  3. renders the gateway's whole configuration (render.go) and applies it
//     over the control socket when the rendering changed or the gateway
//     restarted (a new control connection: a restarted gateway runs its
//     bootstrap file again);
//  4. writes the assignment's status: the generation applied, the last
//     error, and the child SAs' SPIs (never keys) read from ike.list.
//
// The gateway starts from a bootstrap file the agent writes
// (Config.BootstrapFile: the parts a reload cannot change, [ha] with the
// partner among them, and no secret); a deleted assignment makes the
// agent apply that bootstrap again, so that the gateway gives up its
// VIPs.
//
// A bad object (a missing Secret, an empty PSK, an address that does not
// parse) is left out of the configuration and named in status.message; an
// apply the gateway refuses is retried with backoff. The agent does not
// stop for either.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/gateway"
)

// Defaults of Config's intervals.
const (
	DefaultPollInterval   = 2 * time.Second
	DefaultResyncInterval = 30 * time.Second
	MinRetry              = 500 * time.Millisecond
	MaxRetry              = 5 * time.Second
)

// Config configures an Agent.
type Config struct {
	// Client reads the objects the assignment names (uncached), renews
	// and deletes the Lease and writes the assignment's status: in a
	// cluster, as this node's own agent account (NodeConfig).
	Client client.Client
	// LeaseCreator creates the Lease when Client cannot read it: in a
	// cluster, the pod's account, the node's own not existing before
	// the Lease does (identity.go). Nil is Client.
	LeaseCreator client.Client
	// Assignments reads this gateway's GatewayAssignment: a cache that
	// holds only it (WatchAssignment), or nil for Client.
	Assignments client.Reader
	// Gateway is this gateway's name (its node's); Namespace the pool's
	// namespace; Pool the pool's name.
	Gateway, Namespace, Pool string
	// Zone and NodeAddress are this node's, published on the Lease; the
	// sync channel listens on NodeAddress.
	Zone        string
	NodeAddress netip.Addr
	// Dir is the memory-backed directory the credentials [ha] and [[tls]]
	// name as files go to.
	Dir string
	// ControlSocket is the gateway's control socket, written into the
	// configuration's [gateway]; Dial connects to it.
	ControlSocket string
	Dial          Dialer
	// BootstrapFile, if set, is where the agent writes the configuration
	// the gateway must start with (Rendering.Bootstrap: the parts an
	// apply cannot change, [ha] with the partner among them, and no
	// secret), for `sluice run --config` in the gateway's container.
	BootstrapFile string
	// StateDir is the gateway's state directory, written into [gateway]
	// ("" for the gateway's default).
	StateDir string
	// KeepLease leaves the Lease in place when Run returns: the
	// bootstrap-only init container's agent, whose Lease the agent
	// container that follows it holds on (deleting it would make the
	// controller move the gateway's tunnels away and back).
	KeepLease bool
	// LeaseDuration and RenewInterval are the Lease's (defaults
	// DefaultLeaseDuration, DefaultRenewInterval).
	LeaseDuration, RenewInterval time.Duration
	// PollInterval is how often the agent asks the gateway for its child
	// SAs, which also finds a restarted gateway; ResyncInterval how often
	// it reads the objects again without a change to its assignment (a
	// rotated Secret is applied within it).
	PollInterval, ResyncInterval time.Duration
	// Log is the logger; nil discards.
	Log *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Agent drives one gateway. Its methods are for one goroutine (Run), but
// Wake may be called from any.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	wake chan struct{}

	// State of the loop, owned by Run's goroutine.
	gw       Gateway           // nil while not connected
	applied  string            // the text applied on gw's connection
	want     *desired          // the last rendering
	status   statusState       // the status last written
	failures int               // consecutive failed syncs, for the backoff
	files    map[string][]byte // the credential files written
}

// desired is a rendering ready to apply.
type desired struct {
	generation int64
	text       string
	bootstrap  []byte
	files      map[string][]byte
	keys       []TicketKey
	keyVersion int64
	problems   []string
}

// statusState is what the agent writes into the assignment's status.
type statusState struct {
	applied    int64
	keyVersion int64
	message    string
	childSAs   []v1alpha1.AssignedChildSA
}

// New returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil || cfg.Dial == nil {
		return nil, errors.New("agent: no Kubernetes client or gateway dialer")
	}
	if cfg.Gateway == "" || cfg.Namespace == "" || cfg.Pool == "" {
		return nil, errors.New("agent: the gateway, namespace and pool are required")
	}
	if !cfg.NodeAddress.IsValid() {
		return nil, errors.New("agent: no node address")
	}
	if cfg.Assignments == nil {
		cfg.Assignments = cfg.Client
	}
	if cfg.LeaseCreator == nil {
		cfg.LeaseCreator = cfg.Client
	}
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.RenewInterval = cmp.Or(cfg.RenewInterval, DefaultRenewInterval)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.ResyncInterval = cmp.Or(cfg.ResyncInterval, DefaultResyncInterval)
	a := &Agent{cfg: cfg, log: cfg.Log, now: cfg.Now, wake: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// Wake makes Run read the assignment again now (the assignment's watch
// calls it on every event).
func (a *Agent) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run holds the Lease and keeps the gateway configured until ctx ends;
// then it deletes the Lease and returns nil.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { a.holdLease(ctx) })
	defer wg.Wait()
	defer a.disconnect()

	poll := time.NewTicker(a.cfg.PollInterval)
	defer poll.Stop()
	retry := time.NewTimer(0) // the first sync, at once
	defer retry.Stop()
	lastSync := time.Time{}
	for {
		full := false
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
			full = true
		case <-retry.C:
			full = true
		case <-poll.C:
			if a.failures > 0 {
				continue // the retry timer's backoff decides when to try again
			}
			full = a.now().Sub(lastSync) >= a.cfg.ResyncInterval
		}
		var err error
		if full {
			lastSync = a.now()
			err = a.Sync(ctx)
		} else {
			err = a.Poll(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			a.failures++
			d := min(MinRetry<<min(a.failures-1, 10), MaxRetry)
			a.log.Warn("sync failed", "err", err, "retry", d)
			retry.Reset(d)
		} else {
			a.failures = 0
		}
	}
}

// Sync reads the assignment and what it names, renders, writes the
// credential files, applies the configuration if it changed (or the
// gateway restarted) and writes the status. It returns an error to be
// retried; the error is in the status's message too, when the status can
// be written.
func (a *Agent) Sync(ctx context.Context) error {
	var asg v1alpha1.GatewayAssignment
	key := client.ObjectKey{Namespace: a.cfg.Namespace, Name: a.cfg.Gateway}
	if err := a.cfg.Assignments.Get(ctx, key, &asg); err != nil {
		if apierrors.IsNotFound(err) {
			return a.unassigned(ctx)
		}
		return fmt.Errorf("agent: get assignment %s: %w", key, err)
	}
	want, err := a.render(ctx, &asg)
	if err != nil {
		return a.fail(ctx, &asg, err)
	}
	a.want = want
	return a.apply(ctx, &asg)
}

// unassigned is Sync without an assignment. Before the first one the
// gateway keeps what it runs (its bootstrap). After one was deleted (the
// gateway left the pool) it applies the bootstrap again: no tunnel, no
// listener and groups without addresses, so that the gateway gives up the
// VIPs the pool now gives others.
func (a *Agent) unassigned(ctx context.Context) error {
	if a.want == nil || a.want.text == string(a.want.bootstrap) {
		return nil
	}
	empty := &desired{text: string(a.want.bootstrap), bootstrap: a.want.bootstrap}
	if a.gw == nil {
		gw, err := a.cfg.Dial(ctx)
		if err != nil {
			return fmt.Errorf("agent: gateway not reachable: %w", err)
		}
		a.gw, a.applied = gw, ""
	}
	err := a.gw.Apply(ctx, ApplyRequest{Name: fmt.Sprintf("gatewayassignment %s/%s deleted", a.cfg.Namespace, a.cfg.Gateway), Config: empty.text})
	if err != nil {
		a.dropIfLost(err)
		return fmt.Errorf("agent: apply without an assignment: %w", err)
	}
	a.want, a.applied, a.status = empty, empty.text, statusState{}
	a.log.Info("assignment deleted: tunnels and listeners removed")
	return nil
}

// Poll applies the last rendering again if the gateway restarted, and
// refreshes the child SAs in the status.
func (a *Agent) Poll(ctx context.Context) error {
	if a.want == nil {
		return nil
	}
	var asg v1alpha1.GatewayAssignment
	key := client.ObjectKey{Namespace: a.cfg.Namespace, Name: a.cfg.Gateway}
	if err := a.cfg.Assignments.Get(ctx, key, &asg); err != nil {
		if apierrors.IsNotFound(err) {
			return a.unassigned(ctx)
		}
		return fmt.Errorf("agent: get assignment %s: %w", key, err)
	}
	if asg.Spec.Generation != a.want.generation {
		return a.Sync(ctx)
	}
	return a.apply(ctx, &asg)
}

// render reads what asg names and renders it.
func (a *Agent) render(ctx context.Context, asg *v1alpha1.GatewayAssignment) (*desired, error) {
	in := Inputs{Assignment: asg, Tunnels: map[string]*v1alpha1.Tunnel{}, Listeners: map[string]*v1alpha1.TLSListener{},
		Secrets: map[string]*corev1.Secret{}, NodeAddress: a.cfg.NodeAddress, Dir: a.cfg.Dir, ControlSocket: a.cfg.ControlSocket, StateDir: a.cfg.StateDir}
	ns := a.cfg.Namespace
	var pool v1alpha1.GatewayPool
	poolName := cmp.Or(asg.Spec.Pool, a.cfg.Pool)
	if err := a.cfg.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, &pool); err != nil {
		return nil, fmt.Errorf("agent: get pool %s/%s: %w", ns, poolName, err)
	}
	in.Pool = &pool
	secret := func(name string) error {
		if name == "" || in.Secrets[name] != nil {
			return nil
		}
		var s corev1.Secret
		err := a.cfg.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			return nil // Render says what is missing
		case err != nil:
			return fmt.Errorf("agent: get Secret %s/%s: %w", ns, name, err)
		}
		in.Secrets[name] = &s
		return nil
	}
	for _, o := range asg.Spec.Tunnels {
		var t v1alpha1.Tunnel
		err := a.cfg.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Name}, &t)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("agent: get tunnel %s/%s: %w", ns, o.Name, err)
		}
		in.Tunnels[o.Name] = &t
		if t.Spec.PSKSecretRef != nil {
			if err := secret(t.Spec.PSKSecretRef.Name); err != nil {
				return nil, err
			}
		}
	}
	for _, o := range asg.Spec.Listeners {
		var l v1alpha1.TLSListener
		err := a.cfg.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Name}, &l)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("agent: get listener %s/%s: %w", ns, o.Name, err)
		}
		in.Listeners[o.Name] = &l
		if err := secret(l.Spec.CertificateSecretRef.Name); err != nil {
			return nil, err
		}
	}
	if err := secret(asg.Spec.HASecret); err != nil {
		return nil, err
	}
	r, err := Render(in)
	if err != nil {
		return nil, err
	}
	text, err := r.File.Encode()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	boot := r.Bootstrap()
	bootText, err := boot.Encode()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	d := &desired{generation: asg.Spec.Generation, text: string(text), bootstrap: bootText, files: r.Files, problems: r.Problems}
	if asg.Spec.TicketKeySecret != "" {
		if err := secret(asg.Spec.TicketKeySecret); err != nil {
			return nil, err
		}
		d.keys, d.keyVersion, err = ticketKeys(in.Secrets[asg.Spec.TicketKeySecret], asg.Spec.TicketKeySecret, asg.Spec.TicketKeyVersion)
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// apply makes the gateway run a.want, then writes the status.
func (a *Agent) apply(ctx context.Context, asg *v1alpha1.GatewayAssignment) error {
	want := a.want
	if err := a.writeFiles(want.files); err != nil {
		return a.fail(ctx, asg, err)
	}
	if err := a.writeBootstrap(want.bootstrap); err != nil {
		return a.fail(ctx, asg, err)
	}
	if a.gw == nil {
		gw, err := a.cfg.Dial(ctx)
		if err != nil {
			return a.fail(ctx, asg, fmt.Errorf("agent: gateway not reachable: %w", err))
		}
		a.gw, a.applied = gw, ""
	}
	// A new connection applies even an unchanged rendering: the gateway
	// may have restarted from its bootstrap file.
	if want.text != a.applied || want.keyVersion != a.status.keyVersion {
		req := ApplyRequest{Name: a.applyName(asg), Config: want.text, TicketKeys: want.keys}
		if err := a.gw.Apply(ctx, req); err != nil {
			a.dropIfLost(err)
			return a.fail(ctx, asg, fmt.Errorf("agent: apply generation %d: %w", want.generation, err))
		}
		a.applied = want.text
		a.log.Info("applied", "generation", want.generation, "problems", len(want.problems))
	}
	info, err := a.gw.IKE(ctx)
	if err != nil {
		a.dropIfLost(err)
		return a.fail(ctx, asg, fmt.Errorf("agent: ike.list: %w", err))
	}
	st := statusState{applied: want.generation, keyVersion: want.keyVersion,
		message: strings.Join(want.problems, "; "), childSAs: childSAs(info, asg)}
	return a.writeStatus(ctx, asg, st)
}

// applyName is what the gateway's errors call the applied text.
func (a *Agent) applyName(asg *v1alpha1.GatewayAssignment) string {
	return fmt.Sprintf("gatewayassignment %s/%s generation %d", asg.Namespace, asg.Name, asg.Spec.Generation)
}

// dropIfLost forgets the connection after an error that is not the
// gateway's answer: the connection is out of step or gone, and the next
// sync dials again (and applies again).
func (a *Agent) dropIfLost(err error) {
	var re *control.RemoteError
	if errors.As(err, &re) {
		return
	}
	a.disconnect()
}

func (a *Agent) disconnect() {
	if a.gw != nil {
		a.gw.Close()
		a.gw, a.applied = nil, ""
	}
}

// fail writes err into the status's message (keeping the rest) and
// returns it.
func (a *Agent) fail(ctx context.Context, asg *v1alpha1.GatewayAssignment, err error) error {
	st := a.status
	if st.applied == 0 {
		st.applied = asg.Status.AppliedGeneration
		st.keyVersion = asg.Status.TicketKeyVersion
		st.childSAs = asg.Status.ChildSAs
	}
	st.message = err.Error()
	if werr := a.writeStatus(ctx, asg, st); werr != nil {
		a.log.Warn("status not written", "err", werr)
	}
	return err
}

// writeStatus writes st into asg's status if it differs from what is
// there.
func (a *Agent) writeStatus(ctx context.Context, asg *v1alpha1.GatewayAssignment, st statusState) error {
	s := &asg.Status
	if s.AppliedGeneration == st.applied && s.TicketKeyVersion == st.keyVersion && s.Message == st.message &&
		slices.Equal(s.ChildSAs, st.childSAs) {
		a.status = st
		return nil
	}
	patch := client.MergeFrom(asg.DeepCopy())
	s.AppliedGeneration, s.TicketKeyVersion, s.Message, s.ChildSAs = st.applied, st.keyVersion, st.message, st.childSAs
	if err := a.cfg.Client.Status().Patch(ctx, asg, patch); err != nil {
		return fmt.Errorf("agent: write status of %s/%s: %w", asg.Namespace, asg.Name, err)
	}
	a.status = st
	return nil
}

// childSAs lists the installed children of the connections of the
// tunnels asg says this gateway owns, with their SPIs (a standby may hold
// its partner's SAs too; the owner's are the tunnel's).
func childSAs(info gateway.IKEInfo, asg *v1alpha1.GatewayAssignment) []v1alpha1.AssignedChildSA {
	var out []v1alpha1.AssignedChildSA
	for _, c := range info.Connections {
		if !slices.ContainsFunc(asg.Spec.Tunnels, func(o v1alpha1.AssignedObject) bool {
			return o.Name == c.Name && o.Role == v1alpha1.RoleOwner
		}) {
			continue
		}
		for _, ch := range c.Children {
			if ch.InSPI == 0 && ch.OutSPI == 0 {
				continue
			}
			out = append(out, v1alpha1.AssignedChildSA{Tunnel: c.Name, Name: strings.TrimPrefix(ch.Name, ChildName(c.Name, "")),
				SPIIn: fmt.Sprintf("0x%08x", ch.InSPI), SPIOut: fmt.Sprintf("0x%08x", ch.OutSPI)})
		}
	}
	return out
}

// writeFiles writes the credential files that changed into the
// directory, each by a rename so the gateway never reads half a file.
func (a *Agent) writeFiles(files map[string][]byte) error {
	if len(files) > 0 && a.cfg.Dir == "" {
		return errors.New("agent: credentials to write and no directory for them (--ha-dir)")
	}
	for name, data := range files {
		if old, ok := a.files[name]; ok && string(old) == string(data) {
			continue
		}
		if err := writeAtomic(filepath.Join(a.cfg.Dir, name), data); err != nil {
			return err
		}
		if a.files == nil {
			a.files = map[string][]byte{}
		}
		a.files[name] = data
	}
	return nil
}

// writeBootstrap writes the bootstrap file if it is configured and its
// content differs. A gateway running an older one needs a restart to
// take the new one: its apply is refused until then, which the status
// says.
func (a *Agent) writeBootstrap(data []byte) error {
	if a.cfg.BootstrapFile == "" {
		return nil
	}
	if old, err := os.ReadFile(a.cfg.BootstrapFile); err == nil && string(old) == string(data) {
		return nil
	}
	return writeAtomic(a.cfg.BootstrapFile, data)
}

// writeAtomic writes data to path by a rename, so that a reader never
// sees half of it; the file's mode is 0600 and its directory is made.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}
