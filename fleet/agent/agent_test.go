package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/control"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/gateway"
)

// fakeGateway is a gateway's control socket: it records what is applied
// and answers ike.list. Its connection can be lost (a restart).
type fakeGateway struct {
	mu      sync.Mutex
	dials   int
	conn    int // the connection that is up; a Gateway of another is lost
	applies []ApplyRequest
	refuse  string // Apply answers this as the gateway's error
	ike     gateway.IKEInfo
	down    bool // dialling fails
}

type fakeConn struct {
	g *fakeGateway
	n int
}

func (g *fakeGateway) dial(ctx context.Context) (Gateway, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		return nil, &control.DialError{Path: "/run/sluice/sluice.sock", Err: errors.New("connection refused")}
	}
	g.dials++
	g.conn = g.dials
	return &fakeConn{g, g.dials}, nil
}

// restart loses the current connection, as a gateway restart does.
func (g *fakeGateway) restart() {
	g.mu.Lock()
	g.conn = -1
	g.mu.Unlock()
}

func (c *fakeConn) check() error {
	if c.g.conn != c.n {
		return errors.New("control: ike.list: /run/sluice/sluice.sock: EOF")
	}
	return nil
}

func (c *fakeConn) Apply(ctx context.Context, req ApplyRequest) error {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	if c.g.refuse != "" {
		return &control.RemoteError{Op: "config.apply", Msg: c.g.refuse}
	}
	c.g.applies = append(c.g.applies, req)
	return nil
}

func (c *fakeConn) IKE(ctx context.Context) (gateway.IKEInfo, error) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if err := c.check(); err != nil {
		return gateway.IKEInfo{}, err
	}
	return c.g.ike, nil
}

func (c *fakeConn) Close() error { return nil }

func (g *fakeGateway) applied() []ApplyRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]ApplyRequest(nil), g.applies...)
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// testObjects are testInputs' objects, as the API server holds them.
func testObjects() []client.Object {
	in := testInputs()
	objs := []client.Object{in.Assignment, in.Pool}
	for _, t := range in.Tunnels {
		objs = append(objs, t)
	}
	for _, s := range in.Secrets {
		objs = append(objs, s)
	}
	return objs
}

// newTestAgent is gateway gw-a's agent on a fake API server holding objs.
func newTestAgent(t *testing.T, objs ...client.Object) (*Agent, client.Client, *fakeGateway) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.GatewayAssignment{}).Build()
	fg := &fakeGateway{}
	a, err := New(Config{Client: c, Gateway: "gw-a", Namespace: testNS, Pool: "pool", Zone: "z1",
		NodeAddress: netip.MustParseAddr("10.9.0.1"), Dir: t.TempDir(), ControlSocket: "/run/sluice/sluice.sock",
		Dial: fg.dial, RenewInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a, c, fg
}

func getAssignment(t *testing.T, c client.Client) *v1alpha1.GatewayAssignment {
	t.Helper()
	var asg v1alpha1.GatewayAssignment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "gw-a"}, &asg); err != nil {
		t.Fatal(err)
	}
	return &asg
}

func TestSyncAppliesOnChange(t *testing.T) {
	ctx := t.Context()
	a, c, fg := newTestAgent(t, testObjects()...)
	fg.ike = gateway.IKEInfo{Connections: []gateway.IKEConnInfo{{Name: "t1", Children: []gateway.IKEChildInfo{
		{Name: "t1/net", State: "installed", InSPI: 0xc1000001, OutSPI: 0x0000abcd}}}, {Name: "t2", Children: []gateway.IKEChildInfo{{Name: "t2/net", State: "installed", InSPI: 0xc2000002, OutSPI: 0xc2000003}}}}} // t2 is gw-b's: not reported
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ap := fg.applied()
	if len(ap) != 1 {
		t.Fatalf("%d applies, want 1", len(ap))
	}
	if !strings.Contains(ap[0].Config, "name = 't1'") || !strings.Contains(ap[0].Config, "name = 't2'") || ap[0].Name != "gatewayassignment sluice/gw-a generation 3" {
		t.Errorf("applied %q:\n%s", ap[0].Name, ap[0].Config)
	}
	asg := getAssignment(t, c)
	if asg.Status.AppliedGeneration != 3 || asg.Status.Message != "" {
		t.Errorf("status = %+v", asg.Status)
	}
	want := []v1alpha1.AssignedChildSA{{Tunnel: "t1", Name: "net", SPIIn: "0xc1000001", SPIOut: "0x0000abcd"}}
	if len(asg.Status.ChildSAs) != 1 || asg.Status.ChildSAs[0] != want[0] {
		t.Errorf("childSAs = %+v, want %+v", asg.Status.ChildSAs, want)
	}

	// Nothing changed: nothing applied.
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(fg.applied()); n != 1 {
		t.Errorf("%d applies after an unchanged sync, want 1", n)
	}

	// A rotated PSK is applied.
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "t1-psk"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data["psk"] = []byte("the rotated pre-shared key")
	if err := c.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ap = fg.applied()
	if len(ap) != 2 || !strings.Contains(ap[1].Config, config.SecretHex([]byte("the rotated pre-shared key"))) {
		t.Errorf("%d applies; the rotated PSK not in the last", len(ap))
	}
}

