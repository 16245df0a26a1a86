package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

type invalidCase struct {
	Name        string            `json:"name"`
	Podwire     map[string]any    `json:"podwire"`
	Annotations map[string]string `json:"annotations"`
	Namespace   string            `json:"namespace"`
	Code        uint              `json:"code"`
	Mention     []string          `json:"mention"`
}

// TestInvalidInputRefused runs every case of testdata/invalid-input.json as
// a pod ADD through libcni: the right CNI code, a message naming the key or
// annotation, and nothing left behind (no state record, no held node lock,
// no link or route of podwire's).
func TestInvalidInputRefused(t *testing.T) {
	raw, err := os.ReadFile("testdata/invalid-input.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct {
		Cases []invalidCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Cases) < 25 {
		t.Fatalf("corpus has %d cases, want at least 25", len(corpus.Cases))
	}
	n := newNode(t)
	linksBefore := n.linkCount()
	for _, tc := range corpus.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			for k, v := range tc.Annotations {
				if v == "@1MiB" {
					tc.Annotations[k] = strings.Repeat("198.51.100.0/24,", 1<<16)
				}
			}
			ann := tc.Annotations
			if ann == nil {
				ann = map[string]string{}
			}
			_, err := n.addPod(podSpec{namespace: tc.Namespace, annotations: ann, podwire: tc.Podwire})
			if err == nil {
				t.Fatal("ADD succeeded")
			}
			if code := cniCode(err); code != tc.Code {
				t.Errorf("code %d, want %d: %v", code, tc.Code, err)
			}
			for _, m := range tc.Mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message does not name %q: %v", m, err)
				}
			}
			if len(err.Error()) > 1000 {
				t.Errorf("message of %d bytes echoes the input", len(err.Error()))
			}
			if recs := n.records(); len(recs) != 0 {
				t.Errorf("state records left: %v", recs)
			}
			assertLockFree(t, n)
		})
	}
	if c := n.linkCount(); c != linksBefore {
		t.Errorf("%d links in the node after the refusals, %d before", c, linksBefore)
	}
}

// assertLockFree fails when the node lock is held.
func assertLockFree(t *testing.T, n *node) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(n.StateDir(), "node.lock"), os.O_RDWR, 0)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("node lock is held after a refused ADD: %v", err)
		return
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
