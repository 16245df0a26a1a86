package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestPinChartValues pins a reference into the chart's own values.yaml:
// exactly the three lines of image.repository, image.tag and image.digest
// change, each keeping its indentation, and every comment and blank line
// stays. Pinning again is a no-op.
func TestPinChartValues(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(rootDir, "deploy/helm/podwire/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := pinnedImage{repository: "registry.example:5000/podwire/podwire-agent", tag: "v1.2.3", digest: testDigest}
	out, err := pinValues(src, p)
	if err != nil {
		t.Fatal(err)
	}
	before, after := strings.Split(string(src), "\n"), strings.Split(string(out), "\n")
	if len(before) != len(after) {
		t.Fatalf("pin changed the number of lines: %d to %d", len(before), len(after))
	}
	changed := map[string]string{}
	for i := range before {
		if before[i] != after[i] {
			key, _, _ := strings.Cut(strings.TrimSpace(after[i]), ":")
			changed[key] = after[i]
		}
	}
	want := map[string]string{
		"repository": `  repository: "registry.example:5000/podwire/podwire-agent"`,
		"tag":        `  tag: "v1.2.3"`,
		"digest":     `  digest: "` + testDigest + `"`,
	}
	for k, line := range want {
		if changed[k] != line {
			t.Errorf("image.%s: line %q, want %q", k, changed[k], line)
		}
	}
	if len(changed) != len(want) {
		t.Errorf("changed lines %v, want only image's three", changed)
	}
	again, err := pinValues(out, p)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("pinning twice changed the file (%v)", err)
	}
}

// TestPinForms: the edit finds the values in other layouts (quoted, plain
// with a comment, a flow mapping) and refuses what it cannot edit in place.
func TestPinForms(t *testing.T) {
	p := pinnedImage{repository: "r.example/a", tag: "v1", digest: testDigest}
	for _, tc := range []struct {
		name, in, want, err string
	}{{
		name: "plain with comments",
		in:   "# top\nimage:\n  repository: old/a # where\n  tag: v0   # the tag\n\n  digest: ''\nother: 1\n",
		want: "# top\nimage:\n  repository: \"r.example/a\" # where\n  tag: \"v1\"   # the tag\n\n  digest: \"" + testDigest + "\"\nother: 1\n",
	}, {
		name: "flow mapping",
		in:   "image: {repository: old/a, tag: \"\", digest: \"\"}\n",
		want: "image: {repository: \"r.example/a\", tag: \"v1\", digest: \"" + testDigest + "\"}\n",
	}, {
		name: "no digest key",
		in:   "image:\n  repository: old/a\n  tag: v0\n",
		err:  "image.digest",
	}, {
		name: "block scalar",
		in:   "image:\n  repository: |\n    old/a\n  tag: v0\n  digest: \"\"\n",
		err:  "image.repository",
	}, {
		name: "image nested elsewhere only",
		in:   "agent:\n  image:\n    repository: a\n",
		err:  "no mapping image",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := pinValues([]byte(tc.in), p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q; wrote %q", err, tc.err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", out, tc.want)
			}
		})
	}
}

// TestParsePinned: push's output splits into the chart's three values; a
// reference without a tag or with a short digest is refused.
func TestParsePinned(t *testing.T) {
	got, err := parsePinned("10.99.0.2:5000/podwire/podwire-agent:v0.1.0-3-gabc@" + testDigest)
	if err != nil {
		t.Fatal(err)
	}
	if want := (pinnedImage{"10.99.0.2:5000/podwire/podwire-agent", "v0.1.0-3-gabc", testDigest}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"ghcr.io/podwire/podwire-agent@" + testDigest,
		"ghcr.io/podwire/podwire-agent:v1@sha256:0123",
		"ghcr.io/podwire/podwire-agent:v1",
	} {
		if _, err := parsePinned(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
