package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options configures a cluster.
type Options struct {
	// Dir is the data directory. It is created (and initdb'd) when it holds
	// no PG_VERSION file.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks one (the previous start's
	// port when it is still free).
	Port int
	// Settings are extra postgresql.conf settings, written after (and so
	// overriding) the defaults, e.g. {"fsync": "off"}. Values that are not a
	// plain word or number are single-quoted.
	Settings map[string]string
	// StartTimeout bounds pg_ctl start; 0 means 60s.
	StartTimeout time.Duration
	// Template, when set, names a directory made by InitTemplate: a new
	// cluster copies it instead of running initdb (faster for tests).
	Template string
	// Owned records the calling process as the server's owner (a file in
	// Dir). A later owned Start that finds the server still running after
	// its owner exited (a crash) stops it and starts a fresh one; it never
	// stops a server whose owner runs (ErrOwned).
	Owned bool
	// BinDir is the folder of initdb, pg_ctl and postgres to run instead
	// of BinDir() (a test of another server version; BinDirAtLeast picks
	// one of a given major or newer).
	BinDir string
	// Password, when set, is required of the postgres role over TCP
	// (scram-sha-256; the unix socket in Dir stays trust) and carried by
	// DSN; a cluster initialized without one gets it on this start.
	Password string
}

// Cluster is a private Postgres cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	dir     string
	bindir  string
	runAs   *user.User // nil: run binaries as the current user
	timeout time.Duration

	mu   sync.Mutex // guards port
	port int

	stale int // pid of the exited owner whose server Start stopped

	password string // Options.Password
}

const (
	confFile    = "sluice.conf"
	logFile     = "server.log"
	includeLine = "include_if_exists = 'sluice.conf'"
	pgUser      = "postgres"
)

