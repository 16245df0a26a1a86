// Package logfile is podwire's size-bounded log file: an io.Writer that
// appends to a file and rotates it with gopkg.in/natefinch/lumberjack.v2
// (as Calico's CNI plugin does), made safe for the many short-lived plugin
// processes a runtime runs at once.
//
// Lumberjack assumes one writing process: each Logger counts the bytes it
// wrote itself since it opened the file and rotates when its own count says
// the file is full. Several plugin processes (parallel ADDs, a kubelet's
// STATUS polls) would each see a stale size, rotate a file another process
// has just rotated (leaving a backup of a few lines that pushes a full one
// out of MaxBackups), and two rotations within one millisecond give the same
// backup name, so the second rename replaces the first backup: its lines are
// lost. Writer therefore serialises every write across processes with an
// exclusive flock(2) on "<file>.lock", and inside the lock decides rotation
// from the file's real size (one stat), writes, and closes the file again, so
// no process ever writes through a descriptor of a file another one renamed.
//
// What concurrent processes see: every line lands whole in the current file
// (one write(2) per slog record, under the lock), no line is lost or
// interleaved, a file is rotated once when it is full. Lumberjack removes
// backups beyond MaxBackups in a goroutine after a rotation; a plugin process
// may exit before it has run, in which case the next rotation removes them,
// so for a moment there may be one backup more than MaxBackups.
//
// Cost: one flock, one stat, one open and one close per log record
// (microseconds; a plugin invocation writes a handful of records).
package logfile

import (
	"os"

	"golang.org/x/sys/unix"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// Defaults for a log file whose limits the config leaves out.
const (
	// DefaultMaxSizeMiB is the size in MiB at which the file is rotated.
	DefaultMaxSizeMiB = 10
	// DefaultMaxBackups is the number of rotated files kept.
	DefaultMaxBackups = 5
)

// Options bound a log file. Zero values take the defaults above; MaxAgeDays 0
// keeps backups by count only.
type Options struct {
	// MaxSizeBytes is the size in bytes past which the file is rotated before
	// the next write (a record is never split across files).
	MaxSizeBytes int64
	// MaxBackups is the number of rotated files kept ("<name>-<time>.<ext>").
	MaxBackups int
	// MaxAgeDays removes rotated files older than this many days; 0 never.
	MaxAgeDays int
}

// Writer appends to a log file and rotates it; safe for concurrent use by
// many processes (see the package comment) and goroutines.
type Writer struct {
	path string
	max  int64
	lock *os.File // nil when the lock file cannot be opened
	lj   *lumberjack.Logger
}

// Open returns a Writer for path. The file is created (mode 0600) on the
// first write; its directory must exist or be creatable. The lock file
// "<path>.lock" is opened now (atomicfile.OpenLock: created exclusively,
// never through a link); when it cannot be, writes go unlocked (the
// single-process behaviour of lumberjack).
func Open(path string, o Options) *Writer {
	if o.MaxSizeBytes <= 0 {
		o.MaxSizeBytes = DefaultMaxSizeMiB << 20
	}
	if o.MaxBackups <= 0 {
		o.MaxBackups = DefaultMaxBackups
	}
	w := &Writer{path: path, max: o.MaxSizeBytes, lj: &lumberjack.Logger{
		Filename:   path,
		MaxBackups: o.MaxBackups,
		MaxAge:     o.MaxAgeDays,
		// Rotation is decided here from the file's real size, so
		// lumberjack's own per-process count must never trigger: give it
		// a limit no log reaches (1 TiB).
		MaxSize: 1 << 20,
	}}
	if f, err := atomicfile.OpenLock(path + ".lock"); err == nil {
		w.lock = f
	}
	return w
}

// Write appends p (one log record) to the file, rotating it first when p
// would take it past the size limit.
func (w *Writer) Write(p []byte) (int, error) {
	if w.lock != nil {
		if err := flock(w.lock, unix.LOCK_EX); err == nil {
			defer flock(w.lock, unix.LOCK_UN) //nolint:errcheck // closing the fd releases it anyway
		}
	}
	if st, err := os.Stat(w.path); err == nil && st.Size() > 0 && st.Size()+int64(len(p)) > w.max {
		if err := w.lj.Rotate(); err != nil {
			return 0, err
		}
	}
	n, err := w.lj.Write(p)
	// Close, so the next record reopens whatever file is current then.
	if cerr := w.lj.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// Close releases the lock file.
func (w *Writer) Close() error {
	_ = w.lj.Close()
	if w.lock != nil {
		return w.lock.Close()
	}
	return nil
}

// flock retries flock(2) on EINTR.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}
