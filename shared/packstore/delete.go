package packstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Deleter is a Store that can remove a pack. Only garbage collection
// (catalog gc.go) deletes, and only a file no retained snapshot and no
// unpublished inventory row references: the store itself keeps no
// references, so the rule lives with the caller.
type Deleter interface {
	// Delete removes the pack at path; a path that holds nothing is not an
	// error (a GC pass killed after the delete runs it again).
	Delete(ctx context.Context, path string) error
}

// Delete implements Deleter.
func (d *DirStore) Delete(ctx context.Context, path string) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting pack %s: %w", path, err)
	}
	if err := os.Remove(d.abs(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting pack %s: %w", path, err)
	}
	return nil
}

// Delete implements Deleter (DeleteObject succeeds for a missing key).
func (s *S3Store) Delete(ctx context.Context, path string) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(path))}); err != nil {
		return fmt.Errorf("deleting pack %s: %w", path, err)
	}
	return nil
}
