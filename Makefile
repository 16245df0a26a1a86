# The Makefile only wraps: the work is in scripts/ and the Go tests.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 0
# Every go command of the Makefile and its scripts compiles with the
# flags of the builds (-trimpath, CGO off): the Go build cache keys a
# compiled package by them, so `go test` and `go vet` reuse the packages
# the builds compiled (client-go, the Kubernetes API types, containerd's
# client) instead of compiling each a second time on a cold machine.
export GOFLAGS := -trimpath

# Reference plugins and cnitool used as real CNI clients by the tests.
CNI_PLUGINS_VERSION := v1.9.1
CNI_VERSION := v1.3.1
TOOLS_DIR := $(CURDIR)/.cache/cni-bin
REF_PLUGINS := ptp host-local tuning portmap bridge loopback macvlan

# The Kubernetes node of integration/k8s: versions named here only.
K8S_VERSION := v1.37.2
ETCD_VERSION := v3.6.6
K8S_BIN_DIR := $(CURDIR)/.cache/k8s-$(K8S_VERSION)
# flannel, the multi-node suite's primary: flanneld and install-conf at
# FLANNEL_VERSION, the flannel CNI plugin from containernetworking/plugins
# at FLANNEL_CNI_VERSION (scripts/flannel-build.sh says why).
FLANNEL_VERSION := v0.28.10
FLANNEL_CNI_VERSION := v0.9.1
FLANNEL_DIR := $(CURDIR)/.cache/flannel-$(FLANNEL_VERSION)
# CoreDNS, the multi-node cluster's DNS, with only the plugins a cluster DNS
# uses (scripts/coredns-build.sh).
COREDNS_VERSION := v1.15.0
COREDNS_DIR := $(CURDIR)/.cache/coredns-$(COREDNS_VERSION)
ETCD_BIN := $(CURDIR)/.cache/etcd-$(ETCD_VERSION)/etcd
# The container runtime of the Kubernetes suites and of the CRI suite:
# containerd at CONTAINERD_VERSION (the 2.3 LTS) and the runc its release
# tests with (its script/setup/runc-version), built by
# scripts/containerd-build.sh. Debian's containerd 1.6 (PATH) is the CRI
# suite's legacy leg only.
CONTAINERD_VERSION := v2.3.7
RUNC_VERSION := v1.5.2
CONTAINERD_DIR := $(CURDIR)/.cache/containerd-$(CONTAINERD_VERSION)
RUNC_BIN := $(CURDIR)/.cache/runc-$(RUNC_VERSION)/runc
RUNTIME_ENV = PODWIRE_CONTAINERD_DIR=$(CONTAINERD_DIR) PODWIRE_RUNC=$(RUNC_BIN)
# CRI-O, the runtime of the single-node suite's second leg (its packet
# tests again, STATUS polled, GC at start-up), with RUNC_VERSION's runc and
# Debian's conmon; built by scripts/crio-build.sh. 1.36 is the first
# release that keeps polling STATUS after the network is first ready.
CRIO_VERSION := v1.36.3
CRIO_DIR := $(CURDIR)/.cache/crio-$(CRIO_VERSION)
# Multus thick, which TestMultus of the multi-node suite installs
# (scripts/multus-build.sh).
MULTUS_VERSION := v4.2.2
MULTUS_DIR := $(CURDIR)/.cache/multus-$(MULTUS_VERSION)
# Calico, the primary of the Calico suite (integration/k8s/calico):
# calico-node and its CNI plugin and install-cni, built from the module
# versions of scripts/calico/go.mod (scripts/calico-build.sh says why).
CALICO_VERSION := v3.30.1
CALICO_DIR := $(CURDIR)/.cache/calico-$(CALICO_VERSION)
# The helm CLI the multi-node suite installs, upgrades and uninstalls the
# chart with: the release tools/chart renders with (its go.mod).
HELM_VERSION := v3.22.0
HELM_BIN := $(CURDIR)/.cache/helm-$(HELM_VERSION)/helm

