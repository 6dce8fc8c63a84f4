package lifecycle

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// --destination and --value never cross. Tenant "a.b" has the destination
// "~c4n64"; a second tenant's routing value is literally "~c4n64" (its
// destination is "~fphj8rhm6g"). public.items holds rows of both tenants,
// public.only rows of the second tenant only, so the destination ~c4n64
// holds nothing in public.only: that must read as nothing, not as the
// other tenant. An alias of a name (~c4n65 decodes to "a.b" too) is
// refused by read and by the lifecycle commands.
func TestDestinationAndValueNeverCross(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	h := &harness{t: t, dsn: pgtest.NewDB(t)}
	h.exec(`CREATE TABLE public.items (tenant_id text NOT NULL, id int NOT NULL, v text, PRIMARY KEY (tenant_id, id));
		CREATE TABLE public.only (tenant_id text NOT NULL, id int NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.items VALUES ('a.b', 1, 'ab'), ('~c4n64', 2, 'tilde');
		INSERT INTO public.only VALUES ('~c4n64', 3)`)
	dev, err := kit.NewDev(t.TempDir(), kit.Source{DSN: h.dsn, Tables: []string{"public.items", "public.only"}}, kit.Settings{FlushInterval: "500ms", PublisherInterval: "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	h.dev, h.server = dev, dev.Server()
	t.Cleanup(func() { _ = dev.P.Stop(60 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := dev.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kit.Wait(ctx, h.server, h.lsn(), time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, dev.Tail())
	}
	read := func(flag, arg, table string) ([]string, error) {
		out, err := h.cli("read", flag, arg, "--table", table, "--format", "jsonl")
		if err != nil {
			return nil, err
		}
		var tenants []string
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var row struct {
				Tenant string `json:"tenant_id"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			tenants = append(tenants, row.Tenant)
		}
		return tenants, nil
	}
	for _, c := range []struct {
		flag, arg, table string
		want             []string
	}{
		{"--destination", "~c4n64", "public.items", []string{"a.b"}},
		{"--destination", "~c4n64", "public.only", nil}, // holds nothing: reads nothing
		{"--value", "a.b", "public.items", []string{"a.b"}},
		{"--value", "a.b", "public.only", nil},
		{"--value", "~c4n64", "public.items", []string{"~c4n64"}},
		{"--value", "~c4n64", "public.only", []string{"~c4n64"}},
		{"--destination", "~fphj8rhm6g", "public.only", []string{"~c4n64"}},
	} {
		got, err := read(c.flag, c.arg, c.table)
		if err != nil && !strings.Contains(err.Error(), "404") {
			t.Fatalf("read %s %s --table %s: %v", c.flag, c.arg, c.table, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("read %s %s --table %s: tenants %q, want %q", c.flag, c.arg, c.table, got, c.want)
		}
	}
	// An alias is refused, naming the canonical name; so is a value given
	// as a name.
	for _, args := range [][]string{
		{"read", "--destination", "~c4n65", "--table", "public.items"},
		{"destinations", "pause", "~c4n65"},
		{"destinations", "retire", "~c4n65", "--yes"},
		{"destinations", "list", "--destination", "~c4n65"},
	} {
		if out, err := h.cli(args...); err == nil || !strings.Contains(err.Error(), "the canonical name of that value is ~c4n64") {
			t.Errorf("sluice %s: %q, %v; want it refused naming ~c4n64", strings.Join(args, " "), out, err)
		}
	}
	if out, err := h.cli("read", "--destination", "a.b", "--table", "public.items"); err == nil || !strings.Contains(err.Error(), "--value") {
		t.Errorf("read --destination a.b: %q, %v; want it refused, pointing at --value", out, err)
	}
	if out, err := h.cli("read", "--destination", "~c4n64", "--value", "a.b", "--table", "public.items"); err == nil {
		t.Errorf("read with both flags: %q; want it refused", out)
	}
	// The alias paused nothing; pausing by value pauses that tenant's
	// destination and no other.
	if l := notActive(h.list()); len(l) != 0 {
		t.Fatalf("destinations not active after refused commands: %+v", l)
	}
	if out := h.mustCLI("destinations", "pause", "--value", "~c4n64"); !strings.Contains(out, "~fphj8rhm6g: active -> paused") {
		t.Fatalf("pause --value ~c4n64: %q", out)
	}
	if l := h.list(); len(notActive(l)) != 1 || l["~fphj8rhm6g"].State != "paused" {
		t.Fatalf("after pause --value ~c4n64: %+v", l)
	}
	if out := h.mustCLI("destinations", "resume", "~fphj8rhm6g"); !strings.Contains(out, "paused -> active") {
		t.Fatalf("resume: %q", out)
	}
}

// notActive keeps the listed destinations that are not active
// (`destinations list` lists every known destination).
func notActive(l map[string]listRow) map[string]listRow {
	out := map[string]listRow{}
	for name, r := range l {
		if r.State != "active" {
			out[name] = r
		}
	}
	return out
}
