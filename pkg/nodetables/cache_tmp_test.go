package nodetables

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteCacheLeavesNoTemporaryFile: a write leaves only the cache; a
// temporary file left by a killed writer is removed once stale, and the
// cache is written again by the next write.
func TestWriteCacheLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	if err := writeCache(dir, &nodeCache{Node: "n1", Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != cacheName {
		t.Fatalf("state dir after a write: %v, want only %s", entries, cacheName)
	}
	tmp := filepath.Join(dir, "."+cacheName+".tmp")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	if err := writeCache(dir, &nodeCache{Node: "n2", Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file not removed: %v", err)
	}
	if err := writeCache(dir, &nodeCache{Node: "n3", Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c, err := readCache(dir)
	if err != nil || c == nil || c.Node != "n3" {
		t.Fatalf("cache after recovery: %+v, %v", c, err)
	}
}
