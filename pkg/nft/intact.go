package nft

import (
	"hash/fnv"
	"os"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Intact carries, from one invocation to the next, the fact that podwire's
// tables matched their wanted content at a ruleset generation
// (Generation), so that an ADD at that same generation skips the verify by
// content: nothing anyone committed since can have changed them. Any commit
// by another owner (kube-proxy, an operator's nft, a podwire rebuild) moves
// the generation, and the next ADD verifies in full, as without it.
//
// The fact, "intact at G", is one line in a file of stateDir, written only
// when proven:
//   - by a verify that found no drift, once no commit came between its
//     start and the invocation's first batch;
//   - by an element batch of podwire's (an ADD's, a DEL's, a GC's) whose
//     commit was the only one since a generation known intact: under an
//     exclusive flock(2) of the file, the generation is read before the
//     batch (G) and after it, and "intact at G+1" is written when the file
//     or the invocation knew G and the batch moved the generation by exactly
//     one. An element batch changes set elements only, never what Verify
//     compares, and each carries a no-op update of the table's hash marker
//     chain, so that it commits a generation even when its elements all
//     exist already (adding an existing element is no transaction, and
//     nf_tables_commit does not bump the generation for a batch without
//     one: net/netfilter/nf_tables_api.c).
//
// So the fact follows podwire's own batches from process to process, a
// burst of concurrent ADDs included, and stops at anyone else's commit. A
// rebuild or a failed batch proves nothing. The line carries a checksum (a
// torn read is no fact), the netns cookie and the boot time (a stateDir
// kept across a reboot, or seen from another netns, matches nothing), and
// each table's identity and hash (another config or binary matches
// nothing).
type Intact struct {
	path    string
	ident   string // netns cookie and boot time
	tables  string // "family/name/marker ..."; for DEL, the file's
	markers map[ID]string
	fd      int // the socket of Generation; -1 without one
	// cur is a generation at which this invocation knows the tables
	// intact, when knows.
	cur     uint32
	knows   bool
	known   bool // the file said so at the start: the verify may be skipped
	start   uint32
	spoiled bool
}

// intactVersion is the file format's first field.
const intactVersion = "v1"

// OpenIntact reads the generation and the file at path. want is the tables
// the caller wants; nil takes them from the file (DEL and GC, which do not
// plan the tables, carry the fact through their own batches). Nothing it
// meets is an error: without a generation or a file the invocation
// verifies as before. Close releases its socket.
func OpenIntact(path string, want []*Table) *Intact {
	fd, err := GenerationSocket()
	return openIntact(path, want, fd, err)
}

// OpenIntactFD is OpenIntact on fd, a socket of GenerationSocket (for a
// caller outside the netns, which opened it there); the Intact closes it.
func OpenIntactFD(path string, want []*Table, fd int) *Intact {
	return openIntact(path, want, fd, nil)
}

func openIntact(path string, want []*Table, fd int, err error) *Intact {
	in := &Intact{path: path, markers: map[ID]string{}, fd: -1}
	if err != nil {
		in.spoiled = true
		return in
	}
	in.fd = fd
	// SO_NETNS_COOKIE: unique to the socket's netns until reboot, never
	// reused.
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		in.spoiled = true
		return in
	}
	if in.start, err = readGeneration(fd); err != nil {
		in.spoiled = true
		return in
	}
	in.ident = strconv.FormatUint(cookie, 10) + " " + strconv.FormatInt(bootTime(), 10)
	if want != nil {
		specs := make([]string, len(want))
		for i, t := range want {
			m := t.MarkerChain()
			in.markers[t.ID()] = m
			specs[i] = strconv.Itoa(int(t.Family)) + "/" + t.Name + "/" + m
		}
		in.tables = strings.Join(specs, " ")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return in
	}
	fgen, ftables, ok := in.parse(b)
	if !ok {
		return in
	}
	if want == nil {
		in.tables = ftables
		for _, s := range strings.Fields(ftables) {
			f := strings.SplitN(s, "/", 3)
			fam, err := strconv.Atoi(f[0])
			if len(f) != 3 || err != nil {
				return in
			}
			in.markers[ID{nftables.TableFamily(fam), f[1]}] = f[2]
		}
	}
	in.known = fgen == in.start && ftables == in.tables && in.tables != ""
	in.cur, in.knows = in.start, in.known
	return in
}

// Known reports whether the tables were intact at the generation of the
// start: the verify may be skipped.
func (in *Intact) Known() bool { return in.known && !in.spoiled }

// Verified records that the caller's verify, begun after OpenIntact, found
// no drift: the tables were intact at the start's generation if nothing
// committed since, which the first batch checks.
func (in *Intact) Verified() { in.cur, in.knows = in.start, true }

// Spoil records that this invocation proves nothing more (a rebuild).
func (in *Intact) Spoil() { in.spoiled, in.knows = true, false }

