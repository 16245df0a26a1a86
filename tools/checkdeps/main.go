// Command checkdeps fails when a script or a test calls a program that no
// Debian package named in scripts/deps.list provides (the list that
// scripts/install-deps.sh installs on a fresh machine).
//
// It finds the programs mechanically:
//   - shell scripts (parsed with mvdan.cc/sh): the command word of every
//     simple command that is a plain literal, through `exec`, `command`,
//     `env`, `timeout`, `nsenter`, `unshare`, `ip netns exec NS`; `command -v
//     X` counts as a use of X, and so does each word of a `for t in a b; do
//     command -v "$t"` loop; a call of the script's own function that runs
//     "$@" is followed into it. Shell builtins and the script's own functions
//     are skipped, and so is a word built from variables.
//   - Go files (go/ast): string literals that reach exec.Command,
//     exec.CommandContext or exec.LookPath, directly, through a function of
//     the same package that passes its first parameter (or argv[0] of a
//     []string parameter) to exec.Command, through a `range` over a []string
//     literal, or as the first word of the argv lists of a [][]string
//     literal that is not ranged over (the tests' doIn/runAll command
//     lists); "nsenter ... --" and
//     "ip netns exec NS" are followed to the command they run.
//
// Each program is resolved with exec.LookPath and `dpkg -S` to a Debian
// package. It is fine when the package is in the deps list, is Essential or
// of priority "required" (on every Debian system), or when the program is
// one the machine comes with or the Makefile builds (go, git, podwire, the
// reference plugins and cnitool under .cache/cni-bin). Anything else is
// reported with the line to add to the list.
//
// Usage: checkdeps -deps scripts/deps.list [-root DIR] FILE...
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// given are programs a fresh machine has before install-deps.sh (Go and git)
// or that `make build tools` builds.
var given = map[string]bool{
	"go": true, "gofmt": true, "git": true,
	"podwire": true, "cnitool": true, "ptp": true, "host-local": true, "tuning": true,
	"portmap": true, "bridge-plugin": true, "loopback": true,
}

var builtins = map[string]bool{}

func init() {
	for _, b := range strings.Fields(`: . [ [[ ]] alias bg bind break builtin caller cd command compgen complete
		compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
		history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
		shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`) {
		builtins[b] = true
	}
}

// use is one program called at file:line.
type use struct {
	file string
	line int
	prog string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command: 0 when every program is provided, 1 when one is not
// (each reported on stderr), 2 on a usage or parse error.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checkdeps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	depsFile := fs.String("deps", "scripts/deps.list", "list of Debian packages, one a line (# comments)")
	verbose := fs.Bool("v", false, "print every program found, with its package")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	deps, err := readDeps(*depsFile)
	if err != nil {
		fmt.Fprintln(stderr, "checkdeps:", err)
		return 2
	}
	var uses []use
	for _, f := range fs.Args() {
		u, err := scan(f)
		if err != nil {
			fmt.Fprintln(stderr, "checkdeps:", err)
			return 2
		}
		uses = append(uses, u...)
	}
	problems := check(uses, deps, *depsFile, *verbose, stdout)
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	if len(problems) > 0 {
		return 1
	}
	return 0
}

// readDeps reads the package list: one name a line, # starts a comment.
func readDeps(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for _, w := range strings.Fields(line) {
			out[w] = true
		}
	}
	return out, sc.Err()
}

func scan(path string) ([]use, error) {
	if strings.HasSuffix(path, ".go") {
		return scanGo(path)
	}
	return scanShell(path)
}

