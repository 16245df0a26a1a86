// Package install edits a node's CNI configuration for podwire: it appends
// the podwire entry to the network's conflist (or updates it in place),
// removes it again, and writes files atomically with a backup.
//
// The editor keeps every other plugin and top-level key of the conflist
// byte for byte (only indentation is normalised): the conflist belongs to
// the primary plugin (flannel, Calico, Cilium, ptp, ...) and podwire is a
// guest at the end of its chain. A single-plugin .conf cannot be chained;
// it is refused with a hint, or converted to a conflist when asked.
//
// Limits: one podwire entry per conflist; the list's cniVersion must be one
// podwire supports (config.SupportedVersions); plugin files loaded from a
// directory named after the network (libcni's loadOnlyInlinedPlugins=false
// extension) are not edited.
package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/podwire/podwire/pkg/config"
)

const (
	// PluginType is the "type" of the podwire entry and the file name of the
	// binary in the CNI bin dir.
	PluginType = "podwire"
	// AnnotationsCapability is the capability through which containerd
	// (>= 1.5) and CRI-O pass the pod's annotations in runtimeConfig.
	AnnotationsCapability = "io.kubernetes.cri.pod-annotations"
)

// SupportedVersions lists the CNI spec versions podwire implements.
var SupportedVersions = config.SupportedVersions

// minCNIVersion is the oldest spec version podwire answers to.
var minCNIVersion = SupportedVersions[0]

// SingleConfError is returned when the file to edit is a single-plugin
// network config (.conf): there is no chain to append podwire to.
type SingleConfError struct {
	// Type is the "type" of the single plugin.
	Type string
}

func (e *SingleConfError) Error() string {
	return fmt.Sprintf("single-plugin network config (type %q) cannot chain podwire: convert it to a conflist (podwire install --convert does it) or point --conflist at the node's .conflist", e.Type)
}

// DefaultEntry is the podwire entry added when the operator gives no config.
func DefaultEntry() []byte {
	return []byte(`{"type":"` + PluginType + `","capabilities":{"` + AnnotationsCapability + `":true}}`)
}

// conflist is a parsed conflist: its ordered top-level object and its
// plugin entries, each kept raw.
type conflist struct {
	top     object
	plugins []json.RawMessage
}

// parseConflist parses data as a conflist. It returns *SingleConfError for a
// single-plugin config.
func parseConflist(data []byte) (*conflist, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	rawPlugins, ok := top.get("plugins")
	if !ok {
		if rawType, ok := top.get("type"); ok {
			var typ string
			_ = json.Unmarshal(rawType, &typ)
			return nil, &SingleConfError{Type: typ}
		}
		return nil, errors.New(`conflist has no "plugins" list`)
	}
	cl := &conflist{top: top}
	if err := json.Unmarshal(rawPlugins, &cl.plugins); err != nil {
		return nil, fmt.Errorf(`conflist "plugins" is not a list: %w`, err)
	}
	if _, ok := top.get("name"); !ok {
		return nil, errors.New(`conflist has no "name"`)
	}
	for i, p := range cl.plugins {
		if _, err := pluginType(p); err != nil {
			return nil, fmt.Errorf("conflist plugin %d: %w", i, err)
		}
	}
	return cl, nil
}

// pluginType returns the "type" of one plugin entry.
func pluginType(raw json.RawMessage) (string, error) {
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("entry is not an object: %w", err)
	}
	if p.Type == "" {
		return "", errors.New(`entry has no "type"`)
	}
	return p.Type, nil
}

// podwireIndex returns the index of the podwire entry, or -1.
func (cl *conflist) podwireIndex() (int, error) {
	idx := -1
	for i, p := range cl.plugins {
		if t, _ := pluginType(p); t == PluginType {
			if idx >= 0 {
				return -1, fmt.Errorf("conflist has more than one %s entry (plugins %d and %d): keep one", PluginType, idx, i)
			}
			idx = i
		}
	}
	return idx, nil
}

