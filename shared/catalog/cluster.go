package catalog

import (
	"context"
	"strings"
)

// OnCluster returns conn with every DDL statement rewritten for a
// replicated ClickHouse cluster named cluster (config catalog.cluster):
// CREATE, ALTER and DROP of a table or view run ON CLUSTER on every node,
// and every *MergeTree engine becomes its Replicated*MergeTree twin with
// the server's default ZooKeeper path and replica name
// (default_replica_path, default_replica_name: /clickhouse/tables/{uuid}/{shard}
// and {replica} unless the server configures others). Queries and INSERTs
// pass unchanged. An empty cluster returns conn.
//
// Not run against a ClickHouse cluster by any test (tested for the
// statements it generates, TestOnClusterStatements): the lease table stays
// ENGINE = Memory, one per node, so every publisher must reach the same
// node (see README, "Replicated ClickHouse").
func OnCluster(conn Conn, cluster string) Conn {
	if cluster == "" {
		return conn
	}
	return clusterConn{Conn: conn, cluster: cluster}
}

type clusterConn struct {
	Conn
	cluster string
}

func (c clusterConn) Exec(ctx context.Context, query string) error {
	return c.Conn.Exec(ctx, onClusterSQL(query, c.cluster))
}

// ddlPrefixes are the DDL statements the catalog issues, each followed by
// the object's name.
var ddlPrefixes = []string{
	"CREATE TABLE IF NOT EXISTS ",
	"CREATE TABLE ",
	"CREATE OR REPLACE VIEW ",
	"CREATE VIEW IF NOT EXISTS ",
	"CREATE VIEW ",
	"ALTER TABLE ",
	"DROP TABLE IF EXISTS ",
	"DROP VIEW IF EXISTS ",
	"DROP TABLE ",
	"DROP VIEW ",
}

// onClusterSQL rewrites one statement (see OnCluster).
func onClusterSQL(q, cluster string) string {
	body := strings.TrimLeft(q, " \t\n")
	for _, p := range ddlPrefixes {
		if !strings.HasPrefix(strings.ToUpper(body[:min(len(body), len(p))]), p) {
			continue
		}
		end := len(p) + nameLen(body[len(p):])
		out := body[:end] + " ON CLUSTER " + ident(cluster) + body[end:]
		if strings.HasPrefix(p, "CREATE TABLE") {
			out = replicatedEngine(out)
		}
		return out
	}
	return q
}

// nameLen is the length of the (possibly backquoted, possibly
// database-qualified) object name at the start of s.
func nameLen(s string) int {
	i := 0
	for i < len(s) {
		switch {
		case s[i] == '`':
			i++
			for i < len(s) && s[i] != '`' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case s[i] == '.' || s[i] == '_' || s[i] >= '0' && s[i] <= '9' || s[i]|0x20 >= 'a' && s[i]|0x20 <= 'z':
			i++
		default:
			return min(i, len(s))
		}
	}
	return min(i, len(s))
}

// replicatedEngine turns ENGINE = <X>MergeTree into ENGINE =
// Replicated<X>MergeTree outside quoted names and string literals.
func replicatedEngine(q string) string {
	const kw = "ENGINE = "
	var b strings.Builder
	for i := 0; i < len(q); {
		switch c := q[i]; {
		case c == '`' || c == '\'':
			j := i + 1
			for j < len(q) && q[j] != c {
				if q[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(q))
			b.WriteString(q[i:j])
			i = j
		case strings.HasPrefix(q[i:], kw):
			b.WriteString(kw)
			i += len(kw)
			eng := nameLen(q[i:])
			name := q[i : i+eng]
			if strings.HasSuffix(name, "MergeTree") && !strings.HasPrefix(name, "Replicated") {
				b.WriteString("Replicated")
			}
			b.WriteString(name)
			i += eng
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}
