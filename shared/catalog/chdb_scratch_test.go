package catalog

import (
	"context"
	"testing"
)

func TestScratch(t *testing.T) {
	c, err := OpenChDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	out, err := c.QueryRaw(ctx, "SELECT name, value FROM system.settings WHERE name ILIKE '%native%' OR name ILIKE '%empty%'", "TSV")
	t.Logf("%s %v", out, err)
	out, err = c.QueryRaw(ctx, "SELECT number FROM numbers(0)", "ArrowStream")
	t.Logf("%d %v", len(out), err)
	out, err = c.QueryRaw(ctx, "SELECT number FROM numbers(0) SETTINGS output_format_write_statistics=1", "Native")
	t.Logf("%d %v", len(out), err)
}
