# The Makefile only wraps: the work is in scripts/ and the Go tests.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 0

# Reference plugins and cnitool used as real CNI clients by the tests.
CNI_PLUGINS_VERSION := v1.9.1
CNI_VERSION := v1.3.1
TOOLS_DIR := $(CURDIR)/.cache/cni-bin
REF_PLUGINS := ptp host-local tuning portmap bridge loopback macvlan

# The Kubernetes node of integration/k8s: versions named here only. kubelet
# 1.37 still accepts Debian's containerd 1.6 (1.38 will want containerd 2).
K8S_VERSION := v1.37.2
ETCD_VERSION := v3.6.6
K8S_BIN_DIR := $(CURDIR)/.cache/k8s-$(K8S_VERSION)
ETCD_BIN := $(CURDIR)/.cache/etcd-$(ETCD_VERSION)/etcd

# One version for both binaries and the image tag: scripts/version.sh (git
# describe; v0.1.0-<commits>-g<hash> while the repository has no tag),
# stamped into pkg/buildinfo with the commit. `make VERSION=v1.2.3` overrides.
VERSION := $(shell scripts/version.sh)
COMMIT := $(shell GIT_OPTIONAL_LOCKS=0 git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/podwire/podwire/pkg/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT)

export PODWIRE_BIN := $(CURDIR)/bin/podwire
export PODWIRE_CNI_BIN := $(TOOLS_DIR)

.PHONY: build image tools k8s-bins test test-unit test-integration test-vm test-e2e test-k8s demo bench lint manifests fuzz clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/podwire ./plugins/podwire
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/podwire-agent ./cmd/podwire-agent

# The agent's image as an OCI archive (bin/podwire-image.tar), built offline.
image: build
	scripts/image.sh

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

test: test-unit test-integration test-e2e test-vm test-k8s

test-unit:
	$(GO) test -count=1 ./pkg/... ./plugins/...

test-integration: build tools
	$(GO) test -count=1 -p 1 -timeout 20m ./integration/

test-vm: build
	scripts/vm-test.sh

test-e2e: image tools
	PODWIRE_IMAGE=$(CURDIR)/bin/podwire-image.tar $(GO) test -count=1 -timeout 20m ./integration/cri/

# Built once per version into .cache (about 25 min on 2 cores the first
# time; seconds when cached).
k8s-bins:
	scripts/k8s-build.sh $(K8S_VERSION) $(ETCD_VERSION) $(CURDIR)/.cache

test-k8s: image tools k8s-bins
	PODWIRE_K8S_BIN=$(K8S_BIN_DIR) PODWIRE_ETCD=$(ETCD_BIN) PODWIRE_IMAGE=$(CURDIR)/bin/podwire-image.tar $(GO) test -count=1 -v -timeout 15m ./integration/k8s/

demo: build tools
	scripts/demo.sh

bench: build tools
	scripts/bench.sh

# Executions per target, not a duration: scripts/fuzz.sh says why.
FUZZTIME ?= 100000x
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	scripts/check-netlink.sh
	scripts/check-deps.sh
	$(GO) -C tools/checkdeps vet .
	$(GO) -C tools/checkdeps test -count=1 .
	$(GO) -C tools/chart vet .
	$(GO) -C tools/chart test -count=1 .

# deploy/*.yaml, rendered from the Helm chart deploy/helm/podwire with the
# Helm SDK (tools/chart); `make lint` fails when they differ from it.
manifests:
	$(GO) -C tools/chart run . -root $(CURDIR)

clean:
	rm -rf bin .cache
