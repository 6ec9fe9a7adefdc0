package job

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tolaria-ml/tolaria/nn"
)

const transformerYAML = `
- embedding: {vocab: 256, dim: 64}
- positional: {}
- transformer_block: {heads: 4, mlp: 256, dropout: 0.1}
- attention: {heads: 2}
- layernorm: {}
- lm_head: {}
`

func transformerLayers() Layers {
	return Layers{
		nn.Embedding(256, 64), nn.Positional(), nn.TransformerBlock(4, 256).WithDropout(0.1),
		nn.Attention(2), nn.LayerNorm(), nn.LMHead(),
	}
}

// The sequence layers read, default and travel as the others do.
func TestParseSequenceLayers(t *testing.T) {
	got, err := ParseLayers(transformerYAML)
	must(t, err)
	if !reflect.DeepEqual(got, transformerLayers()) {
		t.Fatalf("got  %v\nwant %v", got, transformerLayers())
	}
	wire, err := json.Marshal(got)
	must(t, err)
	var back Layers
	must(t, json.Unmarshal(wire, &back))
	if !reflect.DeepEqual(back, got) {
		t.Errorf("read back from JSON %s:\n got %v", wire, back)
	}
	s := Default()
	s.Dataset, s.Input, s.Layers = "text", []int{128}, got
	must(t, s.Validate())
	for in, want := range map[string]string{
		"[{embedding: {vocab: 256}}]":              "model.layers: layers[0] (embedding): dim is required, e.g. embedding: {vocab: 256, dim: 128}",
		"[{transformer_block: {heads: 4}}]":        "model.layers: layers[0] (transformer_block): mlp is required, e.g. transformer_block: {heads: 4, mlp: 512}",
		"[{attention: {heads: 2, p: 0.1}}]":        `model.layers: layers[0] (attention): unknown key "p"; the keys of attention are heads, dropout`,
		"[{layernorm: {eps: 0.001, momentum: 0}}]": `model.layers: layers[0] (layernorm): unknown key "momentum"; the keys of layernorm are eps`,
	} {
		if _, err := ParseLayers(in); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
}

// A model of logits per position is refused on a dataset of one class
// per example, and attention that cannot split its features is refused
// as soon as the input's shape is known.
func TestPlanRefusesASequenceModel(t *testing.T) {
	base, train, test := synthetic(t)
	s := base
	must(t, s.Set("model.layers", "[{embedding: {vocab: 11, dim: 8}}, {transformer_block: {heads: 2, mlp: 16}}, {lm_head: {}}]"))
	_, err := s.Plan(train, test)
	want := "model.layers: layers[2] (lm_head): the model ends in the sequence [64, 11], logits per position, but the dataset has one class per example; end it in [10] (e.g. flatten and linear: {out: 10})"
	if err == nil || err.Error() != want {
		t.Errorf("Plan:\n got %v\nwant %s", err, want)
	}
	s.Input = []int{5}
	must(t, s.Set("model.layers", "[{embedding: {vocab: 11, dim: 8}}, {attention: {heads: 3}}, {lm_head: {}}]"))
	want = "model.layers: layers[1] (attention): its input [5, 8] has 8 features per position, which 3 heads cannot split evenly; give heads dividing 8"
	if err := s.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate:\n got %v\nwant %s", err, want)
	}
}
