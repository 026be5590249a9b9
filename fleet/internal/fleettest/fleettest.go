// Package fleettest has what the fleet's tests share: a real API server
// (kube-apiserver and etcd built by .ci/kube-assets, run by
// controller-runtime's envtest with the CRDs of deploy/crd) and the
// gateway's binary.
package fleettest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// DefaultKubeAssets is where .ci/kube-assets builds kube-apiserver and
// etcd unless $KUBEBUILDER_ASSETS says otherwise.
const DefaultKubeAssets = "/var/cache/sluice/kube-assets"

// root is the repository's root (the gateway module's directory).
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// CRDDir is the directory of the generated CRDs (deploy/crd).
func CRDDir() string { return filepath.Join(root(), "deploy", "crd") }

// Assets returns the directory holding kube-apiserver and etcd. Without
// them the test is skipped, or fails under CI=true, where they must be.
func Assets(t testing.TB) string {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = DefaultKubeAssets
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true and no %s in %s (build it with .ci/kube-assets): %v", bin, assets, err)
			}
			t.Skipf("no %s in %s (build it with .ci/kube-assets, or set $KUBEBUILDER_ASSETS)", bin, assets)
		}
	}
	return assets
}

// Environment returns an envtest environment on Assets with the CRDs.
func Environment(t testing.TB) *envtest.Environment {
	return &envtest.Environment{
		BinaryAssetsDirectory: Assets(t),
		CRDDirectoryPaths:     []string{CRDDir()},
		ErrorIfCRDPathMissing: true,
	}
}

// StartAPIServer starts a kube-apiserver and etcd of the test's own,
// stopped when it ends.
func StartAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env := Environment(t)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})
	return env, cfg
}

// BuildSluice builds the gateway's cmd/sluice (in its own module) into
// dir and returns its path.
func BuildSluice(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/sluice")
	cmd.Dir = root()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/sluice: %v\n%s", err, b)
	}
	return out
}

// Kustomize builds the kustomization in deploy/dir, as `kubectl apply -k`
// would, and returns its objects.
func Kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(filepath.Dir(CRDDir()), dir))
	if err != nil {
		t.Fatalf("kustomize deploy/%s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}
