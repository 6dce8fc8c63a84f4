package catalog

// SetIgnoreClears makes reads ignore clears: the negative control of
// TestClear.
func SetIgnoreClears(c *Catalog, on bool) { c.ignoreClears = on }

// SetChangesNoFallback switches off Changes' fallback to every key across a
// clear or schema change (negative control).
func SetChangesNoFallback(c *Catalog, on bool) { c.changesNoFallback = on }
