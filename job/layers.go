package job

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cast"
	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// Layers are a model's layers as a job carries them. In a configuration
// file, a flag, an environment variable, a run's config.yaml and on the
// wire to a worker they are written the same way: a list of maps of one
// key, the layer's kind, to its settings, e.g.
//
//	[{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}, {residual: [{linear: {out: 8}}]}]
type Layers []nn.LayerSpec

// layerKey is one setting of a layer kind: its name, and its default
// ("" when it must be given).
type layerKey struct {
	name, def string
}

// layerKinds are the kinds in the order the help lists them, with their
// settings and what they do.
var layerKinds = []struct {
	kind nn.LayerKind
	keys []layerKey
	does string
}{
	{nn.KindLinear, []layerKey{{"out", ""}}, "[F] -> [out]; [T, F] -> [T, out], per position"},
	{nn.KindConv, []layerKey{{"out", ""}, {"kernel", ""}, {"stride", "1"}, {"padding", "0"}},
		"[C, H, W] -> [out, H', W']"},
	{nn.KindMaxPool, []layerKey{{"kernel", ""}, {"stride", "kernel"}, {"padding", "0"}}, "maximum over each window"},
	{nn.KindAvgPool, []layerKey{{"kernel", ""}, {"stride", "kernel"}, {"padding", "0"}}, "mean over each window, padding as zeros"},
	{nn.KindGlobalAvgPool, nil, "[C, H, H] -> [C, 1, 1]"},
	{nn.KindBatchNorm, []layerKey{{"eps", "1e-5"}, {"momentum", "0.1"}}, "per channel (per feature of a vector)"},
	{nn.KindReLU, nil, "activation"},
	{nn.KindGELU, nil, "activation (tanh approximation)"},
	{nn.KindTanh, nil, "activation"},
	{nn.KindSigmoid, nil, "activation, 1/(1+e^-x)"},
	{nn.KindFlatten, nil, "[C, H, W] -> [H·W·C], in (h, w, c) order"},
	{nn.KindResidual, nil, "the block's output plus its input"},
	{nn.KindDropout, []layerKey{{"p", ""}}, "zeroes values with probability p in training"},
	{nn.KindEmbedding, []layerKey{{"vocab", ""}, {"dim", ""}}, "[T] token ids -> [T, dim]; the first layer"},
	{nn.KindPositional, nil, "adds a learned vector per position to [T, D]"},
	{nn.KindLayerNorm, []layerKey{{"eps", "1e-5"}}, "each position over its features"},
	{nn.KindAttention, []layerKey{{"heads", ""}, {"dropout", "0"}}, "causal multi-head self-attention on [T, D]"},
	{nn.KindTransformerBlock, []layerKey{{"heads", ""}, {"mlp", ""}, {"dropout", "0"}}, "pre-norm attention, then MLP, each residual"},
	{nn.KindLMHead, nil, "[T, D] -> [T, vocab], logits per position"},
}

func keysOf(kind nn.LayerKind) []layerKey {
	for _, k := range layerKinds {
		if k.kind == kind {
			return k.keys
		}
	}
	return nil
}

// LayersUsage lists every layer kind and its settings with their
// defaults, one a line, for a command's help.
func LayersUsage() string {
	var b strings.Builder
	for _, k := range layerKinds {
		var keys []string
		for _, key := range k.keys {
			if key.def == "" {
				keys = append(keys, key.name)
			} else {
				keys = append(keys, fmt.Sprintf("%s (%s)", key.name, key.def))
			}
		}
		settings := "{" + strings.Join(keys, ", ") + "}"
		switch {
		case k.kind == nn.KindResidual:
			settings = "[layers...]"
		case len(keys) == 0:
			settings = "{}"
		}
		fmt.Fprintf(&b, "  %-17s %-41s %s\n", k.kind, settings, k.does)
	}
	return b.String()
}

