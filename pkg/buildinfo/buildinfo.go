// Package buildinfo is the version of podwire's binaries (the plugin and the
// node agent), stamped by the Makefile at build time:
//
//	go build -ldflags "-X github.com/podwire/podwire/pkg/buildinfo.Version=v0.1.0-12-g15c26ea \
//	    -X github.com/podwire/podwire/pkg/buildinfo.Commit=15c26ea..."
//
// The version is scripts/version.sh's (git describe, with a fallback while
// the repository has no tag); the image of `make image` carries the same
// string as its tag. A binary built without the Makefile (go test, go run)
// says v0.1.0-dev and the commit Go recorded, if any.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are set with -ldflags -X (see the package comment).
var (
	// Version is a git describe string such as v0.1.0, v0.1.0-12-g15c26ea or
	// v0.1.0-12-g15c26ea-dirty; it is a valid image tag.
	Version = "v0.1.0-dev"
	// Commit is the full hash of the commit built.
	Commit = ""
)

// CommitOrUnknown is Commit, else the revision Go stamped (builds with
// -buildvcs), else "unknown".
func CommitOrUnknown() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the version line of `podwire version` and
// `podwire-agent --version`: "v0.1.0-12-g15c26ea (commit 15c26ea..., go1.26.8)".
func String() string {
	return fmt.Sprintf("%s (commit %s, %s)", Version, CommitOrUnknown(), runtime.Version())
}
