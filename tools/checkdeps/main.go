// Command checkdeps fails when a script or a test calls a program that no
// Debian package of scripts/deps.list provides, naming the line to add. It
// finds the programs in shell with mvdan.cc/sh and in Go with go/ast (see
// follow, scanShell and scanGo for what counts as a call) and resolves each
// with exec.LookPath and `dpkg -S`: a package of the list, one that is
// Essential or of priority required, and the programs of `given` pass.
//
// Usage: checkdeps -deps scripts/deps.list [-v] FILE...
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// given are programs a fresh machine has before install-deps.sh (Go and git)
// or that `make build tools` builds.
var given = strings.Fields("go gofmt git podwire cnitool ptp host-local tuning portmap bridge-plugin loopback")

var builtins = strings.Fields(`: . [ [[ ]] alias bg bind break builtin caller cd command compgen complete
	compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
	history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
	shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`)

// uses are the programs called by each file, at each line.
type uses map[string][]string // program → "file:line" of each call

// add records the programs argv runs (follow) at file:line, but those
// skip (if not nil) names.
func (u uses) add(file string, line int, argv []string, skip func(string) bool) {
	for _, p := range follow(argv) {
		if p != "" && (skip == nil || !skip(p)) {
			u[p] = append(u[p], fmt.Sprintf("%s:%d", file, line))
		}
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command: 0 when every program is provided, 1 when one is not
// (each reported on stderr), 2 on a usage or parse error.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checkdeps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	depsFile := fs.String("deps", "scripts/deps.list", "list of Debian packages, one a line (# comments)")
	verbose := fs.Bool("v", false, "print every program found, with its package")
	if fs.Parse(args) != nil {
		return 2
	}
	raw, err := os.ReadFile(*depsFile)
	u := uses{}
	for _, f := range fs.Args() {
		if err == nil && strings.HasSuffix(f, ".go") {
			err = scanGo(f, u)
		} else if err == nil {
			err = scanShell(f, u)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "checkdeps:", err)
		return 2
	}
	deps := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, w := range strings.Fields(line) {
			deps[w] = true
		}
	}
	problems := check(u, deps, *depsFile, *verbose, stdout)
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	return min(len(problems), 1)
}

// follow returns the programs an argv runs: argv[0] and, for wrappers, the
// program they run (after their options, env's VAR=value words, timeout's
// duration, `--` or `ip netns exec NS`). "" stands for a word that is not a
// literal.
func follow(argv []string) []string {
	if len(argv) == 0 || argv[0] == "" {
		return nil
	}
	prog, rest := argv[0], argv[1:]
	out := []string{prog}
	switch filepath.Base(prog) {
	case "command":
		if len(rest) >= 2 && (rest[0] == "-v" || rest[0] == "-V") {
			return rest[1:2]
		}
		out = nil
	case "exec", "builtin":
		out = nil
	case "nsenter", "unshare", "setsid", "nohup":
		if i := slices.Index(rest, "--"); i >= 0 {
			return append(out, follow(rest[i+1:])...)
		}
	case "env", "timeout":
	case "ip":
		if len(rest) >= 4 && rest[0] == "netns" && rest[1] == "exec" {
			return append(out, follow(rest[3:])...)
		}
		return out
	default:
		return out
	}
	optArg, dur := false, prog != "timeout"
	for i, w := range rest {
		switch {
		case optArg:
			optArg = false
		case strings.HasPrefix(w, "-"):
			optArg = prog == "timeout" && slices.Contains([]string{"-k", "-s", "--kill-after", "--signal"}, w)
		case prog == "env" && strings.Contains(w, "="):
		case !dur:
			dur = true
		default:
			return append(out, follow(rest[i:])...)
		}
	}
	return out
}