// Close releases the socket.
func (in *Intact) Close() {
	if in.fd >= 0 {
		unix.Close(in.fd)
		in.fd = -1
	}
}

// parse reads the file's line: its generation and tables when its checksum
// and identity match.
func (in *Intact) parse(b []byte) (gen uint32, tables string, ok bool) {
	line, _, _ := strings.Cut(string(b), "\n")
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return 0, "", false
	}
	sum, err := strconv.ParseUint(line[i+1:], 10, 64)
	if err != nil || sum != checksum(line[:i]) {
		return 0, "", false
	}
	f := strings.SplitN(line[:i], " ", 5) // version, gen, cookie, boot, tables
	if len(f) != 5 || f[0] != intactVersion || f[2]+" "+f[3] != in.ident {
		return 0, "", false
	}
	g, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, "", false
	}
	return uint32(g), f[4], true
}

// checksum is FNV-1a of s: no table to build, unlike crc32's, in a
// process that lives for one invocation.
func checksum(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// flush flushes the batch queued on c, which touched table t's sets, and
// carries the fact across it (see Intact).
func (in *Intact) flush(c Conn, t *nftables.Table) error {
	marker, ok := "", false
	if t != nil && !in.spoiled && in.fd >= 0 && in.tables != "" {
		marker, ok = in.markers[ID{t.Family, t.Name}]
	}
	if !ok {
		in.knows = false
		return c.Flush()
	}
	f, err := os.OpenFile(in.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		in.knows = false
		return c.Flush()
	}
	defer f.Close() // and the lock with it
	_ = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	before, gerr := readGeneration(in.fd)
	intact := gerr == nil && in.knows && in.cur == before
	if !intact && gerr == nil {
		buf := make([]byte, 4096)
		n, _ := f.ReadAt(buf, 0)
		g, tables, ok := in.parse(buf[:n])
		intact = ok && g == before && tables == in.tables
	}
	if intact {
		// Only then: the marker is known to exist, so its no-op update
		// creates nothing (a stale file's marker would be a new chain).
		c.AddChain(&nftables.Chain{Name: marker, Table: &nftables.Table{Family: t.Family, Name: t.Name}})
	}
	if err := c.Flush(); err != nil {
		in.Spoil()
		return err
	}
	after, gerr := readGeneration(in.fd)
	in.knows = intact && gerr == nil && after == before+1 && after != 0
	if in.knows {
		in.cur = after
		line := intactVersion + " " + strconv.FormatUint(uint64(after), 10) + " " + in.ident + " " + in.tables
		line += " " + strconv.FormatUint(checksum(line), 10) + "\n"
		// Under the lock; a reader without it (OpenIntact) that meets a
		// half-written line fails its checksum.
		if _, err := f.WriteAt([]byte(line), 0); err == nil {
			_ = f.Truncate(int64(len(line)))
		}
	}
	return nil
}

// Conn wraps c so that every batch it flushes carries the fact (see
// Intact).
func (in *Intact) Conn(c Conn) Conn { return &witnessConn{Conn: c, in: in} }

// witnessConn is Intact's view of the invocation's batches.
type witnessConn struct {
	Conn
	in      *Intact
	touched *nftables.Table
}

func (w *witnessConn) touch(s *nftables.Set) {
	if w.touched == nil && s != nil && s.Table != nil {
		w.touched = s.Table
	}
}

func (w *witnessConn) SetAddElements(s *nftables.Set, e []nftables.SetElement) error {
	w.touch(s)
	return w.Conn.SetAddElements(s, e)
}

func (w *witnessConn) SetDeleteElements(s *nftables.Set, e []nftables.SetElement) error {
	w.touch(s)
	return w.Conn.SetDeleteElements(s, e)
}

// The structural calls (a rebuild or a deletion) spoil the invocation.
func (w *witnessConn) AddTable(t *nftables.Table) *nftables.Table {
	w.in.Spoil()
	return w.Conn.AddTable(t)
}

func (w *witnessConn) DelTable(t *nftables.Table) {
	w.in.Spoil()
	w.Conn.DelTable(t)
}

func (w *witnessConn) AddChain(c *nftables.Chain) *nftables.Chain {
	w.in.Spoil()
	return w.Conn.AddChain(c)
}

func (w *witnessConn) AddRule(r *nftables.Rule) *nftables.Rule {
	w.in.Spoil()
	return w.Conn.AddRule(r)
}

func (w *witnessConn) AddSet(s *nftables.Set, e []nftables.SetElement) error {
	w.in.Spoil()
	return w.Conn.AddSet(s, e)
}

// Flush flushes the batch through Intact.
func (w *witnessConn) Flush() error {
	t := w.touched
	w.touched = nil
	return w.in.flush(w.Conn, t)
}
