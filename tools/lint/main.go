// Command lint runs forbidigo (github.com/ashanbrown/forbidigo/v2, the
// analyzer golangci-lint runs as its linter of that name) with the rules and
// exclusions of the repository's .golangci.yml, over the packages of one Go
// module, and fails when an issue is left.
//
// It reads the part of golangci-lint's version 2 configuration that a
// forbidigo run needs, with golangci-lint's meaning: linters.enable (only
// forbidigo), linters.settings.forbidigo (forbid: pattern, pkg, msg;
// analyze-types; exclude-godoc-examples) and linters.exclusions.rules (path,
// path-except, text, source, linters: a rule drops an issue when all its
// fields given match; paths relative to the repository root, as
// run.relative-path-mode gitroot). Any other key fails the run, so that the
// file never says more than is enforced. golangci-lint itself would read
// the file as it is; it is not used because its build costs a fresh machine
// far more than forbidigo's (the commit that added this command has the
// figures).
//
// Usage, in a module's directory:
//
//	lint -config ../.golangci.yml [-root DIR] [PACKAGES]   (default ./...)
//
// Test files are included. Issues print as "path:line:col: text (forbidigo)",
// path relative to -root (default: the directory of the config file); files
// outside it are not checked.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ashanbrown/forbidigo/v2/forbidigo"
	"go.yaml.in/yaml/v3"
	"golang.org/x/tools/go/packages"
)

// config is the part of golangci-lint's configuration (version "2") that
// this command reads; decoding fails on any other key.
type config struct {
	Version string `yaml:"version"`
	Run     struct {
		RelativePathMode string `yaml:"relative-path-mode"`
	} `yaml:"run"`
	Linters struct {
		Default  string   `yaml:"default"`
		Enable   []string `yaml:"enable"`
		Settings struct {
			Forbidigo struct {
				Forbid []struct {
					Pattern string `yaml:"pattern" json:"p"`
					Pkg     string `yaml:"pkg" json:"pkg,omitempty"`
					Msg     string `yaml:"msg" json:"msg,omitempty"`
				} `yaml:"forbid"`
				AnalyzeTypes         bool  `yaml:"analyze-types"`
				ExcludeGodocExamples *bool `yaml:"exclude-godoc-examples"`
			} `yaml:"forbidigo"`
		} `yaml:"settings"`
		Exclusions struct {
			Rules []exclusion `yaml:"rules"`
		} `yaml:"exclusions"`
	} `yaml:"linters"`
}

// exclusion is one of linters.exclusions.rules: every field given must match
// for the rule to drop an issue.
type exclusion struct {
	Path       string   `yaml:"path"`
	PathExcept string   `yaml:"path-except"`
	Text       string   `yaml:"text"`
	Source     string   `yaml:"source"`
	Linters    []string `yaml:"linters"`

	path, pathExcept, text, source *regexp.Regexp
}

// issue is one forbidden use, its path relative to the root.
type issue struct {
	path      string
	line, col int
	text      string
}

func (i issue) String() string {
	return fmt.Sprintf("%s:%d:%d: %s (forbidigo)", i.path, i.line, i.col, i.text)
}

func main() {
	configFile := flag.String("config", ".golangci.yml", "golangci-lint configuration (version 2) with the forbidigo rules")
	root := flag.String("root", "", "directory that paths are relative to and files are checked under (default: the config file's)")
	flag.Parse()
	os.Exit(run(*configFile, *root, flag.Args(), os.Stdout, os.Stderr))
}

// run lints patterns (go list patterns in the current directory's module)
// and returns the exit code: 0 clean, 1 issues, 2 a failure to run.
func run(configFile, root string, patterns []string, stdout, stderr io.Writer) int {
	cfg, err := readConfig(configFile)
	if err != nil {
		fmt.Fprintln(stderr, "lint:", err)
		return 2
	}
	if root == "" {
		root = filepath.Dir(configFile)
	}
	if root, err = filepath.Abs(root); err != nil {
		fmt.Fprintln(stderr, "lint:", err)
		return 2
	}
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	issues, err := lint(cfg, root, patterns)
	if err != nil {
		fmt.Fprintln(stderr, "lint:", err)
		return 2
	}
	for _, i := range issues {
		fmt.Fprintln(stdout, i)
	}
	if len(issues) > 0 {
		return 1
	}
	return 0
}

