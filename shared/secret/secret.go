package secret

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FileMode is the mode of every secret file and of sluice's data files.
const FileMode os.FileMode = 0o600

// DirMode is the mode of the directories sluice creates for its data.
const DirMode os.FileMode = 0o700

// DataDirMode is the mode of data_dir itself: its owner's, but others may
// traverse it (not list or read it), because the demo Postgres of `sluice
// dev`, run as the postgres user when sluice runs as root, has its own
// directory below it. Everything in it is DirMode or FileMode.
const DataDirMode os.FileMode = 0o711

// ErrEmpty is returned for a secret file that holds only white space.
var ErrEmpty = errors.New("secret file is empty")

// New returns 32 random bytes, hex encoded.
func New() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Read returns the secret in path, surrounding white space removed.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%w: %s", ErrEmpty, path)
	}
	return s, nil
}

// ReadOrCreate returns the secret in path, generating one (New) into it
// first when the file does not exist; created says which. The file is
// written 0600 under a temporary name and linked into place, so two
// processes racing on first start agree on one secret and neither reads a
// partial file; path's directory is created 0700 when missing. An existing
// file that others may read (group or other permission bits) is refused,
// naming the chmod that fixes it.
func ReadOrCreate(path string) (s string, created bool, err error) {
	if s, err := readPrivate(path); !errors.Is(err, os.ErrNotExist) {
		return s, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
		return "", false, fmt.Errorf("creating the directory of %s: %w", path, err)
	}
	s, err = New()
	if err != nil {
		return "", false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", false, fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(FileMode); err != nil {
		_ = tmp.Close()
		return "", false, fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.WriteString(s + "\n")
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return "", false, fmt.Errorf("writing %s: %w", path, err)
	}
	// Link, not rename: it fails when another process made path first,
	// and then that process's secret is the one.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			s, err := readPrivate(path)
			return s, false, err
		}
		return "", false, fmt.Errorf("writing %s: %w", path, err)
	}
	return s, true, nil
}

// readPrivate reads a secret file that only its owner may read.
func readPrivate(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by other users (mode %04o): chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	return Read(path)
}

// PrivateDir creates dir (and its parents) with DirMode when missing and
// takes group and other permissions off it when it exists and this process
// owns it, so what sluice keeps there is readable by its own user only.
func PrivateDir(dir string) error { return ownDir(dir, DirMode, 0o077, dir) }

// DataDir creates data_dir with DataDirMode when missing and, when this
// process owns an existing one, takes every permission but traversal off
// group and others.
func DataDir(dir string) error { return ownDir(dir, DataDirMode, 0o066, "data_dir "+dir) }

// ownDir creates dir with mode when missing and, when this process owns an
// existing one, takes the permissions in drop off it.
func ownDir(dir string, mode, drop os.FileMode, what string) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("creating %s: %w", what, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&drop != 0 && ownedBySelf(fi) {
		if err := os.Chmod(dir, fi.Mode().Perm()&^drop); err != nil {
			return fmt.Errorf("restricting %s to its owner: %w", what, err)
		}
	}
	return nil
}
