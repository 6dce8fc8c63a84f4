package catalog

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/config"
)

// Open connects to the catalog engine cfg.URL names: "embedded" starts (or
// joins) the in-process chDB engine with its data under <dataDir>/catalog;
// clickhouse://host:9000/db or http(s)://host:8123/db connects to a
// ClickHouse server through clickhouse-go, its DDL ON CLUSTER cfg.Cluster
// when that is set (OnCluster).
func Open(ctx context.Context, cfg config.Catalog, dataDir string) (Conn, error) {
	switch cfg.URL {
	case "", "embedded":
		c, err := chdb.Open(filepath.Join(dataDir, "catalog"))
		if err != nil {
			return nil, fmt.Errorf("opening embedded catalog: %w", err)
		}
		return c, nil
	default:
		s, err := OpenServer(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return OnCluster(s, cfg.Cluster), nil
	}
}
