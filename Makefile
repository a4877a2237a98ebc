# Tessera - a thin wrapper around CMake and ctest. `make help` lists the targets. Each target
# first installs the Debian packages it needs that are missing, and no others (the lists
# below): make, make demo and make install the build's alone; make test the tests' too, with
# Node.js and tests/node's npm packages.
#
#   make deps   install every Debian package the build, tests, demo and benchmarks need, and
#               the Node test's npm packages
#   make        build into build/
#   make test   unit + integration + security tests, the unit tests and a subset of the
#               integration tests under ASan/UBSan (build-asan/), and 3-10 s of each fuzz target
#               (within 20 minutes on 2 cores: the long cases wait for make test-long)
#   make test-long  make test with its long cases too (TESSERA_LONG=1: variants of shorter
#               cases over another mode, a hung peer, a disk tier; docs/testing.md)
#   make test-fault  the crash suite: kill -9 during snapshots, 24 trials (FAULT_TRIALS=N),
#               shards killed while training with replicas and rollbacks of lost partitions,
#               under the sanitizers, shards restarted by `tessera up --respawn`, the master
#               killed twice under the sanitizers, and the kill matrix: 50 random kills of a
#               shard or the master in exact runs, with its table (KILL_TRIALS=N), then 10 of
#               a reduce job without replicas (KILL_REDUCE_TRIALS=N) and 20 of the CTR
#               trainer's tables (KILL_CTR_TRIALS=N), the pause matrix: the
#               master stopped 5, 15, 60 s and a head shard 5, 30, 150 s (SIGSTOP), and the
#               partitions on emulated hosts (packets dropped, no RST): the master cut from
#               everyone 15 s, a worker from a head shard 60 s (as root; skipped without)
#   make test-big  a 2 GiB tensor registers and trains a step (about a minute, 7 GiB of memory),
#               and a CTR model learns with tables of 8+ times their shards' memory, twice
#               the memory cgroup they run in (about 12 minutes)
#   make test-scale  one master, 10,000 simulated workers heartbeating beside an exact
#               training job: none misses a lease, the job ends exact (a few minutes)
#   make test-deploy  the deployments (docs/deploy.md): emulated hosts, Kubernetes manifests,
#               systemd units, a real Slurm, the podman image; says what it skipped and why
#   make test-rdma  on a real kernel verbs device, Soft-RoCE in a QEMU guest booting Debian's own
#               kernel (tests/rdma/guest.sh): the verbs smoke test, the transport's unit tests
#               over rdma, and exact training over rdma: 2 workers, a shard killed with replicas,
#               one worker on rdma and one on tcp (tests/rdma/test_rdma_train.py; ~15 minutes)
#   make bench-rdma  the rdma transport against ib_write_bw and tcp in that guest (bench/rdma.py)
#   make soak   500 + 20 concurrent short jobs on one cluster, then its RSS, fds and threads
#               must be back where they started (SOAK_ARGS="--seed S ..."; docs/operations.md)
#   make soak-growth  1000 short jobs in a row on one cluster: the master's and shards' RSS
#               after job 1000 within 2 MiB of after job 300 (about 70 minutes)
#   make fuzz   run each libFuzzer target for FUZZ_SECONDS (default 600; build-fuzz/, clang),
#               one after another: the decoders (manifest frame rpc codec handshake) and what
#               lies behind them (dataplane shm master shard_rpc http; docs/testing.md);
#               FUZZ_TARGETS="shm http" runs only those
#   make demo   start a local cluster, show it, stop it
#   make bench  run the benchmarks (bench/results/*.json)
#   make install [PREFIX=/usr/local] [DESTDIR=]  the commands, libtessera (shared and static),
#               tessera.h, tessera.pc and the CMake package (docs/install.md)
#   make fresh-check [CMD="make demo"] [FRESH_ARGS=--user]  CMD on a clean clone of HEAD in a
#               brand-new Debian 12 root (.ci/fresh-root; what CI runs with `make test`)