// TestRestartReapplies: a gateway that restarted (its control connection
// lost) gets the configuration again, though the rendering is unchanged.
func TestRestartReapplies(t *testing.T) {
	ctx := t.Context()
	a, _, fg := newTestAgent(t, testObjects()...)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	fg.restart()
	if err := a.Poll(ctx); err == nil {
		t.Fatal("Poll on a lost connection succeeded")
	}
	if err := a.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n, d := len(fg.applied()), fg.dials; n != 2 || d != 2 {
		t.Errorf("%d applies over %d connections, want 2 over 2", n, d)
	}
	// And an unchanged poll applies nothing more.
	if err := a.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(fg.applied()); n != 2 {
		t.Errorf("%d applies, want 2", n)
	}
}

// TestApplyRefusedGoesToStatus: the gateway's refusal is the status's
// message, the connection stays, and the next sync after a fix clears it.
func TestApplyRefusedGoesToStatus(t *testing.T) {
	ctx := t.Context()
	a, c, fg := newTestAgent(t, testObjects()...)
	fg.refuse = "gatewayassignment sluice/gw-a generation 3:12:1: connection[1].proposals: unknown algorithm"
	err := a.Sync(ctx)
	if err == nil {
		t.Fatal("Sync succeeded with the apply refused")
	}
	asg := getAssignment(t, c)
	if !strings.Contains(asg.Status.Message, fg.refuse) || asg.Status.AppliedGeneration != 0 {
		t.Errorf("status = %+v", asg.Status)
	}
	fg.refuse = ""
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	asg = getAssignment(t, c)
	if asg.Status.Message != "" || asg.Status.AppliedGeneration != 3 || fg.dials != 1 {
		t.Errorf("status = %+v after %d dials", asg.Status, fg.dials)
	}
}

// TestBadObjectsInStatus: a missing Secret and a gateway that cannot be
// reached are clear messages, not crashes.
func TestBadObjectsInStatus(t *testing.T) {
	ctx := t.Context()
	var objs []client.Object
	for _, o := range testObjects() {
		if o.GetName() != "t2-psk" {
			objs = append(objs, o)
		}
	}
	a, c, fg := newTestAgent(t, objs...)
	fg.down = true
	err := a.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "agent: gateway not reachable") {
		t.Fatalf("Sync = %v", err)
	}
	if asg := getAssignment(t, c); !strings.Contains(asg.Status.Message, "gateway not reachable") {
		t.Errorf("message %q", asg.Status.Message)
	}
	fg.down = false
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	asg := getAssignment(t, c)
	if asg.Status.Message != "tunnel t2: Secret t2-psk not found" || asg.Status.AppliedGeneration != 3 {
		t.Errorf("status = %+v", asg.Status)
	}
	if ap := fg.applied(); len(ap) != 1 || strings.Contains(ap[0].Config, "name = 't2'") {
		t.Errorf("t2 applied without its Secret")
	}

	// The HA Secret missing: nothing to apply, said so.
	var ha corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "pool-ha-gw-a"}, &ha); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &ha); err != nil {
		t.Fatal(err)
	}
	asg.Spec.Generation = 4
	if err := c.Update(ctx, asg); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err == nil {
		t.Fatal("Sync succeeded without the HA Secret")
	}
	asg = getAssignment(t, c)
	if asg.Status.Message != "agent: render: HA Secret pool-ha-gw-a not found" || asg.Status.AppliedGeneration != 3 {
		t.Errorf("status = %+v", asg.Status)
	}
}

