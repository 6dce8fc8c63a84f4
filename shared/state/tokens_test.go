package state

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Create returns the token once; the table holds only its hash; Verify
// accepts it for its destination, and refuses a wrong secret, an unknown
// id and garbage as invalid; an expired one (by the server clock) and a
// revoked one (at once) by their reasons; List never carries a secret.
func TestTokens(t *testing.T) {
	pool, _, _ := migrated(t)
	ts := NewTokens(pool, schema)
	ctx := context.Background()

	tok, plain, err := ts.Create(ctx, "shop1", "reporting", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, TokenPrefix+tok.ID+"_") || tok.Destination != "shop1" || tok.Name != "reporting" {
		t.Fatalf("Create = %+v, %q", tok, plain)
	}
	if tok.ExpiresAt == nil || tok.ExpiresAt.Sub(tok.CreatedAt) != 30*24*time.Hour || tok.RevokedAt != nil {
		t.Fatalf("expiry: %+v", tok)
	}
	_, secret, _ := ParseToken(plain)
	// The secret is in no column, in any form but its hash.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.tokens t WHERE strpos(t::text, $1) > 0 OR strpos(encode(secret_sha256, 'escape'), $1) > 0`, secret).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the secret is stored in plaintext: %d rows, %v", n, err)
	}
	v, err := ts.Verify(ctx, plain)
	if err != nil || !v.OK || v.Destination != "shop1" || v.ID != tok.ID {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
	wrong := plain[:len(plain)-1] + map[bool]string{true: "b", false: "a"}[plain[len(plain)-1] == 'a']
	other, _, err := ts.Create(ctx, "shop2", "", 0)
	if err != nil || other.ExpiresAt != nil {
		t.Fatalf("a token that never expires: %+v, %v", other, err)
	}
	for name, p := range map[string]string{
		"wrong secret": wrong,
		"unknown id":   TokenPrefix + "aaaaaaaaaaaaaaaa_" + secret,
		"another id":   TokenPrefix + other.ID + "_" + secret,
		"garbage":      "slt_x",
		"operator":     "tok",
		"empty":        "",
	} {
		if v, err := ts.Verify(ctx, p); err != nil || v.OK || v.Reason != TokenInvalid || v.Destination != "" {
			t.Errorf("%s: Verify = %+v, %v; want invalid", name, v, err)
		}
	}

	short, splain, err := ts.Create(ctx, "shop1", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sluice.tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, short.ID); err != nil {
		t.Fatal(err)
	}
	if v, err := ts.Verify(ctx, splain); err != nil || v.OK || v.Reason != TokenExpired {
		t.Fatalf("expired: Verify = %+v, %v", v, err)
	}

	r, err := ts.Revoke(ctx, tok.ID)
	if err != nil || r.RevokedAt == nil {
		t.Fatalf("Revoke = %+v, %v", r, err)
	}
	if v, err := ts.Verify(ctx, plain); err != nil || v.OK || v.Reason != TokenRevoked {
		t.Fatalf("revoked: Verify = %+v, %v", v, err)
	}
	again, err := ts.Revoke(ctx, tok.ID)
	if err != nil || !again.RevokedAt.Equal(*r.RevokedAt) {
		t.Fatalf("second Revoke = %+v, %v; want the first time kept", again, err)
	}
	if _, err := ts.Revoke(ctx, "nope"); err == nil || !strings.Contains(err.Error(), ErrTokenNotFound.Error()) {
		t.Fatalf("Revoke(unknown) = %v", err)
	}
	list, err := ts.List(ctx)
	if err != nil || len(list) != 3 || list[0].ID != tok.ID || list[0].RevokedAt == nil {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, bad := range []string{"", "a b", "~c4n64x"} {
		if _, _, err := ts.Create(ctx, bad, "", 0); err == nil {
			t.Errorf("Create(%q) accepted", bad)
		}
	}
}
