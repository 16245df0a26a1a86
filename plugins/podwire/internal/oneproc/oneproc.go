// Package oneproc sets GOMAXPROCS to 1 when it is initialised. Import it,
// for its side effect, from a short sequential program whose goroutines
// would otherwise each wake an idle P's thread (plugins/podwire's main
// says why podwire is one).
//
// It imports nothing but runtime, so it is initialised among the first
// packages of the program (the spec orders package initialisation by
// import path among the packages whose imports are initialised): changing
// GOMAXPROCS stops the world and frees the other Ps' span caches, which
// costs more the more the program has allocated by then (bench -phases
// direct: 0.4 ms of CPU here, 2.2 ms from main's init).
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