// ParseLayers reads layers from a configuration value: a list from a file
// (or a worker's JSON), or text in YAML's flow form from a flag or an
// environment variable; nil and "" give none. Its errors name the layer
// by its path (layers[4].residual[0]) and, for an unknown kind or
// setting, list the valid ones. Settings left out take their defaults.
func ParseLayers(v any) (Layers, error) {
	switch x := v.(type) {
	case Layers:
		return x, nil
	case []nn.LayerSpec:
		return Layers(x), nil
	}
	w := blockForm
	if s, ok := v.(string); ok {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		var parsed any
		if err := yaml.Unmarshal([]byte(s), &parsed); err != nil {
			return nil, field.Errorf("model.layers", "is not valid YAML (%v); write e.g. [{conv: {out: 32, kernel: 3}}, {relu: {}}]", err)
		}
		v, w = parsed, flowForm
	}
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if m, isMap := v.(map[string]any); isMap && len(m) > 0 {
		return nil, field.Errorf("model.layers", "is a list of layers, one kind each, not a map: write %s", w.items(m))
	}
	if !ok {
		return nil, field.Errorf("model.layers", "is a list of layers, one kind each, e.g. %s; got %s", w.list("conv: {out: 32, kernel: 3}", "relu: {}"), flowText(v))
	}
	return w.parseList(list, "layers")
}

// form is how the layers were written, so that a refusal shows the fix
// the same way: in YAML's block form (a configuration file's list items,
// - conv: {...}) or its flow form (a flag's [{conv: {...}}]).
type form bool

const (
	blockForm form = false
	flowForm  form = true
)

// item is one layer, kind: settings, as a list item of the form.
func (w form) item(layer string) string {
	if w == flowForm {
		return "{" + layer + "}"
	}
	return "- " + layer
}

// list is the layers as a list of the form.
func (w form) list(layers ...string) string {
	items := make([]string, len(layers))
	for i, l := range layers {
		items[i] = w.item(l)
	}
	if w == flowForm {
		return "[" + strings.Join(items, ", ") + "]"
	}
	return strings.Join(items, " then ")
}

// items is the fix for a map of kinds written where a list belongs: each
// kind as its own list item, its settings elided.
func (w form) items(m map[string]any) string {
	kinds := sortedNames(m)
	layers := make([]string, len(kinds))
	for i, k := range kinds {
		layers[i] = k + ": " + elided(m[k])
	}
	return w.list(layers...)
}

// elided is a layer's settings in brief: {} when there are none, else
// {...} or [...].
func elided(settings any) string {
	switch x := settings.(type) {
	case nil:
		return "{}"
	case map[string]any:
		if len(x) == 0 {
			return "{}"
		}
		return "{...}"
	case []any:
		return "[...]"
	}
	return flowText(settings)
}

// flowText is v written in YAML's flow form, as a user would write it.
func flowText(v any) string {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	n.Style = yaml.FlowStyle
	b, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}

