package nodetables

import (
	"fmt"
	"strings"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
)

// remover is the part of an nftables connection RemoveAll needs.
type remover interface {
	ListTables() ([]*nftables.Table, error)
	DelTable(*nftables.Table)
	Flush() error
}

// RemoveAll deletes every table of the current netns whose name starts with
// "podwire" (nft.OwnerPrefix), of every family, in one batch: what `podwire
// uninstall` removes. Other tables are not touched. It returns the tables it
// deleted ("inet podwire-egress"); none present is not an error.
func RemoveAll(c remover) ([]nft.ID, error) {
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("failed to list nftables tables: %w", err)
	}
	var gone []nft.ID
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, nft.OwnerPrefix) {
			continue
		}
		c.DelTable(&nftables.Table{Family: t.Family, Name: t.Name})
		gone = append(gone, nft.ID{Family: t.Family, Name: t.Name})
	}
	if len(gone) == 0 {
		return nil, nil
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("failed to delete podwire tables: %w", err)
	}
	return gone, nil
}
