package catalog

// SetLatestRegistration makes reads use a table's latest registration
// instead of its schema at the read's version (tableAt): the negative
// control of TestSchemaAtVersion.
func SetLatestRegistration(c *Catalog, on bool) { c.latestRegistration = on }
