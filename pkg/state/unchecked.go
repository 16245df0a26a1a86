package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// uncheckedName is the index of the attachments whose sources podwire
// cannot check (Record.Unchecked): one line "key<TAB>pod: reason" each. It
// lets STATUS, which a kubelet polls every few seconds, warn about them
// with one read instead of a listing of every record; it is written only
// by the ADD and the DEL of such an attachment, under the node lock.
const uncheckedName = "unchecked"

// Unchecked returns the lines of the index ("key<TAB>pod: reason"); none
// when there is no index.
func (s *Store) Unchecked() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, uncheckedName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", uncheckedName, err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}

// MarkUnchecked adds r to the index when r.Unchecked is set (the caller
// holds the node lock).
func (s *Store) MarkUnchecked(r *Record) error {
	if r.Unchecked == "" {
		return nil
	}
	return s.editUnchecked(r.Key(), r.Key()+"\t"+r.PodRef()+": "+r.Unchecked)
}

// ClearUnchecked removes r from the index; r not in it is success (the
// caller holds the node lock).
func (s *Store) ClearUnchecked(r *Record) error {
	if r.Unchecked == "" {
		return nil
	}
	return s.editUnchecked(r.Key(), "")
}

// editUnchecked replaces the line of key with line ("" removes it), and
// removes the index when it is left empty.
func (s *Store) editUnchecked(key, line string) error {
	lines, err := s.Unchecked()
	if err != nil {
		return err
	}
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" || strings.HasPrefix(l, key+"\t") })
	if line != "" {
		lines = append(lines, line)
	}
	path := filepath.Join(s.Dir, uncheckedName)
	if len(lines) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to remove %s: %w", uncheckedName, err)
		}
		return nil
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), FileMode)
}
