package catalog

// Test knobs for the external test package.

// SetNoFence removes the lease fence and the version barrier from the
// publishing statements (the negative control of the wedge test).
func SetNoFence(c *Catalog, off bool) { c.noFence = off }

// SetBeforeStatements installs a hook run between a publish's lease renewal
// and its statements.
func SetBeforeStatements(c *Catalog, f func()) { c.beforeStatements = f }

// SetClockWindow makes a publish record as its high-water the highest
// block among the rows stamped after the last publish minus publishSlack
// (the negative control of the stalled-inventory tests).
func SetClockWindow(c *Catalog, on bool) { c.clockWindow = on }

// SetNoStaging makes Index read every pack in place, never through a
// staging file (the baseline of BenchmarkIndexSmallPacks).
func SetNoStaging(c *Catalog, off bool) { c.noStaging = off }

// SetReplacingInventory creates the inventory as schema 6's
// ReplacingMergeTree (the negative control of the re-index merge test).
// Set it before EnsureSchema.
func SetReplacingInventory(c *Catalog, on bool) { c.replacingInventory = on }

// SetNoRemovalCheck lets PublishReplace remove members the latest snapshot
// does not hold (the negative control of the removal check).
func SetNoRemovalCheck(c *Catalog, on bool) { c.noRemovalCheck = on }
