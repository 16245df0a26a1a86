package nodetables

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// The node agent writes two JSON files into stateDir for the plugin: the
// node annotation cache (cacheName) and the cluster's ranges (clusterName).
// Neither is named "*.json": the state store reads every *.json file there
// as an attachment record.

// readStateFile decodes the file name of stateDir into v; found is false
// when there is none. what names the file in errors ("cluster CIDRs").
func readStateFile(stateDir, name, what string, v any) (found bool, err error) {
	return atomicfile.ReadJSON(filepath.Join(stateDir, name), what+" file", v)
}

// writeStateFile writes b as the file name of stateDir (atomicfile.WriteFile,
// mode 0600), making stateDir if need be. The node agent is the only
// writer, so the temporary files a killed writer left are its own and are
// removed first.
func writeStateFile(stateDir, name, what string, b []byte) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("failed to create state dir %q: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, name)
	if err := atomicfile.RemoveTemps(path); err != nil {
		return fmt.Errorf("failed to write the %s: %w", what, err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("failed to write the %s: %w", what, err)
	}
	return nil
}
