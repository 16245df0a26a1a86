// Command report writes docs/benchmarks.md from the output of
// integration/bench (`go test -bench`: one line per benchmark, its figures
// as "value unit" pairs) and the "key: value" lines scripts/bench.sh prints
// around it, through benchmarks.md.tmpl; findings.md, the hand-written
// profile, goes in as is. Several files are read as one, a later line
// winning over an earlier one of the same key.
//
// A section of its own (the template's "scale", make bench-scale's, and
// "nodescale", BenchmarkNodeScale's) is rendered alone and spliced into
// the document between its markers, so that a run that measures one
// section leaves the others as the last full run wrote them; make bench
// renders both inside the whole document from the same results.
//
// Usage: report FILE... > docs/benchmarks.md
//
//	report -section scale -into docs/benchmarks.md FILE...
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

var (
	//go:embed benchmarks.md.tmpl
	tmpl string
	//go:embed findings.md
	findings string
	//go:embed scalefindings.md
	scaleFindings string
	//go:embed nodescalefindings.md
	nodeScaleFindings string
)

// data is what the template reads.
type data struct {
	Config   map[string]string             // "key: value" lines
	M        map[string]map[string]float64 // benchmark name without "Benchmark" and -GOMAXPROCS (or "Config") → unit → value
	Findings string
	// ScaleFindings is the hand-written reading of make bench-scale's
	// profiles (scalefindings.md), in its section.
	ScaleFindings string
	// NodeScaleFindings is the same for BenchmarkNodeScale
	// (nodescalefindings.md).
	NodeScaleFindings string
}

var benchLine = regexp.MustCompile(`^Benchmark(\w+?)(-\d+)?\s+\d+\s+(.*)$`)

func main() {
	section := flag.String("section", "", "render only this section of the template (a {{define}} of it) and splice it into -into between its markers")
	into := flag.String("into", "", "the document -section is spliced into")
	flag.Parse()
	if flag.NArg() == 0 || (*section == "") != (*into == "") {
		fmt.Fprintln(os.Stderr, "usage: report FILE... | report -section NAME -into DOC FILE...")
		os.Exit(2)
	}
	d := data{Config: map[string]string{}, M: map[string]map[string]float64{"Config": {}}, Findings: findings, ScaleFindings: scaleFindings, NodeScaleFindings: nodeScaleFindings}
	for _, f := range flag.Args() {
		raw, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(2)
		}
		d.read(string(raw))
	}
	t := template.Must(template.New("").Funcs(funcs(d)).Parse(tmpl))
	if *section != "" {
		if err := splice(t, d, *section, *into); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	if err := t.Execute(os.Stdout, d); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// read adds the benchmark lines and "key: value" lines of raw to d.
func (d *data) read(raw string) {
	for _, l := range strings.Split(raw, "\n") {
		if m := benchLine.FindStringSubmatch(l); m != nil {
			d.M[m[1]] = map[string]float64{}
			f := strings.Fields(m[3])
			for i := 0; i+1 < len(f); i += 2 {
				d.M[m[1]][f[i+1]], _ = strconv.ParseFloat(f[i], 64)
			}
		} else if k, v, ok := strings.Cut(l, ": "); ok && !strings.ContainsAny(k, " \t") {
			d.Config[k] = strings.TrimSpace(v)
			if f, err := strconv.ParseFloat(d.Config[k], 64); err == nil {
				d.M["Config"][k] = f // e.g. the VM's figures of arm G
			}
		}
	}
}

// markers are the comments around a section's text in the document: the
// template writes them around each section it renders.
func markers(section string) (begin, end string) {
	return "<!-- section " + section + " -->", "<!-- end of section " + section + " -->"
}

// splice renders the template's section and puts it in place of what
// stands between its markers in the document at path; a document without
// them gets the section at its end.
func splice(t *template.Template, d data, section, path string) error {
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, section, d); err != nil {
		return err
	}
	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	out, err := spliceText(string(doc), section, b.String())
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// spliceText is doc with the text between section's markers replaced by
// text, which carries the markers itself.
func spliceText(doc, section, text string) (string, error) {
	begin, end := markers(section)
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, begin) || !strings.HasSuffix(text, end) {
		return "", fmt.Errorf("section %s renders without its markers", section)
	}
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + text + "\n", nil
	}
	return doc[:i] + text + doc[j+len(end):], nil
}

// funcs are the template's: m is a figure (NaN when the run has none,
// printed "n/a"), the rest look up, format and compute.
func funcs(d data) template.FuncMap {
	m := func(bench, unit string) float64 {
		if v, ok := d.M[bench][unit]; ok {
			return v
		}
		return math.NaN()
	}
	num := func(format string) func(float64) string {
		return func(v float64) string {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return "n/a"
			}
			return fmt.Sprintf(format, v)
		}
	}
	return template.FuncMap{
		"m":      m,
		"has":    func(bench string) bool { return d.M[bench] != nil },
		"key":    fmt.Sprintf,
		"f":      num("%.1f"),
		"f0":     num("%.0f"),
		"f2":     num("%.2f"),
		"sf":     num("%+.1f"),
		"pct":    func(a, b float64) string { return num("%+.0f%%")(100 * (a/b - 1)) },
		"sub":    func(a, b float64) float64 { return a - b },
		"add3":   func(a, b, c float64) float64 { return a + b + c },
		"mul":    func(a, b float64) float64 { return a * b },
		"div":    func(a, b float64) float64 { return a / b },
		"holds":  func(ok bool) string { return map[bool]string{true: "holds", false: "**missed**"}[ok] },
		"within": within,
		// sc is a figure of make bench-scale at a size: scale-SIZE-KEY;
		// sa the larger of its two agents' (KEY-a1, KEY-a2).
		"sc": func(size, k string) float64 { return m("Config", "scale-"+size+"-"+k) },
		"sa": func(size, k string) float64 {
			return math.Max(m("Config", "scale-"+size+"-"+k+"-a1"), m("Config", "scale-"+size+"-"+k+"-a2"))
		},
		"le":    func(a, b float64) bool { return a <= b },
		"last":  func(s []string) string { return s[len(s)-1] },
		"isNaN": math.IsNaN,
		"list":  func(v ...any) []any { return v },
		"split": strings.Fields,
		"rest":  func(n int, s string) string { return strings.Join(strings.Fields(s)[n:], " ") },
		"row":   func(name string, a, b float64) map[string]any { return map[string]any{"name": name, "a": a, "b": b} },
		// lv are the figures of a BenchmarkScaling level (its existing
		// pods): op → add, del, addcpu, delcpu (p50) and the same + "90".
		"lv": func(l string) map[string]map[string]float64 {
			out := map[string]map[string]float64{}
			for _, op := range []string{"A", "E", "first", "alone", "alonefirst"} {
				out[op] = map[string]float64{}
				for _, k := range [][2]string{{"add", "add-ms"}, {"del", "del-ms"}, {"addcpu", "add-cpu-ms"}, {"delcpu", "del-cpu-ms"}} {
					out[op][k[0]] = m("Scaling", op+"@"+l+"-"+k[1])
					out[op][k[0]+"90"] = m("Scaling", "p90-"+op+"@"+l+"-"+k[1])
				}
			}
			return out
		},
	}
}

// within reports whether b lies within frac of a, either way (|b - a| <=
// frac * |a|), the verdict of a "within 10%" row: a missing figure (NaN) is
// never within.
func within(b, a, frac float64) bool {
	return math.Abs(b-a) <= frac*math.Abs(a)
}
