package chdbhttp

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
)

var (
	settingsWord = regexp.MustCompile(`(?i)\bSETTINGS\b`)
	intoOutfile  = regexp.MustCompile(`(?i)\bINTO\s+OUTFILE\b`)
)

// readOnlyStatement prepares a GET's (or HEAD's) query for readonly = 1,
// which ClickHouse's HTTP interface implies for GET and which the engine
// enforces: it refuses writes, DDL, SET and the file(), url() and other
// table functions that read or write outside the catalog's tables. The
// setting can only ride on the statement (the engine has one session,
// shared with the writers), and two things would let a query escape a
// trailing SETTINGS readonly = 1, both measured on libchdb 26.5:
//
//   - a second statement (`SELECT 1; INSERT INTO FUNCTION file(…) …`): the
//     engine runs every statement of a call, and the SETTINGS belongs only
//     to the last. So the query is replaced by the engine's own rendering
//     of it (formatQuery), which parses exactly one statement and refuses
//     more ("Multi-statements are not allowed");
//   - a SETTINGS clause inside it: a subquery's `SETTINGS readonly = 0`
//     overrides the outer one, and `SELECT * FROM (SELECT … FROM
//     file('/etc/passwd') SETTINGS readonly = 0) SETTINGS readonly = 1`
//     reads the file. So a rendering that holds the word SETTINGS anywhere
//     is refused: a GET query takes its settings from URL parameters.
//
// And one thing readonly = 1 does not cover: SELECT … INTO OUTFILE, which
// the embedded engine (clickhouse-local) writes as a client would, is
// refused in the rendering too.
func readOnlyStatement(r *http.Request, eng *chdb.Conn, query string) (string, error) {
	out, err := eng.QueryRaw(r.Context(), "SELECT formatQuery("+quoteString(query)+")", "RawBLOB")
	if err != nil {
		return "", err
	}
	stmt := strings.TrimSpace(string(out))
	if settingsWord.MatchString(stmt) {
		return "", newErr(http.StatusBadRequest, codeReadonly, "a GET query runs with readonly = 1 and cannot carry a SETTINGS clause; give settings as URL parameters, or send the query with POST")
	}
	if intoOutfile.MatchString(stmt) {
		return "", newErr(http.StatusBadRequest, codeReadonly, "a GET query runs with readonly = 1 and cannot write INTO OUTFILE")
	}
	return stmt, nil
}

// quoteString renders s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
