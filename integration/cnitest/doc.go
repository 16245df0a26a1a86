// Package cnitest is the one harness of podwire's root test suites: the
// integration suite (integration/), the VM suite (integration/vm), the CRI
// suite (integration/cri) and the benchmark (integration/bench) all make
// their chains and runtime configs here (and their network namespaces with
// internal/testns, the one helper for that in the whole tree).
//
// Two layers:
//   - error-returning building blocks that need no *testing.T, for the
//     benchmark: NewPodNS (testns.Make with IPv6 DAD off), Chain (ptp +
//     host-local, then chained entries, as a conflist), PodArgs (what a CRI runtime sends), Client
//     (libcni verbs run inside a node netns) and Attach (ADD, and DEL after a
//     failed ADD as a runtime does);
//   - Node and Pod for tests, on top of them: a node netns and directory
//     per test (NewNode), its chain (Node.Chain), pods added through it
//     (Node.AddPod), everything released in t.Cleanup. Each suite wraps
//     them with what it adds (the integration suite's pod specs, the VM
//     suite's VLAN keys).
//
// Nothing here calls t.Fatal or t.FailNow except NewNode and Node.Do,
// which are for the test goroutine only; everything else returns errors,
// so that tests may call it (Node.AddPod too) from goroutines and report
// after Wait.
//
// Nothing here touches the host's own netns, links, ruleset or sysctls.
package cnitest
