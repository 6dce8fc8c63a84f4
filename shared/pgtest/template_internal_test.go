package pgtest

import "testing"

// The template is keyed on the binaries' folder and their version: a folder
// whose binaries were replaced by another version's (SLUICE_PG_BINDIR at a
// reused path, a re-fetched build) gets a template of its own, never the
// old version's data directory, which its server would refuse or misread.
func TestTemplateKeyedOnVersion(t *testing.T) {
	a := templateDir("/opt/pg/bin", "17.10")
	for _, c := range []struct{ bindir, version string }{
		{"/opt/pg/bin", "17.11"},
		{"/opt/pg/bin", "18.4"},
		{"/opt/pg2/bin", "17.10"},
	} {
		if b := templateDir(c.bindir, c.version); b == a {
			t.Errorf("templateDir(%q, %q) = templateDir(/opt/pg/bin, 17.10) = %s", c.bindir, c.version, a)
		}
	}
	if b := templateDir("/opt/pg/bin", "17.10"); b != a {
		t.Errorf("templateDir is not stable: %s, then %s", a, b)
	}
}
