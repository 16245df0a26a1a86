package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/noderepair"
)

// forgetUnknown deletes the elements the node repair (noderepair) added for the
// attachment's host interface while it had no record, and its entry in
// noderepair.UnknownFile. ADD calls it under the node lock right after writing the
// record (putFirst); from then on the record's own elements (none for a
// forwarding pod) say what is checked. When that file does not list the
// interface (nearly always) it reads that one file and touches nothing else.
func (x *invocation) forgetUnknown() error {
	if x.rec.HostIfName == "" {
		return nil
	}
	path := filepath.Join(x.conf.StateDir, noderepair.UnknownFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var listed, keep []cliapi.UnknownInterface
	if err := json.Unmarshal(b, &listed); err != nil {
		return fmt.Errorf("corrupt %q: %w", path, err)
	}
	gone := nft.Elements{}
	for _, u := range listed {
		if u.Name == x.rec.HostIfName {
			noderepair.AddUnknownElements(gone, u)
		} else {
			keep = append(keep, u)
		}
	}
	if len(keep) == len(listed) {
		return nil
	}
	c, err := x.conn()
	if err != nil {
		return err
	}
	// Idempotent: an element already gone is not an error.
	if err := nft.DeleteElements(x.carryIntact(c), gone); err != nil {
		return err
	}
	x.log.Info("interface taken out of the unknown interfaces: it has a record now", "hostIf", x.rec.HostIfName)
	if keep == nil {
		keep = []cliapi.UnknownInterface{}
	}
	if b, err = json.Marshal(keep); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}
