package secret

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestReadOrCreate: a generated secret is written 0600 in a 0700
// directory, read back unchanged on later starts, and racing first starts
// agree on one secret.
func TestReadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "pw")
	s, created, err := ReadOrCreate(path)
	if err != nil || !created || len(s) != 64 {
		t.Fatalf("ReadOrCreate = %q %v %v", s, created, err)
	}
	for p, want := range map[string]os.FileMode{path: FileMode, dir: DirMode} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	again, created, err := ReadOrCreate(path)
	if err != nil || created || again != s {
		t.Fatalf("second ReadOrCreate = %q %v %v, want the first secret", again, created, err)
	}

	race := filepath.Join(dir, "race")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, _ = ReadOrCreate(race)
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g == "" || g != got[0] {
			t.Fatalf("racing first starts disagree: %q", got)
		}
	}
}

// TestRefusesReadableSecret: a secret file others may read is refused,
// naming the fix; the same file at 0600 is read (negative control).
func TestRefusesReadableSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadOrCreate(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 secret: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, _, err := ReadOrCreate(path); err != nil || s != "x" {
		t.Fatalf("0600 secret: %q %v", s, err)
	}
}

// TestPrivateDir: an existing open data dir is narrowed to its owner.
func TestPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != DirMode {
		t.Fatalf("mode %04o", fi.Mode().Perm())
	}
}

// TestDataDir: data_dir is created 0711 and an existing 0775 one loses
// every group and other permission but traversal.
func TestDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	if err := DataDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != DataDirMode {
		t.Fatalf("new data_dir: mode %04o", fi.Mode().Perm())
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := DataDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != DataDirMode {
		t.Fatalf("narrowed data_dir: mode %04o", fi.Mode().Perm())
	}
}
