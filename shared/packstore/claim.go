package packstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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

// ClaimInfo is one claim object as a listing sees it: its path and when it
// was last written (a rewrite of a replayed change renews it).
type ClaimInfo struct {
	Path     string
	Modified time.Time
	Size     int64
}

// ClaimCollector is a ClaimStore whose objects can be listed and deleted:
// what the claim garbage collection (services/publisher claims.go) needs.
// The store keeps no references; the rule lives with the caller.
type ClaimCollector interface {
	ClaimStore
	// ListClaims calls fn for every claim object under proto.ClaimsDir,
	// sorted by path. Objects whose path is no claim path are skipped.
	ListClaims(ctx context.Context, fn func(ClaimInfo) error) error
	// DeleteClaim removes the object at path; a path that holds nothing is
	// not an error (a pass killed after the delete runs it again).
	DeleteClaim(ctx context.Context, path string) error
}

// ListClaims implements ClaimCollector. Temporary files of killed writes
// are skipped (CleanTemp removes them).
func (d *DirStore) ListClaims(ctx context.Context, fn func(ClaimInfo) error) error {
	root := d.abs(proto.ClaimsDir)
	var out []ClaimInfo
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if e.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, _, _, err := proto.ParseClaimPath(rel); err != nil {
			return nil
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since the directory was read
		} else if err != nil {
			return err
		}
		out = append(out, ClaimInfo{Path: rel, Modified: info.ModTime(), Size: info.Size()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	for _, c := range out {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// DeleteClaim implements ClaimCollector, and removes the claim's position
// directory once it is empty.
func (d *DirStore) DeleteClaim(ctx context.Context, path string) error {
	if err := ValidateClaimPath(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting claim %s: %w", path, err)
	}
	p := d.abs(path)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting claim %s: %w", path, err)
	}
	_ = os.Remove(filepath.Dir(p)) // only when empty: another column's claim may be there
	return nil
}

// ListClaims implements ClaimCollector.
func (s *S3Store) ListClaims(ctx context.Context, fn func(ClaimInfo) error) error {
	var out []ClaimInfo
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.key(proto.ClaimsDir + "/")),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing claims: %w", err)
		}
		for _, obj := range page.Contents {
			rel, ok := strings.CutPrefix(aws.ToString(obj.Key), s.prefix)
			if !ok {
				continue
			}
			if _, _, _, err := proto.ParseClaimPath(rel); err != nil {
				continue
			}
			out = append(out, ClaimInfo{Path: rel, Modified: aws.ToTime(obj.LastModified), Size: aws.ToInt64(obj.Size)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	for _, c := range out {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// DeleteClaim implements ClaimCollector (DeleteObject succeeds for a
// missing key).
func (s *S3Store) DeleteClaim(ctx context.Context, path string) error {
	if err := ValidateClaimPath(path); err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(path))}); err != nil {
		return fmt.Errorf("deleting claim %s: %w", path, err)
	}
	return nil
}