BUILD ?= build
PREFIX ?= /usr/local
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
# tests/fuzz/fuzz_<name>.c; the seeds of each are in tests/fuzz/corpus-<name>, the manifest's
# in tests/fuzz/corpus. FUZZ_TARGETS (on the command line or in the environment) picks which
# of them make fuzz builds and runs; make test builds them all, whatever it says.
FUZZ_ALL := manifest frame rpc codec handshake dataplane shm master shard_rpc http
FUZZ_TARGETS ?= $(FUZZ_ALL)
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

# Debian packages, by who reads them (docs/testing.md says how these lists are kept complete:
# CI runs `make test` in a brand-new minimal Debian 12 root, .ci/fresh-root). Node.js comes
# from Debian unless a node is already on PATH; so does kubectl (kubernetes-client, 1.20, for
# `kubectl kustomize` in test_deploy_kubernetes; a newer kubectl on PATH is used as it is).
#   build:  compilers, CMake, the gRPC C core and protobuf-c, protoc with the well-known protos
#           (libprotobuf-dev ships google/protobuf/descriptor.proto, which reflection embeds),
#           the libraries we link (libmicrohttpd serves /metrics; LMDB and RocksDB, the disk
#           tier's candidate stores, which bench_table_store measures; libibverbs and
#           librdmacm, for the rdma transport, built everywhere), the Fashion-MNIST
#           files the trainer and demo read, Python's headers for the binding: all that make,
#           make install and make demo need, to build and to run
#   py:     Debian's Python with grpcio and protobuf (the independent clients of
#           tests/integration/tessera_testlib.py and tests/fault/clusterlib.py) and numpy (the
#           binding's arrays): what the scripts of test-fault, test-big and soak import
#   fault:  py, iproute2 and iptables (tests/fault/partition.py: emulated hosts, packets
#           dropped between them)
#   torch:  torch and torchvision (tessera.torch and its examples; ResNet-18)
#   fuzz:   clang with its libFuzzer/ASan runtimes (the fuzz build)
#   slurm:  Slurm and munge (a real Slurm of three nodes on this host: tests/deploy/test_slurm.py)
#   test:   py, torch, fuzz and slurm, and scipy (lib/verify's references), pip, setuptools,
#           wheel and venv (the install test), Prometheus (the scrape test), Chromium (the
#           status page, rendered headless), iproute2 (ip netns: test_hosts' emulated hosts),
#           PyYAML (the Kubernetes manifests), the openssl command (test_identity's role-only
#           certificate of an older `tessera certs init`)
#   bench:  py and torch, iproute2 (ip netns, tc: the emulated hosts and links of
#           bench/modes.py, bench/multihost.py and the torch benchmarks), and fio (the disk's
#           random-read limit beside the table tiers, bench/table_tiers.py)
#   rdma:   QEMU, a static busybox, kmod, cpio and xz (the guest's kernel modules and
#           initramfs, tests/rdma/guest.sh), iproute2 (the `rdma` command), and the verbs
#           stack: libibverbs with its providers (rxe's), librdmacm, their tools and perftest;
#           make test-rdma and bench-rdma add py (tests/rdma/test_rdma_train.py, bench/rdma.py)
#   deploy: py, slurm, iproute2 and PyYAML (the deployment tests of make test, run again), and
#           the container image's: podman with runc, netavark, aardvark-dns, iptables and
#           uidmap, and mmdebstrap for its base (tests/deploy/test_container.py)
DEB_BUILD := build-essential cmake pkg-config libgrpc-dev grpc-proto libprotobuf-c-dev \
             protobuf-c-compiler protobuf-compiler libprotobuf-dev xxd libxxhash-dev \
             libcmocka-dev libssl-dev zlib1g-dev libopenblas-dev dataset-fashion-mnist \
             libzstd-dev python3-dev libmicrohttpd-dev liblmdb-dev librocksdb-dev \
             libibverbs-dev librdmacm-dev
DEB_PY := python3 python3-grpcio python3-protobuf python3-numpy
DEB_TORCH := python3-torch python3-torchvision
DEB_FUZZ := clang libclang-rt-14-dev
DEB_SLURM := slurmctld slurmd slurm-client munge
DEB_TEST := $(DEB_PY) $(DEB_TORCH) $(DEB_FUZZ) $(DEB_SLURM) python3-scipy python3-pip \
            python3-setuptools python3-wheel python3-venv prometheus chromium iproute2 \
            python3-yaml openssl
