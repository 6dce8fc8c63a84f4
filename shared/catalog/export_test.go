package catalog

// Test knobs for the external test package.

// SetNoFence removes the lease fence and the version barrier from the
// publishing statements (the negative control of the wedge test).
func SetNoFence(c *Catalog, off bool) { c.noFence = off }

// SetBeforeStatements installs a hook run between a publish's lease renewal
// and its statements.
func SetBeforeStatements(c *Catalog, f func()) { c.beforeStatements = f }

// SetAlwaysRenew makes every publish renew the lease, not only when half
// its TTL is gone.
func SetAlwaysRenew(c *Catalog, on bool) { c.lazyRenew = !on }

// SetNoStaging makes Index read every pack in place, never through a
// staging file (the baseline of BenchmarkIndexSmallPacks).
func SetNoStaging(c *Catalog, off bool) { c.noStaging = off }
