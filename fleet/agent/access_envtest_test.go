package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/fleet/controller"
	"github.com/sluicegw/sluice/fleet/internal/fleettest"
)

// deployNS is the namespace deploy/ installs into.
const deployNS = "sluice-system"

// installAccess creates deploy/'s namespace and every RBAC object and
// admission policy of deploy/ (kustomized, as `kubectl apply -k deploy/`
// would: the very rules of deploy/base/rbac.yaml), and waits until the
// admission policies are in force.
func installAccess(t *testing.T, cfg *rest.Config, admin client.Client, adminCS *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	kinds := []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	n := 0
	for _, k := range kinds {
		for _, o := range fleettest.Kustomize(t, ".") {
			if o.GetKind() != k {
				continue
			}
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("create %s %s from deploy/: %v", k, o.GetName(), err)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("deploy/ holds %d RBAC and policy objects", n)
	}
	// The policies take effect once the API server has compiled them: a
	// token request of the pod account's token bound to no node (for the
	// one account that exists yet) is refused then.
	unbound := tokenFor(t, adminCS, v1alpha1.AgentPodServiceAccount, nil)
	cs := clientsetAs(t, cfg, unbound)
	var err error
	waitFor(t, "the admission policies in force", func() bool {
		_, err = requestToken(ctx, cs, v1alpha1.AgentPodServiceAccount)
		return apierrors.IsForbidden(err)
	})
	t.Logf("a token bound to no node: %v", err)
}

// tokenFor returns a token for ServiceAccount sa of deployNS, bound to pod
// if it is not nil.
func tokenFor(t *testing.T, cs *kubernetes.Clientset, sa string, pod *corev1.Pod) string {
	t.Helper()
	secs := int64(3600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	out, err := cs.CoreV1().ServiceAccounts(deployNS).CreateToken(t.Context(), sa, tr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return out.Status.Token
}

// requestToken asks, as cs, for a token of ServiceAccount sa of deployNS.
func requestToken(ctx context.Context, cs *kubernetes.Clientset, sa string) (string, error) {
	secs := int64(NodeTokenSeconds)
	out, err := cs.CoreV1().ServiceAccounts(deployNS).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return out.Status.Token, nil
}

// tokenConfig is a configuration of base's API server that authenticates
// with token alone.
func tokenConfig(base *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(base)
	cfg.BearerToken = token
	return cfg
}

func clientsetAs(t *testing.T, base *rest.Config, token string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(tokenConfig(base, token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestAgentHeldToItsNode runs the controller (as its own ServiceAccount)
// and two agents, each as its pod's ServiceAccount with a token bound to
// a pod on its node, on a real API server with RBAC and the RBAC objects
// and admission policies of deploy/. The agents work end to end (Lease,
// assignment, the Secrets it names, status, failover) with what they are
// given; and the agent of gw-a, as its pod's account or as its node's,
// cannot read gw-b's Secrets, Lease or assignment, write gw-b's status or
// Lease, read the pool's CA key or a tunnel it is not assigned, list any
// Secret, or take gw-b's account.
func TestAgentHeldToItsNode(t *testing.T) {
	env, admin := startAPIServer(t)
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	adminCS, err := kubernetes.NewForConfig(env.Config)
	must(err)
	installAccess(t, env.Config, admin, adminCS)

	ns := deployNS
	must(admin.Create(ctx, &v1alpha1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}))
	for _, name := range []string{"t1", "t2"} {
		tn := testTunnel(name, "192.0.2.1"+name[1:], "198.51.100."+name[1:])
		tn.Namespace, tn.ResourceVersion = ns, ""
		must(admin.Create(ctx, tn))
		s := testSecret(name+"-psk", map[string][]byte{"psk": []byte("a pre-shared key of " + name)})
		s.Namespace = ns
		must(admin.Create(ctx, s))
	}
	// A tunnel of another pool, which neither gateway is assigned.
	other := testTunnel("elsewhere", "192.0.2.99", "198.51.100.99")
	other.Namespace, other.ResourceVersion, other.Spec.Pool = ns, "", "other"
	must(admin.Create(ctx, other))
	otherPSK := testSecret("elsewhere-psk", map[string][]byte{"psk": []byte("not yours")})
	otherPSK.Namespace = ns
	must(admin.Create(ctx, otherPSK))

	// The controller as its own ServiceAccount: it grants the agents
	// only what it holds.
	ccfg := rest.CopyConfig(env.Config)
	ccfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":sluice-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	mgr, _, err := controller.NewManager(ccfg, controller.Options{Namespace: ns, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	must(err)
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-mdone })

	type member struct {
		pod, node client.Client
		podCS     *kubernetes.Clientset
		fg        *fakeGateway
		cancel    context.CancelFunc
		done      chan error
	}
	members := map[string]*member{}
	start := time.Now()
	for i, gw := range []string{"gw-a", "gw-b"} {
		// The DaemonSet's pod on node gw, and the token the kubelet would
		// project into its agent container: bound to the pod.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sluice-gateway-" + gw},
			Spec: corev1.PodSpec{NodeName: gw, ServiceAccountName: v1alpha1.AgentPodServiceAccount,
				Containers: []corev1.Container{{Name: "agent", Image: "sluice-fleet"}}}}
		must(admin.Create(ctx, pod))
		podCfg := tokenConfig(env.Config, tokenFor(t, adminCS, v1alpha1.AgentPodServiceAccount, pod))
		nodeCfg, err := NodeConfig(podCfg, ns, gw)
		must(err)
		mapper, err := PodMapper(podCfg)
		must(err)
		m := &member{fg: &fakeGateway{}, done: make(chan error, 2)}
		m.pod, err = client.New(podCfg, client.Options{Scheme: testScheme(t), Mapper: mapper})
		must(err)
		m.node, err = client.New(nodeCfg, client.Options{Scheme: testScheme(t), Mapper: mapper})
		must(err)
		m.podCS, err = kubernetes.NewForConfig(podCfg)
		must(err)
		cache, err := NewAssignmentCache(nodeCfg, mapper, testScheme(t), ns, gw)
		must(err)
		a, err := New(Config{Client: m.node, LeaseCreator: m.pod, Assignments: cache, Gateway: gw, Namespace: ns, Pool: "pool",
			Zone: "z" + gw[3:], NodeAddress: netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}), Dir: t.TempDir(),
			ControlSocket: "/run/sluice/sluice.sock", Dial: m.fg.dial, RenewInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond})
		must(err)
		must(a.WakeOn(ctx, cache))
		actx, cancel := context.WithCancel(ctx)
		m.cancel = cancel
		go func() { m.done <- cache.Start(actx) }()
		go func() { m.done <- a.Run(actx) }()
		t.Cleanup(func() { cancel(); <-m.done; <-m.done })
		members[gw] = m
	}

	// End to end with only those rights: both gateways paired, each given
	// both tunnels (owner of one, standby of the other) with their PSKs,
	// and the status of each assignment written by its own agent.
	waitFor2 := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // the assignment watch backs off until the Role exists
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor2("both gateways configured with both tunnels and their statuses written", func() bool {
		for gw, m := range members {
			ap := m.fg.applied()
			var asg v1alpha1.GatewayAssignment
			if len(ap) == 0 || admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: gw}, &asg) != nil ||
				len(asg.Spec.Tunnels) != 2 || asg.Status.AppliedGeneration != asg.Spec.Generation || asg.Status.Message != "" {
				return false
			}
		}
		return true
	})
	t.Logf("from the agents' start to both gateways configured, statuses written: %v", time.Since(start).Round(time.Millisecond))

	a := members["gw-a"]
	get := func(c client.Client, name string, o client.Object) error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed", what, err)
		}
	}

	// As gw-a's node account.
	for _, name := range []string{"pool-ha-gw-a", "t1-psk", "t2-psk", "pool-ticket-keys"} {
		allowed("gw-a reads Secret "+name, get(a.node, name, &corev1.Secret{}))
	}
	for _, name := range []string{"pool-ha-gw-b", "pool-ha-ca", "elsewhere-psk"} {
		refused("gw-a reads Secret "+name, get(a.node, name, &corev1.Secret{}))
	}
	refused("gw-a lists Secrets", a.node.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
	refused("gw-a reads tunnel elsewhere", get(a.node, "elsewhere", &v1alpha1.Tunnel{}))
	refused("gw-a lists every assignment", a.node.List(ctx, &v1alpha1.GatewayAssignmentList{}, client.InNamespace(ns)))
	var asgB v1alpha1.GatewayAssignment
	refused("gw-a reads gw-b's assignment", get(a.node, "gw-b", &asgB))
	must(get(admin, "gw-b", &asgB))
	patched := asgB.DeepCopy()
	patched.Status.Message = "written by gw-a"
	refused("gw-a writes gw-b's status", a.node.Status().Patch(ctx, patched, client.MergeFrom(&asgB)))
	refused("gw-a updates gw-b's assignment", a.node.Update(ctx, patched))
	var asgA v1alpha1.GatewayAssignment
	allowed("gw-a reads its assignment", get(a.node, "gw-a", &asgA))
	var leaseB coordinationv1.Lease
	refused("gw-a reads gw-b's Lease", get(a.node, LeaseName("gw-b"), &leaseB))
	must(get(admin, LeaseName("gw-b"), &leaseB))
	held := leaseB.DeepCopy()
	held.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(time.Hour)}
	refused("gw-a renews gw-b's Lease", a.node.Update(ctx, held))
	refused("gw-a deletes gw-b's Lease", a.node.Delete(ctx, &leaseB))
	allowed("gw-a reads its Lease", get(a.node, LeaseName("gw-a"), &coordinationv1.Lease{}))

	// As gw-a's pod account: nothing but its own Lease's creation and its
	// own node account's token.
	refused("gw-a's pod reads its own HA Secret", get(a.pod, "pool-ha-gw-a", &corev1.Secret{}))
	refused("gw-a's pod reads its assignment", get(a.pod, "gw-a", &v1alpha1.GatewayAssignment{}))
	refused("gw-a's pod reads gw-b's Lease", get(a.pod, LeaseName("gw-b"), &coordinationv1.Lease{}))
	refused("gw-a's pod renews gw-b's Lease", a.pod.Update(ctx, held))
	_, err = requestToken(ctx, a.podCS, v1alpha1.AgentServiceAccount("gw-b"))
	refused("gw-a's pod takes a token of gw-b's account", err)
	_, err = requestToken(ctx, a.podCS, v1alpha1.AgentPodServiceAccount)
	refused("gw-a's pod takes a token of the pod account", err)
	_, err = requestToken(ctx, a.podCS, v1alpha1.AgentServiceAccount("gw-a"))
	allowed("gw-a's pod takes a token of its own account", err)
	forged := func(name, gw string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{v1alpha1.LabelPool: "pool", v1alpha1.LabelGateway: gw}}}
	}
	refused("gw-a's pod creates gw-c's Lease", a.pod.Create(ctx, forged(LeaseName("gw-c"), "gw-c")))
	refused("gw-a's pod creates a Lease of its name labelled for gw-c", a.pod.Create(ctx, forged(LeaseName("gw-a"), "gw-c")))

	// gw-a's node account's Role names nothing of gw-b's.
	role, err := adminCS.RbacV1().Roles(ns).Get(ctx, v1alpha1.AgentServiceAccount("gw-a"), metav1.GetOptions{})
	must(err)
	for _, r := range role.Rules {
		if len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, "pool-ha-gw-b") || slices.Contains(r.ResourceNames, "gw-b") {
			t.Errorf("gw-a's Role has rule %+v", r)
		}
	}

	// Failover with those rights: gw-b's agent stops and deletes its
	// Lease (as its node account); gw-a is assigned both tunnels as owner
	// and applies them.
	members["gw-b"].cancel()
	waitFor2("gw-b's Lease deleted by its agent", func() bool {
		return apierrors.IsNotFound(get(admin, LeaseName("gw-b"), &coordinationv1.Lease{}))
	})
	waitFor2("gw-a owns both tunnels and applied them", func() bool {
		var asg v1alpha1.GatewayAssignment
		if get(admin, "gw-a", &asg) != nil || asg.Status.AppliedGeneration != asg.Spec.Generation || len(asg.Spec.Tunnels) != 2 {
			return false
		}
		for _, o := range asg.Spec.Tunnels {
			if o.Role != v1alpha1.RoleOwner {
				return false
			}
		}
		return true
	})
}
