package proto

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// SchemaMetadata is the schema-level metadata of a batch or pack of table
// with primary key key and routing column routing: the key as a list
// (MetaKey) and, for builds that read only it, comma-joined
// (MetaPrimaryKey).
func SchemaMetadata(table string, key []string, routing string) arrow.Metadata {
	list, err := json.Marshal(key)
	if err != nil { // a []string always marshals
		panic(err)
	}
	if key == nil {
		list = []byte("[]")
	}
	return arrow.NewMetadata(
		[]string{MetaTable, MetaKey, MetaPrimaryKey, MetaRouting},
		[]string{table, string(list), strings.Join(key, ","), routing})
}

// PrimaryKey returns the primary key columns md names, in key order:
// MetaKey's list, or, in a schema written before MetaKey, MetaPrimaryKey
// split at its commas. No key is nil.
func PrimaryKey(md arrow.Metadata) ([]string, error) {
	if v, ok := md.GetValue(MetaKey); ok {
		var key []string
		if err := json.Unmarshal([]byte(v), &key); err != nil {
			return nil, fmt.Errorf("schema metadata %s is not a JSON list of names: %w", MetaKey, err)
		}
		for _, k := range key {
			if k == "" {
				return nil, fmt.Errorf("schema metadata %s names an empty column: %s", MetaKey, v)
			}
		}
		if len(key) == 0 {
			return nil, nil
		}
		return key, nil
	}
	if v, ok := md.GetValue(MetaPrimaryKey); ok && v != "" {
		return strings.Split(v, ","), nil
	}
	return nil, nil
}
