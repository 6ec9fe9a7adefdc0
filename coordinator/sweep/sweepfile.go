package sweep

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// Sweep is a sweep file read and resolved: every trial's job, validated.
type Sweep struct {
	Path   string
	Raw    []byte // the file as it was read, kept in the sweep directory
	Trials []Trial
	// Launcher and Slurm are the file's launcher: and slurm: ("" and zero
	// without them); the command line's flags take precedence.
	Launcher string
	Slurm    launch.SlurmConfig
	// Warnings name the deprecated flat keys the file uses, each once,
	// with the key to write instead.
	Warnings []string
}

// Trial is one job of a sweep.
type Trial struct {
	// Name is the trial's directory under the sweep directory.
	Name string
	// Overrides are the settings the trial changes from base, by key
	// (optimizer.lr, however the file spelled it).
	Overrides map[field.Name]any
	// Spec is base with the overrides applied; the sweep sets its device
	// and run directory when the trial runs.
	Spec job.Spec
	// Priority is the trial's priority for device memory (its priority:
	// key, 0 without one): the budget broker parks a trial of lower
	// priority to make room for one of higher.
	Priority float64
}

// sweepKeys are the settings a sweep file may not give: the sweep sets
// them for every trial, or (schedule.max_steps) decides them.
var sweepKeys = map[field.Name]string{
	"run_dir": "each trial runs in <sweep-dir>/<trial name>",
	"resume":  "a sweep starts its trials fresh",
	"device":  "the sweep's --device or --devices choose it",
	// A run stopped by max_steps ends interrupted, which a trial that
	// nothing interrupted cannot be: every such trial failed.
	"schedule.max_steps": "a trial trains to its last epoch; give schedule.epochs",
}