# One version for both binaries and the image tag: scripts/version.sh (git
# describe; v0.1.0-<commits>-g<hash> while the repository has no tag),
# stamped into pkg/buildinfo with the commit. `make VERSION=v1.2.3` overrides.
# Each is computed once, at its first use (`X = $(eval X := ...)$(X)`), so
# targets that do not build (lint, deps) do not ask git.
VERSION = $(eval VERSION := $$(shell scripts/version.sh))$(VERSION)
COMMIT = $(eval COMMIT := $$(shell GIT_OPTIONAL_LOCKS=0 git rev-parse HEAD 2>/dev/null))$(COMMIT)
BUILDINFO := github.com/podwire/podwire/pkg/buildinfo
LDFLAGS = -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT)

# The image: REGISTRY/podwire-agent:VERSION, a multi-arch index of PLATFORMS;
# the default REGISTRY is the project's.
REGISTRY ?= ghcr.io/podwire
PLATFORMS ?= linux/amd64 linux/arm64
IMAGE = $(REGISTRY)/podwire-agent:$(VERSION)

export PODWIRE_BIN := $(CURDIR)/bin/podwire
export PODWIRE_CNI_BIN := $(TOOLS_DIR)

# The Go modules: the root one is what the plugin and the agent link; the
# test suites (integration, whose go test runs in its directory), the image
# builder (tools/image: mkimage and ociimage, with go-containerregistry), the
# chart's renderer and the linters are modules of their own, each tied to
# the root by a replace, so their dependencies stay out of the product's
# go.mod. `make lint` vets every one.
MODULES := . cmd/kubectl-podwire integration tools/alerts tools/chart tools/checkdeps tools/image tools/lint
# mkimage, the image builder of tools/image (scripts/image.sh, make push).
MKIMAGE := $(CURDIR)/bin/mkimage
# Package paths as callers name them from the root (./integration/x/) to
# paths inside the integration module (./x/).
in-integration = $(patsubst integration/%,./%,$(patsubst ./integration/%,./%,$(1)))

.PHONY: deps build mkimage image image-previous push tools runtime-bins k8s-bins test test-unit test-integration test-vm test-vm-k8s test-e2e test-k8s test-conformance bench-k8s bench-scale demo bench lint manifests fuzz clean

# The Debian packages of scripts/deps.list that the demo and the suites call,
# installed (as root) only when one is missing: the check is one dpkg-query.
deps:
	@scripts/install-deps.sh --check 2>/dev/null || scripts/install-deps.sh

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/podwire ./plugins/podwire
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/podwire-agent ./cmd/podwire-agent
	$(GO) -C cmd/kubectl-podwire build -trimpath -ldflags '$(LDFLAGS)' -o $(CURDIR)/bin/kubectl-podwire .

# The agent's image as an OCI archive (bin/podwire-image.tar) holding a
# multi-arch index with a CycloneDX SBOM of its binaries, built offline;
# `make push` sends it to REGISTRY (plain HTTP allowed with INSECURE=1) and
# prints the pushed reference with its digest.
mkimage:
	$(GO) -C tools/image build -trimpath -o $(MKIMAGE) .

image: build mkimage
	MKIMAGE=$(MKIMAGE) IMAGE=$(IMAGE) VERSION=$(VERSION) COMMIT=$(COMMIT) LDFLAGS='$(LDFLAGS)' PLATFORMS='$(PLATFORMS)' scripts/image.sh

# The earlier release the multi-node suite's upgrade test crosses to and
# from (TestHelmUpgrade): a commit of main, the last before the agents
# stopped watching Nodes for PodwireNodes, built from its own tree by its
# own Makefile (scripts/previous-build.sh: git archive into
# .cache/podwire-<hash>, then its `make image` at the version it had, the
# node's platform only; once per commit), with its own chart.
PREVIOUS_COMMIT := b214c9e82011c0fcee75bdb821e3cdcef7870e3d
PREVIOUS_DIR = $(CURDIR)/.cache/podwire-$(shell printf %.7s $(PREVIOUS_COMMIT))
PREVIOUS_VERSION = $(eval PREVIOUS_VERSION := $$(shell scripts/version.sh $(PREVIOUS_COMMIT)))$(PREVIOUS_VERSION)
image-previous:
	scripts/previous-build.sh $(PREVIOUS_COMMIT) $(REGISTRY) $(CURDIR)/.cache

# `make push` then pins what it pushed: the chart's image.repository, tag
# and digest (mkimage pin, only those values' text), and deploy/ re-rendered.
# `make pin` pins bin/podwire-image.tar without pushing: its name and index
# digest, the digest a push of it gives. docs/releasing.md is the release.
push: image
	ref=$$($(MKIMAGE) push $(if $(INSECURE),-insecure) bin/podwire-image.tar $(IMAGE)) && echo "$$ref" && \
		$(MKIMAGE) pin -values deploy/helm/podwire/values.yaml "$$ref"
	$(MAKE) manifests

