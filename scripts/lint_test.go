// Package scripts holds the tests of the lint rules make lint runs.
package scripts

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestForbidigoRules builds tools/lint and runs it with the repository's
// .golangci.yml over testdata/lint, a tree laid out as the repository
// (pkg/, plugins/podwire/internal/oneproc/, integration/): every line
// marked `// want "TEXT"` must be reported with TEXT, and no other line.
// The unmarked lines are the controls: the marked netlink calls
// (`// dump retried`, `// no dump`), netlinksafe, GOMAXPROCS(0), oneproc
// setting GOMAXPROCS, a thread locked in a test and in a suite, names in
// comments.
func TestForbidigoRules(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lint")
	// -trimpath as make lint builds it, so that the two share the build cache.
	if out, err := exec.Command("go", "build", "-C", "../tools/lint", "-trimpath", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building tools/lint: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-config", "../.golangci.yml", "-root", "testdata/lint", "./testdata/lint/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("lint: %v (want exit 1, issues found)\n%s%s", err, out, stderr.String())
	}

	want := wants(t, "testdata/lint")
	got := map[string]string{} // "path:line" → the issue's text
	issue := regexp.MustCompile(`^([^:]+:\d+):\d+: (.*) \(forbidigo\)$`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		m := issue.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("lint printed %q, want path:line:col: text (forbidigo)", line)
		}
		got[m[1]] += m[2]
	}
	for at, text := range want {
		if !strings.Contains(got[at], text) {
			t.Errorf("%s: want an issue with %q, got %q", at, text, got[at])
		}
	}
	for at, text := range got {
		if _, ok := want[at]; !ok {
			t.Errorf("%s: unexpected issue %s", at, text)
		}
	}
}

// wants reads the `// want "TEXT"` marks of the .go files under dir:
// "path:line" (path relative to dir) → TEXT.
func wants(t *testing.T, dir string) map[string]string {
	t.Helper()
	mark := regexp.MustCompile(`// want "([^"]+)"`)
	want := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(dir, path)
		s := bufio.NewScanner(f)
		for n := 1; s.Scan(); n++ {
			if m := mark.FindStringSubmatch(s.Text()); m != nil {
				want[filepath.ToSlash(rel)+":"+strconv.Itoa(n)] = m[1]
			}
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatalf("no want marks under %s", dir)
	}
	return want
}

// TestCheckFigures runs check-figures.sh on fixtures: each benchmark
// figure in a comment of bad.go fails, naming its line; good.go (a
// constant in a comment) and the tree's own code pass.
func TestCheckFigures(t *testing.T) {
	out, err := exec.Command("./check-figures.sh", "testdata/figures/bad.go").CombinedOutput()
	if err == nil {
		t.Fatalf("bad.go passed:\n%s", out)
	}
	for _, line := range []string{"4", "5"} {
		if !strings.Contains(string(out), "bad.go:"+line+":") {
			t.Errorf("bad.go:%s is not named:\n%s", line, out)
		}
	}
	for _, args := range [][]string{{"testdata/figures/good.go"}, nil} {
		if out, err := exec.Command("./check-figures.sh", args...).CombinedOutput(); err != nil {
			t.Errorf("check-figures.sh %v: %v\n%s", args, err, out)
		}
	}
}
