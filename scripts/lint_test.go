// Package scripts holds the tests of the lint scripts make lint runs.
package scripts

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCheckProcessShape runs check-process-shape.sh on fixtures: each
// netns switch, GOMAXPROCS write and benchmark figure of bad.go fails,
// naming its line; good.go (ns.WithNetNSPath, a GOMAXPROCS read, a
// constant in a comment) and the tree's own code pass.
func TestCheckProcessShape(t *testing.T) {
	out, err := exec.Command("./check-process-shape.sh", "testdata/process-shape/bad.go").CombinedOutput()
	if err == nil {
		t.Fatalf("bad.go passed:\n%s", out)
	}
	for _, line := range []string{"13", "14", "15", "16", "17", "21", "22", "25", "26"} {
		if !strings.Contains(string(out), "bad.go:"+line+":") {
			t.Errorf("bad.go:%s is not named:\n%s", line, out)
		}
	}
	for _, args := range [][]string{{"testdata/process-shape/good.go"}, nil} {
		if out, err := exec.Command("./check-process-shape.sh", args...).CombinedOutput(); err != nil {
			t.Errorf("check-process-shape.sh %v: %v\n%s", args, err, out)
		}
	}
}