DEB_FAULT := $(DEB_PY) iproute2 iptables
DEB_BENCH := $(DEB_PY) $(DEB_TORCH) iproute2 fio
DEB_RDMA := qemu-system-x86 busybox-static kmod cpio xz-utils iproute2 ibverbs-providers \
            ibverbs-utils rdmacm-utils perftest libibverbs-dev librdmacm-dev
DEB_DEPLOY := $(DEB_PY) $(DEB_SLURM) iproute2 python3-yaml podman runc netavark aardvark-dns \
              iptables mmdebstrap uidmap

# What each goal on the command line installs, by the lists' names above, besides the build
# list, which every goal that builds installs; NODE is Node.js and kubectl when none is on PATH,
# and tests/node's npm packages. A goal not named here (make, make build, make demo, make
# install, make asan) installs the build list alone. make deps installs every list but the
# container image's packages, which only make test-deploy needs.
DEPS_deps := TEST FAULT BENCH NODE
DEPS_test := TEST NODE
DEPS_test-long := TEST NODE
DEPS_fuzz-build := FUZZ
DEPS_fuzz := FUZZ
DEPS_test-fault := FAULT
DEPS_test-big := PY
DEPS_test-scale := PY
DEPS_soak := PY
DEPS_soak-growth := PY
DEPS_bench := BENCH
DEPS_test-deploy := DEPLOY NODE
DEPS_test-rdma := RDMA PY
DEPS_bench-rdma := RDMA PY
deps_lists := $(sort $(foreach g,$(MAKECMDGOALS),$(DEPS_$(g))))
deps_debs := $(sort $(DEB_BUILD) $(foreach l,$(filter-out NODE,$(deps_lists)),$(DEB_$(l))))
deps_node := $(filter NODE,$(deps_lists))

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps deps-needed deps-build deps-node test demo bench clean help asan fuzz \
        fuzz-build fuzz-check test-fault install soak soak-growth fresh-check test-deploy test-big \
        test-scale test-long test-rdma bench-rdma

all: build

help:
	@sed -n '/^#/!q;p' Makefile

# Installs the Debian packages of $(1) that are missing; with $(2) set, also Node.js and
# kubectl when none is on PATH. Without $(2) the recipe does not name them at all, so that
# `make -n` shows exactly what a goal may install (tests/integration/test_make_deps.py).
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	    | grep -q 'ok installed' || printf ' %s' $$p; done); \
	$(if $(2),$(node_missing)) \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing$$missing"; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
	        $$missing >/dev/null || { echo "deps: apt-get failed; install by hand:$$missing"; exit 1; }; \
	fi
endef
node_missing = { command -v node >/dev/null && command -v npm >/dev/null || \
	missing="$$missing nodejs npm"; }; \
	command -v kubectl >/dev/null || missing="$$missing kubernetes-client";

# What the goals on the command line need (DEPS_<goal>), in one apt-get before anything is
# built: every target that builds or runs needs it. One, because two apt-gets at once under
# `make -j` would fight over dpkg's lock.
deps-needed:
	$(call apt_install,$(deps_debs),$(deps_node))
	$(if $(deps_node),@$(MAKE) --no-print-directory deps-node)

deps: deps-needed

# What building alone needs (deploy/container builds the image with it).
deps-build:
	$(call apt_install,$(DEB_BUILD),)

# The Node tests' packages (reflection; kubernetes-models for the manifests), exactly as
# package-lock.json records them.
deps-node:
	@if [ ! -d tests/node/node_modules ] || [ tests/node/package-lock.json -nt tests/node/node_modules ]; then \
	    echo "deps: npm ci in tests/node"; \
	    npm ci --prefix tests/node --no-audit --no-fund --loglevel=error >/dev/null && \
	    touch tests/node/node_modules; \
	fi

# After deps-needed (order only): under `make -j` CMake must not look for packages still being
# installed.
$(BUILD)/CMakeCache.txt: | deps-needed
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps-needed $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The sanitizer build: the unit tests (they cover lib/) and the services and CLI, which a subset
# of the integration tests runs against (tests/CMakeLists.txt, TS_ASAN_INTEGRATION).
ASAN_BINS := tessera-master tessera-shard tessera-verify tessera-worker tessera dp_probe \
             test_pull_race
