package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/config"
)

// SlotInfo is one replication slot and the WAL it makes the source keep.
type SlotInfo struct {
	Name              string `json:"slot_name"`
	Plugin            string `json:"plugin,omitempty"`
	Type              string `json:"slot_type"`
	Database          string `json:"database,omitempty"`
	Active            bool   `json:"active"`
	ActivePID         *int32 `json:"active_pid,omitempty"`
	RestartLSN        string `json:"restart_lsn,omitempty"`
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn,omitempty"`
	CurrentLSN        string `json:"current_lsn"`
	// RetainedBytes is current LSN - restart_lsn: the WAL the slot pins.
	RetainedBytes int64 `json:"retained_bytes"`
	// UnconfirmedBytes is current LSN - confirmed_flush_lsn: how far the
	// reader's confirmations are behind.
	UnconfirmedBytes *int64 `json:"unconfirmed_bytes,omitempty"`
	WALStatus        string `json:"wal_status,omitempty"`
	SafeWALSize      *int64 `json:"safe_wal_size,omitempty"`
	// OverWarn is true when RetainedBytes exceeds the --warn threshold.
	OverWarn bool `json:"over_warn"`
}

// slotQuery reads pg_replication_slots; on a standby the current LSN is the
// last received one.
const slotQuery = `
SELECT s.slot_name::text, coalesce(s.plugin::text, ''), s.slot_type, coalesce(s.database::text, ''),
       s.active, s.active_pid,
       coalesce(s.restart_lsn::text, ''), coalesce(s.confirmed_flush_lsn::text, ''),
       cur.lsn::text,
       coalesce(pg_wal_lsn_diff(cur.lsn, s.restart_lsn), 0)::bigint,
       pg_wal_lsn_diff(cur.lsn, s.confirmed_flush_lsn)::bigint,
       coalesce(s.wal_status, ''), s.safe_wal_size
FROM pg_replication_slots s,
     (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END AS lsn) cur
WHERE $1 = '' OR s.slot_name = $1
ORDER BY s.slot_name`

// QuerySlots returns the replication slot named slot (every slot when slot
// is empty) of the database at dsn, marking those retaining more than warn
// bytes (warn <= 0: none).
func QuerySlots(ctx context.Context, dsn, slot string, warn int64) ([]SlotInfo, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting to the source: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, slotQuery, slot)
	if err != nil {
		return nil, fmt.Errorf("reading pg_replication_slots: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotInfo, error) {
		var s SlotInfo
		err := r.Scan(&s.Name, &s.Plugin, &s.Type, &s.Database, &s.Active, &s.ActivePID,
			&s.RestartLSN, &s.ConfirmedFlushLSN, &s.CurrentLSN, &s.RetainedBytes, &s.UnconfirmedBytes,
			&s.WALStatus, &s.SafeWALSize)
		s.OverWarn = warn > 0 && s.RetainedBytes > warn
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading pg_replication_slots: %w", err)
	}
	return out, nil
}

func newSlotCmd(g *globalFlags) *cobra.Command {
	var slot, dsn, warn string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "slot",
		Short: "The replication slot's retained WAL (connects to source.dsn); exit 1 when over --warn",
		Long: `Shows the source's replication slot from pg_replication_slots: active, restart_lsn,
confirmed_flush_lsn, and the WAL it retains (current LSN - restart_lsn). Postgres keeps that
WAL until the reader confirms it, so a growing number means the reader is down or behind.
Exits 1 when a slot retains more than --warn, or when the slot does not exist.

It connects to source.dsn (SLUICE_SOURCE_DSN) directly. With no source.dsn it finds the
private Postgres of a running ` + "`sluice dev`" + ` under data_dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limit, err := config.ParseByteSize(warn)
			if err != nil {
				return &exitError{2, fmt.Errorf("--warn: %w", err)}
			}
			cfg, err := g.loadConfig(true)
			if err != nil {
				return &exitError{2, err}
			}
			if dsn == "" {
				dsn, err = sourceDSN(cfg)
				if err != nil {
					return &exitError{2, err}
				}
			}
			name := slot
			if name == "" && !all {
				name = cfg.Source.Slot
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			slots, err := QuerySlots(ctx, dsn, name, int64(limit))
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(os.Stdout).Encode(slots); err != nil {
					return err
				}
			} else if err := printSlots(os.Stdout, slots, int64(limit)); err != nil {
				return err
			}
			if len(slots) == 0 {
				if name == "" {
					return &exitError{1, errors.New("the source has no replication slot")}
				}
				return &exitError{1, fmt.Errorf("replication slot %q does not exist (the reader creates it when it starts)", name)}
			}
			var over []string
			for _, s := range slots {
				if s.OverWarn {
					over = append(over, s.Name)
				}
			}
			if len(over) > 0 {
				return &exitError{1, fmt.Errorf("slot %s retains more than %s of WAL", strings.Join(over, ", "), formatBytes(int64(limit)))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&slot, "slot", "", "slot name (default: source.slot)")
	cmd.Flags().BoolVar(&all, "all", false, "every replication slot of the source")
	cmd.Flags().StringVar(&dsn, "dsn", "", "Postgres URL of the source (default: source.dsn)")
	cmd.Flags().StringVar(&warn, "warn", "1GiB", "warn (and exit 1) when a slot retains more WAL than this")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the slots as JSON")
	return cmd
}

// sourceDSN is source.dsn, or the private cluster of a running `sluice dev`.
func sourceDSN(cfg config.Config) (string, error) {
	if cfg.Source.DSN != "" {
		return cfg.Source.DSN, nil
	}
	pid := filepath.Join(cfg.DataDir, "pg", "postmaster.pid")
	f, err := os.Open(pid)
	if err != nil {
		return "", fmt.Errorf("source.dsn is empty and no `sluice dev` Postgres is running under %s: set SLUICE_SOURCE_DSN or pass --dsn", filepath.Join(cfg.DataDir, "pg"))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if line == 4 { // postmaster.pid line 4: the port
			port, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			if err != nil {
				break
			}
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/demo?sslmode=disable", port), nil
		}
	}
	return "", fmt.Errorf("reading the port of the `sluice dev` Postgres from %s: unexpected format", pid)
}

func printSlots(w io.Writer, slots []SlotInfo, warn int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tACTIVE\tRESTART_LSN\tCONFIRMED_FLUSH_LSN\tCURRENT_LSN\tRETAINED\tWAL_STATUS\t")
	for _, s := range slots {
		flag := ""
		if s.OverWarn {
			flag = "WARNING: over " + formatBytes(warn)
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Active, dash(s.RestartLSN), dash(s.ConfirmedFlushLSN),
			s.CurrentLSN, formatBytes(s.RetainedBytes), dash(s.WALStatus), flag)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatBytes renders n with a binary unit: 512B, 1.5KiB, 3.0GiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}
