package main

import (
	"strings"
	"testing"

	"github.com/podwire/podwire/pkg/buildinfo"
)

// TestVersion: `podwire version` prints the build's version with its
// commit, the CNI spec versions and the agent protocol.
func TestVersion(t *testing.T) {
	old := [2]string{buildinfo.Version, buildinfo.Commit}
	defer func() { buildinfo.Version, buildinfo.Commit = old[0], old[1] }()
	buildinfo.Version, buildinfo.Commit = "v0.1.0-7-gabcdef0", "abcdef0123456789"
	code, out, _ := runCLIArgs("version")
	for _, want := range []string{"podwire v0.1.0-7-gabcdef0 (commit abcdef0123456789, go", "CNI spec versions: 0.3.0,",
		"agent protocol: 1 (reads 1-1)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("podwire version: code %d, output %q, want %q", code, out, want)
		}
	}
}
