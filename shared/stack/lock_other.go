//go:build !unix

package stack

import "os"

// tryLock: no flock here, so no lock and no proof that a predecessor is
// dead (its leases and deliveries wait out their TTLs and AckWaits).
func tryLock(*os.File) (bool, error) { return true, nil }

// canLock: without a lock nothing proves a predecessor dead.
const canLock = false
