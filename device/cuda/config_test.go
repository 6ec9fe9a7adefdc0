package cuda

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"zero value", Config{}, ""},
		{"second GPU with a limit", Config{Ordinal: 1, MemoryLimit: 1 << 30}, ""},
		{"negative ordinal", Config{Ordinal: -1}, "Config.Ordinal"},
		{"negative limit", Config{MemoryLimit: -5}, "Config.MemoryLimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestConfigName(t *testing.T) {
	if got := (Config{Ordinal: 3}).name(); got != "cuda:3" {
		t.Errorf("name() = %q, want cuda:3", got)
	}
}
