package packstore

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
)

// ValidatePath checks that path follows <destination>/<table>/<file>[/...]:
// a valid destination name, a valid schema.table, and file segments of
// [A-Za-z0-9_.-] that neither start with a dot nor are "." or "..". A
// segment's path (proto.SegmentPath) is valid too: validSegmentPath.
func ValidatePath(path string) error {
	if rest, ok := strings.CutPrefix(path, proto.SegmentsDir+"/"); ok {
		return validSegmentPath(path, rest)
	}
	parts := strings.Split(path, "/")
	if len(parts) < 3 {
		return fmt.Errorf("%w: %q: want <destination>/<table>/<file>", ErrBadPath, path)
	}
	if err := proto.ValidateDestination(parts[0]); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
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

// IsSegmentPath reports whether path is under proto.SegmentsDir (it may
// still be invalid: ValidatePath).
func IsSegmentPath(path string) bool { return strings.HasPrefix(path, proto.SegmentsDir+"/") }

// validSegmentPath checks rest, path after ".seg/", against
// <YYYY-MM-DD>/<HH>/<schema.table>/<id>.arrow: the hour directory the id's
// time names, a valid table, an id proto.SegmentTime reads.
func validSegmentPath(path, rest string) error {
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return fmt.Errorf("%w: %q: want %s/<YYYY-MM-DD>/<HH>/<table>/<id>.arrow", ErrBadPath, path, proto.SegmentsDir)
	}
	if err := proto.ValidateTable(parts[2]); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
	}
	id, ok := strings.CutSuffix(parts[3], ".arrow")
	if !ok || !fileRe.MatchString(parts[3]) {
		return fmt.Errorf("%w: %q: file %q", ErrBadPath, path, parts[3])
	}
	t, err := proto.SegmentTime(id)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
	}
	if want := proto.SegmentHourDir(t); proto.SegmentsDir+"/"+parts[0]+"/"+parts[1] != want {
		return fmt.Errorf("%w: %q: segment %s belongs under %s", ErrBadPath, path, id, want)
	}
	return nil
}

// validatePrefix accepts "" and any prefix of a valid path: complete
// segments must be valid, the last (partial) segment may only use the
// characters a path segment may hold.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.Contains(prefix, "..") || strings.HasPrefix(prefix, "/") || strings.ContainsAny(prefix, "\\\x00") {
		return fmt.Errorf("%w: prefix %q", ErrBadPath, prefix)
	}
	parts := strings.Split(prefix, "/")
	seg := parts[0] == proto.SegmentsDir && len(parts) > 1
	for i, p := range parts {
		last := i == len(parts)-1
		if last && p == "" {
			break
		}
		switch {
		case seg && i == 0:
		case seg && i == 3 && !last:
			if err := proto.ValidateTable(p); err != nil {
				return fmt.Errorf("%w: prefix %q: %v", ErrBadPath, prefix, err)
			}
		case seg:
			if err := prefixChars(prefix, p); err != nil {
				return err
			}
		case i == 0 && !last:
			if err := proto.ValidateDestination(p); err != nil {
				return fmt.Errorf("%w: prefix %q: %v", ErrBadPath, prefix, err)
			}
		case i == 1 && !last:
			if err := proto.ValidateTable(p); err != nil {
				return fmt.Errorf("%w: prefix %q: %v", ErrBadPath, prefix, err)
			}
		default:
			if err := prefixChars(prefix, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func prefixChars(prefix, p string) error {
	for j := 0; j < len(p); j++ {
		c := p[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '~') {
			return fmt.Errorf("%w: prefix %q", ErrBadPath, prefix)
		}
	}
	return nil
}
