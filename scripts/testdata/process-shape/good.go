// Fixture of lint_test.go: what the check lets pass.
package fixture

import (
	"runtime"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// portUpTimeout bounds the wait for a bridge port, 200 ms: a constant, not
// a measurement.
const portUpTimeout = 200 * time.Millisecond

func inPod(path string) error {
	// Workers: one per P (runtime.GOMAXPROCS(0) reads it).
	_ = runtime.GOMAXPROCS(0)
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return nil })
}
