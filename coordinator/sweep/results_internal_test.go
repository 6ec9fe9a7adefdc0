package sweep

import "testing"

// TestOverridesText: results.csv's overrides column spells a model's layer
// list as JSON, keys sorted, and scalars as they are.
func TestOverridesText(t *testing.T) {
	got := overridesText(map[string]any{
		"lr": 0.003,
		"model.layers": []any{
			map[string]any{"embedding": map[string]any{"vocab": 256, "dim": 32}},
			map[string]any{"positional": map[string]any{}},
		},
		"optimizer": "adamw",
	})
	want := `lr=0.003 model.layers=[{"embedding":{"dim":32,"vocab":256}},{"positional":{}}] optimizer=adamw`
	if got != want {
		t.Errorf("overrides %s\nwant %s", got, want)
	}
}
