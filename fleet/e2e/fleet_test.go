// Package e2e runs the fleet end to end: a real API server, the controller
// and two node agents in this process, and real `sluice run` gateways in
// the network namespaces of the failover tests (lab.HATopology), with a
// sluice peer behind the WAN router.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/fleet/agent"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/controller"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
	"github.com/sluicegw/sluice/internal/lab"
)

const (
	ns       = "fleet"
	pool     = "edge"
	tunnel   = "site-peer"
	gwID     = "gw.fleet.sluice"
	peerID   = "peer.fleet.sluice"
	syncPort = 7310
	// flowRate is the datagrams per second of each measuring flow.
	flowRate = 2000
)

// measuref logs a measurement, marked so that it can be found in CI logs.
func measuref(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("measure: "+format, args...)
}

// member is one gateway of the pool: its namespace, its agent and its
// `sluice run`.
type member struct {
	name   string
	hg     *lab.HAGateway
	sock   string
	boot   string
	log    string
	proc   *lab.Process
	cancel context.CancelFunc
	done   chan error
}

// bed is the fleet's test bed.
type bed struct {
	t      *testing.T
	ctx    context.Context
	lab    *lab.Lab
	topo   *lab.HATopology
	c      client.Client
	sluice string
	dir    string
	gws    map[string]*member
	peer   *lab.Process
}

