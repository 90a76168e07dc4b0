# anvil — bare-metal provisioning. `make help` lists the targets.
SHELL   := /bin/bash
GO      ?= go
BIN     := bin
GOFLAGS := -trimpath
export CGO_ENABLED := 0

.PHONY: help build check-tidy test test-quick test-vm test-e2e test-compat test-ironic bench bench-load bench-ironic soak-long demo demo-sim demo-clean docs fmt vet clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build all binaries into bin/ (static, no cgo)
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

# -diff prints what tidy would change and fails, leaving go.mod and go.sum as
# they are, so a failing CI run does not hide the problem by fixing its clone.
check-tidy: ## fail if `go mod tidy` would change go.mod or go.sum (changes nothing)
	$(GO) mod tidy -diff

test-quick: ## unit and integration tests without VMs (< 5 min)
	$(GO) test -count=1 ./...

test-compat: build ## drive a real controller with the python-ironicclient `baremetal` CLI and openstacksdk
	ANVIL_CONTROLLER_BIN=$(CURDIR)/$(BIN)/anvil-controller $(GO) test -count=1 -tags compat -run Compat -v ./cmd/anvil-controller/

test-ironic: ## the agent driven by Debian's stock Ironic 21.4 on loopback (no VM; about 5 min)
	$(GO) test -count=1 -tags ironic -run StockIronic -v ./cmd/anvil-agent/

test-vm: ## only the tests that boot QEMU VMs (TCG) and drive BMC emulators, incl. the end-to-end scenarios
	$(GO) test -count=1 -tags vm -run 'VM' -timeout 30m ./...

test-e2e: ## only the end-to-end scenarios, verbose
	$(GO) test -count=1 -tags vm -run 'VME2E' -timeout 30m -v ./image/

test: check-tidy test-compat ## everything CI runs: the go.mod/go.sum tidy check, all Go tests including VM ones, the end-to-end scenarios with their durations, and the CLI compatibility test
	$(GO) test -count=1 -tags 'vm ironic' -skip 'VME2E' -timeout 40m ./...
	@mkdir -p out
	@echo "== end-to-end scenarios (QEMU nodes behind anvil-vbmc, real agent ramdisk)"
	@$(GO) test -count=1 -tags vm -run 'VME2E' -timeout 30m -v ./image/ > out/e2e.log 2>&1; s=$$?; \
	  grep -E '^(--- |ok|FAIL)|e2e_vm_test.go:[0-9]+: \[' out/e2e.log; \
	  if [ $$s -ne 0 ]; then echo "== full log of the end-to-end run:"; cat out/e2e.log; fi; exit $$s

bench: build ## benchmarks: API load from another process, store and conductor micro-benchmarks, erase and image write vs dd (root: loop devices)
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./controller/...
	$(BIN)/anvil-bench -controller $(BIN)/anvil-controller
	$(GO) test -run '^$$' -bench . -benchtime 7x -count 1 ./hardware/...

BENCH_LOAD_FLAGS ?=
bench-load: build ## load test: 10,000 nodes, 500 cleaning, API reads; SQLite x1, PostgreSQL x1 and x2 (minutes each; BENCH_LOAD_FLAGS adds flags)
	$(BIN)/anvil-bench load -controller $(BIN)/anvil-controller -database sqlite $(BENCH_LOAD_FLAGS)
	$(BIN)/anvil-bench load -controller $(BIN)/anvil-controller -database postgres $(BENCH_LOAD_FLAGS)
	$(BIN)/anvil-bench load -controller $(BIN)/anvil-controller -database postgres -controllers 2 $(BENCH_LOAD_FLAGS)

SOAK_FLAGS ?=
soak-long: build ## the long crash soak: 1000 simulated machines, 30 min, two controllers on PostgreSQL, SIGKILLs, then the invariants (SOAK_FLAGS adds flags)
	$(BIN)/anvil-bench soak -controller $(BIN)/anvil-controller -database postgres -controllers 2 -nodes 1000 \
	  -duration 30m -kill-every 1m -heartbeat-interval 2s -lease-ttl 10s -step-timeout 2m -settle 15m -timeout 1h $(SOAK_FLAGS)

BENCH_IRONIC_FLAGS ?=
bench-ironic: build ## the same workload against anvil-controller and Debian's stock Ironic 21.4, side by side with the ratios (about 15 min; BENCH_IRONIC_FLAGS adds flags)
	$(BIN)/anvil-bench ironic -controller $(BIN)/anvil-controller $(BENCH_IRONIC_FLAGS)

demo: build image ## a QEMU node behind anvil-vbmc (Redfish) through its whole lifecycle with the real agent
	$(BIN)/anvil-demo -vm -image out/image -controller $(BIN)/anvil-controller

demo-sim: build ## the same walk on a fake-hardware node whose agent the controller simulates (no VM, seconds)
	$(BIN)/anvil-demo -controller $(BIN)/anvil-controller

demo-clean: ## remove what the demo left behind (it stops everything it started itself)
	rm -rf out/demo

docs: ## regenerate the generated parts of docs/ (the flag table) from the code
	ANVIL_UPDATE_DOCS=1 $(GO) test -count=1 -run 'FlagsDoc' ./cmd/anvil-controller/

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

vet: ## go vet
	$(GO) vet ./...
	$(GO) vet -tags 'vm compat ironic' ./...

clean:
	rm -rf $(BIN) out

.PHONY: image image-clean
image: ## agent ramdisk into out/image/: vmlinuz, initramfs.cpio.gz, manifest.json (image/README.md)
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS) -o $(BIN)/anvil-image ./cmd/anvil-image
	$(BIN)/anvil-image -repo $(CURDIR)

image-clean: ## remove the built image and its download/base cache
	rm -rf out/image out/image-cache
