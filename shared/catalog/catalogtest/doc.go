// Package catalogtest is the catalog's test kit: hand-made packs of small
// test tables, written to a packstore.Store, for the catalog, indexer and
// publisher tests. It must never be imported by non-test code.
package catalogtest
