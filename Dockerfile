# A small static image of sluice: the pure-Go binary (no cgo engines) on
# a distroless base, as root inside the container so that it may create
# its TUN device; give the container only what a gateway needs:
#
#   docker build -t sluice .
#   docker run --rm --cap-add NET_ADMIN --cap-add NET_RAW --device /dev/net/tun \
#     -v /etc/sluice:/etc/sluice:ro -p 500:500/udp -p 4500:4500/udp sluice
#
# The configuration is /etc/sluice/sluice.toml; `docker run ... sluice check
# -c /etc/sluice/sluice.toml` checks it without starting anything.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X github.com/sluicegw/sluice/internal/buildinfo.Version=${VERSION}" \
	-o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/sluice /usr/bin/sluice
VOLUME ["/var/lib/sluice"]
ENTRYPOINT ["/usr/bin/sluice"]
CMD ["run", "-c", "/etc/sluice/sluice.toml"]