.PHONY: pin
pin: mkimage
	$(MKIMAGE) pin -values deploy/helm/podwire/values.yaml bin/podwire-image.tar
	$(MAKE) manifests

tools: $(TOOLS_DIR)/.stamp

$(TOOLS_DIR)/.stamp: Makefile
	mkdir -p $(TOOLS_DIR)
	for p in $(REF_PLUGINS); do \
		p_pkg=github.com/containernetworking/plugins/plugins/main/$$p; \
		[ $$p = host-local ] && p_pkg=github.com/containernetworking/plugins/plugins/ipam/host-local; \
		[ $$p = tuning ] && p_pkg=github.com/containernetworking/plugins/plugins/meta/tuning; \
		[ $$p = portmap ] && p_pkg=github.com/containernetworking/plugins/plugins/meta/portmap; \
		GOBIN=$(TOOLS_DIR) $(GO) install $$p_pkg@$(CNI_PLUGINS_VERSION) || exit 1; \
	done
	GOBIN=$(TOOLS_DIR) $(GO) install github.com/containernetworking/cni/cnitool@$(CNI_VERSION)
	touch $@

test: deps test-unit test-integration test-e2e test-vm test-vm-k8s test-k8s

test-unit:
	$(GO) test -count=1 ./pkg/... ./plugins/... ./internal/... ./scripts/...
	$(GO) -C integration test -count=1 ./bench/report/
	$(GO) -C tools/image test -count=1 ./...
	$(GO) -C cmd/kubectl-podwire test -count=1 ./...

# INTEGRATION_RUN narrows the tests (go test -run) while working on one.
INTEGRATION_RUN ?= .
test-integration: deps build tools
	$(GO) -C integration test -count=1 -p 1 -timeout 20m -run '$(INTEGRATION_RUN)' .

test-vm: deps build
	scripts/vm-test.sh

# VLAN network functions under a real kubelet: integration/k8s/vlan, a
# two-node cluster inside the VM (Debian's kernel: VLAN filtering, 8021q),
# podwire installed from its chart with vlanGrants.
VM_K8S_MEM ?= 6144
test-vm-k8s: deps build image tools k8s-bins
	$(K8S_TEST_ENV) PODWIRE_BIN=$(CURDIR)/bin/podwire PODWIRE_VM_SUITE=k8s \
		PODWIRE_VM_MEM=$(VM_K8S_MEM) PODWIRE_VM_TIMEOUT=1200 scripts/vm-test.sh

# The CRI suite twice: on containerd CONTAINERD_VERSION, then on the host's
# (Debian's 1.6, the legacy leg).
test-e2e: deps image tools runtime-bins
	@echo "integration/cri on containerd $(CONTAINERD_VERSION), runc $(RUNC_VERSION)"
	$(RUNTIME_ENV) PODWIRE_IMAGE=$(CURDIR)/bin/podwire-image.tar PODWIRE_IMAGE_REF=$(IMAGE) $(GO) -C integration test -count=1 -timeout 20m ./cri/
	@echo "integration/cri on the host's containerd and runc (the legacy leg)"
	PODWIRE_IMAGE=$(CURDIR)/bin/podwire-image.tar PODWIRE_IMAGE_REF=$(IMAGE) $(GO) -C integration test -count=1 -timeout 20m ./cri/

# Built once per version into .cache (a few minutes on 2 cores the first
# time; a relink of seconds from a warm Go build cache).
runtime-bins:
	scripts/containerd-build.sh $(CONTAINERD_VERSION) $(RUNC_VERSION) $(CURDIR)/.cache

# Built once per version into .cache: the longest build of a cold run
# (docs/testing.md gives its time), seconds when cached.
k8s-bins: runtime-bins
	scripts/crio-build.sh $(CRIO_VERSION) $(CURDIR)/.cache
	scripts/k8s-build.sh $(K8S_VERSION) $(ETCD_VERSION) $(CURDIR)/.cache
	scripts/e2e-build.sh $(K8S_VERSION) $(CURDIR)/.cache
	scripts/flannel-build.sh $(FLANNEL_VERSION) $(FLANNEL_CNI_VERSION) $(CURDIR)/.cache
	scripts/helm-build.sh $(HELM_VERSION) $(CURDIR)/.cache
	scripts/coredns-build.sh $(COREDNS_VERSION) $(CURDIR)/.cache
	scripts/multus-build.sh $(MULTUS_VERSION) $(K8S_VERSION) $(CURDIR)/.cache
	scripts/calico-build.sh $(CALICO_VERSION) $(CURDIR)/.cache

