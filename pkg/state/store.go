package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/podwire/podwire/pkg/atomicfile"
	"golang.org/x/sys/unix"
)

// File modes of the state directory and its files.
const (
	DirMode  = 0o700
	FileMode = 0o600
	lockName = "node.lock"
	suffix   = ".json"
)

// Store is the directory of attachment records.
type Store struct {
	Dir string
}

// New returns the store in dir; nothing is created until a write.
func New(dir string) *Store { return &Store{Dir: dir} }

// ensureDir makes stateDir, mode 0700, or narrows an existing one to 0700:
// a kubelet creates a DaemonSet's hostPath (DirectoryOrCreate) 0755, and
// the records name every pod of the node.
func (s *Store) ensureDir() error {
	if err := os.MkdirAll(s.Dir, DirMode); err != nil {
		return fmt.Errorf("failed to create state dir %q: %w", s.Dir, err)
	}
	fi, err := os.Stat(s.Dir)
	if err != nil {
		return fmt.Errorf("failed to stat state dir %q: %w", s.Dir, err)
	}
	if fi.Mode().Perm() != DirMode {
		if err := os.Chmod(s.Dir, DirMode); err != nil {
			return fmt.Errorf("failed to set state dir %q to mode %o: %w", s.Dir, DirMode, err)
		}
	}
	return nil
}

// escape makes a path element of a container ID or ifname: '%', '_' and '/'
// are percent-encoded so that "<cid>_<ifname>.json" is unambiguous.
func escape(s string) string { return escaper.Replace(s) }

// escaper is built once: a Replacer builds its lookup tables when made.
var escaper = strings.NewReplacer("%", "%25", "_", "%5F", "/", "%2F")

func (s *Store) path(containerID, ifName string) string {
	return filepath.Join(s.Dir, escape(containerID)+"_"+escape(ifName)+suffix)
}

// Put writes r atomically (atomicfile.WriteFile: a temporary file in the
// same directory, fsync, rename over the old record).
func (s *Store) Put(r *Record) error {
	if err := s.ensureDir(); err != nil {
		return err
	}
	r.Version = RecordVersion
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("failed to encode record %s: %w", r.Key(), err)
	}
	if err := atomicfile.WriteFileFixedTemp(s.path(r.ContainerID, r.IfName), data, FileMode); err != nil {
		return fmt.Errorf("failed to write record %s: %w", r.Key(), err)
	}
	return nil
}

// Get returns the record of an attachment, or (nil, nil) when there is none.
func (s *Store) Get(containerID, ifName string) (*Record, error) {
	return s.read(s.path(containerID, ifName))
}

func (s *Store) read(path string) (*Record, error) {
	var buf [4096]byte
	return readRecord(unix.AT_FDCWD, path, buf[:0])
}

// readRecord reads the record at name (relative to the directory dirfd, or
// a path with unix.AT_FDCWD), using buf's storage when it is large enough;
// (nil, nil) when there is none.
func readRecord(dirfd int, name string, buf []byte) (*Record, error) {
	data, err := readSmall(dirfd, name, buf, false)
	r := &Record{}
	if err == nil && json.Unmarshal(data, r) != nil {
		// A short first read, or a corrupt record: read to EOF.
		*r = Record{}
		data, err = readSmall(dirfd, name, buf, true)
		if err == nil {
			if err := json.Unmarshal(data, r); err != nil {
				return nil, fmt.Errorf("corrupt record %q: %w", name, err)
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read record %q: %w", name, err)
	}
	if r.Version > RecordVersion {
		return nil, fmt.Errorf("record %q is of schema version %d, newer than this podwire's %d: "+
			"it was written by a newer podwire, and acting on it could leave behind what it describes", name, r.Version, RecordVersion)
	}
	return r, nil
}

// readSmall reads a small file into buf (grown as needed) with open, read
// and close only. os.ReadFile also stats the file and offers it to the
// runtime's poller, which refuses a regular file, and reads until a read
// returns 0: 6 system calls a record instead of 3, and a rebuild of the
// node tables reads every record. Unless toEOF, a read that leaves room in
// buf is taken as the whole file (read(2) of a regular file returns less
// than asked only at end of file, or when a signal interrupts it after
// some bytes were copied): readRecord reads again to EOF when what it got
// does not decode.
func readSmall(dirfd int, path string, buf []byte, toEOF bool) ([]byte, error) {
	fd, err := unix.Openat(dirfd, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := cap(buf) - len(buf)
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		buf = buf[:len(buf)+n]
		if n == 0 || (n < room && !toEOF) {
			return buf, nil
		}
	}
}

// Delete removes the record of an attachment and any temporary file a
// crashed Put left; a missing record is not an error (DEL is idempotent).
func (s *Store) Delete(containerID, ifName string) error {
	if err := atomicfile.RemoveTemp(s.path(containerID, ifName)); err != nil {
		return fmt.Errorf("failed to delete record %s/%s: %w", containerID, ifName, err)
	}
	if err := os.Remove(s.path(containerID, ifName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to delete record %s/%s: %w", containerID, ifName, err)
	}
	return nil
}

// IsRecordName reports whether name (a file name in stateDir) is a
// record's, which the agent's watch of stateDir follows.
func IsRecordName(name string) bool {
	return strings.HasSuffix(name, suffix) && !strings.HasPrefix(name, ".")
}

// List returns every record, in the order of their file names. A missing
// directory is an empty list. Corrupt records are returned as errors
// alongside the good ones (errors.Join), so that GC and the node tables
// carry on past them. A rebuild of the node tables reads every record of
// the node, so the files are opened relative to the directory (no path to
// build and walk per record), read by one worker per P (GOMAXPROCS: the
// plugin widens it for a rebuild, package oneproc), and the names are read
// without a stat or a DirEntry each.
func (s *Store) List() ([]*Record, error) {
	dir, err := os.Open(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list state dir %q: %w", s.Dir, err)
	}
	defer dir.Close()
	all, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("failed to list state dir %q: %w", s.Dir, err)
	}
	names := all[:0]
	for _, name := range all {
		if IsRecordName(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	dirfd := int(dir.Fd())
	recs := make([]*Record, len(names))
	errs := make([]error, len(names))
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Go(func() {
			buf := make([]byte, 0, 4096) // json.Unmarshal keeps nothing of it
			for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
				if recs[i], errs[i] = readRecord(dirfd, names[i], buf); errs[i] != nil {
					errs[i] = fmt.Errorf("in %s: %w", s.Dir, errs[i])
				}
			}
		})
	}
	wg.Wait()
	out := recs[:0]
	for _, r := range recs {
		if r != nil { // vanished since the listing: a DEL ran
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// Lock takes the node lock: an exclusive flock(2) on stateDir/node.lock,
// blocking until it is free. The kernel releases it if the process dies, so
// a crashed podwire never leaves it held. The returned func releases it.
func (s *Store) Lock() (unlock func(), err error) {
	if err := s.ensureDir(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, FileMode)
	if err != nil {
		return nil, fmt.Errorf("failed to open node lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to take node lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