// checkVersion refuses a conflist whose effective cniVersion (the highest
// of "cniVersion" and "cniVersions" that this libcni knows, as libcni picks
// it) is older than podwire supports: the runtime would fail every ADD.
func (cl *conflist) checkVersion() error {
	var effective string
	if raw, ok := cl.top.get("cniVersion"); ok {
		if err := json.Unmarshal(raw, &effective); err != nil {
			return fmt.Errorf(`conflist "cniVersion" is not a string: %s`, raw)
		}
	}
	if raw, ok := cl.top.get("cniVersions"); ok {
		var vs []string
		if err := json.Unmarshal(raw, &vs); err != nil {
			return fmt.Errorf(`conflist "cniVersions" is not a list of strings: %s`, raw)
		}
		for _, v := range vs {
			if effective == "" {
				effective = v
				continue
			}
			if gt, err := version.GreaterThan(v, effective); err == nil && gt {
				effective = v
			}
		}
	}
	if effective == "" {
		return fmt.Errorf(`conflist has no "cniVersion": set it to one of %s`, strings.Join(SupportedVersions, ", "))
	}
	ok, err := version.GreaterThanOrEqualTo(effective, minCNIVersion)
	if err != nil {
		return fmt.Errorf("conflist cniVersion %q is invalid: %w", effective, err)
	}
	if !ok {
		return fmt.Errorf("conflist cniVersion %q is older than podwire supports (%s): raise \"cniVersion\" to \"1.0.0\" once every plugin in the list accepts it", effective, strings.Join(SupportedVersions, ", "))
	}
	return nil
}

// marshal renders the conflist with its plugins list replaced.
func (cl *conflist) marshal() ([]byte, error) {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range cl.plugins {
		if i > 0 {
			b.WriteString(",")
		}
		b.Write(p)
	}
	b.WriteString("]")
	cl.top.set("plugins", json.RawMessage(b.String()))
	return cl.top.marshal()
}

// normalizeEntry turns an operator's podwire config into the entry to store:
// "type" defaults to podwire (another type is an error), and the
// annotations capability is declared unless the entry sets it (to false),
// keeping every other key and capability as given.
func normalizeEntry(entry []byte) (json.RawMessage, error) {
	obj, err := parseObject(entry)
	if err != nil {
		return nil, fmt.Errorf("podwire config: %w", err)
	}
	if raw, ok := obj.get("type"); ok {
		var typ string
		if err := json.Unmarshal(raw, &typ); err != nil || typ != PluginType {
			return nil, fmt.Errorf("podwire config: \"type\" is %s, want %q", raw, PluginType)
		}
	} else {
		obj = append(object{{key: "type", value: json.RawMessage(`"` + PluginType + `"`)}}, obj...)
	}
	for _, k := range []string{"name", "cniVersion", "cniVersions", "plugins"} {
		if _, ok := obj.get(k); ok {
			return nil, fmt.Errorf("podwire config: key %q belongs to the conflist, not to the podwire entry", k)
		}
	}
	caps := object{}
	if raw, ok := obj.get("capabilities"); ok {
		if caps, err = parseObject(raw); err != nil {
			return nil, fmt.Errorf("podwire config: \"capabilities\": %w", err)
		}
	}
	// Declared by default; an operator's explicit false is kept (annotations
	// then come from the node agent only, as with a runtime that does not
	// send the capability).
	if v, ok := caps.get(AnnotationsCapability); !ok {
		caps.set(AnnotationsCapability, json.RawMessage("true"))
	} else if b := new(bool); json.Unmarshal(v, b) != nil {
		// libcni reads capabilities as booleans: anything else would make
		// the runtime refuse the whole conflist.
		return nil, fmt.Errorf("podwire config: \"capabilities\": %q is %s, want true or false", AnnotationsCapability, v)
	}
	rawCaps, err := caps.compact()
	if err != nil {
		return nil, err
	}
	obj.set("capabilities", rawCaps)
	return obj.compact()
}

