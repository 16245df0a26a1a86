package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestHostDirsShared makes host mountpoints as two runs of the package
// would, one of them still using its mount over one when the other stops:
// removeHostDirs keeps every marked directory while a mount namespace
// mounts at or below it, and removes them all (made by either run) once
// none does; a directory that existed before is kept.
func TestHostDirsShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace)")
	}
	base := t.TempDir() // existed before: never marked, never removed
	paths := []string{filepath.Join(base, "var/lib/kubelet"), filepath.Join(base, "opt/cni/bin")}
	if err := makeHostDirs(paths); err != nil {
		t.Fatal(err)
	}
	if err := makeHostDirs(paths); err != nil { // the second run finds them made
		t.Fatal(err)
	}
	// The other run's node: a mount namespace with a mount over one path.
	user := exec.Command("unshare", "--mount", "--propagation=private", "sh", "-c",
		"mount -t tmpfs none "+paths[0]+" && echo up && exec sleep 60")
	out, err := user.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = user.Process.Kill(); _ = user.Wait() })
	buf := make([]byte, 3)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("the mount namespace did not come up: %v", err)
	}

	if err := removeHostDirs(paths); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{paths[0], filepath.Join(base, "var")} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed while another mount namespace mounts over it: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "opt")); err == nil {
		t.Errorf("%s kept, though nothing mounts below it", filepath.Join(base, "opt"))
	}

	_ = user.Process.Kill()
	_ = user.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := removeHostDirs(paths); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(base, "var")); os.IsNotExist(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	entries, _ := os.ReadDir(base)
	if _, err := os.Stat(base); err != nil || len(entries) != 0 {
		t.Errorf("after the last user: %s holds %d entries (%v), want the directory alone and empty", base, len(entries), err)
	}
}