// readConfig decodes the configuration, refusing keys it does not know,
// another linter than forbidigo and a path mode other than gitroot, and
// compiles the exclusions.
func readConfig(name string) (*config, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var cfg config
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cfg.Version != "2" || cfg.Linters.Default != "none" || !slices.Equal(cfg.Linters.Enable, []string{"forbidigo"}) {
		return nil, fmt.Errorf(`%s: want version "2", linters.default none and linters.enable [forbidigo]: this command runs forbidigo only`, name)
	}
	if cfg.Run.RelativePathMode != "gitroot" {
		return nil, fmt.Errorf("%s: want run.relative-path-mode gitroot (the paths of the exclusions)", name)
	}
	for i := range cfg.Linters.Exclusions.Rules {
		r := &cfg.Linters.Exclusions.Rules[i]
		for _, f := range []struct {
			expr string
			re   **regexp.Regexp
		}{{r.Path, &r.path}, {r.PathExcept, &r.pathExcept}, {r.Text, &r.text}, {r.Source, &r.source}} {
			if f.expr == "" {
				continue
			}
			if *f.re, err = regexp.Compile(f.expr); err != nil {
				return nil, fmt.Errorf("%s: exclusion %d: %w", name, i+1, err)
			}
		}
	}
	return &cfg, nil
}

// lint loads the packages with their tests and type information and runs
// forbidigo over each file under root once, then drops the excluded issues.
func lint(cfg *config, root string, patterns []string) ([]issue, error) {
	fcfg := cfg.Linters.Settings.Forbidigo
	var forbid []string
	for _, f := range fcfg.Forbid {
		// As golangci-lint passes them: a JSON object forbidigo parses.
		p, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		forbid = append(forbid, string(p))
	}
	excludeExamples := fcfg.ExcludeGodocExamples == nil || *fcfg.ExcludeGodocExamples
	linter, err := forbidigo.NewLinter(forbid,
		forbidigo.OptionExcludeGodocExamples(excludeExamples),
		forbidigo.OptionAnalyzeTypes(fcfg.AnalyzeTypes),
		// golangci-lint's //nolint replaces forbidigo's own //permit.
		forbidigo.OptionIgnorePermitDirectives(true))
	if err != nil {
		return nil, err
	}

	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
			packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Tests: true,
	}, patterns...)
	if err != nil {
		return nil, err
	}
	var loadErrs []string
	for _, p := range pkgs {
		for _, e := range p.Errors {
			loadErrs = append(loadErrs, e.Error())
		}
	}
	if len(loadErrs) > 0 {
		return nil, fmt.Errorf("loading packages:\n%s", strings.Join(loadErrs, "\n"))
	}

	var issues []issue
	done := map[string]bool{} // a file is in a package and in its test variant
	sources := map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.Syntax {
			name := p.Fset.Position(f.Pos()).Filename
			rel, err := filepath.Rel(root, name)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || done[name] {
				continue
			}
			done[name] = true
			found, err := linter.RunWithConfig(forbidigo.RunConfig{Fset: p.Fset, TypesInfo: p.TypesInfo}, f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
			for _, fi := range found {
				pos := fi.Position()
				i := issue{path: filepath.ToSlash(rel), line: pos.Line, col: pos.Column, text: fi.Details()}
				if sources[name] == nil {
					if sources[name], err = readLines(name); err != nil {
						return nil, err
					}
				}
				if !excluded(cfg.Linters.Exclusions.Rules, i, sources[name][i.line-1]) {
					issues = append(issues, i)
				}
			}
		}
	}
	slices.SortFunc(issues, func(a, b issue) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return a.line - b.line
	})
	return issues, nil
}

// excluded tells whether a rule drops the issue found on the line source.
func excluded(rules []exclusion, i issue, source string) bool {
	for _, r := range rules {
		if len(r.Linters) > 0 && !slices.Contains(r.Linters, "forbidigo") {
			continue
		}
		if (r.path == nil || r.path.MatchString(i.path)) &&
			(r.pathExcept == nil || !r.pathExcept.MatchString(i.path)) &&
			(r.text == nil || r.text.MatchString(i.text)) &&
			(r.source == nil || r.source.MatchString(source)) {
			return true
		}
	}
	return false
}

func readLines(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines, s.Err()
}
