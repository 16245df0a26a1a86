// Package oneproc owns the plugin's GOMAXPROCS: it sets one P when it is
// initialised, and [Widen] gives the runtime's default back for the one
// parallel part of an invocation. Nothing else in the plugin sets
// GOMAXPROCS (a forbidigo rule of .golangci.yml fails on it).
//
// Why one P: an invocation is a short sequential program, and with idle Ps
// every goroutine it starts wakes another OS thread (a futex wake and a
// context switch each way): mdlayher/socket starts one per netlink send and
// receive, ns.Do one per pod netns visit. With one P they run on the thread
// that started them. The A/B figure is in docs/benchmarks.md ("Process
// shape").
//
// Why a package: it imports nothing but runtime, so it is initialised among
// the first packages of the program (the spec orders package initialisation
// by import path among the packages whose imports are initialised), and
// changing GOMAXPROCS stops the world and frees the other Ps' span caches,
// which costs more the more the program has allocated by then.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }

// Widen gives the invocation the runtime's default number of Ps (the CPUs,
// within the cgroup's quota) from here on, for work that runs one worker
// per P: the rebuild of the node tables, which reads every record of the
// node (state.Store.List).
func Widen() { runtime.SetDefaultGOMAXPROCS() }
