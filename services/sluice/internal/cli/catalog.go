package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/secret"
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
	var (
		listen   string
		insecure bool
	)
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the embedded chDB catalog over ClickHouse's HTTP interface, so several sluice processes can share it (catalog.url: http://ADDR)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig(true)
			if err != nil {
				return &exitError{2, err}
			}
			return serveCatalog(cmd, cfg.Catalog, cfg.DataDir, listen, insecure)
		},
	}
	serve.Flags().StringVar(&listen, "listen", "127.0.0.1:8123", "address to serve the ClickHouse HTTP interface on")
	serve.Flags().BoolVar(&insecure, "insecure-no-auth", false, "serve without credentials, on a loopback address only (every local user and process can then read and write the catalog)")
	cmd.AddCommand(serve)
	return cmd
}

// CatalogPasswordFile is where `catalog serve` keeps the password it
// generates when none is configured: <data_dir>/catalog_password, 0600.
func CatalogPasswordFile(dataDir string) string { return filepath.Join(dataDir, "catalog_password") }

// serveCatalog hosts the embedded engine over ClickHouse's HTTP interface:
// GET queries run read-only, and every request needs the catalog's
// credentials: catalog.user/password from the environment, or a password
// generated on first start into CatalogPasswordFile (catalog.password_file
// for the clients). Only insecure serves without them, on loopback only.
func serveCatalog(cmd *cobra.Command, cfg config.Catalog, dataDir, listen string, insecure bool) error {
	if cfg.URL != "embedded" {
		return &exitError{2, fmt.Errorf("catalog serve hosts the embedded engine; catalog.url is %q", cfg.URL)}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := chdbhttp.Options{User: cfg.User, Password: cfg.Password, InsecureNoAuth: insecure, Log: log}
	if insecure && (cfg.User != "" || cfg.Password != "") {
		return &exitError{2, errors.New("--insecure-no-auth with SLUICE_CATALOG_USER/PASSWORD set: drop one")}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	if err := secret.DataDir(dataDir); err != nil {
		_ = ln.Close()
		return err
	}
	if opts.Password == "" && !insecure {
		path := cfg.PasswordFile
		if path == "" {
			path = CatalogPasswordFile(dataDir)
		}
		pw, created, err := secret.ReadOrCreate(path)
		if err != nil {
			_ = ln.Close()
			return &exitError{2, fmt.Errorf("reading the catalog password: %w", err)}
		}
		opts.Password = pw
		abs, _ := filepath.Abs(path)
		if created {
			fmt.Fprintf(os.Stderr, "generated the catalog password into %s (mode 0600)\n", abs)
		}
		opts.AuthHint = "catalog serve's password is in " + abs + ": give clients catalog.password_file or SLUICE_CATALOG_PASSWORD"
		fmt.Fprintf(os.Stderr, "clients: SLUICE_CATALOG_PASSWORD_FILE=%s (user %q)\n", abs, userOrDefault(cfg.User))
	}
	if err := chdbhttp.CheckListen(ln.Addr(), opts); err != nil {
		_ = ln.Close()
		return &exitError{2, err}
	}
	eng, err := chdb.Open(filepath.Join(dataDir, "catalog"))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("opening the embedded catalog: %w", err)
	}
	defer eng.Close()
	fmt.Fprintf(os.Stderr, "serving the embedded catalog on http://%s (catalog.url for other processes)\n", ln.Addr())
	return chdbhttp.Serve(cmd.Context(), ln, chdbhttp.New(eng, opts))
}

func userOrDefault(u string) string {
	if u == "" {
		return "default"
	}
	return u
}