func TestTicketKeys(t *testing.T) {
	ctx := t.Context()
	key := func(b byte) []byte { k := make([]byte, 32); k[0] = b; return k }
	ring := v1alpha1.TicketKeyRing{Version: 5, Keys: []v1alpha1.TicketKey{
		{ID: "k1", Key: key(1), State: v1alpha1.KeyRetired},
		{ID: "k2", Key: key(2), State: v1alpha1.KeyIssue},
		{ID: "k3", Key: key(3), State: v1alpha1.KeyAccept},
	}}
	data, err := json.Marshal(ring)
	if err != nil {
		t.Fatal(err)
	}
	objs := testObjects()
	asg := objs[0].(*v1alpha1.GatewayAssignment)
	asg.Spec.TicketKeySecret, asg.Spec.TicketKeyVersion = "pool-ticket-keys", 6
	objs = append(objs, testSecret("pool-ticket-keys", map[string][]byte{v1alpha1.TicketKeyRingKey: data}))
	a, c, fg := newTestAgent(t, objs...)
	err = a.Sync(ctx)
	if err == nil || getAssignment(t, c).Status.Message != "agent: ticket-key Secret pool-ticket-keys holds ring version 5, the assignment asks for 6" {
		t.Fatalf("Sync = %v, status %+v", err, getAssignment(t, c).Status)
	}
	asg = getAssignment(t, c)
	asg.Spec.TicketKeyVersion = 5
	if err := c.Update(ctx, asg); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ap := fg.applied()
	if len(ap) != 1 {
		t.Fatalf("%d applies", len(ap))
	}
	k := ap[0].TicketKeys
	if len(k) != 2 || k[0].ID != "k2" || !k[0].Issue || k[1].ID != "k3" || k[1].Issue {
		t.Errorf("ticket keys %+v", k)
	}
	if st := getAssignment(t, c).Status; st.TicketKeyVersion != 5 || st.AppliedGeneration != 3 {
		t.Errorf("status %+v", st)
	}
}

func TestLease(t *testing.T) {
	ctx := t.Context()
	a, c, _ := newTestAgent(t)
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	if err := a.renewLease(ctx); err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: testNS, Name: "sluice-gw-gw-a"}
	if err := c.Get(ctx, key, &l); err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "gw-a" || *l.Spec.LeaseDurationSeconds != 10 || !l.Spec.RenewTime.Time.Equal(now) ||
		l.Labels[v1alpha1.LabelPool] != "pool" || l.Labels[v1alpha1.LabelGateway] != "gw-a" ||
		l.Annotations[v1alpha1.AnnotationZone] != "z1" || l.Annotations[v1alpha1.AnnotationAddress] != "10.9.0.1" {
		t.Errorf("lease %+v", l)
	}
	now = now.Add(3 * time.Second)
	if err := a.renewLease(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &l); err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.Time.Equal(now) || l.Spec.AcquireTime.Time.Equal(now) {
		t.Errorf("renewed lease %+v", l.Spec)
	}
	if err := a.deleteLease(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &l); !apierrors.IsNotFound(err) {
		t.Errorf("lease after delete: %v", err)
	}
}