// follow returns the programs an argv runs: argv[0] and, for wrappers, the
// program they run. "" stands for a word that is not a literal.
func follow(argv []string) []string {
	if len(argv) == 0 || argv[0] == "" {
		return nil
	}
	prog := argv[0]
	rest := argv[1:]
	next := func(skip func(i int, w string) bool) []string {
		for i, w := range rest {
			if skip(i, w) {
				continue
			}
			return follow(rest[i:])
		}
		return nil
	}
	var out []string
	switch filepath.Base(prog) {
	case "exec", "builtin":
		return next(func(_ int, w string) bool { return strings.HasPrefix(w, "-") })
	case "command":
		if len(rest) >= 2 && (rest[0] == "-v" || rest[0] == "-V") {
			return []string{rest[1]}
		}
		return next(func(_ int, w string) bool { return strings.HasPrefix(w, "-") })
	case "env":
		out = append(out, prog)
		out = append(out, next(func(_ int, w string) bool { return strings.HasPrefix(w, "-") || strings.Contains(w, "=") })...)
	case "timeout":
		out = append(out, prog)
		dur, optArg := false, false
		out = append(out, next(func(_ int, w string) bool {
			if optArg {
				optArg = false
				return true
			}
			if strings.HasPrefix(w, "-") {
				optArg = w == "-k" || w == "-s" || w == "--kill-after" || w == "--signal"
				return true
			}
			if !dur {
				dur = true
				return true
			}
			return false
		})...)
	case "nsenter", "unshare", "setsid", "nohup":
		out = append(out, prog)
		dashdash := false
		for i, w := range rest {
			if w == "--" {
				out = append(out, follow(rest[i+1:])...)
				dashdash = true
				break
			}
		}
		if !dashdash {
			out = append(out, next(func(_ int, w string) bool { return strings.HasPrefix(w, "-") })...)
		}
	case "ip":
		out = append(out, prog)
		if len(rest) >= 4 && rest[0] == "netns" && rest[1] == "exec" {
			out = append(out, follow(rest[3:])...)
		}
	default:
		out = append(out, prog)
	}
	return out
}

// scanShell lists the programs a shell script calls.
func scanShell(path string) ([]use, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	file, err := syntax.NewParser().Parse(f, path)
	if err != nil {
		return nil, err
	}
	// The script's functions; those that run "$@" (after `shift`s) are
	// wrappers: `in_() { local n=$1; shift; ip netns exec "$n" "$@"; }`.
	funcs := map[string]bool{}
	type wrapper struct {
		shift int
		argv  []string // the call running "$@", which is atArg
		atArg int
	}
	wrappers := map[string]wrapper{}
	syntax.Walk(file, func(n syntax.Node) bool {
		fd, ok := n.(*syntax.FuncDecl)
		if !ok {
			return true
		}
		funcs[fd.Name.Value] = true
		shift := 0
		syntax.Walk(fd.Body, func(n syntax.Node) bool {
			ce, ok := n.(*syntax.CallExpr)
			if !ok || len(ce.Args) == 0 {
				return true
			}
			if ce.Args[0].Lit() == "shift" {
				k := 1
				if len(ce.Args) > 1 {
					if v, err := strconv.Atoi(ce.Args[1].Lit()); err == nil {
						k = v
					}
				}
				shift += k
				return true
			}
			for i, w := range ce.Args {
				if isQuotedAt(w) {
					if _, seen := wrappers[fd.Name.Value]; !seen {
						wrappers[fd.Name.Value] = wrapper{shift: shift, argv: words(ce.Args), atArg: i}
					}
				}
			}
			return true
		})
		return true
	})
	var out []use
	addArgv := func(pos syntax.Pos, argv []string) {
		for _, p := range follow(argv) {
			if p == "" || builtins[p] || funcs[p] {
				continue
			}
			out = append(out, use{path, int(pos.Line()), p})
		}
	}
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ForClause:
			// for t in ip ping socat; do command -v "$t" ...: each word.
			wi, ok := n.Loop.(*syntax.WordIter)
			if !ok {
				return true
			}
			syntax.Walk(&syntax.Block{Stmts: n.Do}, func(m syntax.Node) bool {
				ce, ok := m.(*syntax.CallExpr)
				if ok && len(ce.Args) >= 3 && ce.Args[0].Lit() == "command" && ce.Args[1].Lit() == "-v" && isParam(ce.Args[2], wi.Name.Value) {
					for _, item := range wi.Items {
						addArgv(item.Pos(), []string{item.Lit()})
					}
				}
				return true
			})
		case *syntax.CallExpr:
			if len(n.Args) == 0 {
				return true
			}
			argv := words(n.Args)
			if w, ok := wrappers[argv[0]]; ok {
				if 1+w.shift <= len(argv) {
					sub := append(append(append([]string{}, w.argv[:w.atArg]...), argv[1+w.shift:]...), w.argv[w.atArg+1:]...)
					addArgv(n.Pos(), sub)
				}
				return true
			}
			addArgv(n.Pos(), argv)
		}
		return true
	})
	return out, nil
}

func words(ws []*syntax.Word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Lit()
	}
	return out
}

// isQuotedAt reports whether w is "$@".
func isQuotedAt(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	dq, ok := w.Parts[0].(*syntax.DblQuoted)
	if !ok || len(dq.Parts) != 1 {
		return false
	}
	pe, ok := dq.Parts[0].(*syntax.ParamExp)
	return ok && pe.Param.Value == "@"
}

