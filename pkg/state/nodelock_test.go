package state

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// flockFree reports whether another open file description can take the
// node lock now (flock(2) with LOCK_NB), releasing it again.
func flockFree(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// TestNodeLockReentrant: nested Locks of one invocation take the flock once,
// and only the outermost unlock releases it; it can be taken again after.
func TestNodeLockReentrant(t *testing.T) {
	s := New(t.TempDir())
	l := s.NodeLock()
	for round := range 2 {
		outer, err := l.Lock()
		if err != nil {
			t.Fatal(err)
		}
		inner, err := l.Lock()
		if err != nil {
			t.Fatal(err)
		}
		if flockFree(t, s.Dir) {
			t.Fatalf("round %d: flock free while held twice", round)
		}
		inner()
		if flockFree(t, s.Dir) {
			t.Fatalf("round %d: flock released by the inner unlock", round)
		}
		outer()
		if !flockFree(t, s.Dir) {
			t.Fatalf("round %d: flock still held after the outermost unlock", round)
		}
	}
}
