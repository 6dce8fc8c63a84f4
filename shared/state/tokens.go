package state

// Tenant tokens (issue 35): a credential that reads one destination's rows,
// changes and exports through the HTTP API, and nothing else.
//
// A token is "slt_<id>_<secret>": id is public (it names the token in
// `sluice tokens list` and revoke, and is the lookup key), secret is 32
// random bytes. Only SHA-256(secret) is stored. A fast hash is enough: the
// secret is 256 random bits, not a password, so a copy of the table cannot
// be turned back into a token by guessing; an HMAC with a server key would
// add a second secret to manage for no gain against that. Verify compares
// the hash in constant time and judges expiry by the Postgres clock, like
// every lease. Nothing is cached: every Verify is one primary-key read, so a
// revocation holds from the next request on, in every process.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
)

// TokenPrefix starts every tenant token.
const TokenPrefix = "slt_"

// Token is a tenant token as listed: never its secret.
type Token struct {
	ID          string     `json:"id"`
	Name        string     `json:"name,omitempty"`
	Destination string     `json:"destination"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"` // nil: never
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// Verdict is what Verify says of a presented token. Reason is
// TokenInvalid, TokenExpired or TokenRevoked when OK is false; ID and
// Destination are set only when OK.
type Verdict struct {
	OK          bool
	ID          string
	Destination string
	Reason      string
}

// Verify reasons.
const (
	TokenInvalid = "invalid" // malformed, unknown id, or a wrong secret
	TokenExpired = "expired"
	TokenRevoked = "revoked"
)

// ErrTokenNotFound: no token has that id.
var ErrTokenNotFound = errors.New("no such token")

// Tokens creates, lists, revokes and verifies tenant tokens in
// <schema>.tokens.
type Tokens struct {
	pool                                  *pgxpool.Pool
	qInsert, qList, qRevoke, qGet, qCheck string
}

// NewTokens returns the tenant tokens of the state schema (DefaultSchema
// when empty). Migrate must have run.
func NewTokens(pool *pgxpool.Pool, schema string) *Tokens {
	if schema == "" {
		schema = DefaultSchema
	}
	t := pgx.Identifier{schema, "tokens"}.Sanitize()
	cols := `id, name, destination, created_at, expires_at, revoked_at`
	return &Tokens{
		pool: pool,
		qInsert: `INSERT INTO ` + t + ` (id, name, destination, secret_sha256, expires_at)
			VALUES ($1, $2, $3, $4, CASE WHEN $5::bigint > 0 THEN now() + make_interval(secs => $5::bigint / 1e6) END)
			RETURNING ` + cols,
		qList:   `SELECT ` + cols + ` FROM ` + t + ` ORDER BY created_at, id`,
		qRevoke: `UPDATE ` + t + ` SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING ` + cols,
		qGet:    `SELECT ` + cols + ` FROM ` + t + ` WHERE id = $1`,
		qCheck: `SELECT destination, secret_sha256, revoked_at IS NOT NULL, coalesce(expires_at <= now(), false)
			FROM ` + t + ` WHERE id = $1`,
	}
}

func tokensDDL(s string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + s + `.tokens (
			id            text PRIMARY KEY,
			name          text NOT NULL DEFAULT '',
			destination   text NOT NULL,
			secret_sha256 bytea NOT NULL CHECK (length(secret_sha256) = 32),
			created_at    timestamptz NOT NULL DEFAULT now(),
			expires_at    timestamptz,
			revoked_at    timestamptz)`,
	}
}

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

const (
	tokenIDBytes     = 10 // 16 characters
	tokenSecretBytes = 32 // 52 characters
)

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return strings.ToLower(tokenEncoding.EncodeToString(b))
}

// Create makes a token that reads dest for ttl (0: it never expires) and
// returns it with its plaintext, which is never stored and cannot be shown
// again.
func (s *Tokens) Create(ctx context.Context, dest, name string, ttl time.Duration) (Token, string, error) {
	if err := proto.ValidateDestination(dest); err != nil {
		return Token{}, "", fmt.Errorf("creating a token: %w: %v", ErrBadArgument, err)
	}
	if ttl < 0 {
		return Token{}, "", fmt.Errorf("creating a token: %w: a negative expiry", ErrBadArgument)
	}
	if len(name) > 200 {
		return Token{}, "", fmt.Errorf("creating a token: %w: a name longer than 200 bytes", ErrBadArgument)
	}
	id, secret := randomText(tokenIDBytes), randomText(tokenSecretBytes)
	sum := sha256.Sum256([]byte(secret))
	tok, err := scanToken(s.pool.QueryRow(ctx, s.qInsert, id, name, dest, sum[:], ttl.Microseconds()))
	if err != nil {
		return Token{}, "", fmt.Errorf("creating a token for %s: %w", dest, err)
	}
	return tok, TokenPrefix + id + "_" + secret, nil
}

// List returns every token, oldest first, revoked and expired ones too.
func (s *Tokens) List(ctx context.Context) ([]Token, error) {
	rows, err := s.pool.Query(ctx, s.qList)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) { return scanToken(r) })
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	return out, nil
}

// Revoke ends token id now (idempotent: a revoked token keeps its first
// revocation time). ErrTokenNotFound for an unknown id.
func (s *Tokens) Revoke(ctx context.Context, id string) (Token, error) {
	tok, err := scanToken(s.pool.QueryRow(ctx, s.qRevoke, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, fmt.Errorf("revoking token %q: %w", id, ErrTokenNotFound)
	}
	if err != nil {
		return Token{}, fmt.Errorf("revoking token %q: %w", id, err)
	}
	return tok, nil
}

// Get returns token id (ErrTokenNotFound).
func (s *Tokens) Get(ctx context.Context, id string) (Token, error) {
	tok, err := scanToken(s.pool.QueryRow(ctx, s.qGet, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, fmt.Errorf("reading token %q: %w", id, ErrTokenNotFound)
	}
	return tok, err
}

// ParseToken splits a presented tenant token into its id and secret; ok is
// false when it does not have the form.
func ParseToken(presented string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(presented, TokenPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 52 {
		return "", "", false
	}
	return id, secret, true
}

// Verify checks a presented token. An error means the check could not be
// made (the database); a wrong, expired or revoked token is a Verdict.
// Expired and revoked are said only of a token whose secret matched.
func (s *Tokens) Verify(ctx context.Context, presented string) (Verdict, error) {
	id, secret, ok := ParseToken(presented)
	if !ok {
		return Verdict{Reason: TokenInvalid}, nil
	}
	var (
		dest             string
		stored           []byte
		revoked, expired bool
	)
	err := s.pool.QueryRow(ctx, s.qCheck, id).Scan(&dest, &stored, &revoked, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		stored = make([]byte, sha256.Size) // compare anyway, for even timing
	} else if err != nil {
		return Verdict{}, fmt.Errorf("verifying a token: %w", err)
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], stored) != 1 || err != nil {
		return Verdict{Reason: TokenInvalid}, nil
	}
	switch {
	case revoked:
		return Verdict{Reason: TokenRevoked}, nil
	case expired:
		return Verdict{Reason: TokenExpired}, nil
	}
	return Verdict{OK: true, ID: id, Destination: dest}, nil
}

func scanToken(r pgx.Row) (Token, error) {
	var t Token
	err := r.Scan(&t.ID, &t.Name, &t.Destination, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
	return t, err
}