asan: deps-needed
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=ON \
	    -DTESSERA_TEST_HOOKS=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests $(ASAN_BINS)

# The libFuzzer targets, built with clang (make test runs each for 3-10 s, make fuzz for
# longer, one after the other; new inputs collect in build-fuzz/corpus-<name>). fuzz-build
# builds those of FUZZ_TARGETS (make test: all of them, for its ctest).
fuzz-build: deps-needed fuzz-check
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

# A name that is not a target is an error, before anything is built.
fuzz-check:
	@bad="$(filter-out $(FUZZ_ALL),$(FUZZ_TARGETS))"; \
	if [ -n "$$bad" ]; then echo "FUZZ_TARGETS: no target $$bad; the targets: $(FUZZ_ALL)" >&2; \
	    exit 2; fi; \
	if [ -z "$(strip $(FUZZ_TARGETS))" ]; then echo "FUZZ_TARGETS: empty" >&2; exit 2; fi

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	    s=corpus-$$t; [ $$t = manifest ] && s=corpus; \
	    mkdir -p $(FUZZ_BUILD)/corpus-$$t && \
	    (cd $(FUZZ_BUILD) && ./bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	        -print_final_stats=1 corpus-$$t $(abspath tests/fuzz)/$$s) || exit 1; \
	done

# ctest runs every fuzz target briefly, so fuzz-build builds them all here, whatever
# FUZZ_TARGETS says.
test: override FUZZ_TARGETS := $(FUZZ_ALL)
test: asan fuzz-build build
	cmake -S . -B $(BUILD) -DTESSERA_ASAN_DIR=$(abspath $(ASAN_BUILD)) \
	    -DTESSERA_FUZZ_DIR=$(abspath $(FUZZ_BUILD)) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	@# A build with no timings of its own (a fresh clone, CI) starts from tests/ctest-costs.txt,
	@# so ctest starts the longest tests first rather than in their order of declaration.
	@mkdir -p $(BUILD)/Testing/Temporary && [ -s $(BUILD)/Testing/Temporary/CTestCostData.txt ] || \
	    cp tests/ctest-costs.txt $(BUILD)/Testing/Temporary/CTestCostData.txt
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS) || \
	    { rc=$$?; /usr/bin/python3 $(CURDIR)/tests/failed_tails.py \
	        $(abspath $(BUILD))/Testing/Temporary/LastTest.log; exit $$rc; }

# A real verbs device: Soft-RoCE in a guest (tests/rdma/guest.sh; its kernel and initramfs
# are cached in build/rdma-guest). In the guest: the verbs smoke test, the transport's unit
# tests, whose rdma cases run there (TESSERA_RDMA_ADDR), and exact training over rdma
# (tests/rdma/test_rdma_train.py). A machine that cannot run the guest (guest.sh exits 77
# saying why) passes, saying so.
test-rdma: build
	@tests/rdma/guest.sh --timeout 1800 -- sh -c 'ibv_devices && \
	    $(abspath $(BUILD))/bin/verbs_smoke && $(abspath $(BUILD))/bin/test_transport && \
	    TESSERA_BIN=$(abspath $(BUILD))/bin PYTHONPATH=$(abspath $(BUILD))/gen/python \
	    /usr/bin/python3 tests/rdma/test_rdma_train.py'; \
	rc=$$?; if [ $$rc = 77 ]; then echo "test-rdma: skipped (the reason is above)"; exit 0; fi; \
	exit $$rc

# The rdma transport (push+pull through shards, and the raw ops) against ib_write_bw and tcp
# on Soft-RoCE, in the guest (bench/rdma.py; emulated rxe: not NIC figures). Installs what
# test-rdma does.
bench-rdma: build
	mkdir -p bench/results
	tests/rdma/guest.sh -- /usr/bin/python3 bench/rdma.py --bin $(abspath $(BUILD))/bin \
	    --out bench/results/rdma.json

