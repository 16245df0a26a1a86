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
		fmt.Fprintln(stderr, "usage: mkimage build|push ... (see the package comment)")
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(args[1:], stdout, stderr)
	case "push":
		err = runPush(args[1:], stdout, stderr)
	default:
		err = fmt.Errorf("unknown command %q: build or push", args[0])
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
