package job

import (
	"slices"
	"sort"
	"strings"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// envPrefix starts every variable that sets a configuration key.
const envPrefix = "TOLARIA_"

// EnvReplacer turns a configuration key into its variable's suffix: dots
// and dashes become underscores (model.hidden: TOLARIA_MODEL_HIDDEN).
func EnvReplacer() *strings.Replacer { return strings.NewReplacer(".", "_", "-", "_") }

// EnvVar is the environment variable that sets key.
func EnvVar(key field.Name) string {
	return envPrefix + strings.ToUpper(EnvReplacer().Replace(string(key)))
}

// UnknownEnv lists the TOLARIA_* variables in env that set none of keys
// and are not among other, each with the variable meant when one ends the
// same way. Test switches (TOLARIA_E2E_*, TOLARIA_REQUIRE_*) are not
// configuration and are let be.
func UnknownEnv(env []string, keys []field.Name, other ...string) []string {
	known := map[string]bool{}
	for _, k := range keys {
		known[EnvVar(k)] = true
	}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || slices.Contains(other, name) ||
			strings.HasPrefix(name, envPrefix+"E2E_") || strings.HasPrefix(name, envPrefix+"REQUIRE_") {
			continue
		}
		msg := name + " is not a tolaria setting and is ignored"
		suffix := strings.TrimPrefix(name, envPrefix)
		for v := range known {
			if strings.HasSuffix(v, "_"+suffix) {
				msg += "; did you mean " + v + "?"
				break
			}
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}
