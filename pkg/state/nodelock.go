package state

// NodeLock is the node lock (Store.Lock) held re-entrantly by one
// invocation: ADD's rollback, the VLAN step and the table repair each take
// it, and only the outermost Lock takes the flock; the matching last unlock
// releases it. It is not safe for concurrent use by goroutines, and it is
// shared by pointer, never copied: the depth is the invocation's.
type NodeLock struct {
	store   *Store
	depth   int
	release func()
}

// NodeLock returns the node lock of s for one invocation, not yet held.
func (s *Store) NodeLock() *NodeLock { return &NodeLock{store: s} }

// Lock takes the node lock unless this invocation holds it already
// (blocking until the flock is free); the returned func releases one level.
// An error is the store's (state dir or lock file unusable); the lock is
// then not held.
func (l *NodeLock) Lock() (unlock func(), err error) {
	if l.depth == 0 {
		release, err := l.store.Lock()
		if err != nil {
			return nil, err
		}
		l.release = release
	}
	l.depth++
	return func() {
		l.depth--
		if l.depth == 0 {
			l.release()
			l.release = nil
		}
	}, nil
}
