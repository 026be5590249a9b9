#!/bin/sh
# gen.sh regenerates the deepcopy functions of fleet/api/v1alpha1 and the
# CRDs in deploy/crd with the controller-gen pinned in fleet/go.mod.
# CI runs it and fails on any difference from what is checked in.
set -eu
fleet=$(cd "$(dirname "$0")/.." && pwd)
cd "$fleet"
gen() { go run sigs.k8s.io/controller-tools/cmd/controller-gen "$@"; }
gen object paths=./api/...
gen crd paths=./api/... output:crd:artifacts:config=../deploy/crd
