#!/usr/bin/env bash
# Build dist/sluice_VERSION_ARCH.deb: the static pure-Go binary, its man
# pages and shell completions, the systemd units and the sysusers entry.
#
#   packaging/build-deb.sh            # VERSION and OUT may be set
#
# nfpm comes from the Go module proxy (go run ...@version), so the only
# tool this needs is Go.
set -euo pipefail
cd "$(dirname "$0")/.."
NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
out=${OUT:-dist}
export VERSION=${VERSION:-0.0.0~git$(git log -1 --format=%cd.%h --date=format:%Y%m%d 2>/dev/null || echo 0)}
export ARCH=${ARCH:-$(go env GOARCH)}
STAGE=dist/stage # packaging/nfpm.yaml names it
rm -rf "$STAGE"
mkdir -p "$STAGE/man"
CGO_ENABLED=0 GOARCH="$ARCH" go build -trimpath -buildvcs=auto \
	-ldflags "-s -w -X github.com/sluicegw/sluice/internal/buildinfo.Version=$VERSION" \
	-o "$STAGE/sluice" ./cmd/sluice
for m in docs/man/*.8; do
	gzip -9n <"$m" >"$STAGE/man/$(basename "$m").gz"
done
go run "$NFPM" package --config packaging/nfpm.yaml --packager deb --target "$out/"
ls "$out"/sluice_*"$ARCH".deb
