# syntax=docker/dockerfile:1

# Build:  docker build -t canada-kaktus .
# The binary is linked statically against musl so the runtime image needs no
# libc at all; distroless/static still supplies CA certificates (needed by
# rustls-platform-verifier to reach the Hetzner API), /etc/passwd entries for
# the nonroot user, and tzdata.

# Base images are pinned by digest, with the tag they were taken from named
# beside it, so a moved tag cannot change what is built. Both digests are
# multi-platform indexes (amd64 and arm64 among them). Bump them together
# with the comment.
#
# rust:1-bookworm (Rust 1.97.1, August 2026): the index digest published in
# docker-library/repo-info (repos/rust/remote/1-bookworm.md).
ARG BUILDER_IMAGE=docker.io/library/rust:1-bookworm@sha256:593db038d36ea0d2e5b22a2e095eb95dbec607d88d658c2f35f65ee880b4f93a

FROM ${BUILDER_IMAGE} AS builder

# musl-gcc compiles ring's C and assembly for the musl target. Not pinned to
# a Debian version: an old pin stops resolving once Debian moves on.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*

# uname -m is the architecture this stage runs as, which with buildx is the
# target platform (emulated by QEMU when not native), so the same file builds
# amd64 and arm64 images without a cross toolchain.
RUN rustup target add "$(uname -m)-unknown-linux-musl"

# cc-rs would otherwise look for an "<arch>-linux-musl-gcc" cross compiler,
# which Debian does not ship; musl-gcc is the native musl wrapper.
ENV TARGET_CC=musl-gcc \
    CARGO_TERM_COLOR=never

WORKDIR /build

# Dependency layer: rebuilt only when Cargo.toml or Cargo.lock change, not on
# every source edit. Cargo refuses a manifest whose [[bin]]/[[test]]/[[bench]]
# targets have no files, so those array sections are dropped from this
# throw-away copy (the package's own src/main.rs is still found as the binary),
# and placeholder src/ files stand in for the crate itself.
COPY Cargo.toml Cargo.lock ./
RUN awk '/^\[\[/ { skip = 1; next } /^\[/ { skip = 0 } !skip' Cargo.toml > Cargo.deps.toml \
    && mv Cargo.deps.toml Cargo.toml \
    && mkdir -p src \
    && printf '//! placeholder\nfn main() {}\n' > src/main.rs \
    && printf '//! placeholder\n' > src/lib.rs \
    && cargo build --release --locked --target "$(uname -m)-unknown-linux-musl"

# Real build. The whole context (see .dockerignore) comes in so that every
# target the real manifest declares exists. The touch matters: the copied
# sources can carry mtimes older than the placeholder build above, and cargo
# would then reuse the placeholder binary.
COPY . .
RUN find src -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --target "$(uname -m)-unknown-linux-musl" \
    && mkdir -p /out \
    && cp "target/$(uname -m)-unknown-linux-musl/release/canada-kaktus" /out/canada-kaktus

# gcr.io/distroless/static-debian12:nonroot (2026).
FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639

# CI passes the repository URL; docker/metadata-action adds version, revision
# and creation time on top of these.
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="canada-kaktus" \
      org.opencontainers.image.description="Keeps Cilium CiliumLoadBalancerIPPools equal to the addresses of the Hetzner servers (Cloud and dedicated) that should serve, with Floating IP failover" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="MIT"

COPY --from=builder /out/canada-kaktus /canada-kaktus
# Also on PATH, so `kubectl exec … -- canada-kaktus check` works; the
# entrypoint stays /canada-kaktus, which `command:` overrides may name.
COPY --from=builder /out/canada-kaktus /usr/local/bin/canada-kaktus

# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading
# /etc/passwd; matches runAsUser/runAsGroup in deploy/deployment.yaml.
USER 65532:65532

# Health, readiness, liveness and (later) metrics: /health, /readyz, /livez, /metrics.
EXPOSE 8080

ENTRYPOINT ["/canada-kaktus"]