// andList joins names as "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func (w form) parseList(list []any, prefix string) (Layers, error) {
	out := make(Layers, 0, len(list))
	for i, item := range list {
		l, err := w.parseLayer(item, fmt.Sprintf("%s[%d]", prefix, i))
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// notALayer says why item is not one layer, a map of one kind to its
// settings, and how to write it.
func (w form) notALayer(item any, path string) error {
	const like = "a layer is its kind with its settings, e.g. %s or %s"
	m, isMap := item.(map[string]any)
	switch {
	case isMap && len(m) > 1:
		return field.Errorf("model.layers", "%s has %d kinds, %s: write each layer as its own list item (%s)",
			path, len(m), andList(sortedNames(m)), w.items(m))
	case isMap:
		return field.Errorf("model.layers", "%s is empty: "+like, path, w.item("conv: {out: 32, kernel: 3}"), w.item("relu: {}"))
	}
	if kind, ok := item.(string); ok && nn.LayerKind(kind).Known() {
		return field.Errorf("model.layers", "%s is %s, a kind without its settings: write %s", path, kind, w.item(example(nn.LayerKind(kind))))
	}
	return field.Errorf("model.layers", "%s is %s, not a layer: "+like, path, flowText(item), w.item("conv: {out: 32, kernel: 3}"), w.item("relu: {}"))
}

func (w form) parseLayer(item any, path string) (nn.LayerSpec, error) {
	m, ok := item.(map[string]any)
	if !ok || len(m) != 1 {
		return nn.LayerSpec{}, w.notALayer(item, path)
	}
	var kind nn.LayerKind
	var settings any
	for k, v := range m {
		kind, settings = nn.LayerKind(k), v
	}
	if !kind.Known() {
		return nn.LayerSpec{}, field.Errorf("model.layers", "%s: unknown layer %q%s; layers are %s", path, kind, nn.KindHint(kind), kindNames())
	}
	bad := func(format string, args ...any) (nn.LayerSpec, error) {
		return nn.LayerSpec{}, field.Errorf("model.layers", "%s (%s): %s", path, kind, fmt.Sprintf(format, args...))
	}
	if kind == nn.KindResidual {
		body, ok := settings.([]any)
		if !ok {
			return bad("give its layers as a list, e.g. residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}]")
		}
		layers, err := w.parseList(body, path+".residual")
		return nn.Residual(layers...), err
	}
	values := map[string]any{}
	if settings != nil {
		if values, ok = settings.(map[string]any); !ok {
			return bad("give its settings as a map, e.g. %s", example(kind))
		}
	}
	l := defaults(kind)
	valid := keysOf(kind)
	for _, name := range sortedNames(values) {
		i := slices.IndexFunc(valid, func(k layerKey) bool { return k.name == name })
		if i < 0 {
			return bad("unknown key %q; %s", name, takes(kind))
		}
		if err := setLayerKey(&l, name, values[name]); err != nil {
			return bad("%s: %v", name, err)
		}
	}
	for _, k := range valid {
		if _, given := values[k.name]; k.def == "" && !given {
			return bad("%s is required, e.g. %s", k.name, example(kind))
		}
	}
	if _, given := values["stride"]; !given && (kind == nn.KindMaxPool || kind == nn.KindAvgPool) {
		l.Stride = l.Kernel
	}
	return l, nil
}

// defaults is a layer of kind with its settings' defaults.
func defaults(kind nn.LayerKind) nn.LayerSpec {
	switch kind {
	case nn.KindConv:
		return nn.LayerSpec{Kind: kind, Stride: 1}
	case nn.KindBatchNorm:
		return nn.BatchNorm()
	case nn.KindLayerNorm:
		return nn.LayerNorm()
	}
	return nn.LayerSpec{Kind: kind}
}

func setLayerKey(l *nn.LayerSpec, name string, v any) error {
	var err error
	switch name {
	case "out":
		l.Out, err = field.WholeNumber(v)
	case "kernel":
		l.Kernel, err = field.WholeNumber(v)
	case "stride":
		l.Stride, err = field.WholeNumber(v)
	case "padding":
		l.Padding, err = field.WholeNumber(v)
	case "eps":
		l.Eps, err = cast.ToFloat64E(v)
	case "momentum":
		l.Momentum, err = cast.ToFloat64E(v)
	case "p", "dropout":
		l.P, err = cast.ToFloat64E(v)
	case "vocab":
		l.Vocab, err = field.WholeNumber(v)
	case "dim":
		l.Dim, err = field.WholeNumber(v)
	case "heads":
		l.Heads, err = field.WholeNumber(v)
	case "mlp":
		l.MLP, err = field.WholeNumber(v)
	}
	return err
}

func takes(kind nn.LayerKind) string {
	keys := keysOf(kind)
	if len(keys) == 0 {
		return fmt.Sprintf("%s has no keys", kind)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	return fmt.Sprintf("the keys of %s are %s", kind, strings.Join(names, ", "))
}

func example(kind nn.LayerKind) string {
	switch kind {
	case nn.KindLinear:
		return "linear: {out: 10}"
	case nn.KindConv:
		return "conv: {out: 32, kernel: 3}"
	case nn.KindMaxPool, nn.KindAvgPool:
		return string(kind) + ": {kernel: 2}"
	case nn.KindDropout:
		return "dropout: {p: 0.5}"
	case nn.KindEmbedding:
		return "embedding: {vocab: 256, dim: 128}"
	case nn.KindAttention:
		return "attention: {heads: 4}"
	case nn.KindTransformerBlock:
		return "transformer_block: {heads: 4, mlp: 512}"
	case nn.KindResidual:
		return "residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}]"
	}
	return string(kind) + ": {}"
}

func kindNames() string {
	names := make([]string, 0, len(nn.LayerKinds()))
	for _, k := range nn.LayerKinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

func sortedNames(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// value is the layers in the configuration's form, every setting written.
func (ls Layers) value() []any {
	out := make([]any, len(ls))
	for i, l := range ls {
		var settings any
		switch l.Kind {
		case nn.KindResidual:
			settings = Layers(l.Body).value()
		default:
			m := map[string]any{}
			for _, k := range keysOf(l.Kind) {
				switch k.name {
				case "out":
					m[k.name] = l.Out
				case "kernel":
					m[k.name] = l.Kernel
				case "stride":
					m[k.name] = l.Stride
				case "padding":
					m[k.name] = l.Padding
				case "eps":
					m[k.name] = l.Eps
				case "momentum":
					m[k.name] = l.Momentum
				case "p", "dropout":
					m[k.name] = l.P
				case "vocab":
					m[k.name] = l.Vocab
				case "dim":
					m[k.name] = l.Dim
				case "heads":
					m[k.name] = l.Heads
				case "mlp":
					m[k.name] = l.MLP
				}
			}
			settings = m
		}
		out[i] = map[string]any{string(l.Kind): settings}
	}
	return out
}

// MarshalYAML writes the layers in the configuration's form.
func (ls Layers) MarshalYAML() (any, error) { return ls.value(), nil }

// UnmarshalYAML reads the layers as ParseLayers does.
func (ls *Layers) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	parsed, err := ParseLayers(v)
	*ls = parsed
	return err
}

// MarshalJSON writes the layers in the configuration's form.
func (ls Layers) MarshalJSON() ([]byte, error) { return json.Marshal(ls.value()) }

// UnmarshalJSON reads the layers as ParseLayers does.
func (ls *Layers) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	parsed, err := ParseLayers(v)
	*ls = parsed
	return err
}

// validateModel checks the layers' settings, and their shapes when the
// input's shape is given; without it the shapes are checked by Plan, on
// the dataset's features. model.input goes with model.layers only.
func (s Spec) validateModel() error {
	if len(s.Layers) == 0 {
		if len(s.Input) > 0 {
			return field.Errorf("model.input", "goes with %s: the %s shorthand takes the dataset's features as they are; give the layers too, or leave %s out",
				field.Name("model.layers"), field.Name("model.hidden"), field.Name("model.input"))
		}
		return nil
	}
	if len(s.Input) == 0 {
		return nn.ValidateLayers(s.Layers)
	}
	return s.net(s.Input).Validate()
}

func (s Spec) net(input []int) nn.Net {
	return nn.Net{Input: nn.Shape(input), Layers: []nn.LayerSpec(s.Layers), Loss: nn.Loss(s.Loss)}
}

// model resolves the spec's model on a dataset of examples of shape d:
// the MLP the training step runs (for a net that is not an MLP, its
// outline: inputs, classes, loss and positions), and the net it was
// described as (zero for the model.hidden shorthand). Shapes are inferred
// and checked here, before anything is allocated: a token dataset's
// against the model's input T and vocabulary (nn.Arch.FitsTokens).
func (s Spec) model(d data.Shape) (nn.Spec, nn.Net, error) {
	features, classes := d.Inputs, d.Classes
	if len(s.Layers) == 0 {
		if d.Tokens {
			return nn.Spec{}, nn.Net{}, field.Errorf("model.layers", "is required for dataset %s of token ids: give layers starting with embedding", d.Name)
		}
		act, _ := nn.ParseActivation(s.Activation)
		return nn.Spec{Inputs: features, Hidden: s.Hidden, Outputs: classes, Act: act, Loss: nn.Loss(s.Loss)}, nn.Net{}, nil
	}
	input := s.Input
	if len(input) == 0 {
		input = []int{features}
	}
	net := s.net(input)
	arch, err := net.Resolve()
	if err != nil {
		return nn.Spec{}, nn.Net{}, err
	}
	if d.Tokens {
		err = arch.FitsTokens(d.Positions, d.Classes)
	} else {
		err = arch.Fits(features, classes)
	}
	if err != nil {
		return nn.Spec{}, nn.Net{}, err
	}
	if mlp, err := net.MLP(); err == nil {
		return mlp, net, nil
	}
	return arch.Outline(), net, nil
}
