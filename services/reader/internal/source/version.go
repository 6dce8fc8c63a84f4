package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// MinServerMajor is the oldest Postgres major version sluice captures from:
// pgoutput sends logical decoding messages (its messages option, which the
// resync's watermarks travel on) from 14 on. 14 to 18 are tested.
const MinServerMajor = 14

// ServerVersion is the source server's version.
type ServerVersion struct {
	Num  int    // server_version_num, e.g. 170010 (major*10000 + minor from 10 on)
	Text string // server_version, e.g. "17.10" or "13.23 (Debian 13.23-1)"
}

// Major is the major version: 17 for 170010, 9 for 90624 (9.6).
func (v ServerVersion) Major() int {
	return v.Num / 10000
}

// ReadServerVersion reads the server's version.
func ReadServerVersion(ctx context.Context, q Querier) (ServerVersion, error) {
	var v ServerVersion
	var num string
	if err := q.QueryRow(ctx, "SELECT current_setting('server_version_num'), current_setting('server_version')").Scan(&num, &v.Text); err != nil {
		return v, fmt.Errorf("reading the server version: %w", err)
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return v, fmt.Errorf("reading the server version: server_version_num %q is not a number", num)
	}
	v.Num = n
	return v, nil
}

// CheckServerVersion refuses a source older than MinServerMajor, naming the
// server's version.
func CheckServerVersion(ctx context.Context, q Querier) (ServerVersion, error) {
	v, err := ReadServerVersion(ctx, q)
	if err != nil {
		return v, err
	}
	return v, v.Check()
}

// Check refuses a version older than MinServerMajor.
func (v ServerVersion) Check() error {
	if v.Major() < MinServerMajor {
		return invalid("the source is Postgres %s (server_version_num %d); sluice needs Postgres %d or newer (it is tested on 14 to 18): upgrade the server", v.Text, v.Num, MinServerMajor)
	}
	return nil
}

// CheckGeneratedNotPublished refuses a publication that publishes stored
// generated columns (publish_generated_columns = stored, new in Postgres
// 18; none, the default, is what every earlier version does). The reader
// computes those columns itself and its periodic schema check compares the
// catalog's other columns with the stream's: a stream that carries them
// too would be taken for a column added, and resync the table by itself.
func CheckGeneratedNotPublished(ctx context.Context, q Querier, pub string, v ServerVersion) error {
	if v.Major() < 18 {
		return nil
	}
	var gencols string
	err := q.QueryRow(ctx, `SELECT pubgencols::text FROM pg_catalog.pg_publication WHERE pubname = $1`, pub).Scan(&gencols)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading publish_generated_columns of publication %s: %w", pub, err)
	}
	if gencols != "n" {
		return invalid("publication %s publishes generated columns (publish_generated_columns = stored, Postgres %s); sluice computes stored generated columns itself: run ALTER PUBLICATION %s SET (publish_generated_columns = none);", pub, v.Text, pgx.Identifier{pub}.Sanitize())
	}
	return nil
}
