# The flint image: one static binary for `flint agent` (the DaemonSet in
# deploy/kubernetes) and `flint server`. The web UI is embedded from
# internal/webui/dist and the BPF objects are committed, so the build needs
# neither node nor clang.
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t flint .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Without cgo, as make builds it: Go drops capabilities on every thread only
# in a binary without cgo, and a static binary needs nothing from the image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/flint ./cmd/flint

# No shell, no package manager: flint reads the host's files through /proc
# and the mounts the manifests give it. The image's user is nonroot
# (65532), which flint server runs as; the agent's pod runs it as root with
# a few capabilities.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/flint /usr/local/bin/flint
ENTRYPOINT ["/usr/local/bin/flint"]
CMD ["--help"]
