package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDeps runs scripts/check-deps.sh (this scanner, then dpkg) on
// fixtures against this machine's dpkg database: a program of a package the
// list does not name fails, naming the call and the line to add; listing
// the package passes; a program that is not installed at all fails.
func TestCheckDeps(t *testing.T) {
	for _, prog := range []string{"dpkg", "socat", "ip"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed (run scripts/install-deps.sh): %v", prog, err)
		}
	}
	for _, tc := range []struct{ file, list, want string }{
		{"calls-socat.sh", "iproute2", `calls-socat.sh:5 calls "socat" (/usr/bin/socat), provided by the Debian package "socat", which`},
		{"calls-socat.sh", "iproute2 socat", ""},
		{"calls-socat.sh", "socat", `calls-socat.sh:3 (and 2 more) calls "ip"`},
		{"calls_socat.go", "iproute2", "calls_socat.go:11 calls \"socat\" (/usr/bin/socat), provided by the Debian package \"socat\", which"},
		{"calls-missing.sh", "iproute2", `calls "podwire-no-such-program", which is not installed here`},
	} {
		list := filepath.Join(t.TempDir(), "deps.list")
		if err := os.WriteFile(list, []byte("# test list\n"+strings.ReplaceAll(tc.list, " ", " # why\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("../../scripts/check-deps.sh", "testdata/"+tc.file)
		cmd.Env = append(os.Environ(), "DEPS_LIST="+list)
		out, err := cmd.CombinedOutput()
		if (err == nil) != (tc.want == "") || !strings.Contains(string(out), tc.want) || tc.want != "" && !strings.Contains(string(out), "add the") {
			t.Errorf("%s with %q: err %v, want the message %q; output:\n%s", tc.file, tc.list, err, tc.want, out)
		}
	}
}

// TestScan: wrappers, loops and sourced scripts are followed to the programs they run;
// builtins and words that are not literals are no programs.
func TestScan(t *testing.T) {
	var out, errs strings.Builder
	if code := run([]string{"testdata/wrappers.sh"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var progs []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		progs = append(progs, strings.Fields(l)[0])
	}
	if got, want := strings.Join(progs, " "), "arping containerd dirname env ip nft nsenter ping qemu-img qemu-system-x86_64 sleep socat strace tcpdump timeout"; got != want {
		t.Errorf("programs %q, want %q", got, want)
	}
}
