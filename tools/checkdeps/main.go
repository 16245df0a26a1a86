// Command checkdeps prints the programs that shell scripts and Go files call,
// a line each: the program, a tab, and where it is called ("file:line", then
// " (and N more)" lines). See follow, scanShell and scanGo for what counts as a
// call. scripts/check-deps.sh resolves each to a Debian package.
//
// Usage: checkdeps FILE...
package main

import (
	"errors"
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

// add records the programs argv runs (follow) at file:line, once, but those
// skip (if not nil) names.
func (u uses) add(file string, line int, argv []string, skip func(string) bool) {
	at := fmt.Sprintf("%s:%d", file, line)
	for _, p := range follow(argv) {
		if p != "" && (skip == nil || !skip(p)) && !slices.Contains(u[p], at) {
			u[p] = append(u[p], at)
		}
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command: 0 when every file was read, 2 when one was not.
func run(files []string, stdout, stderr io.Writer) int {
	u := uses{}
	for _, f := range files {
		var err error
		if strings.HasSuffix(f, ".go") {
			err = scanGo(f, u)
		} else {
			_, err = scanShell(f, u)
		}
		if err != nil {
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
	case "command", "exec", "builtin":
		if prog == "command" && len(rest) >= 2 && (rest[0] == "-v" || rest[0] == "-V") {
			return rest[1:2]
		}
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

// wrapper is a function that runs "$@" (after `shift`s):
// `in_() { local n=$1; shift; ip netns exec "$n" "$@"; }`.
type wrapper struct {
	shift, at int      // at: the index of "$@" in argv
	argv      []string // the call running "$@"
}

// scanShell adds the programs a shell script calls: the literal command
// word of every simple command (through follow's wrappers), each word of a
// `for t in a b; do command -v "$t"` loop, and the calls a function of the
// script that runs "$@" makes; builtins and the script's functions, with
// those of the project scripts it sources, are not programs; the calls of
// those scripts count too. It returns those functions (nil, or the *wrapper
// of one that runs "$@").
func scanShell(path string, u uses) (map[string]*wrapper, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	file, err := syntax.NewParser().Parse(f, path)
	if err != nil {
		return nil, err
	}
	funcs := map[string]*wrapper{}
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if src := sourced(path, n.Args); src != "" {
				more, e := scanShell(src, u)
				maps.Copy(funcs, more)
				err = errors.Join(err, e)
			}
		case *syntax.FuncDecl:
			name, shift := n.Name.Value, 0
			funcs[name] = nil
			syntax.Walk(n.Body, func(n syntax.Node) bool {
				if ce, ok := n.(*syntax.CallExpr); ok {
					argv := words(ce.Args)
					if argv[0] == "shift" { // shift [N]
						k, _ := strconv.Atoi(append(argv, "1")[1])
						shift += max(k, 1)
					}
					at := slices.IndexFunc(ce.Args, func(w *syntax.Word) bool { return text(w) == `"$@"` })
					if at >= 0 && funcs[name] == nil {
						funcs[name] = &wrapper{shift, at, argv}
					}
				}
				return true
			})
		}
		return true
	})
	skip := func(p string) bool {
		_, fn := funcs[p]
		return fn || slices.Contains(builtins, p)
	}
	loops := map[string][]*syntax.Word{} // for t in ip ping socat: t → the words
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ForClause:
			if wi, ok := n.Loop.(*syntax.WordIter); ok {
				loops[wi.Name.Value] = wi.Items
			}
		case *syntax.CallExpr:
			argv := words(n.Args)
			if len(argv) >= 3 && argv[0] == "command" && argv[1] == "-v" {
				for _, item := range loops[strings.Trim(text(n.Args[2]), `"${}`)] {
					u.add(path, int(item.Pos().Line()), []string{item.Lit()}, skip)
				}
			}
			if w := funcs[argv[0]]; w == nil {
				u.add(path, int(n.Pos().Line()), argv, skip)
			} else if 1+w.shift <= len(argv) {
				u.add(path, int(n.Pos().Line()), slices.Concat(w.argv[:w.at], argv[1+w.shift:], w.argv[w.at+1:]), skip)
			}
		}
		return true
	})
	return funcs, err
}

// sourced is the project script `source WORD` or `. WORD` reads (argv):
// WORD's text after its last expansion (`$(dirname "$0")` or
// `${BASH_SOURCE%/*}`), unquoted, from the script's directory, when that is a
// file; "" otherwise.
func sourced(script string, argv []*syntax.Word) string {
	if len(argv) != 2 || argv[0].Lit() != "source" && argv[0].Lit() != "." {
		return ""
	}
	w := text(argv[1])
	p := filepath.Join(filepath.Dir(script), strings.Trim(w[strings.LastIndexAny(w, ")}")+1:], `"'`))
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// words are the literals of ws ("" for a word that is not one), and "" when
// ws is empty.
func words(ws []*syntax.Word) []string {
	out := make([]string, max(len(ws), 1))
	for i, w := range ws {
		out[i] = w.Lit()
	}
	return out
}

// text is a word as the script spells it.
func text(w *syntax.Word) string {
	var b strings.Builder
	syntax.NewPrinter().Print(&b, w)
	return b.String()
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
			for _, n := range f.Names { // all named, or none (no parameter to pass on)
				params[n.Name] = len(params)
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
				ranged[v.Name] = litArgs(n.X.(*ast.CompositeLit).Elts)
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
				for _, l := range ranged[types.ExprString(arg)] {
					add(n.Pos(), []string{l})
				}
				add(n.Pos(), litArgs(n.Args[slices.Index(n.Args, arg):]))
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
