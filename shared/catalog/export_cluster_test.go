package catalog

// OnClusterSQL is onClusterSQL for the external tests.
var OnClusterSQL = onClusterSQL