// BinDir returns the folder holding initdb, pg_ctl and postgres:
// $SLUICE_PG_BINDIR, else `pg_config --bindir`, else the newest
// /usr/lib/postgresql/<version>/bin.
func BinDir() (string, error) {
	var candidates []string
	if d := os.Getenv("SLUICE_PG_BINDIR"); d != "" {
		candidates = append(candidates, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(m) > 0 {
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		candidates = append(candidates, m...)
	}
	for _, d := range candidates {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (looked in %v)", ErrNoBinaries, candidates)
}

// Version returns the version of the server binaries in bindir, as
// `postgres --version` prints it: "17.10", "15.14 (Debian 15.14-0+deb12u1)".
func Version(bindir string) (string, error) {
	out, err := exec.Command(filepath.Join(bindir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("reading the version of %s: %w", filepath.Join(bindir, "postgres"), err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) ")
	if !ok || v == "" {
		return "", fmt.Errorf("reading the version of %s: unexpected output %q", filepath.Join(bindir, "postgres"), out)
	}
	return v, nil
}

func versionOf(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

func hasServer(dir string) bool {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Start initializes the cluster if needed and starts its server (or adopts
// the server already running on Dir).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: Options.Dir is empty", ErrBadDir)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving cluster directory %s: %w", opts.Dir, err)
	}
	c, err := newCluster(dir, opts.BinDir)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout > 0 {
		c.timeout = opts.StartTimeout
	}
	c.password = opts.Password
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if opts.Template != "" {
			err = c.copyTemplate(ctx, opts.Template)
		} else {
			err = c.initdb(ctx, dir)
		}
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrBadDir, dir, err)
	}
	if opts.Owned {
		if err := c.reclaim(ctx); err != nil {
			return nil, err
		}
		c2, err := c.startOrAdopt(ctx, dir, opts)
		if err != nil {
			return nil, err
		}
		if err := c2.WriteOwner(os.Getpid()); err != nil {
			_ = c2.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
		if err := c2.ensurePassword(ctx, opts.Settings, true); err != nil {
			_ = c2.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
		return c2, nil
	}
	c2, err := c.startOrAdopt(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	if err := c2.ensurePassword(ctx, opts.Settings, true); err != nil {
		return nil, err
	}
	return c2, nil
}

// startOrAdopt starts the server, or adopts the one already running on dir.
func (c *Cluster) startOrAdopt(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	if port, ok := c.runningPort(ctx); ok {
		c.port = port
		return c, nil
	}
	var err error
	port := opts.Port
	auto := port == 0
	if auto {
		if prev := previousPort(dir); prev != 0 && portFree(prev) {
			port = prev
		} else if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		if err := c.writeConf(port, opts.Settings); err != nil {
			return nil, err
		}
		c.port = port
		err := c.start(ctx)
		if err == nil {
			return c, nil
		}
		if !auto || attempt >= 3 || !strings.Contains(err.Error(), "could not bind") && !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
}

func newCluster(dir, bindir string) (*Cluster, error) {
	if bindir == "" {
		var err error
		if bindir, err = BinDir(); err != nil {
			return nil, err
		}
	} else if !hasServer(bindir) {
		return nil, fmt.Errorf("%w (looked in %s)", ErrNoBinaries, bindir)
	}
	return newClusterIn(dir, bindir)
}

func newClusterIn(dir, bindir string) (*Cluster, error) {
	c := &Cluster{dir: dir, bindir: bindir, timeout: 60 * time.Second}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(pgUser)
		if err != nil {
			return nil, fmt.Errorf("looking up user %q (Postgres refuses to run as root; create the user, e.g. by installing the postgresql package): %w", pgUser, err)
		}
		c.runAs = u
	}
	return c, nil
}

// Dir returns the data directory.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the server log file.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, logFile) }

// Port returns the TCP port on 127.0.0.1.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// DSN returns the URL of database db as the superuser postgres, with the
// cluster's password when it has one (else trust auth).
func (c *Cluster) DSN(db string) string {
	u := url.User(pgUser)
	if c.password != "" {
		u = url.UserPassword(pgUser, c.password)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", u.String(), c.Port(), db)
}

// Running reports whether the server is up.
func (c *Cluster) Running(ctx context.Context) bool {
	_, ok := c.runningPort(ctx)
	return ok
}

// Stop shuts the server down in fast mode (clients are disconnected, a
// checkpoint is written). Stopping a stopped server is not an error.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.stop(ctx, "fast")
}

// Kill stops the server in immediate mode: no checkpoint, crash recovery on
// the next start, as after a power loss of the server process.
func (c *Cluster) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.stop(ctx, "immediate")
}

// Restart stops the server if it runs (fast) and starts it again on the same
// port.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}

// CreateDatabase creates database name if it does not exist.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to create database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}

// Watchdog starts a detached process that, once process pid has exited,
// stops this cluster in immediate mode and then removes removeDir (when not
// empty). It outlives the calling process; it is how a test binary that is
// killed still leaves no server behind.
func (c *Cluster) Watchdog(pid int, removeDir string) error {
	const script = `pid=$1; shift
while kill -0 "$pid" 2>/dev/null; do sleep 1; done
"$@" >/dev/null 2>&1
if [ -n "$SLUICE_WATCHDOG_RM" ]; then rm -rf "$SLUICE_WATCHDOG_RM"; fi`
	stop := c.command("pg_ctl", "stop", "-D", c.dir, "-m", "immediate", "-w", "-t", "30")
	args := append([]string{"-c", script, "sluice-pg-watchdog", strconv.Itoa(pid)}, stop...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = append(os.Environ(), "SLUICE_WATCHDOG_RM="+removeDir)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting cluster watchdog: %w", err)
	}
	return cmd.Process.Release()
}

// command returns the argv that runs a server binary as the right user.
func (c *Cluster) command(bin string, args ...string) []string {
	argv := append([]string{filepath.Join(c.bindir, bin)}, args...)
	if c.runAs != nil {
		argv = append([]string{"runuser", "-u", c.runAs.Username, "--"}, argv...)
	}
	return argv
}

func (c *Cluster) run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	argv := c.command(bin, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.dir
	// The postmaster inherits pg_ctl's process group: keep it out of ours so
	// a terminal's Ctrl-C does not stop the database under a draining sluice.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	out, err := cmd.CombinedOutput()
	return out, err
}

func (c *Cluster) prepareDir() error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("%w: creating %s: %v", ErrBadDir, c.dir, err)
	}
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	if err := os.Chown(c.dir, uid, gid); err != nil {
		return fmt.Errorf("%w: giving %s to user %s: %v", ErrBadDir, c.dir, pgUser, err)
	}
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadDir, err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		ownedByPG := sys != nil && int(sys.Uid) == uid
		if st.Mode().Perm()&0o001 == 0 && !ownedByPG {
			return fmt.Errorf("%w: %s is not traversable by user %s, who runs the server: chmod o+x it or put the cluster elsewhere", ErrBadDir, p, pgUser)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func (c *Cluster) initdb(ctx context.Context, dir string) error {
	args := []string{"-D", dir, "-U", pgUser, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"}
	if c.password != "" {
		pw, err := c.pwFile()
		if err != nil {
			return err
		}
		defer os.Remove(pw)
		args = append(args, "--pwfile="+pw)
	}
	out, err := c.run(ctx, "initdb", args...)
	if err != nil {
		return fmt.Errorf("initializing cluster in %s: %w: %s", dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// InitTemplate makes sure dir holds a freshly initdb'd data directory that
// Options.Template can copy. It is safe when several processes call it at
// once: the template is built beside dir and renamed into place. dir's
// parent must be traversable by the server's user.
func InitTemplate(ctx context.Context, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return nil
	}
	tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	c, err := newCluster(tmp, "")
	if err != nil {
		return err
	}
	if err := c.prepareDir(); err != nil {
		return err
	}
	if err := c.initdb(ctx, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "PG_VERSION")); serr == nil {
			return nil // another process won the race
		}
		return fmt.Errorf("installing cluster template %s: %w", dir, err)
	}
	return nil
}

func (c *Cluster) copyTemplate(ctx context.Context, template string) error {
	if _, err := os.Stat(filepath.Join(template, "PG_VERSION")); err != nil {
		return fmt.Errorf("%w: template %s is not an initialized cluster: %v", ErrBadDir, template, err)
	}
	// cp -a keeps modes and (as root) the server user's ownership.
	out, err := exec.CommandContext(ctx, "cp", "-a", template+"/.", c.dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying cluster template %s to %s: %w: %s", template, c.dir, err, bytes.TrimSpace(out))
	}
	return nil
}

func (c *Cluster) writeConf(port int, settings map[string]string) error {
	hba, err := c.writeHBA()
	if err != nil {
		return err
	}
	if len(hba) > 0 {
		merged := map[string]string{}
		for k, v := range settings {
			merged[k] = v
		}
		for k, v := range hba {
			merged[k] = v
		}
		settings = merged
	}
	sock := c.dir
	if len(sock)+len("/.s.PGSQL.65535") > 107 {
		sock = "" // too long for a unix socket path: TCP only
	}
	var b strings.Builder
	b.WriteString("# written by sluice pgcluster on every start; edit Options.Settings instead\n")
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, quote(v)) }
	kv("port", strconv.Itoa(port))
	kv("listen_addresses", "127.0.0.1")
	kv("unix_socket_directories", sock)
	kv("wal_level", "logical")
	kv("max_replication_slots", "64")
	kv("max_wal_senders", "64")
	kv("max_connections", "200")
	kv("TimeZone", "UTC")
	kv("log_timezone", "UTC")
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !settingRe.MatchString(k) {
			return fmt.Errorf("writing %s: setting name %q is not a Postgres parameter name", confFile, k)
		}
		kv(k, settings[k])
	}
	path := filepath.Join(c.dir, confFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := c.chown(path); err != nil {
		return err
	}
	main := filepath.Join(c.dir, "postgresql.conf")
	cur, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("reading %s: %w", main, err)
	}
	if !bytes.Contains(cur, []byte(includeLine)) {
		f, err := os.OpenFile(main, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", main, err)
		}
		_, werr := f.WriteString("\n" + includeLine + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("appending to %s: %w", main, werr)
		}
	}
	return nil
}

var (
	settingRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
	plainRe   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*|-?[0-9]+(\.[0-9]+)?[A-Za-z]*)$`)
	portRe    = regexp.MustCompile(`(?m)^port = (\d+)$`)
)

func quote(v string) string {
	if plainRe.MatchString(v) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

func (c *Cluster) chown(path string) error {
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("giving %s to user %s: %w", path, pgUser, err)
	}
	return nil
}

func previousPort(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, confFile))
	if err != nil {
		return 0
	}
	m := portRe.FindSubmatch(b)
	if m == nil {
		return 0
	}
	p, _ := strconv.Atoi(string(m[1]))
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// runningPort reports the port of the server running on the directory, if
// one runs (pg_ctl status exits 0 and postmaster.pid names the port).
func (c *Cluster) runningPort(ctx context.Context) (int, bool) {
	if _, err := c.run(ctx, "pg_ctl", "status", "-D", c.dir); err != nil {
		return 0, false
	}
	f, err := os.Open(filepath.Join(c.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if line == 4 { // postmaster.pid line 4: port
			p, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			return p, err == nil
		}
	}
	return 0, false
}

func (c *Cluster) start(ctx context.Context) error {
	// Make sure the log file exists and belongs to the server's user.
	lp := c.LogPath()
	if f, err := os.OpenFile(lp, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		f.Close()
		if err := c.chown(lp); err != nil {
			return err
		}
	}
	secs := strconv.Itoa(int(c.timeout / time.Second))
	out, err := c.run(ctx, "pg_ctl", "start", "-D", c.dir, "-l", lp, "-w", "-t", secs)
	if err != nil {
		return fmt.Errorf("starting postgres in %s on port %d: %w: %s; server log tail: %s",
			c.dir, c.Port(), err, bytes.TrimSpace(out), tail(lp, 1500))
	}
	return nil
}

func (c *Cluster) stop(ctx context.Context, mode string) error {
	if !c.Running(ctx) {
		return nil
	}
	out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dir, "-m", mode, "-w", "-t", "60")
	if err != nil && c.Running(ctx) {
		return fmt.Errorf("stopping postgres in %s (%s): %w: %s", c.dir, mode, err, bytes.TrimSpace(out))
	}
	return nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}
