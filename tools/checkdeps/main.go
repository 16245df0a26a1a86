// Command checkdeps prints the programs that shell scripts and Go files call,
// a line each: the program, a tab, and where it is called ("file:line", then
// " (and N more)"). See follow, scanShell and scanGo for what counts as a
// call. scripts/check-deps.sh resolves each to a Debian package.
//
// Usage: checkdeps FILE...
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

var builtins = strings.Fields(`: . [ [[ ]] alias bg bind break builtin caller cd command compgen complete
	compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
	history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
	shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`)

// uses are the calls of each program: program → "file:line" of each call.
type uses map[string][]string

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

// run is the command: 0 when every file was read, 2 when one was not.
func run(files []string, stdout, stderr io.Writer) int {
	u := uses{}
	for _, f := range files {
		scan := scanShell
		if strings.HasSuffix(f, ".go") {
			scan = scanGo
		}
		if err := scan(f, u); err != nil {
			fmt.Fprintln(stderr, "checkdeps:", err)
			return 2
		}
	}
	for _, p := range slices.Sorted(maps.Keys(u)) {
		where := u[p][0]
		if n := len(u[p]); n > 1 {
			where += fmt.Sprintf(" (and %d more)", n-1)
		}
		fmt.Fprintf(stdout, "%s\t%s\n", p, where)
	}
	return 0
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
		name = pe.Param.Value
	}
	return name, quoted
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
	type wrapper struct {
		i    int
		argv bool
	}
	wrappers := map[string]wrapper{}
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
			a := execArg(call)
			if ix, ok := a.(*ast.IndexExpr); ok {
				a = ix.X
			}
			if i, ok := params[types.ExprString(a)]; ok && a != nil {
				wrappers[fd.Name.Name] = wrapper{i, a != execArg(call)}
			}
			return true
		})
	}
	add := func(pos token.Pos, argv []string) { u.add(path, fset.Position(pos).Line, argv, nil) }
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
			if w, ok := wrappers[name]; ok && w.i < len(n.Args) {
				args := n.Args[w.i:]
				if cl, ok := args[0].(*ast.CompositeLit); ok && w.argv {
					args = cl.Elts
				}
				add(n.Pos(), litArgs(args))
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
