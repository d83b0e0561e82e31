# Leasehold: the `leasehold` binary and the example controllers' components,
# on a small runtime image, run as a non-root user.
#
#   docker build -t leasehold .
#   docker run --rm -e LEASEHOLD_DATABASE_URL=postgres://... \
#     -v "$PWD/deploy/kubernetes/leasehold.toml:/etc/leasehold/leasehold.toml:ro" \
#     -p 8080:8080 leasehold
#
# Your own controllers: build FROM this image and COPY their .wasm files
# into /usr/local/lib/leasehold/components (the config names them with
# ${LEASEHOLD_GUEST_DIR}).

# --- build -----------------------------------------------------------------
FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --locked --release -p leasehold-host --bin leasehold \
 && cargo build --locked --profile guest --target wasm32-wasip2 \
      -p scheduler -p rollout -p provisioner \
 && mkdir -p /out/components \
 && cp target/release/leasehold /out/leasehold \
 && cp target/wasm32-wasip2/guest/scheduler.wasm \
       target/wasm32-wasip2/guest/rollout.wasm \
       target/wasm32-wasip2/guest/provisioner.wasm /out/components/

# --- run -------------------------------------------------------------------
# glibc and nothing else: no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/leasehold /usr/local/bin/leasehold
COPY --from=build /out/components/ /usr/local/lib/leasehold/components/
ENV LEASEHOLD_GUEST_DIR=/usr/local/lib/leasehold/components
# The numeric id of distroless' `nonroot` user, so orchestrators can check
# runAsNonRoot without resolving a name.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/leasehold", "--log-format", "json"]
CMD ["run", "--config", "/etc/leasehold/leasehold.toml"]
