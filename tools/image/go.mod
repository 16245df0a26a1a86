module github.com/podwire/podwire/tools/image

go 1.26.0

require github.com/podwire/podwire v0.0.0-00010101000000-000000000000

require (
	github.com/CycloneDX/cyclonedx-go v0.12.0
	github.com/containernetworking/plugins v1.9.1
	github.com/google/go-containerregistry v0.22.1
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/containernetworking/cni v1.3.1 // indirect
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)

replace github.com/podwire/podwire => ../..
