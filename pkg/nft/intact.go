package nft

import (
	"hash/fnv"
	"os"
	"strconv"
	"strings"

	"github.com/google/nftables"
)

// Intact carries from one invocation to the next the fact that podwire's
// tables matched their wanted content at a ruleset generation (Generation),
// so that an ADD at that same generation skips the verify by content:
// nothing anyone committed since can have changed them. Any commit by
// another owner (kube-proxy, an operator's nft, another podwire process)
// moves the generation, and the next ADD verifies in full, as without it.
//
// The fact is written to a small file in stateDir only when it is proven
// for the generation written:
//   - at the start, the generation is G and either the file says the
//     tables were intact at G, or the invocation's own verify (from G on)
//     found no drift (Verified);
//   - every batch this invocation flushed through Conn committed exactly
//     one generation: each carries a no-op update of the table's hash
//     marker chain, a transaction even when its elements all exist already
//     (adding an existing element is none, and nf_tables_commit does not
//     bump the generation for a batch without one:
//     net/netfilter/nf_tables_api.c), and those batches change set elements
//     only, never what Verify compares;
//   - at the end the generation is G plus those batches, so no other
//     commit came between.
//
// A rebuild, an error, or a batch outside the known tables spoils the
// invocation: it writes nothing. The file's line carries a checksum (a torn
// read is no fact), the netns cookie and the boot time (a stateDir kept
// across a reboot or moved to another netns matches nothing), and each
// table's identity and hash (a changed config or binary matches nothing).
// Every line ever written states a fact about one point of the netns's
// history, so concurrent writers need no lock.
type Intact struct {
	path     string
	ident    string // netns cookie and boot time
	tables   string // "family/name/marker ..." of the tables; "" for DEL, from the file
	markers  map[ID]string
	start    uint32
	known    bool
	verified bool
	ours     int
	spoiled  bool
	closed   bool
}

// intactVersion is the file format's first field.
const intactVersion = "v1"

// OpenIntact reads the generation and the file at path. want is the tables
// the caller wants; nil takes them from the file (DEL, which does not plan
// the tables, carries the fact forward through its own batches). Nothing
// it meets is an error: without a generation or a file the invocation
// verifies as before.
func OpenIntact(path string, want []*Table) *Intact {
	in := &Intact{path: path, markers: map[ID]string{}}
	gen, cookie, err := generationAndCookie()
	if err != nil {
		in.spoiled = true
		return in
	}
	in.start = gen
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
	fgen, ftables, ok := in.read()
	if !ok {
		return in
	}
	if want == nil {
		in.tables = ftables
		for _, s := range strings.Fields(ftables) {
			f := strings.SplitN(s, "/", 3)
			fam, err := strconv.Atoi(f[0])
			if len(f) != 3 || err != nil {
				in.spoiled = true
				return in
			}
			in.markers[ID{nftables.TableFamily(fam), f[1]}] = f[2]
		}
	}
	in.known = fgen == gen && ftables == in.tables
	return in
}

// Known reports whether the tables were intact at the current generation:
// the verify may be skipped.
func (in *Intact) Known() bool { return in.known && !in.spoiled }

// Verified records that the caller's verify, which began at the
// generation OpenIntact read, found no drift.
func (in *Intact) Verified() { in.verified = true }

// Spoil records that this invocation proves nothing (a rebuild).
func (in *Intact) Spoil() { in.spoiled = true }

// Close writes the fact for the generation reached, when proven (see
// Intact). Calling it again does nothing.
func (in *Intact) Close() {
	if in.closed || in.spoiled || !(in.known || in.verified) || in.tables == "" {
		in.closed = true
		return
	}
	in.closed = true
	gen, _, err := generationAndCookie()
	if err != nil || gen != in.start+uint32(in.ours) || gen < in.start {
		return // another commit came between, or the counter wrapped
	}
	line := intactVersion + " " + strconv.FormatUint(uint64(gen), 10) + " " + in.ident + " " + in.tables
	line += " " + strconv.FormatUint(checksum(line), 10) + "\n"
	// One write at offset 0 of a file truncated first: a reader sees the
	// whole line, nothing, or (two writers) two whole lines' overlap that
	// the checksum of the first line refuses.
	_ = os.WriteFile(in.path, []byte(line), 0o600)
}

// read parses the file: its generation and tables when its checksum and
// identity match.
func (in *Intact) read() (gen uint32, tables string, ok bool) {
	b, err := os.ReadFile(in.path)
	if err != nil {
		return 0, "", false
	}
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

// Conn wraps c so that every batch it flushes is counted and carries the
// no-op marker update of a table its elements touch (see Intact).
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

// Flush adds the witness, flushes, and counts the commit; a batch whose
// table has no known marker, or that fails, spoils the invocation.
func (w *witnessConn) Flush() error {
	t := w.touched
	w.touched = nil
	if t != nil {
		if m, ok := w.in.markers[ID{t.Family, t.Name}]; ok {
			w.Conn.AddChain(&nftables.Chain{Name: m, Table: &nftables.Table{Family: t.Family, Name: t.Name}})
		} else {
			w.in.Spoil()
		}
	}
	err := w.Conn.Flush()
	switch {
	case err != nil:
		w.in.Spoil()
	case t != nil:
		w.in.ours++
	}
	return err
}