// isParam reports whether w is $name or "$name".
func isParam(w *syntax.Word, name string) bool {
	if len(w.Parts) != 1 {
		return false
	}
	part := w.Parts[0]
	if dq, ok := part.(*syntax.DblQuoted); ok && len(dq.Parts) == 1 {
		part = dq.Parts[0]
	}
	pe, ok := part.(*syntax.ParamExp)
	return ok && pe.Param.Value == name
}

// scanGo lists the programs a Go file runs.
func scanGo(path string) ([]use, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, err
	}
	// Wrappers: funcs passing their first string parameter (name) or
	// argv[0] of a []string parameter to exec.Command.
	nameWrappers, argvWrappers := map[string]int{}, map[string]int{}
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		params := paramNames(fd.Type)
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			arg, ok := execArg(call)
			if !ok {
				return true
			}
			switch a := arg.(type) {
			case *ast.Ident:
				if i, ok := params[a.Name]; ok {
					nameWrappers[fd.Name.Name] = i
				}
			case *ast.IndexExpr:
				if id, ok := a.X.(*ast.Ident); ok {
					if i, ok := params[id.Name]; ok {
						argvWrappers[fd.Name.Name] = i
					}
				}
			}
			return true
		})
	}
	var out []use
	add := func(pos token.Pos, argv []string) {
		for _, p := range follow(argv) {
			if p != "" {
				out = append(out, use{path, fset.Position(pos).Line, p})
			}
		}
	}
	ranged := map[string][]string{}   // loop variable -> the []string literal it ranges over
	rangedOver := map[ast.Expr]bool{} // a [][]string ranged over holds arguments (run("ip", c...)), not argvs
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			rangedOver[n.X] = true
			if v, ok := n.Value.(*ast.Ident); ok {
				if lits := stringLits(n.X); len(lits) > 0 {
					ranged[v.Name] = lits
				}
			}
		case *ast.CompositeLit:
			if isSliceOfStringSlices(n.Type) && !rangedOver[n] {
				for _, e := range n.Elts {
					if inner, ok := e.(*ast.CompositeLit); ok {
						add(inner.Pos(), litArgs(inner.Elts))
					}
				}
			}
		case *ast.CallExpr:
			if arg, ok := execArg(n); ok {
				if id, ok := arg.(*ast.Ident); ok && ranged[id.Name] != nil {
					for _, l := range ranged[id.Name] {
						add(n.Pos(), []string{l})
					}
					return true
				}
				idx := argIndex(n, arg)
				add(n.Pos(), litArgs(n.Args[idx:]))
				return true
			}
			name := calleeName(n)
			if i, ok := nameWrappers[name]; ok && i < len(n.Args) {
				add(n.Pos(), litArgs(n.Args[i:]))
			}
			if i, ok := argvWrappers[name]; ok && i < len(n.Args) {
				if cl, ok := n.Args[i].(*ast.CompositeLit); ok {
					add(n.Pos(), litArgs(cl.Elts))
				}
			}
		}
		return true
	})
	return out, nil
}

// execArg returns the argument naming the program of an exec.Command,
// exec.CommandContext or exec.LookPath call.
func execArg(call *ast.CallExpr) (ast.Expr, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "exec" {
		return nil, false
	}
	i := -1
	switch sel.Sel.Name {
	case "Command", "LookPath":
		i = 0
	case "CommandContext":
		i = 1
	}
	if i < 0 || i >= len(call.Args) {
		return nil, false
	}
	return call.Args[i], true
}

func argIndex(call *ast.CallExpr, arg ast.Expr) int {
	for i, a := range call.Args {
		if a == arg {
			return i
		}
	}
	return 0
}

func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

func paramNames(ft *ast.FuncType) map[string]int {
	out := map[string]int{}
	i := 0
	for _, f := range ft.Params.List {
		if len(f.Names) == 0 {
			i++
			continue
		}
		for _, n := range f.Names {
			out[n.Name] = i
			i++
		}
	}
	return out
}

// litArgs is the argv of literal strings ("" for anything else).
func litArgs(es []ast.Expr) []string {
	out := make([]string, len(es))
	for i, e := range es {
		if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			out[i], _ = strconv.Unquote(bl.Value)
		}
	}
	return out
}

