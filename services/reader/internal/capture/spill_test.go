package capture

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

func TestProtocol(t *testing.T) {
	for _, c := range []struct{ want, major, got int }{
		{0, 13, 1}, {0, 14, 2}, {0, 18, 2}, {1, 17, 1}, {2, 14, 2}, {2, 13, 0}, {3, 17, 0},
	} {
		got, err := Protocol(c.want, c.major)
		if got != c.got || (c.got == 0) != errors.Is(err, source.ErrInvalidSource) {
			t.Errorf("Protocol(%d, %d) = %d, %v; want %d", c.want, c.major, got, err, c.got)
		}
	}
}

// A session start removes only spill files from the spill directory.
func TestClearSpills(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{spillName(7), spillName(8), "keep.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := clearSpills(dir); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "keep.txt" {
		t.Fatalf("left %v, want keep.txt", ents)
	}
	if err := clearSpills(filepath.Join(dir, "missing")); err != nil {
		t.Fatalf("a missing directory: %v", err)
	}
}
