// Fixture of lint_test.go: what the check lets pass.
package fixture

import "time"

// portUpTimeout bounds the wait for a bridge port, 200 ms: a constant, not
// a measurement.
const portUpTimeout = 200 * time.Millisecond
