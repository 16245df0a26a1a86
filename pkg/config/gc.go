package config

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// GC keys: the spec's name, and the older spelling libcni still sends.
const (
	KeyValidAttachments = "cni.dev/valid-attachments"
	KeyAttachments      = "cni.dev/attachments"
)

// GCValidAttachments reads which attachments a GC must keep from the GC
// request (stdin bytes). sent is false when the request has neither key: the
// runtime did not say, and GC must remove nothing (unknown is not "none").
// A key that is present with the value null means that no attachment is
// valid: libcni's GCNetworkList (containernetworking/cni v1.3.1,
// libcni/api.go) injects
//
//	inject["cni.dev/valid-attachments"] = args.ValidAttachments
//	inject["cni.dev/attachments"] = args.ValidAttachments
//
// whenever it is given GCArgs, so a nil slice (CRI-O passes nil for a
// network without pods) arrives as null. cni.dev/valid-attachments wins
// when both are present. Errors are CNI error 6 naming the key.
func GCValidAttachments(stdin []byte) (valid []types.GCAttachment, sent bool, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, false, decodeError(err)
	}
	for _, key := range []string{KeyValidAttachments, KeyAttachments} {
		raw, ok := top[key]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, &valid); err != nil {
			return nil, false, types.NewError(types.ErrDecodingFailure,
				fmt.Sprintf("invalid %q: want a list of {containerID, ifname} or null: %v", key, err), "")
		}
		return valid, true, nil
	}
	return nil, false, nil
}