# The environment of the Kubernetes suites: the builds of k8s-bins (and
# runtime-bins) and the agent's images.
K8S_TEST_ENV = $(RUNTIME_ENV) PODWIRE_CRIO_DIR=$(CRIO_DIR) PODWIRE_K8S_BIN=$(K8S_BIN_DIR) PODWIRE_E2E=$(K8S_BIN_DIR)/e2e.test PODWIRE_ETCD=$(ETCD_BIN) PODWIRE_FLANNEL=$(FLANNEL_DIR) PODWIRE_COREDNS=$(COREDNS_DIR) PODWIRE_MULTUS=$(MULTUS_DIR) PODWIRE_CALICO=$(CALICO_DIR) PODWIRE_HELM=$(HELM_BIN) PODWIRE_IMAGE=$(CURDIR)/bin/podwire-image.tar PODWIRE_IMAGE_REF=$(IMAGE)

# The earlier release of image-previous, for TestHelmUpgrade alone.
PREVIOUS_ENV = PODWIRE_PREVIOUS_IMAGE=$(PREVIOUS_DIR)/bin/podwire-image.tar PODWIRE_PREVIOUS_IMAGE_REF=$(REGISTRY)/podwire-agent:$(PREVIOUS_VERSION) \
	PODWIRE_PREVIOUS_CHART=$(PREVIOUS_DIR)/deploy/helm/podwire

# promtool, for the multi-node suite's evaluation of the chart's alerts.
K8S_TEST_ENV += PODWIRE_PROMTOOL=$(PROMTOOL)

# The Kubernetes suites run two at a time (-p 2): each cluster is private
# to its run. The single-node and the multi-node suites start at once, and
# the Calico suite takes the single-node one's place when it ends; go test
# then prints each package's output whole, as it ends.
# K8S_RUN narrows the tests (go test -run) while working on one; K8S_PKGS
# the suites, named from the root (go test runs them in integration/).
K8S_RUN ?= .
K8S_PKGS ?= ./integration/k8s/ ./integration/k8s/multinode/ ./integration/k8s/calico/
test-k8s: deps image image-previous tools k8s-bins promtool
	$(K8S_TEST_ENV) $(PREVIOUS_ENV) $(GO) -C integration test -count=1 -p 2 -v -timeout 30m -run '$(K8S_RUN)' $(call in-integration,$(K8S_PKGS))

# Every [sig-network] [Conformance] spec the multi-node cluster can run,
# beyond test-k8s's subset (integration/k8s/multinode/conformance_test.go),
# after the cluster package's checks of the images the suites build.
test-conformance: deps image tools k8s-bins
	$(K8S_TEST_ENV) $(GO) -C integration test -count=1 ./k8s/cluster/
	$(K8S_TEST_ENV) PODWIRE_CONFORMANCE_FULL=1 $(GO) -C integration test -count=1 -p 1 -v -timeout 40m -run '^TestConformance$$' ./k8s/multinode/

# What users feel at pod start (time to Running): TestPodStartup creates 30 pods at
# once, with podwire chained and without, and writes the mean times into
# .cache/bench-bin/pod-startup.txt, which the next make bench puts into
# docs/benchmarks.md; with the agent's memory under large annotations and
# its footprint idle and under churn (TestAgentFootprint); figures only,
# not part of make test. PODSTARTUP_BURSTS
# bursts of each side (even).
PODSTARTUP_BURSTS ?= 4
bench-k8s: deps image tools k8s-bins
	mkdir -p .cache/bench-bin
	$(K8S_TEST_ENV) PODWIRE_K8S_PODSTARTUP=1 PODWIRE_K8S_PODSTARTUP_OUT=$(CURDIR)/.cache/bench-bin/pod-startup.txt \
		PODWIRE_K8S_PODSTARTUP_BURSTS=$(PODSTARTUP_BURSTS) \
		PODWIRE_K8S_MEMORY=1 PODWIRE_K8S_MEMORY_OUT=$(CURDIR)/.cache/bench-bin/agent-memory.txt \
		PODWIRE_K8S_FOOTPRINT=1 \
		$(GO) -C integration test -count=1 -p 1 -v -timeout 40m -run '^(TestPodStartup|TestAgentMemoryUnderAnnotations|TestAgentFootprint)$$' ./k8s/multinode/