# Every case, the long ones too (tessera_testrun.py, long_case).
test-long:
	TESSERA_LONG=1 $(MAKE) test

# DESTDIR, when set, is read by cmake --install from the environment (a staging root).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	$(BUILD)/bin/tessera demo

bench: build
	mkdir -p bench/results
	$(BUILD)/bin/bench_rpc_latency --out bench/results/rpc_latency.json
	$(BUILD)/bin/bench_aggregate --out bench/results/aggregate.json
	$(BUILD)/bin/bench_optim --out bench/results/optim.json
	$(BUILD)/bin/bench_transport_raw --out bench/results/transport_raw.json
	$(BUILD)/bin/bench_pushpull --exact --out bench/results/pushpull.json
	/usr/bin/python3 bench/train.py --bin $(BUILD)/bin --out bench/results/train.json
	PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 bench/python_buffers.py \
	    --bin $(BUILD)/bin --out bench/results/python_buffers.json
	PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 bench/embeddings.py \
	    --bin $(BUILD)/bin --out bench/results/embeddings.json
	PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 bench/table_tiers.py \
	    --bin $(BUILD)/bin --out bench/results/table_tiers.json
	PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 bench/torch_overlap.py \
	    --bin $(BUILD)/bin --out bench/results/torch_overlap.json
	PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 bench/torch_models.py \
	    --bin $(BUILD)/bin --out bench/results/torch_models.json
	/usr/bin/python3 bench/modes.py --bin $(BUILD)/bin --out bench/results/modes.json
	/usr/bin/python3 bench/modes.py --bin $(BUILD)/bin --no-netns --steps 200 --batch 96 \
	    --micro 16 --compute-ms 20 --out bench/results/modes-balance.json \
	    --configs x-bsp,x-exact,x-bal,x-bal-exact,d-bsp,d-bal,d-bal-exact
	/usr/bin/python3 bench/multihost.py --bin $(BUILD)/bin --out bench/results/multihost.json
	$(BUILD)/bin/bench_snapshot --out bench/results/snapshot.json
	$(BUILD)/bin/bench_verify --out bench/results/verify.json
	$(BUILD)/bin/bench_codec --out bench/results/codec.json
	$(BUILD)/bin/bench_table --out bench/results/table.json
	$(BUILD)/bin/bench_table_store --out bench/results/table_store.json
	$(BUILD)/bin/bench_table_policy --out bench/results/table_policy.json
	$(BUILD)/bin/bench_table_redo --out bench/results/table_redo.json
	/usr/bin/python3 bench/shard_redo.py --bin $(BUILD)/bin --out bench/results/shard_redo.json
	/usr/bin/python3 bench/recovery.py --bin $(BUILD)/bin --out bench/results/recovery.json
	/usr/bin/python3 bench/table_join.py --bin $(BUILD)/bin --out bench/results/table_join.json
	/usr/bin/python3 bench/metrics.py --bin $(BUILD)/bin --out bench/results/metrics.json
	/usr/bin/python3 bench/security.py --bin $(BUILD)/bin --out bench/results/security.json

FAULT_TRIALS ?= 24
KILL_TRIALS ?= 50
KILL_REDUCE_TRIALS ?= 10
KILL_CTR_TRIALS ?= 20
test-big: build
	TESSERA_BIN=$(abspath $(BUILD))/bin TESSERA_SRC=$(CURDIR) \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    /usr/bin/python3 tests/integration/test_big_tensor.py
	TESSERA_BIN=$(abspath $(BUILD))/bin TESSERA_SRC=$(CURDIR) \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    /usr/bin/python3 tests/integration/test_big_table.py

# One master for 10,000 simulated workers beside an exact training job (issue 49,
# docs/scaling.md): minutes.
test-scale: build
	TESSERA_BIN=$(abspath $(BUILD))/bin TESSERA_SRC=$(CURDIR) \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    /usr/bin/python3 tests/integration/test_scale.py

