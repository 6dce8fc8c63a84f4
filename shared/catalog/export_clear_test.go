package catalog

// SetIgnoreClears makes reads ignore clears: the negative control of
// TestClear.
func SetIgnoreClears(c *Catalog, on bool) { c.ignoreClears = on }
