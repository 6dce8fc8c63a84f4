package catalog

// Test knobs for the external test package.

// SetNoFence removes the lease fence and the version barrier from the
// publishing statements (the negative control of the wedge test).
func SetNoFence(c *Catalog, off bool) { c.noFence = off }

// SetBeforeStatements installs a hook run between a publish's lease renewal
// and its statements.
func SetBeforeStatements(c *Catalog, f func()) { c.beforeStatements = f }

// SetNoWindow makes every publish and Pending read every pack against every
// membership (a full sweep), as if there were no inventory high-water.
func SetNoWindow(c *Catalog, on bool) { c.noWindow = on }

// SetClockWindow makes a publish admit by the clock window it had before
// the inventory high-water (rows stamped after the last publish minus
// publishSlack; the negative control of the stalled-inventory tests).
func SetClockWindow(c *Catalog, on bool) { c.clockWindow = on }

// SetNoStaging makes Index read every pack in place, never through a
// staging file (the baseline of BenchmarkIndexSmallPacks).
func SetNoStaging(c *Catalog, off bool) { c.noStaging = off }

// SetPublishCap lowers the packs one publish admits (tests); it returns a
// restore func.
func SetPublishCap(n int) func() {
	old := publishCap
	publishCap = n
	return func() { publishCap = old }
}

// SetCapAdvances lets a publish cut by the cap claim the caller's
// through_lsn anyway (the negative control of the cap test).
func SetCapAdvances(c *Catalog, on bool) { c.capAdvances = on }
