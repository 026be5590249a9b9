// Package check proves that the kube-apiserver and etcd .ci/kube-assets
// builds run under controller-runtime's envtest: objects round-trip through
// a client, and the API server enforces a CRD's validation.
package check

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// defaultAssets is where .ci/kube-assets puts the binaries when
// KUBEBUILDER_ASSETS is unset.
const defaultAssets = "/var/cache/sluice/kube-assets"

// assetsDir returns the directory holding kube-apiserver and etcd. Without
// them the test fails when CI=true and skips otherwise.
func assetsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = defaultAssets
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("envtest assets: %v (CI=true: not skipping; .ci/kube-assets builds them)", err)
			}
			t.Skipf("envtest assets: %v (run .ci/kube-assets to build them)", err)
		}
	}
	return dir
}

// TestEnvtest starts envtest's control plane from the built binaries, then
// checks what the fleet's tests rely on.
func TestEnvtest(t *testing.T) {
	dir := assetsDir(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDDirectoryPaths:        []string{"testdata"},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: start: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest: stop: %v", err)
		}
	})
	t.Logf("envtest: control plane up, CRDs established in %v", time.Since(start).Round(time.Millisecond))

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	t.Run("Version", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatalf("discovery: %v", err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatalf("server version: %v", err)
		}
		t.Logf("kube-apiserver %s (%s)", v.GitVersion, v.GoVersion)
		if !strings.HasPrefix(v.GitVersion, "v1.") {
			t.Errorf("server version %q: want v1.x (the link-time version of .ci/kube-assets)", v.GitVersion)
		}
	})

	t.Run("ConfigMap", func(t *testing.T) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "envtest-check", Namespace: "default"},
			Data:       map[string]string{"psk": "not-a-secret"},
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatalf("create: %v", err)
		}
		var got corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatalf("get: %v", err)
		}
		if got.Data["psk"] != "not-a-secret" || got.UID == "" {
			t.Errorf("read back %+v (uid %q), want data psk=not-a-secret and a uid", got.Data, got.UID)
		}
	})

	t.Run("CRDValidation", func(t *testing.T) {
		// Defaults are applied by the server.
		good := probe("good", map[string]any{"pool": "edge"})
		if err := c.Create(ctx, good); err != nil {
			t.Fatalf("create valid probe: %v", err)
		}
		spec, _, _ := unstructured.NestedMap(good.Object, "spec")
		if spec["steering"] != "vip" || spec["misses"] != int64(3) || spec["interval"] != "100ms" {
			t.Errorf("valid probe spec after create = %v, want the schema's defaults steering=vip misses=3 interval=100ms", spec)
		}

		bad := []struct {
			name  string
			spec  map[string]any
			field string
		}{
			{"enum", map[string]any{"pool": "edge", "steering": "bgp"}, "spec.steering"},
			{"minimum", map[string]any{"pool": "edge", "misses": int64(1)}, "spec.misses"},
			{"maximum", map[string]any{"pool": "edge", "misses": int64(101)}, "spec.misses"},
			{"pattern", map[string]any{"pool": "edge", "interval": "soon"}, "spec.interval"},
			{"required", map[string]any{"steering": "vip"}, "spec.pool"},
		}
		for _, tc := range bad {
			err := c.Create(ctx, probe("bad-"+tc.name, tc.spec))
			if !apierrors.IsInvalid(err) {
				t.Errorf("%s: create %v: err = %v, want the server's Invalid error", tc.name, tc.spec, err)
				continue
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: error %q does not name %s", tc.name, err, tc.field)
			}
			t.Logf("%s: refused: %v", tc.name, err)
		}
	})
}

// probe returns a check.sluice.io/v1alpha1 Probe in namespace default.
func probe(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("check.sluice.io/v1alpha1")
	u.SetKind("Probe")
	u.SetNamespace("default")
	u.SetName(name)
	return u
}