// trialName is what a trial's name may be: it names a directory.
var trialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._=,+-]{0,99}$`)

// maxNameBytes bounds a trial's name, as crossed with the grid's: the
// longest entry named after it, trials/<name>.yaml, must fit the 255 bytes
// that ext4, XFS, btrfs, tmpfs, NFS and APFS allow a name. A longer one
// failed only when its file was written, after the sweep had started.
const maxNameBytes = 255 - len(".yaml")

// reservedNames are the sweep directory's own entries, each launcher's
// directory among them: a trial named so would put its run directory in
// their place.
func reservedNames() []string {
	names := []string{ResultsJSON, ResultsCSV, SweepFileCopy, TrialConfigDir, JournalFile, sweepLock}
	for _, k := range launch.Kinds() {
		names = append(names, k.Name)
	}
	return names
}

// checkTrialName refuses a name that cannot be a run directory of its
// own in the sweep directory. seen holds the names so far by their lower
// case: two names that differ only in case share one directory on a file
// system that ignores case (macOS's, Windows').
func checkTrialName(name string, seen map[string]string) error {
	for _, r := range reservedNames() {
		if strings.EqualFold(name, r) {
			return fmt.Errorf("trial %q: the name is reserved: the sweep directory's own %s is named so; rename the trial", name, r)
		}
	}
	if len(name) > maxNameBytes {
		return fmt.Errorf("trial %q: the name is %d bytes long, at most %d fit a file name (trials/<name>.yaml); name the trial, or shorten the grid's values", name, len(name), maxNameBytes)
	}
	folded := strings.ToLower(name)
	switch other, ok := seen[folded]; {
	case ok && other == name:
		return fmt.Errorf("trial %q: the name is used twice; trial names must be unique (they name directories)", name)
	case ok:
		return fmt.Errorf("trial %q: the name differs from trial %q only in case; they would share a directory on a file system that ignores case: rename one", name, other)
	}
	seen[folded] = name
	return nil
}

// sweepYAML is a sweep file's layout.
type sweepYAML struct {
	Base     yaml.Node          `yaml:"base"`
	Trials   []yaml.Node        `yaml:"trials"`
	Grid     yaml.Node          `yaml:"grid"`
	Launcher string             `yaml:"launcher"`
	Slurm    launch.SlurmConfig `yaml:"slurm"`
}

// topKeys are the keys of a sweep file's top level.
var topKeys = []string{"base", "trials", "grid", "launcher", "slurm"}

// topKeysText lists them for a refusal.
const topKeysText = "a sweep file has base:, trials:, grid:, and optionally launcher: and slurm:"

// slurmKeys are the keys of a sweep file's slurm: (launch.SlurmConfig's),
// each with its field's index.
func slurmKeys() ([]string, map[string]int) {
	var names []string
	index := map[string]int{}
	typ := reflect.TypeFor[launch.SlurmConfig]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
			index[name] = i
		}
	}
	return names, index
}

// readLayout reads a sweep file's top level by key, as tolaria train
// reads its file: every unknown key (slurm:'s included) is refused at
// once, each by its path as written and the nearest key it may mean, and
// a value of the wrong shape by its key and the shape it must have. The
// trials' settings, under base:, trials: and grid:, are the job's
// schema's to check (settingsOf).
func readLayout(raw []byte) (sweepYAML, error) {
	var f sweepYAML
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, errors.New("is empty; give base: and trials:, grid: or both")
		}
		return f, fmt.Errorf("is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return f, errors.New("is empty; give base: and trials:, grid: or both")
	}
	top := resolved(doc.Content[0])
	switch {
	case top.Tag == "!!null":
		return f, errors.New("is empty; give base: and trials:, grid: or both")
	case top.Kind != yaml.MappingNode:
		return f, fmt.Errorf("must be a mapping of keys (%s), e.g. base: {dataset: synthetic} and grid: {optimizer.lr: [0.01, 0.1]}; got %s", topKeysText, shapeName(top))
	}
	var keys, unknown, wrong []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, v := top.Content[i].Value, resolved(top.Content[i+1])
		keys = append(keys, key)
		if seen[key] {
			wrong = append(wrong, fmt.Sprintf("%s: is given twice; give each key once", key))
			continue
		}
		seen[key] = true
		switch key {
		case "base":
			if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
				wrong = append(wrong, fmt.Sprintf("base: must be a mapping of a job's settings (the keys of a tolaria train configuration file), e.g. base: {dataset: synthetic, schedule: {epochs: 2}}; got %s", shapeName(v)))
				continue
			}
			f.Base = *v
		case "trials":
			trials, problems := trialNodes(v)
			f.Trials, wrong = trials, append(wrong, problems...)
		case "grid":
			if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
				wrong = append(wrong, fmt.Sprintf("grid: must map keys to lists of values, e.g. grid: {optimizer.lr: [0.01, 0.1]}; got %s", shapeName(v)))
				continue
			}
			if v.Tag != "!!null" {
				f.Grid = *v
			}
		case "launcher":
			if v.Kind != yaml.ScalarNode {
				wrong = append(wrong, fmt.Sprintf("launcher: must be the name of a launcher (%s); got %s", strings.Join(launcherNames(), " or "), shapeName(v)))
				continue
			}
			if v.Tag != "!!null" {
				f.Launcher = v.Value
			}
		case "slurm":
			u, w := readSlurm(v, &f.Slurm)
			unknown, wrong = append(unknown, u...), append(wrong, w...)
		default:
			unknown = append(unknown, key+nearestHint(key, "", topKeys))
		}
	}
	if len(unknown) > 0 {
		known := func(k string) bool { return slices.Contains(topKeys, k) }
		if other := field.OtherCommand(keys, "tolaria sweep", known); other != "" {
			return f, errors.New(other)
		}
	}
	var problems []string
	switch {
	case len(unknown) == 1:
		problems = append(problems, fmt.Sprintf("%s %s (%s)", field.ErrUnknownKey, unknown[0], topKeysText))
	case len(unknown) > 1:
		problems = append(problems, fmt.Sprintf("%ss %s (%s)", field.ErrUnknownKey, strings.Join(unknown, "; "), topKeysText))
	}
	if problems = append(problems, wrong...); len(problems) > 0 {
		err := errors.New(strings.Join(problems, "; "))
		if len(unknown) > 0 {
			err = unknownKeys{err}
		}
		return f, err
	}
	return f, nil
}

// unknownKeys is a refusal of unknown keys, which errors.Is finds as
// field.ErrUnknownKey, as it finds the refusals of tolaria train's file.
type unknownKeys struct{ err error }

func (e unknownKeys) Error() string   { return e.err.Error() }
func (e unknownKeys) Unwrap() []error { return []error{e.err, field.ErrUnknownKey} }

// trialNodes are the trials of trials: (nil when it is absent or empty of
// value), and what is wrong with their shape.
func trialNodes(v *yaml.Node) ([]yaml.Node, []string) {
	switch {
	case v.Tag == "!!null":
		return nil, nil
	case v.Kind != yaml.SequenceNode:
		return nil, []string{fmt.Sprintf("trials: must be a list of trials, each a mapping of its settings, e.g. trials: [{name: fast, optimizer: {lr: 0.1}}]; got %s", shapeName(v))}
	}
	trials := make([]yaml.Node, 0, len(v.Content))
	var wrong []string
	for i, t := range v.Content {
		t = resolved(t)
		if t.Kind != yaml.MappingNode && t.Tag != "!!null" {
			wrong = append(wrong, fmt.Sprintf("trials[%d]: must be a mapping of the trial's settings, e.g. {name: fast, optimizer: {lr: 0.1}}; got %s", i+1, shapeName(t)))
			continue
		}
		trials = append(trials, *t)
	}
	return trials, wrong
}

// readSlurm reads slurm: into cfg: its unknown keys (by path, with the
// nearest known), and its values of the wrong shape.
func readSlurm(v *yaml.Node, cfg *launch.SlurmConfig) (unknown, wrong []string) {
	names, index := slurmKeys()
	switch {
	case v.Tag == "!!null":
		return nil, nil
	case v.Kind != yaml.MappingNode:
		return nil, []string{fmt.Sprintf("slurm: must be a mapping of its settings (%s), e.g. slurm: {partition: gpu}; got %s", strings.Join(names, ", "), shapeName(v))}
	}
	fields := reflect.ValueOf(cfg).Elem()
	for i := 0; i+1 < len(v.Content); i += 2 {
		key, val := v.Content[i].Value, resolved(v.Content[i+1])
		at, ok := index[key]
		if !ok {
			unknown = append(unknown, "slurm."+key+nearestHint(key, "slurm.", names))
			continue
		}
		dst := fields.Field(at)
		want := "a string"
		if dst.Kind() == reflect.Slice {
			want = "a list of strings, e.g. [--mem=8G, --qos=normal]"
		}
		if (dst.Kind() == reflect.String) != (val.Kind == yaml.ScalarNode) || val.Decode(dst.Addr().Interface()) != nil {
			wrong = append(wrong, fmt.Sprintf("slurm.%s: must be %s; got %s", key, want, shapeName(val)))
		}
	}
	return unknown, wrong
}

// nearestHint suggests the key of names (each prefixed) that key is a
// slip for, or lists them.
func nearestHint(key, prefix string, names []string) string {
	if near := field.Nearest(key, names); near != "" {
		return fmt.Sprintf(" (did you mean %s%s?)", prefix, near)
	}
	if prefix == "" && isJobKey(key) {
		return " (a job's setting: put it under base:, or a trial's under trials:)"
	}
	if prefix != "" {
		return fmt.Sprintf(" (%s holds %s)", strings.TrimSuffix(prefix, "."), strings.Join(names, ", "))
	}
	return ""
}

// isJobKey reports whether key is a setting of a job, a section of them
// or a deprecated flat key.
func isJobKey(key string) bool {
	sc := job.Schema()
	return sc.Flat[field.Name(key)] != "" || slices.ContainsFunc(sc.Keys, func(k field.Name) bool {
		return string(k) == key || strings.HasPrefix(string(k), key+".")
	})
}

func launcherNames() []string {
	var names []string
	for _, k := range launch.Kinds() {
		names = append(names, k.Name)
	}
	return names
}

// resolved is n, or the node an alias n stands for.
func resolved(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// shapeName says what a node is, for a refusal of its shape.
func shapeName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return quoteShort(n.Value)
}

// quoteShort quotes a scalar for a refusal, cut short.
func quoteShort(v string) string {
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return fmt.Sprintf("%q", v)
}

// DefaultMaxTrials is the most trials a sweep file may make unless the
// caller allows more (tolaria sweep --max-trials). A grid grows as the
// product of its lists, so one more key can turn a sweep of hundreds into
// one of hundreds of thousands; such a sweep is refused before it is
// expanded, not found out after hours. Ten thousand trials keep the
// coordinator's memory near 60 MiB and results.json near 4 MB.
const DefaultMaxTrials = 10000

// ReadSweep reads and validates a sweep file: a base job (the keys of a
// tolaria train configuration file, nested in their sections), and trials
// (a list of overrides in the same layout, each optionally named) and/or
// a grid (key -> list of values, the keys nested or written whole, e.g.
// optimizer.lr: [0.01, 0.1], crossed in the order the file gives the
// keys, the last varying fastest). The deprecated flat keys (lr:) are
// read too, each named in Warnings. With both,
// every trial is crossed with every grid point. Every refusal wraps
// refusal.ErrConfig and names the file, and the trial and key at fault. It makes
// at most DefaultMaxTrials trials.
func ReadSweep(path string) (*Sweep, error) {
	return ReadSweepMax(path, DefaultMaxTrials)
}

// ReadSweepMax is ReadSweep with at most maxTrials trials; a larger sweep
// is refused (naming max_trials) before its trials are made. 0 sets no
// limit: for a sweep accepted once already, as a resumed one is.
func ReadSweepMax(path string, maxTrials int) (*Sweep, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, refusal.Config(fmt.Errorf("sweep file %s: %w", path, err))
	}
	sw, err := parseSweepMax(raw, maxTrials)
	if err != nil {
		return nil, refusal.Config(fmt.Errorf("sweep file %s: %w", path, err))
	}
	sw.Path, sw.Raw = path, raw
	return sw, nil
}

func parseSweep(raw []byte) (*Sweep, error) { return parseSweepMax(raw, DefaultMaxTrials) }

func parseSweepMax(raw []byte, maxTrials int) (*Sweep, error) {
	f, err := readLayout(raw)
	if err != nil {
		return nil, err
	}
	if _, err := launch.Find(f.Launcher); err != nil {
		return nil, err
	}
	if err := f.Slurm.Validate(); err != nil {
		return nil, fmt.Errorf("slurm: %w", err)
	}
	var warnings []string
	trials, err := trialsOf(f, maxTrials, &warnings)
	if err != nil {
		return nil, err
	}
	return &Sweep{Trials: trials, Launcher: f.Launcher, Slurm: f.Slurm, Warnings: warnings}, nil
}

// warn adds st's deprecation warnings to warnings, each once, saying
// where in the file (base, trials, grid) they were written.
func warn(warnings *[]string, where string, st job.Settings) {
	for _, w := range st.Warnings() {
		if w = where + ": " + w; !slices.Contains(*warnings, w) {
			*warnings = append(*warnings, w)
		}
	}
}

func trialsOf(f sweepYAML, maxTrials int, warnings *[]string) ([]Trial, error) {
	base, err := settingsOf(&f.Base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	warn(warnings, "base", base)
	spec := job.Default()
	if err := base.Apply(&spec); err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	named, err := listTrials(f.Trials, warnings)
	if err != nil {
		return nil, err
	}
	axes, err := gridAxes(&f.Grid, warnings)
	if err != nil {
		return nil, err
	}
	if err := checkCount(len(named), f.Trials != nil, axes, maxTrials); err != nil {
		return nil, err
	}
	points := gridPoints(axes)
	if len(named) == 0 && len(points) == 0 {
		return nil, errors.New("has no trials; give trials: (a list of overrides), grid: (key: [values]) or both")
	}
	if f.Trials != nil && len(named) == 0 {
		// Crossed with the grid, an empty list makes no trial at all.
		return nil, errors.New("trials: is empty; give at least one trial, or leave trials: out to run the grid alone")
	}
	return cross(spec, base, named, points, f.Trials != nil)
}

// settingsOf reads settings in the layout of a configuration file (an
// absent node gives none), refusing the sweep's own keys.
func settingsOf(n *yaml.Node, extra ...field.Name) (job.Settings, error) {
	if n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	st, err := job.ParseSettings(n, extra...)
	if err != nil {
		return nil, err
	}
	for _, s := range st {
		if why, ok := sweepKeys[s.Key]; ok {
			return nil, st.Spell(field.Errorf(s.Key, "is set by the sweep (%s); remove it", why))
		}
	}
	return st, nil
}

// point is a set of overrides with its name.
type point struct {
	name     string
	priority float64
	settings job.Settings
}

func listTrials(list []yaml.Node, warnings *[]string) ([]point, error) {
	var out []point
	for i := range list {
		p := point{name: fmt.Sprintf("trial-%d", i+1)}
		if list[i].Kind == yaml.MappingNode {
			// The name first: every other refusal names the trial.
			for j := 0; j+1 < len(list[i].Content); j += 2 {
				if list[i].Content[j].Value == "name" {
					if err := list[i].Content[j+1].Decode(&p.name); err != nil || !trialName.MatchString(p.name) {
						return nil, fmt.Errorf("trials[%d]: name %q: must be 1-100 letters, digits and ._=,+- (it names the trial's directory), starting with a letter or digit", i+1, list[i].Content[j+1].Value)
					}
				}
			}
		}
		st, err := settingsOf(&list[i], "name", "priority")
		if err != nil {
			return nil, fmt.Errorf("trial %q: %w", p.name, err)
		}
		for _, s := range st {
			if s.Key != "priority" {
				continue
			}
			switch n := s.Value.(type) {
			case int:
				p.priority = float64(n)
			case float64:
				p.priority = n
			default:
				return nil, fmt.Errorf("trial %q: priority %q: must be a number (higher: its budget comes first, and it may park trials of lower priority)", p.name, fmt.Sprint(s.Value))
			}
		}
		warn(warnings, "trials", st)
		p.settings = st.Without("name", "priority")
		out = append(out, p)
	}
	return out, nil
}

// axis is one key of a grid and its values.
type axis struct {
	key    field.Setting // the key, as written; its Value is the list
	values []any
}

// gridAxes reads a grid's keys and their values, in the file's order.
func gridAxes(n *yaml.Node, warnings *[]string) ([]axis, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("grid: must map keys to lists of values, e.g. optimizer.lr: [0.01, 0.1]")
	}
	if len(n.Content) == 0 {
		// It would make one trial with no name, run in the sweep
		// directory itself.
		return nil, errors.New("grid: has no keys; give key: [values], e.g. optimizer.lr: [0.01, 0.1], or leave grid: out")
	}
	st, err := settingsOf(n)
	if err != nil {
		return nil, fmt.Errorf("grid: %w", err)
	}
	warn(warnings, "grid", st)
	var axes []axis
	for _, s := range st {
		values, isList := s.Value.([]any)
		switch {
		case !isList:
			return nil, fmt.Errorf("grid: %s: must be a list of values, e.g. [0.01, 0.1]", s.Written)
		case len(values) == 0:
			return nil, fmt.Errorf("grid: %s: has no values", s.Written)
		}
		axes = append(axes, axis{s, values})
	}
	return axes, nil
}

// checkCount refuses a sweep of more than maxTrials trials (0: no limit)
// from the sizes of its parts, before any trial is made.
func checkCount(named int, listed bool, axes []axis, maxTrials int) error {
	if maxTrials <= 0 {
		return nil
	}
	n := 1
	if listed {
		n = named
	}
	for _, a := range axes {
		// Saturates above the limit: the product of a few long lists
		// overflows an int.
		n = min(n*len(a.values), maxTrials+1)
	}
	if n <= maxTrials {
		return nil
	}
	total := big.NewInt(1)
	if listed {
		total.SetInt64(int64(named))
	}
	for _, a := range axes {
		total.Mul(total, big.NewInt(int64(len(a.values))))
	}
	return field.Errorf("max_trials", "the sweep makes %s trials, more than %d; give %s %s to run them all, or make the grid smaller",
		total, maxTrials, field.Name("max_trials"), total)
}

// gridPoints crosses a grid's values, the first key varying slowest. A
// point's name spells each value after its key's last part, as the file
// wrote the key: lr=0.1 for optimizer.lr and for the flat lr alike.
func gridPoints(axes []axis) []point {
	if len(axes) == 0 {
		return nil
	}
	points := []point{{}}
	for _, a := range axes {
		next := make([]point, 0, len(points)*len(a.values))
		written := string(a.key.Written)
		short := written[strings.LastIndex(written, ".")+1:]
		for _, p := range points {
			for _, v := range a.values {
				s := a.key
				s.Value = v
				part := short + "=" + valueName(v)
				next = append(next, point{name: joinName(p.name, part), settings: append(slices.Clone(p.settings), s)})
			}
		}
		points = next
	}
	return points
}

// cross makes the trials: every named trial with every grid point.
// A trial whose data.dir neither the base nor its own settings give takes
// its dataset's default (job.DefaultDataDir: the fortunes for text), as
// tolaria train does, so a text trial does not read Fashion-MNIST's
// directory as its corpus.
func cross(spec job.Spec, base job.Settings, named, points []point, listed bool) ([]Trial, error) {
	if !listed {
		named = []point{{}}
	}
	if len(points) == 0 {
		points = []point{{}}
	}
	var trials []Trial
	seen := map[string]string{}
	for _, n := range named {
		for _, g := range points {
			t := Trial{Name: joinName(n.name, g.name), Overrides: map[field.Name]any{}, Spec: spec, Priority: n.priority}
			for _, s := range n.settings {
				if g.settings.Has(s.Key) {
					return nil, fmt.Errorf("trial %q: %s is set by both the trial and the grid; set it in one", n.name, s.Written)
				}
			}
			over := append(slices.Clone(n.settings), g.settings...)
			for _, s := range over {
				t.Overrides[s.Key] = s.Value
			}
			if err := checkTrialName(t.Name, seen); err != nil {
				return nil, err
			}
			if err := over.Apply(&t.Spec); err != nil {
				return nil, fmt.Errorf("trial %q: %w", t.Name, err)
			}
			if !over.Has("data.dir") && !base.Has("data.dir") {
				t.Spec.DataDir = job.DefaultDataDir(t.Spec.Dataset)
			}
			if err := t.Spec.Validate(); err != nil {
				return nil, fmt.Errorf("trial %q: %w", t.Name, append(slices.Clone(base), over...).Spell(err))
			}
			trials = append(trials, t)
		}
	}
	return trials, nil
}

func joinName(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "," + b
}

// valueName spells a grid value in a trial's name: lists joined by -,
// mappings (a layer list's layers) as their keys in order, each followed
// by its value's spelling, anything a directory name should not hold
// replaced. So [{embedding: {vocab: 256, dim: 32}}, {positional: {}}]
// is embedding_dim_32_vocab_256-positional.
func valueName(v any) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '-' || r == '+' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, spell(v))
}

func spell(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = spell(e)
		}
		return strings.Join(parts, "-")
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, k)
			if s := spell(x[k]); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "_")
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
