package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deps writes a deps list with the packages.
func deps(t *testing.T, pkgs ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "deps.list")
	if err := os.WriteFile(p, []byte("# test list\n"+strings.Join(pkgs, "  # why\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckDeps runs the checker on fixtures against this machine's dpkg
// database: a program of a package the list does not name fails, naming
// the program and the line to add; listing the package passes; a program
// that is not installed at all fails.
func TestCheckDeps(t *testing.T) {
	for _, prog := range []string{"dpkg", "socat", "ip"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed (run scripts/install-deps.sh): %v", prog, err)
		}
	}
	for _, tc := range []struct {
		name     string
		file     string
		pkgs     []string
		wantCode int
		wantErr  []string
	}{
		{"shell, socat unlisted", "testdata/calls-socat.sh", []string{"iproute2"}, 1,
			[]string{`calls-socat.sh:5 calls "socat"`, `Debian package "socat"`, "add the line\n    socat\n"}},
		{"shell, socat listed", "testdata/calls-socat.sh", []string{"iproute2", "socat"}, 0, nil},
		{"shell, iproute2 unlisted", "testdata/calls-socat.sh", []string{"socat"}, 1,
			[]string{`calls-socat.sh:3 (and 2 more) calls "ip"`, "    iproute2\n"}},
		{"go, socat unlisted", "testdata/calls_socat.go", []string{"iproute2"}, 1,
			[]string{`calls_socat.go:11 calls "socat"`, "    socat\n"}},
		{"go, socat listed", "testdata/calls_socat.go", []string{"iproute2", "socat"}, 0, nil},
		{"not installed", "testdata/calls-missing.sh", []string{"iproute2"}, 1,
			[]string{`calls "podwire-no-such-program", which is not installed here`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"-deps", deps(t, tc.pkgs...), tc.file}, &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("%s: exit %d, want %d; stderr:\n%s", tc.name, code, tc.wantCode, stderr.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, stderr.String())
				}
			}
		})
	}
}

// TestFollow: wrappers are followed to the program they run.
func TestFollow(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want []string
	}{
		{[]string{"ip", "netns", "exec", "", "nft", "list"}, []string{"ip", "nft"}},
		{[]string{"nsenter", "--net=/x", "--", "containerd", "-c"}, []string{"nsenter", "containerd"}},
		{[]string{"timeout", "-k", "5", "10", "socat"}, []string{"timeout", "socat"}},
		{[]string{"env", "A=b", "strace", "-c"}, []string{"env", "strace"}},
		{[]string{"command", "-v", "socat"}, []string{"socat"}},
		{[]string{"exec", "qemu-system-x86_64"}, []string{"qemu-system-x86_64"}},
		{[]string{"", "x"}, nil},
	} {
		if got := follow(tc.argv); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("follow(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}
