package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads path (a missing file is an error unless allowMissing), applies
// the environment and validates.
func Load(path string, allowMissing bool) (Config, error) {
	cfg := Default()
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := decode(b, &cfg); err != nil {
			return Config{}, fmt.Errorf("reading %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && allowMissing:
	default:
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	if err := applyEnv(&cfg, os.LookupEnv); err != nil {
		return Config{}, err
	}
	if err := cfg.readTokenFile(); err != nil {
		return Config{}, err
	}
	if err := cfg.readCatalogPasswordFile(); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Parse decodes YAML text onto the defaults and validates, without the
// environment. Tests and fuzzing use it.
func Parse(text []byte) (Config, error) {
	cfg := Default()
	if err := decode(text, &cfg); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func decode(b []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return namedKeyError(b, err)
	}
	return checkSecretsInFile(b)
}

// namedKeyError turns the YAML decoder's first type error ("line 5: cannot
// unmarshal !!str `soon` into time.Duration", "line 3: field foo not found
// in type config.Delivery") into a KeyError naming the dotted key on that
// line (delivery.flush_interval). Other errors pass through.
func namedKeyError(b []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return err
	}
	lineText, msg, ok := strings.Cut(strings.TrimPrefix(te.Errors[0], "line "), ": ")
	line, convErr := strconv.Atoi(lineText)
	if !ok || convErr != nil {
		return err
	}
	key := keyLines(b)[line]
	if key == "" {
		return err
	}
	if strings.HasPrefix(msg, "field ") && strings.Contains(msg, " not found in type ") {
		msg = "unknown key"
	}
	msg += fmt.Sprintf(" (line %d)", line)
	if n := len(te.Errors) - 1; n > 0 {
		msg += fmt.Sprintf("; and %d more", n)
	}
	return &KeyError{Key: key, Msg: msg}
}

// keyLines maps each line of a YAML document that holds a mapping key, or
// a value on a line of its own, to the key's dotted path.
func keyLines(b []byte) map[int]string {
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil {
		return nil
	}
	lines := map[int]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				lines[k.Line] = p
				if _, ok := lines[v.Line]; !ok {
					lines[v.Line] = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				if _, ok := lines[c.Line]; !ok {
					lines[c.Line] = path
				}
				walk(c, path)
			}
		}
	}
	walk(&root, "")
	return lines
}

// KeyError names a configuration key and what is wrong with it.
type KeyError struct {
	Key string // e.g. delivery.flush_interval
	Msg string
}

func (e *KeyError) Error() string { return "config key " + e.Key + ": " + e.Msg }

func bad(key, format string, args ...any) error {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)}
}
