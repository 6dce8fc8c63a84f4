package packstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
)

// ClaimStore holds claim-check objects: values too large to travel in a
// message, written by the reader and read by the flusher when it writes the
// pack (proto.ColClaims). Their paths (proto.ClaimPath) lie under
// proto.ClaimsDir, outside the pack layout, so List never returns them.
// Unlike a pack, a claim may be rewritten: its path is a function of the
// change, so a rewrite carries the same change's value.
type ClaimStore interface {
	// PutClaim writes data at path durably and atomically (a reader sees
	// the old object or the new one, whole).
	PutClaim(ctx context.Context, path string, data []byte) error
	// GetClaim returns the object at path, or an error wrapping
	// ErrNotFound.
	GetClaim(ctx context.Context, path string) ([]byte, error)
}

// ValidateClaimPath checks that path is proto.ClaimsDir/<table>/<segments>.
func ValidateClaimPath(path string) error {
	parts := strings.Split(path, "/")
	if len(parts) < 3 || parts[0] != proto.ClaimsDir {
		return fmt.Errorf("%w: %q: want %s/<table>/<file>", ErrBadPath, path, proto.ClaimsDir)
	}
	if err := proto.ValidateTable(parts[1]); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
	}
	for _, p := range parts[2:] {
		if !fileRe.MatchString(p) {
			return fmt.Errorf("%w: %q: segment %q", ErrBadPath, path, p)
		}
	}
	return nil
}

// PutClaim implements ClaimStore: temp file, fsync, rename, fsync of the
// directory.
func (d *DirStore) PutClaim(ctx context.Context, path string, data []byte) error {
	if err := ValidateClaimPath(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing claim %s: %w", path, err)
	}
	final := d.abs(path)
	dir := filepath.Dir(final)
	if err := d.mkdirDurable(dir); err != nil {
		return fmt.Errorf("writing claim %s: %w", path, err)
	}
	tmp, err := writeTemp(dir, data)
	if err != nil {
		return fmt.Errorf("writing claim %s: %w", path, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing claim %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("writing claim %s: syncing directory: %w", path, err)
	}
	return nil
}

// GetClaim implements ClaimStore.
func (d *DirStore) GetClaim(ctx context.Context, path string) ([]byte, error) {
	if err := ValidateClaimPath(path); err != nil {
		return nil, err
	}
	return d.read(ctx, "claim", path)
}

// PutClaim implements ClaimStore (a plain PUT: atomic on S3).
func (s *S3Store) PutClaim(ctx context.Context, path string, data []byte) error {
	if err := ValidateClaimPath(path); err != nil {
		return err
	}
	if err := s.putObject(ctx, s.key(path), data, false); err != nil {
		return fmt.Errorf("writing claim %s: %w", path, err)
	}
	return nil
}

// GetClaim implements ClaimStore.
func (s *S3Store) GetClaim(ctx context.Context, path string) ([]byte, error) {
	if err := ValidateClaimPath(path); err != nil {
		return nil, err
	}
	b, err := s.getObject(ctx, s.key(path))
	if err != nil {
		return nil, fmt.Errorf("reading claim %s: %w", path, err)
	}
	return b, nil
}
