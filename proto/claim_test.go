package proto

import "testing"

// TestParseClaimPath: ParseClaimPath inverts ClaimPath (what the claim GC
// reads a claim's position from) and refuses what ClaimPath never writes.
func TestParseClaimPath(t *testing.T) {
	pos := Position{LSN: 0x16B3748, Seq: 42}
	p := ClaimPath("public.docs", pos, "a body/ü")
	table, got, col, err := ParseClaimPath(p)
	if err != nil || table != "public.docs" || got != pos || col != "a body/ü" {
		t.Fatalf("%s: %s %v %q %v", p, table, got, col, err)
	}
	for _, bad := range []string{
		"shop1/public.docs/p.arrow",
		".claims/public.docs/16b3748-42/62",         // LSN not 16 digits
		".claims/public.docs/00000000016b3748/62",   // no seq
		".claims/public.docs/00000000016b3748-x/62", // seq not a number
		".claims/public.docs/00000000016b3748-1/zz", // column not hex
		".claims/public.docs/00000000016b3748-1/62/63",
	} {
		if _, _, _, err := ParseClaimPath(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}
