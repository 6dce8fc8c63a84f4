package config

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// clusterRe is a ClickHouse cluster name (catalog.cluster).
var clusterRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)

// ByteSize is a size in bytes; YAML and the environment accept 1048576,
// 512KiB, 64MiB, 8GiB (and KB/MB/GB as powers of 1000).
type ByteSize int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseByteSize reads a size such as 64MiB.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil {
				return 0, fmt.Errorf("size %q: %w", s, err)
			}
			return ByteSize(n * float64(u.mul)), nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want bytes or a number with KiB, MiB, GiB", s)
	}
	return ByteSize(n), nil
}

// field is one leaf key of the config.
type field struct {
	key    string // yaml path, e.g. delivery.flush_interval
	env    string // SLUICE_DELIVERY_FLUSH_INTERVAL
	secret string // "", "env" (only from the environment) or "password" (no password in the file)
	v      reflect.Value
}

func fields(cfg *Config) []field {
	var out []field
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			fv := v.Field(i)
			if sf.Type.Kind() == reflect.Struct {
				walk(fv, key)
				continue
			}
			out = append(out, field{
				key:    key,
				env:    "SLUICE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")),
				secret: sf.Tag.Get("secret"),
				v:      fv,
			})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

// EnvNames lists every SLUICE_ variable the config reads, for docs and tests.
func EnvNames() []string {
	var cfg Config
	var names []string
	for _, f := range fields(&cfg) {
		names = append(names, f.env)
	}
	return names
}

var durationType = reflect.TypeOf(time.Duration(0))

func applyEnv(cfg *Config, lookup func(string) (string, bool)) error {
	for _, f := range fields(cfg) {
		raw, ok := lookup(f.env)
		if !ok {
			continue
		}
		if err := setValue(f.v, raw); err != nil {
			return bad(f.key, "from %s: %v", f.env, err)
		}
	}
	return nil
}

func setValue(v reflect.Value, raw string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Type() == reflect.TypeOf(ByteSize(0)):
		b, err := ParseByteSize(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(b))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Float64:
		n, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return err
		}
		v.SetFloat(n)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	case v.Kind() == reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, p := range strings.Split(raw, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				return fmt.Errorf("want key=value,key=value")
			}
			m.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(val))
		}
		v.Set(m)
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// checkSecretsInFile refuses credentials written into the YAML file: keys
// marked secret:"env" may not appear at all, and DSNs and URLs marked
// secret:"password" may not carry a password.
func checkSecretsInFile(text []byte) error {
	var fromFile Config
	dec := yaml.NewDecoder(strings.NewReader(string(text)))
	if err := dec.Decode(&fromFile); err != nil {
		return nil // the main decode reported it
	}
	for _, f := range fields(&fromFile) {
		switch f.secret {
		case "env":
			if !f.v.IsZero() {
				return bad(f.key, "credentials are accepted only from the environment: set %s instead", f.env)
			}
		case "password":
			if s := f.v.String(); s != "" && dsnHasPassword(s) {
				if f.key == "catalog.url" {
					return bad(f.key, "a password in the config file is refused: set SLUICE_CATALOG_PASSWORD (or catalog.password_file), or the whole URL in %s, in the environment instead", f.env)
				}
				return bad(f.key, "a password in the config file is refused: set %s (or PGPASSWORD) in the environment instead", f.env)
			}
		}
	}
	return nil
}

// passwordKey matches a password setting of a key/value Postgres DSN
// ("host=h password=x", sslpassword too).
var passwordKey = regexp.MustCompile(`(?i)(^|\s)(ssl)?password\s*=`)

// dsnHasPassword reports whether a DSN or URL carries a password: in its
// user info (user:pw@), as a query parameter (?password=, ?sslpassword=,
// any case), or as a key of a key/value DSN.
func dsnHasPassword(s string) bool {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				return true
			}
		}
		for k := range u.Query() {
			if k := strings.ToLower(k); k == "password" || k == "sslpassword" {
				return true
			}
		}
		return false
	}
	return passwordKey.MatchString(s)
}