# The scale bench (integration/k8s/scale): kwok's controller (built by
# scripts/kwok-build.sh into .cache) keeps SCALE_SIZES fake Nodes, with pod
# CIDRs, addresses, a tenth publishing podwire.io/routes, and their pods,
# beside a two-node cluster whose real agents are measured. It writes
# .cache/bench-bin/scale.txt and, from it, its section of
# docs/benchmarks.md (make bench keeps the section from the same file);
# figures only, not part of make test.
KWOK_VERSION := v0.8.0
KWOK_DIR := $(CURDIR)/.cache/kwok-$(KWOK_VERSION)
SCALE_SIZES ?= 1000,2000,5000
SCALE_PODS ?= 30
bench-scale: deps build tools k8s-bins
	scripts/kwok-build.sh $(KWOK_VERSION) $(CURDIR)/.cache
	mkdir -p .cache/bench-bin
	$(RUNTIME_ENV) PODWIRE_K8S_BIN=$(K8S_BIN_DIR) PODWIRE_ETCD=$(ETCD_BIN) PODWIRE_AGENT_BIN=$(CURDIR)/bin/podwire-agent \
		PODWIRE_KWOK=$(KWOK_DIR) PODWIRE_SCALE_SIZES=$(SCALE_SIZES) PODWIRE_SCALE_PODS=$(SCALE_PODS) \
		PODWIRE_SCALE_OUT=$(CURDIR)/.cache/bench-bin/scale.txt \
		$(GO) -C integration test -count=1 -v -timeout 30m -run '^TestScale$$' ./k8s/scale/
	$(GO) -C integration run ./bench/report -section scale -into $(CURDIR)/docs/benchmarks.md $(CURDIR)/.cache/bench-bin/scale.txt

demo: deps build tools
	scripts/demo.sh

bench: deps build tools
	scripts/bench.sh

# Executions per target, not a duration: scripts/fuzz.sh says why.
FUZZTIME ?= 100000x
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# promtool, built once per version into .cache by scripts/promtool-build.sh
# from the module proxy (github.com/prometheus/prometheus v0.MAJORMINOR.PATCH
# is Prometheus MAJOR.MINOR.PATCH): `make lint` checks and tests the chart's
# PrometheusRule with it (scripts/check-alerts.sh), the multi-node suite
# evaluates the rules on the agents' scrapes.
PROMETHEUS_VERSION := v0.316.0
PROMTOOL := $(CURDIR)/.cache/promtool-$(PROMETHEUS_VERSION)/promtool
.PHONY: promtool
promtool:
	scripts/promtool-build.sh $(PROMETHEUS_VERSION) $(CURDIR)/.cache

# The forbidigo rules of .golangci.yml (netlink dumps, the process shape),
# run by tools/lint: forbidigo's analyzer at the version of tools/lint/go.mod,
# built into LINT_BIN (a no-op build when nothing changed), over every module.
LINT_BIN := $(CURDIR)/bin/lint
lint: promtool
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	for m in $(MODULES); do echo "go vet in $$m"; $(GO) -C $$m vet ./... || exit 1; done
	$(GO) -C tools/lint build -trimpath -o $(LINT_BIN) .
	for m in $(MODULES); do echo "forbidigo in $$m"; (cd $$m && $(LINT_BIN) -config $(CURDIR)/.golangci.yml) || exit 1; done
	scripts/check-figures.sh
	scripts/check-deps.sh
	$(GO) -C tools/checkdeps test -count=1 .
	$(GO) -C tools/chart test -count=1 .
	GO=$(GO) scripts/check-alerts.sh $(PROMTOOL)
	$(GO) -C tools/alerts test -count=1 .

# deploy/*.yaml, rendered from the Helm chart deploy/helm/podwire with the
# Helm SDK (tools/chart); `make lint` fails when they differ from it.
manifests:
	$(GO) -C tools/chart run . -root $(CURDIR)

clean:
	rm -rf bin .cache
