package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
)

// Format is an export file format.
type Format string

// The formats.
const (
	Parquet Format = "parquet"
	Arrow   Format = "arrow"
	CSV     Format = "csv"
	JSONL   Format = "jsonl"
)

// ErrFormat is returned for a format this package does not write.
var ErrFormat = errors.New("unknown export format: want parquet, arrow, csv or jsonl")

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Parquet, Arrow, CSV, JSONL:
		return f, nil
	}
	return "", fmt.Errorf("format %q: %w", s, ErrFormat)
}

// Ext is the file name extension of a format.
func (f Format) Ext() string { return string(f) }

// ContentType is the MIME type of a format.
func (f Format) ContentType() string {
	switch f {
	case Parquet:
		return "application/vnd.apache.parquet"
	case Arrow:
		return "application/vnd.apache.arrow.file"
	case CSV:
		return "text/csv; charset=utf-8"
	}
	return "application/x-ndjson"
}

// FileName is the name of table's file in an export directory.
func FileName(table string, f Format) string { return table + "." + f.Ext() }

// Column is one column of an exported table: its name and kind.
type Column struct {
	Name string
	Kind proto.Kind
}

// Page is one page of rows, each a JSON object keyed by column, in column
// order (as the catalog's Read renders them); Next is "" on the last page.
type Page struct {
	Rows []json.RawMessage
	Next string
}

// Pager returns the page after cursor after ("" for the first).
type Pager func(ctx context.Context, after string) (Page, error)

// Write writes every page of pages to w in format f. cols are the table's
// columns (the Arrow formats' schema, and the CSV header of an empty
// table). progress, when not nil, is called with the rows written so far
// after each page. It returns the number of rows written.
func Write(ctx context.Context, w io.Writer, f Format, cols []Column, pages Pager, progress func(rows int64)) (int64, error) {
	var sink rowSink
	switch f {
	case JSONL:
		sink = &jsonlSink{w: bufio.NewWriterSize(w, 256<<10)}
	case CSV:
		sink = &csvSink{w: csv.NewWriter(w), cols: cols}
	case Arrow, Parquet:
		s, err := newArrowSink(w, f, cols)
		if err != nil {
			return 0, err
		}
		sink = s
	default:
		return 0, fmt.Errorf("format %q: %w", f, ErrFormat)
	}
	var n int64
	after := ""
	for {
		p, err := pages(ctx, after)
		if err != nil {
			sink.abort()
			return n, fmt.Errorf("reading rows after %d: %w", n, err)
		}
		if err := sink.page(p.Rows); err != nil {
			sink.abort()
			return n, fmt.Errorf("writing rows after %d: %w", n, err)
		}
		n += int64(len(p.Rows))
		if progress != nil {
			progress(n)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if err := sink.close(); err != nil {
		return n, fmt.Errorf("finishing the %s file: %w", f, err)
	}
	return n, nil
}

// rowSink writes pages of rows in one format.
type rowSink interface {
	page(rows []json.RawMessage) error
	close() error
	abort()
}

type jsonlSink struct{ w *bufio.Writer }

func (j *jsonlSink) page(rows []json.RawMessage) error {
	for _, r := range rows {
		j.w.Write(r)
		if err := j.w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}
func (j *jsonlSink) close() error { return j.w.Flush() }
func (j *jsonlSink) abort()       { _ = j.w.Flush() }

type csvSink struct {
	w      *csv.Writer
	cols   []Column
	header bool
}

func (c *csvSink) page(rows []json.RawMessage) error {
	for _, r := range rows {
		keys, vals, err := CSVCells(r)
		if err != nil {
			return err
		}
		if !c.header {
			c.header = true
			if err := c.w.Write(keys); err != nil {
				return err
			}
		}
		if err := c.w.Write(vals); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvSink) close() error {
	if !c.header && len(c.cols) > 0 { // an empty table still names its columns
		names := make([]string, len(c.cols))
		for i, col := range c.cols {
			names[i] = SafeCSVCell(col.Name)
		}
		if err := c.w.Write(names); err != nil {
			return err
		}
	}
	c.w.Flush()
	return c.w.Error()
}
func (c *csvSink) abort() { c.w.Flush() }

// CSVCells is OrderedCells for a CSV file: every key and cell passes
// through SafeCSVCell, so a spreadsheet that opens the file never runs a
// tenant's value as a formula.
func CSVCells(r json.RawMessage) (keys []string, vals []string, err error) {
	keys, vals, err = OrderedCells(r)
	for i := range keys {
		keys[i] = SafeCSVCell(keys[i])
	}
	for i := range vals {
		vals[i] = SafeCSVCell(vals[i])
	}
	return keys, vals, err
}

// SafeCSVCell neutralizes a CSV cell a spreadsheet would run as a formula
// (OWASP "CSV injection"): a cell that starts with =, +, -, @, a tab or a
// carriage return gets a single quote in front ('=1+1), which spreadsheets
// take as "this is text". So that this stays reversible, a cell that
// already starts with a single quote gets one more (a cell 'x is
// written with two quotes before the x):
// UnsafeCSVCell (drop one leading quote of any cell that has one) gives
// back the value exactly. Only cells that start with one of those seven
// characters change; a negative number's cell (-5) does too, as text.
func SafeCSVCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '-', '+':
		// A plain number (a negative value, an exponent's sign) is no
		// formula: a spreadsheet reads it as the number it is.
		if plainNumber(s[1:]) {
			return s
		}
		return "'" + s
	case '=', '@', '\t', '\r', '\'':
		return "'" + s
	}
	return s
}

// plainNumber reports whether s is digits with an optional fraction and
// exponent (what a JSON number is after its sign).
func plainNumber(s string) bool {
	digits := func(i int) int {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j
	}
	i := digits(0)
	if i == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

// UnsafeCSVCell reverses SafeCSVCell.
func UnsafeCSVCell(s string) string { return strings.TrimPrefix(s, "'") }

// OrderedCells decodes a row (a JSON object) into its keys in order and
// each value as a CSV cell (Cell).
func OrderedCells(r json.RawMessage) (keys []string, vals []string, err error) {
	err = eachField(r, func(k string, v json.RawMessage) error {
		keys = append(keys, k)
		vals = append(vals, Cell(v))
		return nil
	})
	return keys, vals, err
}

// eachField calls f with every key and raw value of a JSON object, in order.
func eachField(r json.RawMessage, f func(k string, v json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("row is not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("decoding a row: %w", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("decoding a row: %w", err)
		}
		if err := f(t.(string), v); err != nil {
			return err
		}
	}
	return nil
}

// Cell renders a JSON value as a CSV cell: a string unquoted, null empty,
// everything else as its JSON text.
func Cell(v json.RawMessage) string {
	if string(v) == "null" {
		return ""
	}
	var s string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// ColumnsOf returns the columns of a table as a page's first row has them
// (the read path renders the schema of the snapshot read, which may be
// older than the latest registration), each with its kind from known; a
// column known no longer (dropped since) is exported as its text. Without
// a row, known is the answer.
func ColumnsOf(first json.RawMessage, known []Column) ([]Column, error) {
	if first == nil {
		return known, nil
	}
	kinds := make(map[string]proto.Kind, len(known))
	for _, c := range known {
		kinds[c.Name] = c.Kind
	}
	var cols []Column
	err := eachField(first, func(k string, _ json.RawMessage) error {
		kind, ok := kinds[k]
		if !ok {
			kind = proto.KindOther
		}
		cols = append(cols, Column{Name: k, Kind: kind})
		return nil
	})
	return cols, err
}
