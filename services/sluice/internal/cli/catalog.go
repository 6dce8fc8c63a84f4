package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

func newCatalogCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "catalog", Short: "Catalog maintenance: rebuild from the packs, serve the embedded engine"}
	cmd.AddCommand(&cobra.Command{
		Use:   "rebuild",
		Short: "Drop every catalog object and re-index everything from the pack store (stop the pipeline first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig(true)
			if err != nil {
				return &exitError{2, err}
			}
			ctx := cmd.Context()
			conn, err := catalog.Open(ctx, cfg.Catalog, cfg.DataDir)
			if err != nil {
				return fmt.Errorf("opening the catalog: %w", err)
			}
			defer conn.Close()
			store, err := packstore.OpenConfig(ctx, cfg)
			if err != nil {
				return fmt.Errorf("opening the pack store: %w", err)
			}
			stats, err := catalog.Rebuild(ctx, conn, store, catalog.Options{Prefix: cfg.Catalog.Prefix})
			if err != nil {
				return fmt.Errorf("rebuilding the catalog: %w", err)
			}
			fmt.Printf("rebuilt: %+v\n", stats)
			return nil
		},
	})
	var listen string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the embedded chDB catalog over ClickHouse's HTTP interface, so several sluice processes can share it (catalog.url: http://ADDR)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig(true)
			if err != nil {
				return &exitError{2, err}
			}
			return serveCatalog(cmd, cfg.Catalog, cfg.DataDir, listen)
		},
	}
	serve.Flags().StringVar(&listen, "listen", "127.0.0.1:8123", "address to serve the ClickHouse HTTP interface on")
	cmd.AddCommand(serve)
	return cmd
}

func serveCatalog(cmd *cobra.Command, cfg config.Catalog, dataDir, listen string) error {
	if cfg.URL != "embedded" {
		return &exitError{2, fmt.Errorf("catalog serve hosts the embedded engine; catalog.url is %q", cfg.URL)}
	}
	eng, err := catalog.OpenChDB(filepath.Join(dataDir, "catalog"))
	if err != nil {
		return fmt.Errorf("opening the embedded catalog: %w", err)
	}
	defer eng.Close()
	srv := &http.Server{Addr: listen, Handler: chdbhttp.New(eng, chdbhttp.Options{User: cfg.User, Password: cfg.Password}), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(os.Stderr, "serving the embedded catalog on http://%s (catalog.url for other processes)\n", listen)
	select {
	case err := <-errc:
		return err
	case <-cmd.Context().Done():
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
}
