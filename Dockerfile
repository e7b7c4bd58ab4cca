# syntax=docker/dockerfile:1
# The wcache image: the release binaries of `make dist` (wcache and the
# backend plugins side by side in /usr/local/bin, where wcache looks for its
# plugins), on Debian 12's glibc (the cgo plugins dlopen the host's vendor
# libraries, which the NVIDIA container runtime mounts), running as uid 1000.
#
#   docker build -t ghcr.io/wcache/wcache:0.1.0-dev .
#   docker build --build-arg VERSION=1.2.3 -t ghcr.io/wcache/wcache:1.2.3 .
#
# deploy/kubernetes/daemonset.yaml runs this image; test/dist checks that
# every file copied here exists, that the build stage copies every package
# the binaries need, and that the manifest's image, user and command match.

ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces a module with a folder of third_party/: needed to download.
COPY third_party/ third_party/
RUN go mod download
COPY Makefile ./
COPY build/ build/
COPY cmd/ cmd/
COPY core/ core/
COPY internal/ internal/
COPY plugins/ plugins/
COPY proto/ proto/
COPY sdk/ sdk/
COPY deploy/systemd/ deploy/systemd/
COPY docs/operations.md docs/
ARG VERSION=0.1.0-dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# The same target CI runs (test/dist builds and runs its archive), for the
# platform of this build, natively with the stage's gcc.
RUN make dist VERSION=${VERSION} DIST=/out DIST_PLATFORMS=${TARGETOS}/${TARGETARCH} CC_${TARGETOS}_${TARGETARCH}=gcc \
 && mkdir /release \
 && tar -C /release --strip-components=1 -xzf /out/wcache-${VERSION}-${TARGETOS}-${TARGETARCH}.tar.gz

FROM debian:bookworm-slim
ARG VERSION=0.1.0-dev
LABEL org.opencontainers.image.title="wcache" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/wcache/wcache"
COPY --from=build /release/bin/ /usr/local/bin/
COPY --from=build /release/systemd/ /usr/share/doc/wcache/systemd/
COPY --from=build /release/operations.md /usr/share/doc/wcache/
USER 1000:1000
ENTRYPOINT ["wcache"]
CMD ["--help"]
