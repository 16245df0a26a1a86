package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// member is one key of a JSON object with its value kept as the exact bytes
// found in the input, so that numbers, nested key order and unknown keys
// survive an edit untouched.
type member struct {
	key   string
	value json.RawMessage
}

// object is a JSON object whose members keep their order of appearance.
// encoding/json's map decoding would sort the keys and reformat numbers;
// an operator's conflist must come back as it was, plus our entry.
type object []member

// parseObject parses data as one JSON object. Duplicate keys are refused:
// which of them a runtime would use depends on its parser.
func parseObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("invalid JSON: want an object, found %v", tok)
	}
	var obj object
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("invalid JSON: want a key, found %v", tok)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("invalid JSON value for key %q: %w", key, err)
		}
		obj = append(obj, member{key: key, value: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("invalid JSON: trailing data after the object")
	}
	return obj, nil
}

// get returns the raw value of key.
func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

// set replaces the value of key where it stands, or appends the key.
func (o *object) set(key string, value json.RawMessage) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].value = value
			return
		}
	}
	*o = append(*o, member{key: key, value: value})
}

// del removes key if present.
func (o *object) del(key string) {
	out := (*o)[:0]
	for _, m := range *o {
		if m.key != key {
			out = append(out, m)
		}
	}
	*o = out
}

// marshal renders the object with two-space indentation (the layout of the
// conflists shipped by flannel, Calico and Cilium). Only whitespace of the
// member values changes.
func (o object) marshal() ([]byte, error) {
	var buf bytes.Buffer
	if err := o.writeIndented(&buf, ""); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func (o object) writeIndented(buf *bytes.Buffer, prefix string) error {
	if len(o) == 0 {
		buf.WriteString("{}")
		return nil
	}
	buf.WriteString("{\n")
	for i, m := range o {
		k, err := json.Marshal(m.key)
		if err != nil {
			return err
		}
		buf.WriteString(prefix + "  ")
		buf.Write(k)
		buf.WriteString(": ")
		if err := json.Indent(buf, m.value, prefix+"  ", "  "); err != nil {
			return fmt.Errorf("invalid JSON value for key %q: %w", m.key, err)
		}
		if i < len(o)-1 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
	}
	buf.WriteString(prefix + "}")
	return nil
}

// compact returns the object as compact JSON, keeping member order.
func (o object) compact() (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := o.writeIndented(&buf, ""); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, buf.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// jsonEqual reports whether a and b hold the same JSON value, ignoring
// whitespace and key order.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
