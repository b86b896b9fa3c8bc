# evictord container image, for building with your own tools (docker build, podman build, buildah bud):
#
#   docker build -t registry.example.com/evictord:0.1.0 .
#
# `make image` builds the same layout here without a container engine or a registry (see the book,
# docs/src/install.md). Stage 1 compiles the release binary; stage 2 is distroless `cc` (glibc, libgcc, CA
# certificates, nothing else), running as its "nonroot" user 65532 — the chart's securityContext
# expects that uid and a read-only root filesystem (evictord writes only to /tmp).
FROM docker.io/library/rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin evictord \
 && strip target/release/evictord \
 && cp target/release/evictord /evictord

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /evictord /evictord
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/evictord"]
CMD ["serve"]
