package main

import "github.com/podwire/podwire/pkg/podmeta"

// The API fallback for pod annotations (DESIGN.md): client-go's metadata
// client, bounded by apiTimeout.
func init() {
	newFetcher = func(kubeconfig string) (podmeta.Fetcher, error) {
		return podmeta.NewAPIFetcher(kubeconfig, apiTimeout)
	}
}
