//go:build !linux

package split

// adviseHuge is a no-op where transparent huge pages are not asked for.
func adviseHuge([]byte) {}