// TestRun: the loop holds the Lease, applies, and on shutdown deletes
// the Lease.
func TestRun(t *testing.T) {
	a, c, fg := newTestAgent(t, testObjects()...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	key := client.ObjectKey{Namespace: testNS, Name: LeaseName("gw-a")}
	waitFor(t, "the lease and the first apply", func() bool {
		var l coordinationv1.Lease
		return c.Get(ctx, key, &l) == nil && len(fg.applied()) == 1 && getAssignment(t, c).Status.AppliedGeneration == 3
	})
	// A restart is found by the poll and applied to.
	fg.restart()
	waitFor(t, "the apply after a restart", func() bool { return len(fg.applied()) == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	var l coordinationv1.Lease
	if err := c.Get(context.Background(), key, &l); !apierrors.IsNotFound(err) {
		t.Errorf("lease after shutdown: %v", err)
	}
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTicketKeysAcceptOnly(t *testing.T) {
	ring, _ := json.Marshal(v1alpha1.TicketKeyRing{Version: 1, Keys: []v1alpha1.TicketKey{{ID: "k1", Key: make([]byte, 32), State: v1alpha1.KeyAccept}}})
	keys, v, err := ticketKeys(testSecret("r", map[string][]byte{v1alpha1.TicketKeyRingKey: ring}), "r", 1)
	if err != nil || v != 1 || keys != nil {
		t.Errorf("ticketKeys = %v, %d, %v; want no keys (the gateway takes a ring only with a key that issues), version 1", keys, v, err)
	}
	for _, tc := range []struct {
		ring v1alpha1.TicketKeyRing
		want string
	}{
		{v1alpha1.TicketKeyRing{Version: 1, Keys: []v1alpha1.TicketKey{{ID: "k1", Key: make([]byte, 31), State: v1alpha1.KeyIssue}}},
			"agent: ticket-key Secret r: key k1 has 31 bytes (want 32)"},
		{v1alpha1.TicketKeyRing{Version: 1, Keys: []v1alpha1.TicketKey{{ID: "k1", Key: make([]byte, 32), State: v1alpha1.KeyIssue}, {ID: "k2", Key: make([]byte, 32), State: v1alpha1.KeyIssue}}},
			"agent: ticket-key Secret r: 2 keys in state issue (want at most one)"},
	} {
		data, _ := json.Marshal(tc.ring)
		if _, _, err := ticketKeys(testSecret("r", map[string][]byte{v1alpha1.TicketKeyRingKey: data}), "r", 1); err == nil || err.Error() != tc.want {
			t.Errorf("err = %v, want %s", err, tc.want)
		}
	}
	if _, _, err := ticketKeys(testSecret("r", map[string][]byte{v1alpha1.TicketKeyRingKey: []byte("{")}), "r", 1); err == nil || !strings.HasPrefix(err.Error(), "agent: ticket-key Secret r: ring.json: ") {
		t.Errorf("err = %v", err)
	}
}

// TestBootstrapFile: the agent writes the file the gateway starts with,
// the credentials [ha] names, and nothing secret in either file.
func TestBootstrapFile(t *testing.T) {
	ctx := t.Context()
	a, _, _ := newTestAgent(t, testObjects()...)
	a.cfg.BootstrapFile = filepath.Join(t.TempDir(), "run", "sluice.toml")
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(a.cfg.BootstrapFile)
	if err != nil {
		t.Fatal(err)
	}
	g, err := config.ParseGateway(a.cfg.BootstrapFile, text)
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, text)
	}
	if g.HA == nil || g.HA.PeerName != "gw-b" || len(g.Connections) != 0 || len(g.Secrets) != 0 {
		t.Errorf("bootstrap:\n%s", text)
	}
	for _, name := range []string{"ha.crt", "ha.key", "ha-ca.crt"} {
		fi, err := os.Stat(filepath.Join(a.cfg.Dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
}

// TestAssignmentDeleted: a gateway whose assignment is deleted (it left
// the pool) gives up its tunnels and VIPs: the agent applies the
// bootstrap, with no connection and groups without addresses.
func TestAssignmentDeleted(t *testing.T) {
	ctx := t.Context()
	a, c, fg := newTestAgent(t, testObjects()...)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, getAssignment(t, c)); err != nil {
		t.Fatal(err)
	}
	if err := a.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	ap := fg.applied()
	if len(ap) != 2 {
		t.Fatalf("%d applies, want 2", len(ap))
	}
	g, err := config.ParseGateway("last", []byte(ap[1].Config))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Connections) != 0 || len(g.Secrets) != 0 || g.HA == nil || len(g.HA.Groups) != 2 || len(g.HA.Groups[0].Addresses) != 0 {
		t.Errorf("applied after the deletion:\n%s", ap[1].Config)
	}
	// Once is enough; a new assignment is applied again.
	if err := a.Poll(ctx); err != nil || len(fg.applied()) != 2 {
		t.Errorf("poll: %v, %d applies", err, len(fg.applied()))
	}
	asg := testObjects()[0]
	asg.SetResourceVersion("")
	if err := c.Create(ctx, asg); err != nil {
		t.Fatal(err)
	}
	if err := a.Poll(ctx); err != nil || len(fg.applied()) != 3 {
		t.Errorf("poll: %v, %d applies, want 3", err, len(fg.applied()))
	}
}
