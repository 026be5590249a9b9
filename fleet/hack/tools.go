//go:build tools

// Package tools pins the code generators the fleet module runs, so that
// go.mod records their versions.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
