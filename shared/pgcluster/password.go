package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// hbaFile is the client authentication file of a cluster with a password
// (Options.Password): TCP needs the password (scram-sha-256); the unix
// socket, in Dir (the server user's alone, 0700), stays trust, and is how
// sluice sets the password on a cluster initialized without one.
const hbaFile = "sluice_hba.conf"

const hbaText = `# written by sluice pgcluster on every start (Options.Password)
local all         all                 trust
host  all         all  127.0.0.1/32   scram-sha-256
host  all         all  ::1/128        scram-sha-256
host  replication all  127.0.0.1/32   scram-sha-256
host  replication all  ::1/128        scram-sha-256
`

// writeHBA writes hbaFile and returns the setting that makes the server
// use it, or nothing without a password.
func (c *Cluster) writeHBA() (map[string]string, error) {
	if c.password == "" {
		return nil, nil
	}
	path := filepath.Join(c.dir, hbaFile)
	if err := os.WriteFile(path, []byte(hbaText), 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := c.chown(path); err != nil {
		return nil, err
	}
	return map[string]string{"hba_file": path, "password_encryption": "scram-sha-256"}, nil
}

// pwFile writes the password where initdb (run as the server's user) can
// read it, for --pwfile; the caller removes it.
func (c *Cluster) pwFile() (string, error) {
	f, err := os.CreateTemp("", "sluice-pgpw-*")
	if err != nil {
		return "", fmt.Errorf("writing the password file for initdb: %w", err)
	}
	_, werr := f.WriteString(c.password + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("writing the password file for initdb: %w", err)
	}
	if err := c.chown(f.Name()); err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// ensurePassword makes the running server require c.password over TCP:
// a server still on another hba_file (one started before the password) is
// restarted, and a postgres role without the password (a cluster
// initialized before it) gets it, through the trusted unix socket.
// settings are the Options.Settings to rewrite the configuration with;
// mayRestart is false on the check after that restart.
func (c *Cluster) ensurePassword(ctx context.Context, settings map[string]string, mayRestart bool) error {
	if c.password == "" {
		return nil
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "28P01" { // invalid_password: the role has none yet
		conn, err = c.setPassword(ctx)
	}
	if err != nil {
		return fmt.Errorf("connecting with the cluster's password: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var hba string
	if err := conn.QueryRow(ctx, "SELECT current_setting('hba_file')").Scan(&hba); err != nil {
		return fmt.Errorf("reading hba_file: %w", err)
	}
	if hba != filepath.Join(c.dir, hbaFile) && !mayRestart {
		return fmt.Errorf("the server uses %s after a restart, not %s", hba, hbaFile)
	}
	if hba != filepath.Join(c.dir, hbaFile) {
		// Adopted, started before the password was asked for: restart
		// onto it.
		conn.Close(ctx)
		if err := c.writeConf(c.Port(), settings); err != nil {
			return err
		}
		if err := c.Restart(ctx); err != nil {
			return err
		}
		return c.ensurePassword(ctx, settings, false) // now on hbaFile: sets the password if the role has none
	}
	return nil
}

// setPassword sets the postgres role's password through the unix socket
// (trust) and returns a TCP connection made with it.
func (c *Cluster) setPassword(ctx context.Context) (*pgx.Conn, error) {
	sock := c.dir
	if len(sock)+len("/.s.PGSQL.65535") > 107 {
		return nil, fmt.Errorf("%w: the cluster has no password yet and no unix socket (%s is too long a path) to set it through: remove the cluster or move it", ErrBadDir, c.dir)
	}
	dsn := fmt.Sprintf("postgres://%s@/postgres?host=%s&port=%d&sslmode=disable", pgUser, url.QueryEscape(sock), c.Port())
	sc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting through the unix socket to set the password: %w", err)
	}
	_, err = sc.Exec(ctx, "ALTER ROLE "+pgUser+" PASSWORD '"+strings.ReplaceAll(c.password, "'", "''")+"'")
	sc.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("setting the password: %w", err)
	}
	return pgx.Connect(ctx, c.DSN("postgres"))
}
