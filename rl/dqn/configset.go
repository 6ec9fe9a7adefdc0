package dqn

import (
	"slices"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// Set reads v, as a flag or a configuration file gives it, into c's
// setting key (one of Keys), as ParseConfig reads a file's value; c is
// not validated. A refusal names key.
func (c *Config) Set(key field.Name, v any) error {
	keys := c.keys()
	i := slices.IndexFunc(keys, func(k configKey) bool { return k.name == key })
	if i < 0 {
		return field.Errorf(key, "is not a key of tolaria rl's configuration (see docs/rl.md)")
	}
	if err := set(keys[i].dst, v); err != nil {
		return field.Errorf(key, "%w", err)
	}
	return nil
}
