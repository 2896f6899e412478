# infer — build, test and demo. `make help` lists the targets.
SHELL   := /bin/bash
GO      ?= go
BIN     := bin/infer
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/inferhq/infer/cmd.version=$(VERSION) -X github.com/inferhq/infer/cmd.commit=$(COMMIT)

.PHONY: help setup build install test vet lint fmt-check bench fuzz demo try ci-bench ci-baseline use-reference clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup: ## fetch the ONNX Runtime library into .cache/onnxruntime (once)
	./scripts/setup-ort.sh

build: ## build bin/infer
	@if [ ! -e $(BIN) ]; then echo "building $(BIN): the first build downloads the Go modules and compiles them (about a minute)…"; fi
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

# A link rather than a copy: infer finds the ONNX Runtime library of this
# clone (.cache/onnxruntime) next to the binary it resolves to.
PREFIX ?= $(HOME)/.local
install: setup build ## put infer on your PATH: a link $(PREFIX)/bin/infer → bin/infer (PREFIX=/usr/local for everyone)
	@mkdir -p $(PREFIX)/bin
	ln -sf $(CURDIR)/$(BIN) $(PREFIX)/bin/infer
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) echo "infer is on your PATH: $$(command -v infer)";; \
	*) echo "$(PREFIX)/bin is not on your PATH; add it: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

test: setup fmt-check vet lint ## the full test suite: gofmt, go vet, staticcheck, go test -race
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

STATICCHECK := .cache/bin/staticcheck
lint: $(STATICCHECK) ## staticcheck (its default checks, unused code included)
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(CURDIR)/.cache/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: ## Go benchmarks of the batcher and the simulated accelerator
	$(GO) test -run='^$$' -bench=. -benchmem ./server/batch ./models/sim

# The fuzz targets, package:name; each runs for FUZZTIME executions (CI:
# 50000x, a few seconds each). A count, not a duration: with a duration, Go
# 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" at the deadline (golang/go#75804, fixed in Go 1.27). Seeds are
# in the packages' testdata/fuzz; what a run finds is kept in the Go cache
# (a failing input is written to testdata/fuzz and reported).
FUZZTIME ?= 1000000x
FUZZ := server:FuzzRequestTimeout server/encoder:FuzzDecodeItems server/encoder:FuzzDecodeV2 server/encoder:FuzzHandler server/encoder:FuzzEmbeddings \
	loadgen/target:FuzzParseMetrics loadgen/attack:FuzzServerTiming \
	loadgen/llm:FuzzReader loadgen/llm:FuzzChunk loadgen/llm:FuzzEncoding loadgen/llm:FuzzReadTrace \
	models/tfjs:FuzzRead models/sentencepiece:FuzzEncode \
	models/llama:FuzzParseHeader models/llama/tokenizer:FuzzEncode
fuzz: ## run each fuzz target for FUZZTIME (default 1000000x executions): decoders, deadlines, the whole handler, the metrics, Server-Timing and SSE parsers, trace files, TF.js manifests, SentencePiece, llama2.c headers and tokenizer
	@set -e; for t in $(FUZZ); do \
		echo "== $${t#*:} (./$${t%%:*}, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) ./$${t%%:*}; \
	done

demo: setup build ## bench the default model naive vs batched (live view) and write the PNG report
	@echo "running scenarios/demo.yaml: about a minute (the first run also makes bert-mini); q stops"
	$(BIN) bench --scenario scenarios/demo.yaml

try: setup build ## serve the default model and sim-lm, send the docs' requests to every endpoint, check each answer
	./scripts/try.sh

# CI's performance check: the quick scenarios against the baseline runs kept
# in ci/baseline/quick and ci/baseline/llm-quick. On shared machines the
# verdict only warns; set FAIL_ON_REGRESSION=1 to make a regression fail.
ci-bench: build ## bench scenarios/quick.yaml and llm-quick.yaml against ci/baseline (reports in ci-out/report, ci-out/llm-report)
	rm -rf ci-out
	$(BIN) bench --scenario scenarios/quick.yaml --no-tui --report=false --out ci-out/quick
	$(BIN) report ci-out/quick --baseline ci/baseline/quick --out ci-out/report $(if $(FAIL_ON_REGRESSION),--fail-on-regression)
	$(BIN) bench --scenario scenarios/llm-quick.yaml --no-tui --report=false --out ci-out/llm-quick
	$(BIN) report ci-out/llm-quick --baseline ci/baseline/llm-quick --out ci-out/llm-report $(if $(FAIL_ON_REGRESSION),--fail-on-regression)

# The baselines of ci-bench, measured again: run it on a quiet machine after
# an intended performance change, and commit ci/baseline.
ci-baseline: build ## re-measure ci/baseline/quick and ci/baseline/llm-quick (on a quiet machine)
	rm -rf ci/baseline/quick ci/baseline/llm-quick
	$(BIN) bench --scenario scenarios/quick.yaml --no-tui --report=false --out ci/baseline/quick
	$(BIN) bench --scenario scenarios/llm-quick.yaml --no-tui --report=false --out ci/baseline/llm-quick
	rm -f ci/baseline/quick/server.log ci/baseline/llm-quick/server.log

# use-lite's expected ids and vectors, from its JavaScript reference (node and
# npm); models/use's TestReferenceRegenerated checks them against a fresh run.
USE_TESTDATA := models/use/testdata
use-reference: ## regenerate models/use/testdata/reference.json with use-lite's JS reference (needs node and npm)
	cd scripts/use-reference && npm ci --ignore-scripts --no-audit --no-fund
	node scripts/use-reference/reference.js $(USE_TESTDATA)/sentences.json > $(USE_TESTDATA)/reference.json.tmp
	mv $(USE_TESTDATA)/reference.json.tmp $(USE_TESTDATA)/reference.json

clean:
	rm -rf bin ci-out
