package state

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/pkg/atomicfile"
)

func TestStoreRoundTrip(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	if recs, err := s.List(); err != nil || len(recs) != 0 {
		t.Fatalf("List on a missing dir: %v %v", recs, err)
	}
	if r, err := s.Get("c", "eth0"); r != nil || err != nil {
		t.Fatalf("Get missing: %v %v", r, err)
	}
	r := &Record{
		ContainerID: "abc_1", IfName: "eth0", Netns: "/var/run/netns/x",
		Addresses: []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00::5")},
		Routes:    []Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Via: netip.MustParseAddr("10.244.1.5")}},
		VLAN:      &VLANAttachment{HostVeth: "pw1234", PVID: 100, Tagged: []uint16{200}},
	}
	// Two attachments whose names would collide without escaping.
	r2 := &Record{ContainerID: "abc", IfName: "1_eth0"}
	for _, rec := range []*Record{r, r2} {
		if err := s.Put(rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get("abc_1", "eth0")
	if err != nil || got == nil {
		t.Fatalf("Get: %v %v", got, err)
	}
	if got.Addresses[1] != r.Addresses[1] || got.Routes[0] != r.Routes[0] || got.VLAN.PVID != 100 || got.Version != RecordVersion {
		t.Errorf("round trip lost data: %+v", got)
	}
	if vs := got.VLAN.VLANs(); len(vs) != 2 {
		t.Errorf("VLANs() = %v", vs)
	}
	recs, err := s.List()
	if err != nil || len(recs) != 2 {
		t.Fatalf("List: %d records, %v", len(recs), err)
	}
	st, _ := os.Stat(s.Dir)
	if st.Mode().Perm() != DirMode {
		t.Errorf("dir mode %o, want %o", st.Mode().Perm(), DirMode)
	}
	entries, _ := os.ReadDir(s.Dir)
	for _, e := range entries {
		info, _ := e.Info()
		if info.Mode().Perm() != FileMode {
			t.Errorf("%s mode %o, want %o", e.Name(), info.Mode().Perm(), FileMode)
		}
	}
	for _, rec := range []*Record{r, r2} {
		if err := s.Delete(rec.ContainerID, rec.IfName); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(rec.ContainerID, rec.IfName); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
	}
	if recs, _ := s.List(); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}

func TestListCarriesOnPastCorruptRecords(t *testing.T) {
	s := New(t.TempDir())
	if err := s.Put(&Record{ContainerID: "good", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "bad_eth0.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	if err == nil || len(recs) != 1 || recs[0].ContainerID != "good" {
		t.Fatalf("List = %v, %v; want the good record and an error", recs, err)
	}
}

// TestRecordsOfEveryShapeRead: records bigger than a read buffer (4 KiB),
// and records written indented by podwire before it wrote compact JSON,
// read back whole through Get and List.
func TestRecordsOfEveryShapeRead(t *testing.T) {
	s := New(t.TempDir())
	big := &Record{ContainerID: "big", IfName: "eth0"}
	for i := range 600 {
		big.AllowedSourcePrefixes = append(big.AllowedSourcePrefixes, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))
	}
	if err := s.Put(big); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(s.path("big", "eth0")); st.Size() <= 2*4096 {
		t.Fatalf("record of %d bytes, want one over two read buffers", st.Size())
	}
	old, err := json.MarshalIndent(&Record{Version: RecordVersion, ContainerID: "old", IfName: "eth0",
		Addresses: []netip.Addr{netip.MustParseAddr("10.244.1.7")}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("old", "eth0"), old, FileMode); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("big", "eth0")
	if err != nil || got == nil || len(got.AllowedSourcePrefixes) != 600 || got.AllowedSourcePrefixes[599] != big.AllowedSourcePrefixes[599] {
		t.Fatalf("Get of the big record: %v, %v", got, err)
	}
	recs, err := s.List()
	if err != nil || len(recs) != 2 {
		t.Fatalf("List: %d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if r.ContainerID == "old" && (len(r.Addresses) != 1 || r.Addresses[0] != netip.MustParseAddr("10.244.1.7")) {
			t.Errorf("indented record read as %+v", r)
		}
		if r.ContainerID == "big" && len(r.AllowedSourcePrefixes) != 600 {
			t.Errorf("big record read with %d prefixes", len(r.AllowedSourcePrefixes))
		}
	}
}

// TestLockExcludes: the node lock serialises read-modify-write sections
// across goroutines (flock is per open file description).
func TestLockExcludes(t *testing.T) {
	s := New(t.TempDir())
	var mu sync.Mutex
	inside, maxInside := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := s.Lock()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("%d holders of the node lock at once", maxInside)
	}
}

func FuzzRecordDecode(f *testing.F) {
	good, _ := json.Marshal(&Record{ContainerID: "c", IfName: "eth0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	f.Add(good)
	f.Add([]byte(`{"vlan":{"pvid":70000}}`))
	f.Add([]byte(`{"addresses":["x"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "c_eth0.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		s := New(dir)
		r, err := s.Get("c", "eth0")
		if err == nil && r == nil {
			t.Fatal("no record and no error for an existing file")
		}
		if err == nil {
			_ = r.VLAN.VLANs()
			_ = r.Key()
		}
	})
}

// TestDeleteRemovesCrashedPut: a podwire killed in the middle of Put leaves
// its temporary file; the next Put reuses the name and Delete (DEL, GC)
// removes it, so nothing piles up in stateDir.
func TestDeleteRemovesCrashedPut(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	if err := s.Put(&Record{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []bool{true, false} { // a crash on the update, and on the first write
		if !rec {
			if err := s.Delete("c1", "eth0"); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(tmpLeftover(s, "c1", "eth0"), []byte(`{"contai`), FileMode); err != nil {
			t.Fatal(err)
		}
		if recs, err := s.List(); err != nil || len(recs) != map[bool]int{true: 1, false: 0}[rec] {
			t.Fatalf("List with a partial temporary file: %v %v", recs, err)
		}
		if err := s.Delete("c1", "eth0"); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(s.Dir)
		for _, e := range entries {
			if e.Name() != lockName {
				t.Errorf("record existed %v: %s left after Delete", rec, e.Name())
			}
		}
		if err := s.Put(&Record{ContainerID: "c1", IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
}

// tmpLeftover is a temporary file that a Put killed before its rename leaves
// (atomicfile.WriteFileFixedTemp's naming).
func tmpLeftover(s *Store, containerID, ifName string) string {
	return atomicfile.TempName(s.path(containerID, ifName))
}

// TestStateDirNarrowedTo0700: a stateDir made 0755 by someone else (a
// kubelet creating the DaemonSet's hostPath) is 0700 after the first
// record is written.
func TestStateDirNarrowedTo0700(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "podwire")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := New(dir).Put(&Record{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != DirMode {
		t.Fatalf("state dir mode %v (%v), want %o", fi.Mode(), err, DirMode)
	}
}

// TestNewerRecordRefused: a record of a newer schema (a downgrade while pods
// run) is refused by Get, naming both versions, and reported by List beside
// the records it can read; a record without a version (older) reads.
func TestNewerRecordRefused(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	if err := s.Put(&Record{ContainerID: "ok", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	newer := fmt.Sprintf(`{"version":%d,"containerID":"newer","ifName":"eth0"}`, RecordVersion+1)
	if err := os.WriteFile(s.path("newer", "eth0"), []byte(newer), FileMode); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("old", "eth0"), []byte(`{"containerID":"old","ifName":"eth0"}`), FileMode); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get("newer", "eth0")
	if want := fmt.Sprintf("schema version %d, newer than this podwire's %d", RecordVersion+1, RecordVersion); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Get of a newer record: %v, want an error containing %q", err, want)
	}
	if r, err := s.Get("old", "eth0"); err != nil || r == nil || r.ContainerID != "old" {
		t.Fatalf("Get of a record without a version: %+v %v", r, err)
	}
	recs, err := s.List()
	if err == nil || len(recs) != 2 {
		t.Fatalf("List: %d records, error %v; want the 2 readable ones and an error for the newer one", len(recs), err)
	}
}
