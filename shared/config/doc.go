// Package config loads sluice's one YAML file, applies SLUICE_<SECTION>_<KEY>
// environment overrides, fills defaults and validates every key, naming the
// bad one. Credentials are accepted only from the environment.
//
// config must never log a value: a DSN or token may carry a secret.
package config
