package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicegw/sluice/fleet/internal/fleettest"
)

// kustomize builds the kustomization in deploy/dir.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	return fleettest.Kustomize(t, dir)
}

// typed converts u into a typed object of the scheme.
func typed[T runtime.Object](t *testing.T, u *unstructured.Unstructured, into T) T {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return into
}

// TestDeployManifests: deploy/ builds with kustomize; the gateway pod is
// not privileged and has only the capabilities a gateway needs; the
// agent's and the controller's arguments and environment are flags their
// commands take; and on a real API server with the CRDs, the example pool
// and tunnels are accepted by the schema.
func TestDeployManifests(t *testing.T) {
	objs := kustomize(t, ".")
	kinds := map[string]int{}
	var ds *appsv1.DaemonSet
	var dep *appsv1.Deployment
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetNamespace() != "" && o.GetNamespace() != "sluice-system" {
			t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		switch o.GetKind() {
		case "DaemonSet":
			ds = typed(t, o, &appsv1.DaemonSet{})
		case "Deployment":
			dep = typed(t, o, &appsv1.Deployment{})
		}
	}
	if kinds["CustomResourceDefinition"] != 4 || ds == nil || dep == nil || kinds["ClusterRole"] != 2 {
		t.Fatalf("deploy/ holds %v", kinds)
	}
	if *dep.Spec.Replicas != 2 || !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
		t.Errorf("the controller: %d replicas, args %q", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Args)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("the gateway pod is not on the host network")
	}
	checkTokenMounts(t, pod)
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s: security context %+v", c.Name, sc)
			continue
		}
		want := []corev1.Capability(nil)
		if c.Name == "gateway" {
			want = []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"}
		}
		if !slices.Equal(sc.Capabilities.Add, want) {
			t.Errorf("container %s adds %v, want %v", c.Name, sc.Capabilities.Add, want)
		}
		if strings.HasPrefix(c.Image, "ghcr.io/sluicegw/sluice-fleet") {
			checkFlags(t, c, newAgentCommand(io.Discard))
		}
	}
	checkFlags(t, dep.Spec.Template.Spec.Containers[0], newControllerCommand(io.Discard))

	// The example objects against the CRDs' schema on a real API server.
	_, c := apiClient(t)
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sluice-system"}}); err != nil {
		t.Fatal(err)
	}
	example := kustomize(t, "example")
	if len(example) < 4 {
		t.Fatalf("deploy/example holds %d objects", len(example))
	}
	for _, o := range example {
		if err := c.Create(ctx, o); err != nil {
			t.Errorf("example %s %s refused: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// checkTokenMounts: the gateway pod mounts no service-account token but
// a projected one, bound to the pod, into its agent containers (the init
// container's and the agent's) alone; the gateway container, which faces
// the Internet, holds no Kubernetes credential.
func checkTokenMounts(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the gateway pod does not set automountServiceAccountToken: false")
	}
	tokenVolumes := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				tokenVolumes[v.Name] = true
			}
		}
	}
	if len(tokenVolumes) != 1 {
		t.Errorf("the gateway pod has %d projected token volumes, want 1", len(tokenVolumes))
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return tokenVolumes[m.Name] })
		if want := c.Name != "gateway"; mounted != want {
			t.Errorf("container %s mounts the agent's token: %v, want %v", c.Name, mounted, want)
		}
		if c.Name == "gateway" && (len(c.EnvFrom) > 0 || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil })) {
			t.Errorf("the gateway container takes environment from a Secret")
		}
	}
}

// checkFlags parses c's arguments (after the subcommand) with cmd's flags,
// and checks that each environment variable c sets is one cmd reads.
func checkFlags(t *testing.T, c corev1.Container, cmd interface {
	ParseFlags([]string) error
}) {
	t.Helper()
	if len(c.Args) == 0 {
		t.Errorf("container %s has no arguments", c.Name)
		return
	}
	if err := cmd.ParseFlags(c.Args[1:]); err != nil {
		t.Errorf("container %s: %q: %v", c.Name, c.Args, err)
	}
	read := []string{"NODE_NAME", "NODE_IP", "POD_NAMESPACE", "SLUICE_POOL", "SLUICE_BOOTSTRAP", "SLUICE_SOCKET", "SLUICE_HA_DIR", "SLUICE_STATE_DIR"}
	for _, e := range c.Env {
		if !slices.Contains(read, e.Name) {
			t.Errorf("container %s sets %s, which sluice-fleet does not read", c.Name, e.Name)
		}
	}
}