// scanShell adds the programs a shell script calls: the literal command
// word of every simple command (through follow's wrappers), each word of a
// `for t in a b; do command -v "$t"` loop, and the calls a function of the
// script that runs "$@" makes; builtins and the script's functions are
// not programs.
func scanShell(path string, u uses) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	file, err := syntax.NewParser().Parse(f, path)
	if err != nil {
		return err
	}
	// The script's functions; one that runs "$@" (after `shift`s) is a
	// wrapper: `in_() { local n=$1; shift; ip netns exec "$n" "$@"; }`.
	type wrapper struct {
		shift, at int      // at: the index of "$@" in argv
		argv      []string // the call running "$@"
	}
	funcs, wrappers := map[string]bool{}, map[string]*wrapper{}
	syntax.Walk(file, func(n syntax.Node) bool {
		fd, ok := n.(*syntax.FuncDecl)
		if !ok {
			return true
		}
		funcs[fd.Name.Value] = true
		shift := 0
		syntax.Walk(fd.Body, func(n syntax.Node) bool {
			ce, ok := n.(*syntax.CallExpr)
			if !ok {
				return true
			}
			if len(ce.Args) > 0 && ce.Args[0].Lit() == "shift" {
				k := 1
				if v, err := strconv.Atoi(words(ce.Args[1:])[0]); err == nil {
					k = v
				}
				shift += k
			}
			for i, w := range ce.Args {
				if name, quoted := param(w); name == "@" && quoted && wrappers[fd.Name.Value] == nil {
					wrappers[fd.Name.Value] = &wrapper{shift, i, words(ce.Args)}
				}
			}
			return true
		})
		return true
	})
	skip := func(p string) bool { return slices.Contains(builtins, p) || funcs[p] }
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ForClause:
			// for t in ip ping socat; do command -v "$t" ...: each word.
			if wi, ok := n.Loop.(*syntax.WordIter); ok {
				syntax.Walk(&syntax.Block{Stmts: n.Do}, func(m syntax.Node) bool {
					if ce, ok := m.(*syntax.CallExpr); ok && len(ce.Args) >= 3 && ce.Args[0].Lit() == "command" && ce.Args[1].Lit() == "-v" {
						if name, _ := param(ce.Args[2]); name == wi.Name.Value {
							for _, item := range wi.Items {
								u.add(path, int(item.Pos().Line()), []string{item.Lit()}, skip)
							}
						}
					}
					return true
				})
			}
		case *syntax.CallExpr:
			argv := words(n.Args)
			if w := wrappers[argv[0]]; w == nil {
				u.add(path, int(n.Pos().Line()), argv, skip)
			} else if 1+w.shift <= len(argv) {
				u.add(path, int(n.Pos().Line()), slices.Concat(w.argv[:w.at], argv[1+w.shift:], w.argv[w.at+1:]), skip)
			}
		}
		return true
	})
	return nil
}

// words are the literals of ws ("" for a word that is not one), and "" when
// ws is empty.
func words(ws []*syntax.Word) []string {
	if len(ws) == 0 {
		return []string{""}
	}
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Lit()
	}
	return out
}

// param is the parameter a word expands alone ($x or "$x"), and whether it
// is quoted.
func param(w *syntax.Word) (name string, quoted bool) {
	if len(w.Parts) != 1 {
		return "", false
	}
	part := w.Parts[0]
	if dq, ok := part.(*syntax.DblQuoted); ok && len(dq.Parts) == 1 {
		part, quoted = dq.Parts[0], true
	}
	if pe, ok := part.(*syntax.ParamExp); ok {
		return pe.Param.Value, quoted
	}
	return "", false
}

// scanGo adds the programs a Go file runs: string literals reaching
// exec.Command, exec.CommandContext or exec.LookPath directly, through a
// function of the file that passes a parameter on (the name, or argv[0] of
// a []string), through a `range` over a []string literal, or as argv[0] of
// the lists of a [][]string literal that is not ranged over.
func scanGo(path string, u uses) error {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return err
	}
	// Wrappers: funcs passing a parameter (the name), or argv[0] of a
	// []string parameter, to exec.Command: the parameter's index.
	nameWrappers, argvWrappers := map[string]int{}, map[string]int{}
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		params := map[string]int{}
		for _, f := range fd.Type.Params.List {
			for _, n := range f.Names {
				params[n.Name] = len(params)
			}
			if len(f.Names) == 0 { // an unnamed parameter counts too
				params[fmt.Sprint(len(params))] = len(params)
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, _ := n.(*ast.CallExpr)
			switch a := execArg(call).(type) {
			case *ast.Ident:
				if i, ok := params[a.Name]; ok {
					nameWrappers[fd.Name.Name] = i
				}
			case *ast.IndexExpr:
				if i, ok := params[types.ExprString(a.X)]; ok {
					argvWrappers[fd.Name.Name] = i
				}
			}
			return true
		})
	}
	add := func(pos token.Pos, argv []string) {
		u.add(path, fset.Position(pos).Line, argv, nil)
	}
	ranged := map[string][]string{}   // loop variable → the []string literal it ranges over
	rangedOver := map[ast.Expr]bool{} // a [][]string ranged over holds arguments (run("ip", c...)), not argvs
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			rangedOver[n.X] = true
			if v, ok := n.Value.(*ast.Ident); ok && isSliceOf(n.X, 1) {
				if lits := slices.DeleteFunc(litArgs(n.X.(*ast.CompositeLit).Elts), func(s string) bool { return s == "" }); len(lits) > 0 {
					ranged[v.Name] = lits
				}
			}
		case *ast.CompositeLit:
			if isSliceOf(n, 2) && !rangedOver[n] {
				for _, e := range n.Elts {
					if inner, ok := e.(*ast.CompositeLit); ok {
						add(inner.Pos(), litArgs(inner.Elts))
					}
				}
			}
		case *ast.CallExpr:
			if arg := execArg(n); arg != nil {
				if id, ok := arg.(*ast.Ident); ok && ranged[id.Name] != nil {
					for _, l := range ranged[id.Name] {
						add(n.Pos(), []string{l})
					}
				} else {
					add(n.Pos(), litArgs(n.Args[slices.Index(n.Args, arg):]))
				}
				return true
			}
			name := types.ExprString(n.Fun)
			name = name[strings.LastIndex(name, ".")+1:]
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
	return nil
}

