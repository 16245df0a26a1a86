package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v3"
)

// pinnedImage is what pin writes: the chart's image.repository, image.tag
// and image.digest.
type pinnedImage struct {
	repository, tag, digest string
}

// digestRE is the chart's form of a digest (values.schema.json's pattern).
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// parsePinned splits "repository:tag@sha256:..." (push's and digest's
// output).
func parsePinned(ref string) (pinnedImage, error) {
	named, digest, ok := strings.Cut(ref, "@")
	if !ok || !digestRE.MatchString(digest) {
		return pinnedImage{}, fmt.Errorf("%q is not REPOSITORY:TAG@sha256:<64 hex digits>", ref)
	}
	tag, err := name.NewTag(named, name.StrictValidation)
	if err != nil {
		return pinnedImage{}, fmt.Errorf("%q is not REPOSITORY:TAG@sha256:<64 hex digits>: %w", ref, err)
	}
	return pinnedImage{repository: tag.Context().Name(), tag: tag.TagStr(), digest: digest}, nil
}

// pinValues returns the Helm values file src with image.repository,
// image.tag and image.digest set to p, every other byte as it was: the
// three values are found by the YAML parser (a top-level mapping "image"
// holding the three keys, each a scalar on one line) and only their text
// is replaced, so comments, blank lines and key order stay. The result is
// parsed again and must hold p and, apart from those three values, the
// same data as src.
func pinValues(src []byte, p pinnedImage) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("failed to parse the values: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("the values are not one YAML document")
	}
	img := mappingValue(doc.Content[0], "image")
	if img == nil || img.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the values have no mapping image")
	}
	type edit struct {
		key, value string
		node       *yaml.Node
	}
	var edits []edit
	for _, kv := range [][2]string{{"repository", p.repository}, {"tag", p.tag}, {"digest", p.digest}} {
		n := mappingValue(img, kv[0])
		if n == nil || n.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("the values have no scalar image.%s", kv[0])
		}
		if n.Value != kv[1] {
			edits = append(edits, edit{kv[0], kv[1], n})
		}
	}
	// From the last to the first, so that an edit leaves the offsets of
	// the ones before it valid when two share a line (a flow mapping).
	slices.SortFunc(edits, func(a, b edit) int {
		return cmp.Or(cmp.Compare(b.node.Line, a.node.Line), cmp.Compare(b.node.Column, a.node.Column))
	})
	lines := bytes.SplitAfter(src, []byte("\n"))
	for _, e := range edits {
		line := lines[e.node.Line-1]
		start := e.node.Column - 1
		end, err := scalarEnd(line, start, e.node.Style)
		if err != nil {
			return nil, fmt.Errorf("image.%s (line %d): %w", e.key, e.node.Line, err)
		}
		lines[e.node.Line-1] = bytes.Join([][]byte{line[:start], []byte(strconv.Quote(e.value)), line[end:]}, nil)
	}
	out := bytes.Join(lines, nil)

	var before, after map[string]any
	if err := yaml.Unmarshal(src, &before); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		return nil, fmt.Errorf("the pinned values do not parse: %w", err)
	}
	got, _ := after["image"].(map[string]any)
	if got["repository"] != p.repository || got["tag"] != p.tag || got["digest"] != p.digest {
		return nil, fmt.Errorf("the pinned values hold image %v, want %+v", got, p)
	}
	for _, k := range []string{"repository", "tag", "digest"} {
		before["image"].(map[string]any)[k] = got[k]
	}
	if !reflect.DeepEqual(before, after) {
		return nil, fmt.Errorf("pinning the image changed other values")
	}
	return out, nil
}

// mappingValue is the value node of key in the mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// scalarEnd is the byte offset in line where the one-line scalar of style
// that starts at start ends: after its closing quote, or, plain, before a
// comment (" #"), a flow collection's "," or "}", or the line's end, trailing blanks excluded. The values
// pin edits are ASCII, so the parser's column is a byte offset.
func scalarEnd(line []byte, start int, style yaml.Style) (int, error) {
	if start >= len(line) {
		return 0, fmt.Errorf("not a one-line scalar")
	}
	rest := line[start:]
	switch style {
	case yaml.DoubleQuotedStyle:
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++
			case '"':
				return start + i + 1, nil
			}
		}
	case yaml.SingleQuotedStyle:
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\'' {
				if i+1 < len(rest) && rest[i+1] == '\'' {
					i++
					continue
				}
				return start + i + 1, nil
			}
		}
	case 0:
		end := len(bytes.TrimRight(rest, "\r\n"))
		if i := bytes.Index(rest[:end], []byte(" #")); i >= 0 {
			end = i
		}
		if i := bytes.IndexAny(rest[:end], ",}]"); i >= 0 {
			end = i
		}
		return start + len(bytes.TrimRight(rest[:end], " \t")), nil
	}
	return 0, fmt.Errorf("not a one-line plain or quoted scalar")
}

// pinFile pins p into the values file at path.
func pinFile(path string, p pinnedImage) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := pinValues(src, p)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
