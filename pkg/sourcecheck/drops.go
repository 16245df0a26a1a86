package sourcecheck

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
)

// Drops counts what the source check dropped from one checked interface
// since its element was added: forged sources, and on a bridge port also
// forged ARP/NA claims and router advertisements.
type Drops struct {
	Packets uint64
	Bytes   uint64
}

// ReadDrops reads the per-interface drop counters of "inet podwire" and
// "bridge podwire" (the counters of their "checked" sets' elements, see
// DropRest): host interface name -> drops. It reads two sets by name and
// nothing else of the node; an absent table reads as no interfaces. A
// counter restarts at zero when a repair re-adds the element.
func ReadDrops(c nft.Reader) (map[string]Drops, error) {
	out := map[string]Drops{}
	for _, id := range []nft.ID{ID, BridgeID} {
		s := &nftables.Set{Table: &nftables.Table{Family: id.Family, Name: id.Name}, Name: SetChecked, KeyType: nftables.TypeIFName}
		elems, err := c.GetSetElements(s)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read the drop counters of %s: %w", id, err)
		}
		for _, e := range elems {
			name := string(bytes.TrimRight(e.Key, "\x00"))
			d := out[name]
			if e.Counter != nil {
				d.Packets += e.Counter.Packets
				d.Bytes += e.Counter.Bytes
			}
			out[name] = d
		}
	}
	return out, nil
}
