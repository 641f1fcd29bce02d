# precog — build, test, demo, bench.
#
# Everything a fresh Debian machine needs (ONNX Runtime, redis-server, postgres)
# is fetched or installed by the targets below; nothing else is assumed.

SHELL        := /bin/bash
GO           ?= go
ORT_VERSION  ?= 1.29.0
CACHE_DIR    ?= $(CURDIR)/.cache
ORT_DIR      := $(CACHE_DIR)/onnxruntime-node-$(ORT_VERSION)
ORT_LIB      := $(ORT_DIR)/libonnxruntime.so.1
STATE_DIR    ?= $(CURDIR)/.precog
TEST_TIMEOUT ?= 30m

export PRECOG_ORT_LIB ?= $(ORT_LIB)
export PRECOG_TESTDATA ?= $(CURDIR)/testdata/generated

.PHONY: all build test test-stability lint demo bench duckdb ort ort-gpu test-gpu gpu-bundle servers testdata fuzz clean cluster-quickstart docs

all: build

## ort: fetch the ONNX Runtime shared library from the onnxruntime-node npm package
## (cached, checked by the sha256 pinned in scripts/ort.sh).
ort: $(ORT_LIB)
$(ORT_LIB):
	@ORT_VERSION=$(ORT_VERSION) bash scripts/ort.sh cpu $(ORT_DIR)

## ort-gpu: the same ONNX Runtime with its CUDA provider (CUDA 13, cuDNN 9) from npm, into
## $(ORT_GPU_DIR); GPU_ARCHS=90 (or 80,90) keeps only those architectures' device code.
## Use it with PRECOG_ORT_LIB=$(ORT_GPU_DIR)/libonnxruntime.so.1 (docs/gpu.md).
GPU_ARCHS   ?=
comma       := ,
ORT_GPU_DIR := $(CACHE_DIR)/onnxruntime-gpu-$(ORT_VERSION)$(if $(GPU_ARCHS),-sm$(subst $(comma),-,$(GPU_ARCHS)))
ort-gpu: $(ORT_GPU_DIR)/libonnxruntime.so.1
$(ORT_GPU_DIR)/libonnxruntime.so.1:
	@ORT_VERSION=$(ORT_VERSION) bash scripts/ort.sh gpu $(ORT_GPU_DIR) "$(GPU_ARCHS)"

## gpu-bundle: everything `make test-gpu` needs on a GPU machine without Go, Redis, Postgres
## or network (ORT with GPU_ARCHS=90 and one stripped Go binary: precog -tags gpucheck, which
## carries the checks and the bench), xz-compressed into bin/precog-gpu-bundle.tar.xz; prints
## its size and fails above 60 MiB. docs/gpu.md says how to run it.
gpu-bundle:
	@$(MAKE) --no-print-directory ort-gpu GPU_ARCHS=$(or $(GPU_ARCHS),90)
	@bash scripts/gpu-bundle.sh $(CACHE_DIR)/onnxruntime-gpu-$(ORT_VERSION)-sm$(subst $(comma),-,$(or $(GPU_ARCHS),90))

## test-gpu: the GPU check (scripts/test-gpu.sh) on this machine's cuda:0; from a checkout
## it builds what it needs first, in an unpacked bundle it runs the bundle's binaries.
test-gpu:
	@bash scripts/test-gpu.sh

## servers: install redis-server and postgresql from Debian packages, and versitygw (S3) from its Go module, when missing.
servers:
	@bash scripts/install-servers.sh

## build: bin/precog
build:
	$(GO) build -o bin/precog ./cmd/precog

## testdata: generate the small test models and datasets (deterministic).
testdata:
	$(GO) run ./testdata/gen -out $(PRECOG_TESTDATA)

## test: the whole suite against real ONNX Runtime, Redis and Postgres. The
## packages with concurrency run under the race detector; the rest (the CLI's
## end-to-end tests drive the real binary) run plain.
RACE_PKGS := ./runner/... ./sinks/... ./sources/... ./jobs/... ./lookup/...
## Both halves run even when the first fails, so one failure does not hide another.
test: ort servers
	$(GO) vet ./...
	@rc=0; \
	echo "== race-detector half: $(RACE_PKGS)"; \
	$(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS) || rc=1; \
	echo "== the rest (the CLI's end-to-end tests, deploy, internal)"; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -E '/(runner|sinks|sources|jobs|lookup)(/|$$)') || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED (see the FAIL lines above)"; fi; \
	exit $$rc

## test-stability: the whole suite on a fresh clone of HEAD twice, on a quiet machine and with
## every core kept busy by a CPU hog; prints pass/fail and minutes of each (scripts/test-stability.sh).
test-stability:
	@bash scripts/test-stability.sh

## lint: gofmt, go vet, staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## fuzz: a short fuzzing pass over every fuzz target of the module (FUZZTIME each),
## found by name, so a new FuzzXxx runs without being listed here.
FUZZTIME ?= 20s
fuzz:
	@set -e; for f in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
	  pkg=./$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== $$pkg $$t"; $(GO) test $$pkg -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

## duckdb: fetch DuckDB's prebuilt node bindings (npm pack, sha256 pinned in scripts/duckdb.sh)
## into $(DUCKDB_DIR): the bench's feed section runs DuckDB's read-sum-write with them (node).
DUCKDB_VERSION ?= 1.5.6-r.1
DUCKDB_DIR     := $(CACHE_DIR)/duckdb-$(DUCKDB_VERSION)
duckdb: $(DUCKDB_DIR)/node_modules/@duckdb/node-api/package.json
$(DUCKDB_DIR)/node_modules/@duckdb/node-api/package.json:
	@DUCKDB_VERSION=$(DUCKDB_VERSION) bash scripts/duckdb.sh $(DUCKDB_DIR)

## bench: the benchmark table (ratios against raw limits measured in the same run),
## written into docs/benchmarks.md's bench-table block (a copy of the table alone in .cache/bench-results.md).
## BENCH_FLAGS="-big=false" skips the 10M-row peak-RSS run; -rows N, -sections core,sinks,lookup,cluster,checks,wide,text,estimate.
BENCH_FLAGS ?=
bench: export PRECOG_DUCKDB_DIR = $(DUCKDB_DIR)
bench: ort duckdb servers build
	@mkdir -p $(CACHE_DIR)
	$(GO) run ./cmd/precog-bench -out $(CACHE_DIR)/bench-results.md -readme docs/benchmarks.md $(BENCH_FLAGS)
	@cat $(CACHE_DIR)/bench-results.md

## docs: regenerate the generated documentation (docs/spec.md, docs/cli/, each page's table of
## contents); the suite's TestDocsGenerated fails when they are not current.
docs: ort
	PRECOG_UPDATE_DOCS=1 $(GO) test ./cmd/precog -run 'TestDocsGenerated' -count=1

## demo: fetch, build, start local Redis+Postgres, generate data, run a job, show a lookup.
demo: ort servers build
	@bash scripts/demo.sh

## cluster-quickstart: the one-machine cluster walkthrough of docs/cluster.md, run for real
## (a throwaway Postgres, two workers, submit, status, workers, rejects, the dashboard).
cluster-quickstart: ort servers build
	@bash scripts/cluster-quickstart.sh

clean:
	rm -rf bin $(STATE_DIR) testdata/generated out
