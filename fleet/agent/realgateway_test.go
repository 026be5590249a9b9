package agent

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
	"github.com/sluicegw/sluice/internal/lab"
)

// TestAgentDrivesRealGateway: the agent's bootstrap file starts a real
// `sluice run` in a network namespace; the agent's configuration applied
// over the real control socket is taken (its fixed parts are the
// bootstrap's); the member, alone, takes both groups and so puts both
// tunnels' VIPs on its eth0; and a restarted gateway is configured again
// by the agent's poll.
func TestAgentDrivesRealGateway(t *testing.T) {
	lab.Require(t)
	ctx := t.Context()
	dir := t.TempDir()
	sluice := fleettest.BuildSluice(t, dir)
	l := lab.NewForTest(t, nil)
	ns, err := l.NewNetns(ctx, "gwa")
	if err != nil {
		t.Fatal(err)
	}
	wan, err := l.NewNetns(ctx, "wan")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(ns, "eth0", wan, "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := ns.AddAddr("eth0", netip.MustParsePrefix("10.9.0.1/24")); err != nil {
		t.Fatal(err)
	}
	if err := wan.AddAddr("eth0", netip.MustParsePrefix("10.9.0.2/24")); err != nil {
		t.Fatal(err)
	}

	// The pair's credentials, as the controller's HA Secret holds them.
	creds, err := lab.WriteHACreds(filepath.Join(dir, "ha"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	objs := testObjects()
	asg := objs[0].(*v1alpha1.GatewayAssignment)
	asg.Name = "a"
	asg.Spec.Gateway, asg.Spec.Partner, asg.Spec.PartnerAddress, asg.Spec.HASecret = "a", "b", "10.9.0.2", "pool-ha-a"
	for i := range asg.Spec.Tunnels {
		if asg.Spec.Tunnels[i].Owner == "gw-a" {
			asg.Spec.Tunnels[i].Owner = "a"
		} else {
			asg.Spec.Tunnels[i].Owner = "b"
		}
	}
	objs = append(objs, &corev1.Secret{ObjectMeta: testSecret("pool-ha-a", nil).ObjectMeta, Data: map[string][]byte{
		"tls.crt": read(creds.Cert["a"]), "tls.key": read(creds.Key["a"]), "ca.crt": read(creds.CA)}})
	a, c, _ := newTestAgent(t, objs...)
	sockDir, err := os.MkdirTemp("", "sfa") // a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	a.cfg.Gateway = "a"
	a.cfg.ControlSocket = filepath.Join(sockDir, "sluice.sock")
	a.cfg.Dial = ControlDialer(a.cfg.ControlSocket)
	a.cfg.BootstrapFile = filepath.Join(dir, "run", "sluice.toml")
	a.cfg.StateDir = filepath.Join(dir, "state")
	a.cfg.Dir = filepath.Join(dir, "creds")
	t.Cleanup(a.disconnect)

	// No gateway yet: the agent writes what it needs to start, and says
	// it cannot reach it.
	if err := a.Sync(ctx); err == nil {
		t.Fatal("Sync succeeded with no gateway running")
	}
	start := func() *lab.Process {
		p, err := l.Start(ns, "sluice", []string{sluice, "run", "--config", a.cfg.BootstrapFile}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := lab.WaitControl(ctx, a.cfg.ControlSocket, 20*time.Second, p); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		return p
	}
	p := start()
	if err := a.Sync(ctx); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	connections := func() []string {
		var names []string
		info, err := a.gw.IKE(ctx)
		if err != nil {
			return nil
		}
		for _, cn := range info.Connections {
			names = append(names, cn.Name)
		}
		return names
	}
	if got := connections(); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Errorf("the gateway runs connections %v, want [t1 t2]", got)
	}
	if st := getAssignmentNamed(t, c, "a").Status; st.AppliedGeneration != 3 || st.Message != "" {
		t.Errorf("status %+v", st)
	}
	// Alone (b never answers), a takes both groups: both VIPs on eth0.
	for _, vip := range []string{"192.0.2.10", "192.0.2.11"} {
		err := lab.WaitFor(ctx, "VIP "+vip+" on eth0", 20*time.Second, 0, func() (bool, error) {
			return ns.HasAddr("eth0", netip.MustParseAddr(vip))
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
	}

	// A restarted gateway runs its bootstrap file: the poll finds the
	// lost connection and applies again.
	if err := p.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	p = start()
	err = lab.WaitFor(ctx, "the configuration applied again", 20*time.Second, 0, func() (bool, error) {
		a.Poll(ctx)
		return a.gw != nil && slices.Equal(connections(), []string{"t1", "t2"}), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
}

func getAssignmentNamed(t *testing.T, c client.Client, name string) *v1alpha1.GatewayAssignment {
	t.Helper()
	var asg v1alpha1.GatewayAssignment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, &asg); err != nil {
		t.Fatal(err)
	}
	return &asg
}
