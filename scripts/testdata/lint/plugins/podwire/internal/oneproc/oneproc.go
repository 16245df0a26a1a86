// Package oneproc is a fixture of lint_test.go: the owner of GOMAXPROCS may
// set it; the other rules still hold here.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }

// Widen gives the runtime its default GOMAXPROCS again.
func Widen() { runtime.SetDefaultGOMAXPROCS() }

func lock() {
	runtime.LockOSThread() // want "process shape: switch a thread's netns"
}