func stringLits(e ast.Expr) []string {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	at, ok := cl.Type.(*ast.ArrayType)
	if !ok {
		return nil
	}
	if id, ok := at.Elt.(*ast.Ident); !ok || id.Name != "string" {
		return nil
	}
	var out []string
	for _, s := range litArgs(cl.Elts) {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func isSliceOfStringSlices(t ast.Expr) bool {
	at, ok := t.(*ast.ArrayType)
	if !ok || at.Len != nil {
		return false
	}
	inner, ok := at.Elt.(*ast.ArrayType)
	if !ok || inner.Len != nil {
		return false
	}
	id, ok := inner.Elt.(*ast.Ident)
	return ok && id.Name == "string"
}

// check resolves every program to a package and reports those outside deps.
func check(uses []use, deps map[string]bool, depsFile string, verbose bool, stdout io.Writer) []string {
	byProg := map[string][]use{}
	for _, u := range uses {
		// Programs of the repository itself (scripts/x.sh, bin/podwire,
		// .cache/cni-bin/ptp) are relative paths.
		if given[filepath.Base(u.prog)] || (strings.Contains(u.prog, "/") && !filepath.IsAbs(u.prog)) {
			continue
		}
		byProg[u.prog] = append(byProg[u.prog], u)
	}
	progs := make([]string, 0, len(byProg))
	for p := range byProg {
		progs = append(progs, p)
	}
	sort.Strings(progs)
	var out []string
	paths := map[string]string{}
	var all []string
	for _, p := range progs {
		if path, err := exec.LookPath(p); err == nil {
			paths[p] = path
			all = append(all, candidates(path)...)
		}
	}
	owners := dpkgOwners(all)
	for _, p := range progs {
		where := fmt.Sprintf("%s:%d", byProg[p][0].file, byProg[p][0].line)
		if n := len(byProg[p]); n > 1 {
			where += fmt.Sprintf(" (and %d more)", n-1)
		}
		path, ok := paths[p]
		if !ok {
			out = append(out, fmt.Sprintf("checkdeps: %s calls %q, which is not installed here: add the Debian package that provides it "+
				"(`apt-file search bin/%s`) to %s and run scripts/install-deps.sh", where, p, filepath.Base(p), depsFile))
			continue
		}
		pkg := ""
		for _, c := range candidates(path) {
			if pkg = owners[c]; pkg != "" {
				break
			}
		}
		if pkg == "" {
			out = append(out, fmt.Sprintf("checkdeps: %s calls %q (%s), which no Debian package provides (dpkg -S): "+
				"install it from a package and add that package to %s", where, p, path, depsFile))
			continue
		}
		if verbose {
			fmt.Fprintf(stdout, "%-28s %-22s %s\n", p, pkg, where)
		}
		if deps[pkg] || baseSystem(pkg) {
			continue
		}
		out = append(out, fmt.Sprintf("checkdeps: %s calls %q (%s), provided by the Debian package %q, which %s does not name: add the line\n    %s\nto %s",
			where, p, path, pkg, depsFile, pkg, depsFile))
	}
	return out
}

// candidates are the paths under which dpkg may know path: as found, its
// target and their /bin <-> /usr/bin twins (merged /usr).
func candidates(path string) []string {
	cands := []string{path}
	if r, err := filepath.EvalSymlinks(path); err == nil && r != path {
		cands = append(cands, r)
	}
	for _, c := range append([]string(nil), cands...) {
		if rest, ok := strings.CutPrefix(c, "/usr"); ok {
			cands = append(cands, rest)
		} else {
			cands = append(cands, "/usr"+c)
		}
	}
	return cands
}

// dpkgOwners maps each of paths that a package installed to that package,
// with one `dpkg -S` (it reads the whole file database: a second per call).
func dpkgOwners(paths []string) map[string]string {
	out := map[string]string{}
	if len(paths) == 0 {
		return out
	}
	// dpkg -S exits 1 when some path is not found; the others are printed.
	res, _ := exec.Command("dpkg", append([]string{"-S"}, paths...)...).Output()
	for _, line := range strings.Split(string(res), "\n") {
		if line == "" || strings.HasPrefix(line, "diversion by") {
			continue // "diversion by dash from: /usr/bin/sh"
		}
		pkgs, path, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		pkg, _, _ := strings.Cut(pkgs, ",") // "a, b: path": the first owner
		pkg, _, _ = strings.Cut(pkg, ":")   // "pkg:amd64"
		if _, seen := out[path]; !seen {
			out[path] = strings.TrimSpace(pkg)
		}
	}
	return out
}

// baseSystem reports whether pkg is on every Debian system: Essential, or
// of priority required.
func baseSystem(pkg string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Essential} ${Priority}", pkg).Output()
	if err != nil {
		return false
	}
	f := strings.Fields(string(out))
	return len(f) == 2 && (f[0] == "yes" || f[1] == "required")
}
