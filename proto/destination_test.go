package proto

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// An alias — a well-formed encoding that is not the canonical name of the
// value it decodes to — is refused, and the error names the canonical name.
func TestDestinationAliasesRefused(t *testing.T) {
	for alias, canon := range map[string]string{
		"~c4n65":    "~c4n64", // "a.b" with an unused trailing bit set
		"~c5h66p35": "abcde",  // the encoding of a plain value
		"~c4":       "a",
		"~c5":       "a", // 'a' = 0x61: the second character's low 2 bits are unused
	} {
		err := ValidateDestination(alias)
		if !errors.Is(err, ErrBadDestination) || !errors.Is(err, ErrNotCanonical) {
			t.Errorf("ValidateDestination(%q) = %v; want ErrBadDestination and ErrNotCanonical", alias, err)
			continue
		}
		if want := "the canonical name of that value is " + canon; !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateDestination(%q) = %q; want it to say %q", alias, err, want)
		}
		if v, err := DecodeDestination(alias); err == nil {
			t.Errorf("DecodeDestination(%q) = %q; want it refused", alias, v)
		}
	}
	// Negative control: the canonical names themselves are accepted.
	for _, canon := range []string{"~c4n64", "abcde", "a", "~", "~c5hmqp9ecdnn4s1ff0"} {
		if err := ValidateDestination(canon); err != nil {
			t.Errorf("ValidateDestination(%q) = %v; want nil", canon, err)
		}
	}
}

// Exhaustively, over every "~" string of up to 3 characters of the
// alphabet, and over every last character of the names of values of 1 to
// 6 bytes (each count of unused trailing bits, 1 to 4): each accepted name
// round-trips, no two accepted names decode to the same value, and of the
// 32 last characters exactly those with the unused bits clear are accepted.
func TestDestinationDecodeIsInjective(t *testing.T) {
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	seen := map[string]string{}
	check := func(name string) {
		v, err := DecodeDestination(name)
		if err != nil {
			return
		}
		if other, dup := seen[v]; dup && other != name {
			t.Fatalf("%q and %q both decode to %q", other, name, v)
		}
		seen[v] = name
		if n, err := DestinationName(v); err != nil || n != name {
			t.Fatalf("DestinationName(DecodeDestination(%q)) = %q, %v", name, n, err)
		}
	}
	var walk func(prefix string)
	walk = func(prefix string) {
		check("~" + prefix)
		if len(prefix) == 3 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			walk(prefix + alphabet[i:i+1])
		}
	}
	walk("")
	// (No variant of these decodes to a plain value, which would be refused.)
	for _, v := range []string{"!", "\xff", "a.", "\x00\x01", "a.b", "...", "a.bc", "\xff\xfe\xfd\xfc", "a.b.c", "\x80\x81\x82\x83\x84", "a.b.c.", "~~~~~~"} {
		name, err := DestinationName(v)
		if err != nil {
			t.Fatal(err)
		}
		unused := (len(name)-1)*5 - len(v)*8
		accepted := 0
		for i := 0; i < len(alphabet); i++ {
			variant := name[:len(name)-1] + alphabet[i:i+1]
			if ValidateDestination(variant) == nil {
				accepted++
				check(variant)
			}
		}
		if want := 32 >> unused; accepted != want {
			t.Errorf("%d of the last-character variants of %q (the name of %q, %d unused bits) are accepted, want %d", accepted, name, v, unused, want)
		}
	}
}

// decode∘encode and encode∘decode are identities on accepted inputs.
func FuzzDestinationCodec(f *testing.F) {
	for _, s := range []string{"", "a", "a.b", "~c4n64", "~c4n65", "~c5h66p35", "shop1", "acme.corp/x", "~", "~~", strings.Repeat("x", 65), "größe ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// s as a routing value.
		if name, err := DestinationName(s); err == nil {
			if err := ValidateDestination(name); err != nil {
				t.Fatalf("DestinationName(%q) = %q, which does not validate: %v", s, name, err)
			}
			if v, err := DecodeDestination(name); err != nil || v != s {
				t.Fatalf("DecodeDestination(DestinationName(%q)) = %q, %v", s, v, err)
			}
		} else if !errors.Is(err, ErrUnroutable) {
			t.Fatalf("DestinationName(%q): %v", s, err)
		}
		// s as a name.
		v, err := DecodeDestination(s)
		if (err == nil) != (ValidateDestination(s) == nil) {
			t.Fatalf("DecodeDestination and ValidateDestination disagree on %q", s)
		}
		if err != nil {
			if !errors.Is(err, ErrBadDestination) {
				t.Fatalf("DecodeDestination(%q): %v, not ErrBadDestination", s, err)
			}
			return
		}
		if n, err := DestinationName(v); err != nil || n != s {
			t.Fatalf("DestinationName(DecodeDestination(%q)) = %q, %v", s, n, err)
		}
		_ = utf8.ValidString(v) // values are bytes; any byte string round-trips
	})
}