// execArg is the argument naming the program of an exec.Command,
// exec.CommandContext or exec.LookPath call, or nil.
func execArg(call *ast.CallExpr) ast.Expr {
	if call == nil {
		return nil
	}
	i, ok := map[string]int{"exec.Command": 0, "exec.LookPath": 0, "exec.CommandContext": 1}[types.ExprString(call.Fun)]
	if !ok || i >= len(call.Args) {
		return nil
	}
	return call.Args[i]
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

// isSliceOf reports whether e is a composite literal of []string (depth 1)
// or [][]string (depth 2).
func isSliceOf(e ast.Expr, depth int) bool {
	cl, ok := e.(*ast.CompositeLit)
	return ok && cl.Type != nil && types.ExprString(cl.Type) == strings.Repeat("[]", depth)+"string"
}

// check resolves every program to a package and reports those outside deps.
func check(u uses, deps map[string]bool, depsFile string, verbose bool, stdout io.Writer) []string {
	var progs, all []string
	paths := map[string]string{}
	for p := range u {
		// Programs of the repository itself (scripts/x.sh, bin/podwire,
		// .cache/cni-bin/ptp) are relative paths.
		if !slices.Contains(given, filepath.Base(p)) && (!strings.Contains(p, "/") || filepath.IsAbs(p)) {
			progs = append(progs, p)
			if path, err := exec.LookPath(p); err == nil {
				paths[p], all = path, append(all, candidates(path)...)
			}
		}
	}
	slices.Sort(progs)
	owners := dpkgOwners(all)
	var out []string
	for _, p := range progs {
		where := u[p][0]
		if n := len(u[p]); n > 1 {
			where += fmt.Sprintf(" (and %d more)", n-1)
		}
		path, pkg := paths[p], ""
		for _, c := range candidates(path) {
			if pkg = owners[c]; pkg != "" {
				break
			}
		}
		if verbose && pkg != "" {
			fmt.Fprintf(stdout, "%-28s %-22s %s\n", p, pkg, where)
		}
		switch {
		case path == "":
			out = append(out, fmt.Sprintf("checkdeps: %s calls %q, which is not installed here: add the Debian package that provides it "+
				"(`apt-file search bin/%s`) to %s and run scripts/install-deps.sh", where, p, filepath.Base(p), depsFile))
		case pkg == "":
			out = append(out, fmt.Sprintf("checkdeps: %s calls %q (%s), which no Debian package provides (dpkg -S): "+
				"install it from a package and add that package to %s", where, p, path, depsFile))
		case !deps[pkg] && !baseSystem(pkg):
			out = append(out, fmt.Sprintf("checkdeps: %s calls %q (%s), provided by the Debian package %q, which %s does not name: add the line\n    %s\nto %s",
				where, p, path, pkg, depsFile, pkg, depsFile))
		}
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
	for _, c := range slices.Clone(cands) {
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
		pkgs, path, ok := strings.Cut(line, ": ")
		if !ok || strings.HasPrefix(line, "diversion by") { // "diversion by dash from: /usr/bin/sh"
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
	f := strings.Fields(string(out))
	return err == nil && len(f) == 2 && (f[0] == "yes" || f[1] == "required")
}