func newBed(t *testing.T) *bed {
	t.Helper()
	lab.Require(t)
	_, cfg := fleettest.StartAPIServer(t)
	ctx := t.Context()
	b := &bed{t: t, ctx: ctx, lab: lab.NewForTest(t, nil), dir: t.TempDir(), gws: map[string]*member{}}
	b.sluice = fleettest.BuildSluice(t, b.dir)
	var err error
	if b.topo, err = b.lab.NewHATopology(ctx); err != nil {
		t.Fatal(err)
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	if b.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	b.must(b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	b.must(b.c.Create(ctx, &v1alpha1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool},
		Spec: v1alpha1.GatewayPoolSpec{VIPInterface: lab.HAWANIf, VIPPrefixLength: int32(b.topo.WANVIP.Bits()), SyncPort: syncPort}}))

	mgr, _, err := controller.NewManager(cfg, controller.Options{Namespace: ns, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	b.must(err)
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-mdone })

	// Control sockets live in a short directory: a socket path has at
	// most 107 bytes.
	sockDir, err := os.MkdirTemp("", "sfe")
	b.must(err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	for _, hg := range []*lab.HAGateway{b.topo.A, b.topo.B} {
		m := &member{name: "gw" + hg.Name, hg: hg, sock: filepath.Join(sockDir, hg.Name+".sock"),
			boot: filepath.Join(b.dir, "gw"+hg.Name, "sluice.toml"), log: filepath.Join(b.dir, "gw"+hg.Name+".log")}
		b.gws[m.name] = m
		b.startAgent(cfg, m)
		t.Cleanup(func() {
			if t.Failed() && m.proc != nil {
				t.Logf("log of %s (%s):\n%s", m.name, m.log, lab.Tail(m.proc.Output(), 60))
			}
		})
	}
	return b
}

func (b *bed) must(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

// startAgent runs m's node agent in this process until the test ends or
// m.cancel.
func (b *bed) startAgent(rc *rest.Config, m *member) {
	t := b.t
	scheme, err := controller.NewScheme()
	b.must(err)
	cache, err := agent.NewAssignmentCache(rc, nil, scheme, ns, m.name)
	b.must(err)
	a, err := agent.New(agent.Config{Client: b.c, Assignments: cache, Gateway: m.name, Namespace: ns, Pool: pool,
		Zone: "zone-" + m.hg.Name, NodeAddress: m.hg.Sync.Addr(), Dir: filepath.Join(b.dir, m.name, "creds"),
		ControlSocket: m.sock, Dial: agent.ControlDialer(m.sock), BootstrapFile: m.boot,
		StateDir: filepath.Join(b.dir, m.name, "state"),
		// Short intervals, so that the test's conditions come quickly;
		// the Lease's are the defaults.
		PollInterval: 200 * time.Millisecond, ResyncInterval: time.Second,
		Log: slog.New(slog.NewTextHandler(&testWriter{t: t, prefix: m.name + " agent: "}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	b.must(err)
	b.must(a.WakeOn(b.ctx, cache))
	actx, cancel := context.WithCancel(b.ctx)
	m.cancel, m.done = cancel, make(chan error, 2)
	go func() { m.done <- cache.Start(actx) }()
	go func() { m.done <- a.Run(actx) }()
	t.Cleanup(m.stopAgent)
}

// stopAgent stops m's agent (it deletes its Lease) and waits for it.
func (m *member) stopAgent() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	<-m.done
	m.cancel = nil
}

// startGateway runs `sluice run` on m's bootstrap file in its namespace
// and waits until its control socket answers.
func (b *bed) startGateway(m *member) {
	b.t.Helper()
	p, err := b.lab.Start(m.hg.NS, m.name, []string{b.sluice, "run", "--config", m.boot}, &lab.ProcOptions{LogFile: m.log})
	b.must(err)
	m.proc = p
	if err := lab.WaitControl(b.ctx, m.sock, 30*time.Second, p); err != nil {
		b.t.Fatalf("%v\n%s", err, lab.Tail(p.Output(), 30))
	}
}

// startPeer runs the remote site's sluice: an IKE responder for the
// pool's tunnel on the WAN VIP, keyed with psk.
func (b *bed) startPeer(psk []byte) {
	b.t.Helper()
	path := filepath.Join(b.dir, "peer.toml")
	b.writePeer(path, psk)
	p, err := b.lab.Start(b.topo.Peer, "peer", []string{b.sluice, "run", "--config", path, "--socket", filepath.Join(filepath.Dir(b.gws["gwa"].sock), "peer.sock")},
		&lab.ProcOptions{LogFile: filepath.Join(b.dir, "peer.log")})
	b.must(err)
	b.peer = p
	if err := lab.WaitControl(b.ctx, filepath.Join(filepath.Dir(b.gws["gwa"].sock), "peer.sock"), 30*time.Second, p); err != nil {
		b.t.Fatalf("%v\n%s", err, lab.Tail(p.Output(), 30))
	}
}

func (b *bed) peerSock() string { return filepath.Join(filepath.Dir(b.gws["gwa"].sock), "peer.sock") }

// writePeer writes the peer's configuration with psk.
func (b *bed) writePeer(path string, psk []byte) {
	b.t.Helper()
	topo := b.topo
	f := config.File{
		Gateway: config.FileGateway{StateDir: filepath.Join(b.dir, "peer-state"), LogLevel: "info"},
		TUN:     &config.FileTUN{Name: "sluice0", Addresses: []string{"10.2.0.1/24"}},
		UDP:     &config.FileUDP{Listen: netip.AddrPortFrom(topo.PeerWAN.Addr(), 4500).String()},
		Connections: []config.FileConnection{{
			Name: "to-site", LocalAddrs: []string{topo.PeerWAN.Addr().String()}, RemoteAddrs: []string{topo.WANVIP.Addr().String()},
			Encap: true, Local: config.FileAuth{Auth: "psk", ID: peerID}, Remote: config.FileAuth{Auth: "psk", ID: gwID},
			Children: []config.FileChild{{Name: "net", LocalTS: []string{topo.RemoteNet.String()}, RemoteTS: []string{topo.LocalNet.String()},
				ESPProposals: "aes128gcm16", StartAction: "none"}},
		}},
		Secrets: []config.FileSecret{{Type: "ike", IDs: []string{peerID, gwID}, Secret: config.SecretHex(psk)}},
	}
	text, err := f.Encode()
	b.must(err)
	b.must(os.WriteFile(path, text, 0o600))
}

// tunnelObject is the pool's tunnel to the peer, its PSK in Secret
// "site-peer-psk".
func (b *bed) tunnelObject() *v1alpha1.Tunnel {
	topo := b.topo
	return &v1alpha1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tunnel},
		Spec: v1alpha1.TunnelSpec{
			Pool: pool, Redundancy: 2,
			LocalAddrs:   []string{topo.WANVIP.Addr().String()},
			InsideAddrs:  []string{topo.LANVIP.String() + " dev " + lab.HALANIf},
			RemoteAddrs:  []string{topo.PeerWAN.Addr().String()},
			Encap:        true,
			Local:        v1alpha1.TunnelAuth{Auth: "psk", ID: gwID},
			Remote:       v1alpha1.TunnelAuth{Auth: "psk", ID: peerID},
			PSKSecretRef: &v1alpha1.SecretKeyRef{Name: tunnel + "-psk"},
			Children: []v1alpha1.TunnelChild{{Name: "net", LocalTS: []string{topo.LocalNet.String()}, RemoteTS: []string{topo.RemoteNet.String()},
				ESPProposals: "aes128gcm16", StartAction: "start"}},
		},
	}
}

// flows are two SeqFlows between the lan host and the remote host, one
// each way, through whichever gateway owns the tunnel.
type flows struct{ up, down *lab.SeqFlow }

var flowPort uint16 = 7100

func (b *bed) startFlows() *flows {
	b.t.Helper()
	topo := b.topo
	open := func(n *lab.Netns, a netip.Addr, port uint16) lab.Conn {
		c, err := n.ListenUDP(netip.AddrPortFrom(a, port))
		b.must(err)
		c.SetReadBuffer(4 << 20)
		b.t.Cleanup(func() { c.Close() })
		return c
	}
	p := flowPort
	flowPort += 2
	o := lab.SeqFlowOptions{Rate: flowRate, GapsOver: 5 * time.Millisecond}
	hostTx, hostRx := open(topo.Host, topo.HostAddr, p), open(topo.Host, topo.HostAddr, p+1)
	remTx, remRx := open(topo.Remote, topo.RemoteAddr, p+1), open(topo.Remote, topo.RemoteAddr, p)
	return &flows{
		up:   lab.StartSeqFlow(hostTx, netip.AddrPortFrom(topo.RemoteAddr, p), remRx, o),
		down: lab.StartSeqFlow(remTx, netip.AddrPortFrom(topo.HostAddr, p+1), hostRx, o),
	}
}

func (f *flows) stop(b *bed) (up, down lab.SeqResult) {
	b.t.Helper()
	var err error
	up, err = f.up.Stop(500 * time.Millisecond)
	b.must(err)
	down, err = f.down.Stop(500 * time.Millisecond)
	b.must(err)
	return up, down
}

// waitDelivering waits until both flows have received n more datagrams
// than from.
func (f *flows) waitDelivering(b *bed, what string, from [2]uint64, n uint64, timeout time.Duration) error {
	return lab.WaitFor(b.ctx, what, timeout, 2*time.Millisecond, func() (bool, error) {
		return f.up.Received() >= from[0]+n && f.down.Received() >= from[1]+n,
			fmt.Errorf("received up %d down %d", f.up.Received()-from[0], f.down.Received()-from[1])
	})
}

func (f *flows) received() [2]uint64 { return [2]uint64{f.up.Received(), f.down.Received()} }

// tunnelStatus reads the Tunnel's status.
func (b *bed) tunnelStatus() v1alpha1.TunnelStatus {
	var tn v1alpha1.Tunnel
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: ns, Name: tunnel}, &tn); err != nil {
		return v1alpha1.TunnelStatus{}
	}
	return tn.Status
}

// waitInSync waits until the tunnel's owner holds its group with the
// standby in sync (the standby has the owner's state to take over with).
func (b *bed) waitInSync(owner *member) {
	b.t.Helper()
	err := lab.WaitFor(b.ctx, owner.name+"'s group in sync with its standby", 30*time.Second, 20*time.Millisecond, func() (bool, error) {
		c, err := control.Dial(b.ctx, owner.sock)
		if err != nil {
			return false, err
		}
		defer c.Close()
		st, err := c.HAStatus(b.ctx)
		if err != nil {
			return false, err
		}
		for _, g := range st.Groups {
			if g.Name == owner.name && g.Role == "owner" && g.InSync {
				return true, nil
			}
		}
		return false, fmt.Errorf("groups %+v", st.Groups)
	})
	b.must(err)
}

// TestFleet: the fleet end to end on real gateways.
//  1. Two gateways hold Leases; the controller pairs them and each
//     agent writes its gateway's bootstrap file, [ha] with the partner;
//     `sluice run` starts on it.
//  2. A Tunnel created with its PSK Secret: the controller places it,
//     the agents apply it (the owner's group gets its VIP and inside
//     address), the owner initiates to the peer, and traffic flows both
//     ways (measured: the Tunnel created to traffic flowing).
//  3. The owner lost (its gateway killed, its agent stopped, which deletes
//     its Lease): the standby takes over over the pair's own channel, not
//     through the API server (measured: the outage), and the controller
//     records the survivor as owner with the epoch bumped.
//  4. The PSK Secret rotated (and the peer's key with it): the survivor
//     rekeys its credentials without losing a packet.
func TestFleet(t *testing.T) {
	b := newBed(t)
	ctx := b.ctx

	// 1. The pair, and the gateways started from their bootstrap files.
	err := lab.WaitFor(ctx, "both bootstrap files name the partner", 60*time.Second, 50*time.Millisecond, func() (bool, error) {
		for _, m := range b.gws {
			data, err := os.ReadFile(m.boot)
			if err != nil || !strings.Contains(string(data), "[ha]") {
				return false, fmt.Errorf("%s: %v", m.name, err)
			}
		}
		return true, nil
	})
	b.must(err)
	for _, m := range b.gws {
		b.startGateway(m)
	}

	// 2. A Tunnel, from creation to traffic.
	psk := []byte("the fleet's first pre-shared key")
	b.startPeer(psk)
	fl := b.startFlows()
	created := time.Now()
	b.must(b.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tunnel + "-psk"}, Data: map[string][]byte{"psk": psk}}))
	b.must(b.c.Create(ctx, b.tunnelObject()))
	if err := fl.waitDelivering(b, "traffic through the new tunnel", [2]uint64{}, 1, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	measuref(t, "Tunnel created to traffic flowing both ways: %v", time.Since(created).Round(time.Millisecond))
	var st v1alpha1.TunnelStatus
	err = lab.WaitFor(ctx, "the tunnel's status: owner, standby, SPIs", 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		st = b.tunnelStatus()
		return st.Owner != "" && st.Standby != "" && st.Phase == "Placed" && len(st.ChildSAs) > 0, fmt.Errorf("%+v", st)
	})
	b.must(err)
	owner, standby := b.gws[st.Owner], b.gws[st.Standby]
	if owner == nil || standby == nil || owner == standby {
		t.Fatalf("status owner %q standby %q", st.Owner, st.Standby)
	}
	b.waitInSync(owner)
	up, down := fl.stop(b)
	measuref(t, "before the failover: up %v; down %v", up, down)

	// 3. The owner lost.
	fl = b.startFlows()
	b.must(fl.waitDelivering(b, "traffic before the failover", [2]uint64{}, flowRate/10, 30*time.Second))
	epoch := st.Epoch
	killed := time.Now()
	owner.proc.Kill()
	owner.stopAgent()
	if err := fl.waitDelivering(b, "traffic through the standby", fl.received(), flowRate/10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	up, down = fl.stop(b)
	measuref(t, "failover: the owner killed; the longest gap up %v (%d lost), down %v (%d lost)",
		up.Gap.Round(time.Millisecond), up.GapLost, down.Gap.Round(time.Millisecond), down.GapLost)
	// The survivor carries on with the owner's Child SA (adopted with its
	// IKE SA), and reports it: the same SPIs, not a new negotiation.
	spis := st.ChildSAs
	err = lab.WaitFor(ctx, "the controller records the survivor as owner", 60*time.Second, 50*time.Millisecond, func() (bool, error) {
		st = b.tunnelStatus()
		return st.Owner == standby.name && st.Epoch > epoch && st.LastFailover != nil && len(st.ChildSAs) > 0, fmt.Errorf("%+v", st)
	})
	b.must(err)
	if fmt.Sprint(st.ChildSAs) != fmt.Sprint(spis) {
		t.Errorf("the tunnel's Child SAs after the takeover %+v, before %+v: renegotiated, not taken over", st.ChildSAs, spis)
	}
	measuref(t, "failover: the controller recorded %s as owner (epoch %d -> %d) %v after the kill (the agent's Lease deleted as it stopped)", st.Owner, epoch, st.Epoch, time.Since(killed).Round(time.Millisecond))

	// 4. The PSK rotated: the peer first, then the Secret; the survivor's
	// agent applies it, and nothing is lost.
	fl = b.startFlows()
	b.must(fl.waitDelivering(b, "traffic before the rotation", [2]uint64{}, flowRate/10, 30*time.Second))
	psk2 := []byte("the fleet's second pre-shared key")
	b.writePeer(filepath.Join(b.dir, "peer.toml"), psk2)
	pc, err := control.Dial(ctx, b.peerSock())
	b.must(err)
	_, err = pc.Reload(ctx)
	pc.Close()
	b.must(err)
	var sec corev1.Secret
	b.must(b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tunnel + "-psk"}, &sec))
	sec.Data["psk"] = psk2
	b.must(b.c.Update(ctx, &sec))
	err = lab.WaitFor(ctx, "the survivor rotated the key", 60*time.Second, 50*time.Millisecond, func() (bool, error) {
		data, err := os.ReadFile(standby.log)
		return strings.Contains(string(data), "IKE pre-shared key rotated"), err
	})
	b.must(err)
	b.must(fl.waitDelivering(b, "traffic after the rotation", fl.received(), flowRate/2, 30*time.Second))
	up, down = fl.stop(b)
	measuref(t, "PSK rotation: up %d/%d, down %d/%d received", up.Received, up.Sent, down.Received, down.Sent)
	if up.Lost+down.Lost > 0 {
		t.Errorf("the PSK rotation lost datagrams: up %v; down %v", up, down)
	}
}

// testWriter writes log lines into the test's log.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
