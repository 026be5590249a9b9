package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
)

func TestAgentFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"agent"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "agent: --gateway is required") {
		t.Errorf("agent without flags: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"agent", "--bogus"}, io.Discard, &stderr); code != 2 {
		t.Errorf("agent --bogus: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if code := run(context.Background(), []string{"controller", "--leader-elect=false"}, io.Discard, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "sluice-fleet: controller: ") {
		t.Errorf("controller: exit %d, %q", code, stderr.String())
	}
	// The downward API's variables are the flags' defaults.
	t.Setenv("NODE_NAME", "node-1")
	t.Setenv("POD_NAMESPACE", "sluice")
	t.Setenv("NODE_IP", "10.9.0.1")
	cmd := newAgentCommand(io.Discard)
	for flag, want := range map[string]string{"gateway": "node-1", "namespace": "sluice", "node-address": "10.9.0.1"} {
		if got := cmd.Flags().Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", flag, got, want)
		}
	}
}

// TestAgentCommand runs the agent command's body against a real API
// server: it reads its Node's zone and address, holds its Lease with
// them, and says in its assignment's status that the gateway is not
// reachable (none runs).
func TestAgentCommand(t *testing.T) {
	cfg, c := apiClient(t)
	ctx := t.Context()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{ZoneLabel: "zone-a"}}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, node))
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.0.7"}}
	must(c.Status().Update(ctx, node))
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sluice"}}))
	must(c.Create(ctx, &v1alpha1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Namespace: "sluice", Name: "pool"},
		Spec: v1alpha1.GatewayPoolSpec{TicketKeys: v1alpha1.TicketKeys{Lifetime: &metav1.Duration{Duration: 24 * time.Hour}},
			Detection: v1alpha1.Detection{Interval: &metav1.Duration{Duration: 100 * time.Millisecond}, Misses: 3}}}))
	must(c.Create(ctx, &v1alpha1.GatewayAssignment{ObjectMeta: metav1.ObjectMeta{Namespace: "sluice", Name: "node-1"},
		Spec: v1alpha1.GatewayAssignmentSpec{Pool: "pool", Gateway: "node-1", Generation: 1}}))
	nodeAccount(t, c, "sluice", "node-1")

	dir := t.TempDir()
	o := agentOptions{Gateway: "node-1", Namespace: "sluice", Pool: "pool", ControlSocket: filepath.Join(dir, "none.sock"),
		HADir: filepath.Join(dir, "creds"), BootstrapFile: filepath.Join(dir, "sluice.toml"), PollInterval: time.Second, ResyncInterval: time.Minute}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runAgentWith(runCtx, cfg, o, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(20 * time.Second)
	for {
		var l coordinationv1.Lease
		var asg v1alpha1.GatewayAssignment
		errL := c.Get(ctx, client.ObjectKey{Namespace: "sluice", Name: "sluice-gw-node-1"}, &l)
		errA := c.Get(ctx, client.ObjectKey{Namespace: "sluice", Name: "node-1"}, &asg)
		if errL == nil && errA == nil && l.Annotations[v1alpha1.AnnotationZone] == "zone-a" && l.Annotations[v1alpha1.AnnotationAddress] == "10.9.0.7" &&
			strings.Contains(asg.Status.Message, "gateway not reachable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %v %+v, assignment %v %+v", errL, l.ObjectMeta, errA, asg.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(o.BootstrapFile); err != nil {
		t.Errorf("no bootstrap file: %v", err)
	}
}

// TestAgentBootstrapOnly: the init container's agent writes the bootstrap
// file for `sluice run` and exits, leaving its Lease for the agent
// container; without --bootstrap-file it refuses to start.
func TestAgentBootstrapOnly(t *testing.T) {
	cfg, c := apiClient(t)
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}))
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sluice"}}))
	must(c.Create(ctx, &v1alpha1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Namespace: "sluice", Name: "pool"}}))
	must(c.Create(ctx, &v1alpha1.GatewayAssignment{ObjectMeta: metav1.ObjectMeta{Namespace: "sluice", Name: "node-1"},
		Spec: v1alpha1.GatewayAssignmentSpec{Pool: "pool", Gateway: "node-1", Generation: 1}}))
	nodeAccount(t, c, "sluice", "node-1")
	dir := t.TempDir()
	o := agentOptions{Gateway: "node-1", Namespace: "sluice", Pool: "pool", NodeAddress: "10.9.0.7", ControlSocket: filepath.Join(dir, "none.sock"),
		HADir: filepath.Join(dir, "creds"), PollInterval: time.Second, ResyncInterval: time.Minute, BootstrapOnly: true}
	if err := runAgentWith(ctx, cfg, o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--bootstrap-file") {
		t.Fatalf("--bootstrap-only without a file: %v", err)
	}
	o.BootstrapFile = filepath.Join(dir, "sluice.toml")
	// A lone member: no partner comes, so it writes a bootstrap without
	// [ha] once the wait is over.
	o.BootstrapWait = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- runAgentWith(ctx, cfg, o, slog.New(slog.DiscardHandler)) }()
	select {
	case err := <-done:
		must(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the bootstrap-only agent did not exit within 30s")
	}
	data, err := os.ReadFile(o.BootstrapFile)
	must(err)
	if !strings.Contains(string(data), "[udp]") {
		t.Errorf("bootstrap file:\n%s", data)
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: "sluice", Name: "sluice-gw-node-1"}, &l); err != nil {
		t.Errorf("the Lease after the bootstrap-only agent exited: %v", err)
	}
}

// nodeAccount makes gateway's agent ServiceAccount in ns, as the
// controller would (here with every right: these tests are of the
// command, TestAgentHeldToItsNode of the rights).
func nodeAccount(t *testing.T, c client.Client, ns, gateway string) {
	t.Helper()
	name := v1alpha1.AgentServiceAccount(gateway)
	if err := c.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	err := c.Create(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}})
	if err != nil {
		t.Fatal(err)
	}
}

// apiClient starts a real API server for the test and returns its
// configuration and a client that knows the fleet's kinds.
func apiClient(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	_, cfg := fleettest.StartAPIServer(t)
	s, err := scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}
