// Command mkimage builds podwire's image offline and pushes it, with
// ociimage over go-containerregistry (no daemon, no base image). It is a
// module of its own (tools/image) so that the root module, which the plugin
// and the agent link, does not require go-containerregistry; the Makefile
// builds it into bin/mkimage.
//
// build writes an OCI archive (an OCI image layout in a tar) holding one
// multi-arch image index: per platform, one image of one layer with the
// static binaries at the root. `ctr -n k8s.io images import` takes the
// archive as it is (it names the image from the io.containerd.image.name
// annotation and unpacks the node's platform):
//
//	bin/mkimage build -o bin/podwire-image.tar \
//	    -name ghcr.io/podwire/podwire-agent:v0.1.0 -version v0.1.0 -revision <commit> \
//	    -platform linux/amd64=bin/linux_amd64 -platform linux/arm64=bin/linux_arm64 \
//	    podwire-agent podwire
//
// push sends the archive's index and every image in it to a registry under
// ref, and prints the pushed reference with its digest (ref@sha256:...), the
// form to pin in a manifest. Credentials come from the Docker config
// (~/.docker/config.json, as docker login writes it). A registry on
// loopback, localhost or a private (RFC 1918) address is reached over plain
// HTTP when it does not answer HTTPS; -insecure allows it for any host:
//
//	bin/mkimage push [-insecure] bin/podwire-image.tar registry.example/podwire/podwire-agent:v0.1.0
//
// build attaches to the index a CycloneDX SBOM of every file of every
// platform's image (package sbom: each Go binary's modules, from its build
// information), as an OCI 1.1 artifact listed in the index itself with
// platform unknown/unknown (ociimage.WithArtifact), so that every copy of
// the index carries it and runtimes leave it alone. sbom prints it, from
// an archive or a registry:
//
//	bin/mkimage sbom [-insecure] bin/podwire-image.tar|ghcr.io/podwire/podwire-agent@sha256:...
//
// digest prints the archive's reference pinned by its index digest, what
// push would print, without pushing (the build is reproducible, so the
// same commit and version give the same digest anywhere):
//
//	bin/mkimage digest bin/podwire-image.tar
//
// pin writes a pinned reference (push's or digest's output, or an archive,
// whose reference digest computes) into the chart's values as
// image.repository, image.tag and image.digest, editing only those three
// values' text (comments and layout stay); `make pin` then re-renders
// deploy/ (docs/releasing.md):
//
//	bin/mkimage pin -values deploy/helm/podwire/values.yaml bin/podwire-image.tar
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: mkimage build|push|digest|pin|sbom ... (see the package comment)")
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(args[1:], stdout, stderr)
	case "push":
		err = runPush(args[1:], stdout, stderr)
	case "digest":
		err = runDigest(args[1:], stdout)
	case "pin":
		err = runPin(args[1:], stdout, stderr)
	case "sbom":
		err = runSBOM(args[1:], stdout, stderr)
	default:
		err = fmt.Errorf("unknown command %q: build, push, digest, pin or sbom", args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "mkimage:", err)
		return 1
	}
	return 0
}

// platformFlags collects -platform os/arch=dir, in order.
type platformFlags []platformDir

type platformDir struct {
	os, arch, dir string
}

func (p *platformFlags) String() string { return fmt.Sprint(*p) }

func (p *platformFlags) Set(s string) error {
	plat, dir, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || osName == "" || arch == "" || dir == "" {
		return fmt.Errorf("want os/arch=dir, got %q", s)
	}
	*p = append(*p, platformDir{osName, arch, dir})
	return nil
}

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts buildOptions
	fs.StringVar(&opts.out, "o", "bin/podwire-image.tar", "OCI archive to write")
	fs.StringVar(&opts.name, "name", "", "image reference recorded in the archive (what ctr import names it)")
	fs.StringVar(&opts.entrypoint, "entrypoint", "/podwire-agent", "entrypoint")
	fs.StringVar(&opts.version, "version", "", "org.opencontainers.image.version of the index")
	fs.StringVar(&opts.revision, "revision", "", "org.opencontainers.image.revision of the index (the commit)")
	fs.Var(&opts.platforms, "platform", "os/arch=dir: an image for that platform from the binaries in dir (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts.bins = fs.Args()
	if opts.name == "" {
		return fmt.Errorf("build: -name is required")
	}
	digest, err := build(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s (index %s)\n", opts.out, opts.name, digest)
	return nil
}

func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	insecure := fs.Bool("insecure", false, "allow plain HTTP to the registry whatever its address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("push: want ARCHIVE REF, got %q", fs.Args())
	}
	pinned, err := push(context.Background(), fs.Arg(0), fs.Arg(1), *insecure)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, pinned)
	return nil
}

func runDigest(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("digest: want ARCHIVE, got %q", args)
	}
	ref, err := archiveRef(args[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ref)
	return nil
}

func runPin(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	values := fs.String("values", "deploy/helm/podwire/values.yaml", "the chart's values file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("pin: want REPOSITORY:TAG@DIGEST or ARCHIVE, got %q", fs.Args())
	}
	ref := fs.Arg(0)
	if _, err := os.Stat(ref); err == nil {
		if ref, err = archiveRef(ref); err != nil {
			return err
		}
	}
	p, err := parsePinned(ref)
	if err != nil {
		return err
	}
	if err := pinFile(*values, p); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: image %s:%s@%s\n", *values, p.repository, p.tag, p.digest)
	return nil
}

func runSBOM(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	insecure := fs.Bool("insecure", false, "allow plain HTTP to the registry whatever its address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("sbom: want ARCHIVE or REF, got %q", fs.Args())
	}
	data, err := readSBOM(fs.Arg(0), *insecure)
	if err != nil {
		return err
	}
	_, err = stdout.Write(data)
	return err
}