// AddEntry returns conflist data with the podwire entry appended at the end
// of the chain, or the existing entry replaced where it stands. entry is the
// podwire plugin config as JSON; nil keeps an existing entry (only making
// sure it declares the annotations capability, unless it sets it to false)
// or adds DefaultEntry.
// changed is false, and out is data unchanged, when nothing needed to
// change: a second run is a no-op.
func AddEntry(data, entry []byte) (out []byte, changed bool, err error) {
	cl, err := parseConflist(data)
	if err != nil {
		return nil, false, err
	}
	if err := cl.checkVersion(); err != nil {
		return nil, false, err
	}
	idx, err := cl.podwireIndex()
	if err != nil {
		return nil, false, err
	}
	if entry == nil {
		entry = DefaultEntry()
		if idx >= 0 {
			entry = cl.plugins[idx]
		}
	}
	want, err := normalizeEntry(entry)
	if err != nil {
		return nil, false, err
	}
	if idx >= 0 {
		if jsonEqual(cl.plugins[idx], want) {
			return data, false, nil
		}
		cl.plugins[idx] = want
	} else {
		cl.plugins = append(cl.plugins, want)
	}
	out, err = cl.marshal()
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// RemoveEntry returns conflist data without the podwire entry; changed is
// false, and out is data unchanged, when there was none. A conflist that
// holds nothing but podwire is an error: the network would be left empty.
func RemoveEntry(data []byte) (out []byte, changed bool, err error) {
	cl, err := parseConflist(data)
	if err != nil {
		return nil, false, err
	}
	kept := cl.plugins[:0]
	for _, p := range cl.plugins {
		if t, _ := pluginType(p); t != PluginType {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(cl.plugins) {
		return data, false, nil
	}
	if len(kept) == 0 {
		return nil, false, fmt.Errorf("conflist holds only %s: removing it would leave the network without plugins; delete the file instead", PluginType)
	}
	cl.plugins = kept
	out, err = cl.marshal()
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// ConvertConf turns a single-plugin network config into an equivalent
// conflist, as libcni's ConfListFromConf does: "cniVersion" and "name" move
// to the list, the rest of the config becomes its only plugin.
func ConvertConf(data []byte) ([]byte, error) {
	conf, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	if _, ok := conf.get("plugins"); ok {
		return nil, errors.New("already a conflist")
	}
	if _, ok := conf.get("type"); !ok {
		return nil, errors.New(`network config has no "type"`)
	}
	var top object
	for _, k := range []string{"cniVersion", "name"} {
		raw, ok := conf.get(k)
		if !ok {
			return nil, fmt.Errorf("network config has no %q", k)
		}
		top = append(top, member{key: k, value: raw})
		conf.del(k)
	}
	plugin, err := conf.compact()
	if err != nil {
		return nil, err
	}
	top = append(top, member{key: "plugins", value: json.RawMessage("[" + string(plugin) + "]")})
	return top.marshal()
}

// Entry returns the podwire entry of a conflist, if it has one.
func Entry(data []byte) (entry json.RawMessage, ok bool, err error) {
	cl, err := parseConflist(data)
	if err != nil {
		return nil, false, err
	}
	idx, err := cl.podwireIndex()
	if err != nil || idx < 0 {
		return nil, false, err
	}
	return cl.plugins[idx], true, nil
}

// ConfExtensions are the file extensions a runtime reads from a CNI conf dir.
var ConfExtensions = []string{".conf", ".conflist", ".json"}

// ConfFiles lists the network config files of a CNI conf dir in the order a
// runtime picks them: regular entries with one of ConfExtensions, by name
// (the order of libcni.ConfFiles, whose list os.ReadDir sorts). A missing
// dir has none. It is here rather than a call to libcni because linking
// libcni links its exec package's OpenTelemetry propagation and, through
// it, net/http and crypto/tls: start-up work for every plugin invocation.
func ConfFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if !e.IsDir() && slices.Contains(ConfExtensions, filepath.Ext(e.Name())) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}
