package logfile

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The writer processes of TestConcurrentProcesses are this test binary
// re-executed with these variables set.
const (
	envPath   = "PODWIRE_LOGFILE_TEST_PATH"
	envWriter = "PODWIRE_LOGFILE_TEST_WRITER"
	envCount  = "PODWIRE_LOGFILE_TEST_COUNT"
	envMax    = "PODWIRE_LOGFILE_TEST_MAX"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envPath); path != "" {
		os.Exit(writeRecords(path))
	}
	os.Exit(m.Run())
}

// writeRecords is one writer process: COUNT records "writer=W seq=N ..." of
// about 150 bytes, one Write each, as slog does.
func writeRecords(path string) int {
	count, _ := strconv.Atoi(os.Getenv(envCount))
	max, _ := strconv.ParseInt(os.Getenv(envMax), 10, 64)
	w := Open(path, Options{MaxSizeBytes: max, MaxBackups: 10000})
	defer w.Close()
	pad := strings.Repeat("x", 100)
	for i := 0; i < count; i++ {
		if _, err := fmt.Fprintf(w, "writer=%s seq=%d pad=%s\n", os.Getenv(envWriter), i, pad); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestConcurrentProcesses runs 8 processes that write and rotate one log
// file at the same time, with a limit small enough for hundreds of
// rotations, and checks what the package comment promises: every record
// lands exactly once and whole, and no file is past the limit.
func TestConcurrentProcesses(t *testing.T) {
	const writers, count, max = 8, 2000, 16 << 10
	dir := t.TempDir()
	path := filepath.Join(dir, "podwire.log")
	cmds := make([]*exec.Cmd, writers)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), envPath+"="+path, envWriter+"="+strconv.Itoa(i),
			envCount+"="+strconv.Itoa(count), envMax+"="+strconv.Itoa(max))
		cmds[i].Stderr = os.Stderr
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}

	files, err := filepath.Glob(filepath.Join(dir, "podwire*.log"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > max {
			t.Errorf("%s has %d bytes, past the %d-byte limit", filepath.Base(f), st.Size(), max)
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "writer=") || !strings.HasSuffix(line, strings.Repeat("x", 100)) {
				t.Errorf("%s: torn or interleaved record %q", filepath.Base(f), line)
				continue
			}
			seen[strings.Fields(line)[0]+" "+strings.Fields(line)[1]]++
		}
		fh.Close()
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < count; i++ {
			k := fmt.Sprintf("writer=%d seq=%d", w, i)
			if seen[k] != 1 {
				t.Fatalf("record %q found %d times, want once (%d files)", k, seen[k], len(files))
			}
		}
	}
	// About 2.4 MB through a 16 KiB limit: ~150 files; one file would mean
	// no rotation happened at all.
	if len(files) < 100 {
		t.Errorf("%d files after %d records of ~150 bytes with a %d-byte limit: rotation did not happen", len(files), writers*count, max)
	}
	t.Logf("%d records in %d files", writers*count, len(files))
}

// TestRotationKeepsBackups checks the bound on the number of files kept.
func TestRotationKeepsBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "podwire.log")
	w := Open(path, Options{MaxSizeBytes: 1000, MaxBackups: 2})
	for i := 0; i < 100; i++ {
		fmt.Fprintf(w, "record %03d %s\n", i, strings.Repeat("y", 80))
	}
	w.Close()
	// The last record is in the current file, whole.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "record 099 "+strings.Repeat("y", 80)+"\n") {
		t.Errorf("current file does not end with the last record: %q", b)
	}
	// Lumberjack removes old backups asynchronously: allow it a moment.
	var files []string
	for try := 0; try < 100; try++ {
		files, _ = filepath.Glob(filepath.Join(dir, "podwire-*.log"))
		if len(files) <= 2 {
			break
		}
		waitABit()
	}
	if len(files) != 2 {
		t.Errorf("%d backups kept, want 2: %v", len(files), files)
	}
}

func waitABit() { time.Sleep(10 * time.Millisecond) }

// TestLockNeverThroughALink: a symlink or a hard link planted at the lock
// file's name is not taken as the lock (the writer goes unlocked and the
// link's target is untouched); a lock file a previous process left is.
func TestLockNeverThroughALink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plant  func(target, at string) error
		locked bool
	}{
		{"symlink", os.Symlink, false},
		{"hard link", os.Link, false},
		{"previous lock file", func(_, at string) error { return os.WriteFile(at, nil, 0o600) }, true},
		{"none", func(string, string) error { return nil }, true},
	} {
		dir := t.TempDir()
		victim := filepath.Join(dir, "victim")
		if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "podwire.log")
		if err := tc.plant(victim, path+".lock"); err != nil {
			t.Fatal(err)
		}
		w := Open(path, Options{})
		if got := w.lock != nil; got != tc.locked {
			t.Errorf("%s: locked %v, want %v", tc.name, got, tc.locked)
		}
		if _, err := fmt.Fprintln(w, "a record"); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		w.Close()
		if b, _ := os.ReadFile(victim); string(b) != "keep" {
			t.Errorf("%s: victim %q", tc.name, b)
		}
	}
}