# The fault suites' long cases run too (tessera_testrun.py, long_case).
test-fault: export TESSERA_LONG = 1
test-fault: build asan
	TESSERA_FAULT_TRIALS=$(FAULT_TRIALS) TESSERA_BIN=$(abspath $(BUILD))/bin \
	    PYTHONPATH=$(abspath $(BUILD))/gen/python TESSERA_SRC=$(CURDIR) \
	    /usr/bin/python3 tests/integration/test_snapshot_fault.py
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    TESSERA_SRC=$(CURDIR) /usr/bin/python3 tests/integration/test_replication.py \
	    DeadFollower AsyncModes
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 TESSERA_ROLLBACK_LONG=1 \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    TESSERA_SRC=$(CURDIR) /usr/bin/python3 tests/integration/test_rollback.py
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(BUILD))/gen/python TESSERA_SRC=$(CURDIR) \
	    TESSERA_JOIN_KILLS=1 /usr/bin/python3 tests/integration/test_join.py
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(BUILD))/gen/python TESSERA_SRC=$(CURDIR) \
	    /usr/bin/python3 tests/fault/kill_points.py
	TESSERA_BIN=$(abspath $(BUILD))/bin PYTHONPATH=$(abspath $(BUILD))/gen/python \
	    TESSERA_SRC=$(CURDIR) /usr/bin/python3 tests/fault/respawn.py
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(BUILD))/gen/python TESSERA_SRC=$(CURDIR) \
	    /usr/bin/python3 tests/integration/test_master_restart.py
	TESSERA_BIN=$(abspath build-asan)/bin TESSERA_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(BUILD))/gen/python TESSERA_SRC=$(CURDIR) \
	    /usr/bin/python3 tests/integration/test_elastic.py
	TESSERA_BIN=$(abspath $(BUILD))/bin /usr/bin/python3 tests/fault/kill_matrix.py \
	    --trials $(KILL_TRIALS)
	TESSERA_BIN=$(abspath $(BUILD))/bin /usr/bin/python3 tests/fault/kill_matrix.py \
	    --mode reduce --trials $(KILL_REDUCE_TRIALS)
	TESSERA_BIN=$(abspath $(BUILD))/bin /usr/bin/python3 tests/fault/kill_matrix.py \
	    --model ctr --steps 300 --trials $(KILL_CTR_TRIALS)
	TESSERA_BIN=$(abspath $(BUILD))/bin /usr/bin/python3 tests/fault/pause_matrix.py
	TESSERA_BIN=$(abspath $(BUILD))/bin /usr/bin/python3 tests/fault/partition.py \
	    || [ $$? = 77 ]   # 77: no namespaces or iptables here (not root); it said why

# The deployments (docs/deploy.md): emulated hosts, Kubernetes manifests, systemd units, a real
# Slurm and the container image, with what each needs; a table at the end says what ran, what
# was skipped and why. DEPLOY_ONLY=slurm,container runs a subset.
DEPLOY_ONLY ?=
test-deploy: build
	TESSERA_BIN=$(abspath $(BUILD))/bin TESSERA_SRC=$(CURDIR) \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath $(BUILD))/gen/python \
	    /usr/bin/python3 tests/deploy/run.py \
	    $(if $(DEPLOY_ONLY),--only $(DEPLOY_ONLY))

# One long-lived cluster, many short jobs, then its services' resources (test_soak.py; the
# suite runs its short profile; docs/operations.md, "The soak test").
SOAK_ARGS ?=
soak: build
	TESSERA_BIN=$(abspath $(BUILD))/bin PYTHONPATH=$(abspath $(BUILD))/gen/python \
	    TESSERA_SRC=$(CURDIR) /usr/bin/python3 tests/integration/test_soak.py --full \
	    $(SOAK_ARGS)

# 1000 jobs in a row on one cluster: the services' memory after job 1000 against after job 300
# (test_soak.py --growth; about 70 minutes on 2 cores; docs/operations.md, "Memory over many
# jobs").
soak-growth: build
	TESSERA_BIN=$(abspath $(BUILD))/bin PYTHONPATH=$(abspath $(BUILD))/gen/python \
	    TESSERA_SRC=$(CURDIR) /usr/bin/python3 tests/integration/test_soak.py --growth \
	    $(SOAK_ARGS)

CMD ?= make test
FRESH_ARGS ?=
fresh-check:
	.ci/fresh-root $(FRESH_ARGS) -- $(CMD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
