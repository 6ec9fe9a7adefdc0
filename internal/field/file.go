package field

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
	"gopkg.in/yaml.v3"
)

// Schema is the keys a configuration file may give. A key is a path of
// sections: optimizer.lr is lr in the mapping optimizer:, and a file may
// also write it whole (optimizer.lr: 0.1) at the top. A key given under
// its deprecated flat spelling (lr:) is read as its key, and the file's
// Setting says so.
type Schema struct {
	// Keys are the settings, every one a leaf: its value is taken as
	// it is, a list or a mapping included (model.layers).
	Keys []Name
	// Flat maps a deprecated flat spelling to its key: lr to
	// optimizer.lr. A flat spelling that is also a section
	// (optimizer: adamw, for optimizer.kind) is the flat key only when
	// its value is not a mapping.
	Flat map[Name]Name
	// Command is the command that reads these files ("tolaria train
	// --config"): a file of another command's keys is refused as that
	// command's (see OtherCommand).
	Command string
}

// Setting is one value a configuration file gives.
type Setting struct {
	Key     Name // the key it sets
	Written Name // the key as the file wrote it: the path, or a deprecated flat key
	Value   any  // the value as YAML decodes it (int, float64, string, bool, []any, map[string]any)
	Node    *yaml.Node
}

// Deprecated reports whether the file wrote the key in its deprecated
// flat spelling.
func (s Setting) Deprecated() bool { return s.Written != s.Key }

// Warning is what to tell the user of a deprecated spelling, "" for one
// that is not.
func (s Setting) Warning() string {
	if !s.Deprecated() {
		return ""
	}
	return fmt.Sprintf("%s is deprecated: write %s (the flat key is still read in this release and will not be in the next)", s.Written, s.Key)
}

// ErrUnknownKey is what a file's key that is no setting wraps.
var ErrUnknownKey = errors.New("unknown key")

// ErrOtherCommand is what a file of another command's keys wraps (see
// OtherCommand); it wraps ErrUnknownKey.
var ErrOtherCommand = fmt.Errorf("%w of another command", ErrUnknownKey)

// commandKeys are, for each command that reads a configuration file, keys
// at the top of its files that no other command's file has.
var commandKeys = []struct {
	command string
	keys    []string
}{
	{"tolaria train --config", []string{"schedule", "data", "graphs", "staging"}},
	{"tolaria sweep", []string{"base", "trials", "grid"}},
	{"tolaria rl --config", []string{"num_agents", "env", "target_update", "buffer_capacity", "learning_starts", "sync_interval", "epsilon_decay_steps"}},
}

// OtherCommand says which command a file is for when it is not self's: a
// file whose top-level keys (top) include, among those self does not
// know (known), two of another command's own keys, or one when self
// knows none of top. It is "" for a file that is not another's.
func OtherCommand(top []string, self string, known func(string) bool) string {
	if command, theirs := whose(top, self, known); command != "" {
		return fmt.Sprintf("is a file for %s (it has %s), not for %s", command, strings.Join(theirs, ", "), self)
	}
	return ""
}

// errSilent wraps an error for errors.Is without adding to the message.
type errSilent struct{ err error }

func (e errSilent) Error() string { return "" }
func (e errSilent) Unwrap() error { return e.err }

// Read decodes a YAML document into its settings, in the file's order.
// An empty document gives none.
func (sc Schema) Read(raw []byte) ([]Setting, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		return nil, nil
	}
	return sc.Settings(doc.Content[0])
}

// Settings reads the mapping n into its settings, in the file's order.
// Every key that is neither a setting, a section holding one, nor a
// deprecated flat key is refused, all of them in one error naming each
// by its path as written. A key given twice (optimizer.lr and lr) is
// refused too.
func (sc Schema) Settings(n *yaml.Node) ([]Setting, error) {
	var out []Setting
	var unknown []string
	if err := sc.walk(n, "", &out, &unknown); err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		var top []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			top = append(top, n.Content[i].Value)
		}
		known := func(k string) bool {
			return slices.Contains(sc.Keys, Name(k)) || sc.section(k) || sc.Flat[Name(k)] != ""
		}
		if other := OtherCommand(top, sc.Command, known); other != "" {
			return nil, fmt.Errorf("%s%w", other, errSilent{ErrOtherCommand})
		}
		if len(unknown) > 1 {
			return nil, fmt.Errorf("%ws %s", ErrUnknownKey, strings.Join(unknown, "; "))
		}
		return nil, fmt.Errorf("%w %s", ErrUnknownKey, unknown[0])
	}
	seen := map[Name]Name{}
	for _, s := range out {
		switch first, twice := seen[s.Key]; {
		case twice && first == s.Written:
			return nil, fmt.Errorf("%s: is given twice; give each key once", s.Written)
		case twice:
			return nil, fmt.Errorf("%s and %s both set %s; give it once", first, s.Written, s.Key)
		}
		seen[s.Key] = s.Written
	}
	return out, nil
}

func (sc Schema) walk(n *yaml.Node, prefix string, out *[]Setting, unknown *[]string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		where := "the file"
		if prefix != "" {
			where = strings.TrimSuffix(prefix, ".")
		}
		return fmt.Errorf("%s: must be a mapping of keys to values, e.g. %s", where, sc.example(prefix))
	}
	start := len(*out)
	var merged []*yaml.Node // the mappings of merge keys (<<: *defaults), in order
	for i := 0; i+1 < len(n.Content); i += 2 {
		written := prefix + n.Content[i].Value
		val := n.Content[i+1]
		if val.Kind == yaml.AliasNode {
			val = val.Alias
		}
		if n.Content[i].Tag == "!!merge" {
			if val.Kind == yaml.SequenceNode {
				merged = append(merged, val.Content...)
			} else {
				merged = append(merged, val)
			}
			continue
		}
		switch key, flat := sc.Flat[Name(written)]; {
		case val.Tag == "!!null" && sc.section(written):
			// An empty section sets nothing.
		case strings.Contains(n.Content[i].Value, "-"):
			*unknown = append(*unknown, fmt.Sprintf("%s (write %s)", written, strings.ReplaceAll(written, "-", "_")))
		case val.Kind == yaml.MappingNode && sc.section(written):
			if err := sc.walk(val, written+".", out, unknown); err != nil {
				return err
			}
		case slices.Contains(sc.Keys, Name(written)):
			if err := add(out, Name(written), Name(written), val); err != nil {
				return err
			}
		case flat && !(val.Kind == yaml.MappingNode && sc.section(written)):
			if err := add(out, key, Name(written), val); err != nil {
				return err
			}
		case sc.section(written):
			return fmt.Errorf("%s: must be a mapping of keys to values, e.g. %s", written, sc.example(written+"."))
		default:
			*unknown = append(*unknown, written+sc.hint(written))
		}
	}
	// A merged mapping gives what the mapping's own keys (and an earlier
	// merged mapping) do not, as YAML's merge key means.
	for _, m := range merged {
		var from []Setting
		if err := sc.walk(m, prefix, &from, unknown); err != nil {
			return err
		}
		for _, s := range from {
			if !slices.ContainsFunc((*out)[start:], func(o Setting) bool { return o.Key == s.Key }) {
				*out = append(*out, s)
			}
		}
	}
	return nil
}

func add(out *[]Setting, key, written Name, n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		// "epochs:" with nothing after it would take the default unseen.
		return Errorf(written, "has no value; give one, or leave the key out for its default")
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return Errorf(written, "cannot be read: %w", err)
	}
	*out = append(*out, Setting{Key: key, Written: written, Value: v, Node: n})
	return nil
}

// section reports whether path holds keys.
func (sc Schema) section(path string) bool {
	return slices.ContainsFunc(sc.Keys, func(k Name) bool { return strings.HasPrefix(string(k), path+".") })
}

// hint suggests the key meant by an unknown one: a key ending the same
// way ("schedule.lr" is optimizer.lr), else the keys of its section.
func (sc Schema) hint(written string) string {
	last := written[strings.LastIndex(written, ".")+1:]
	for _, k := range sc.Keys {
		if strings.HasSuffix("."+string(k), "."+last) {
			return fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	if i := strings.LastIndex(written, "."); i > 0 && sc.section(written[:i]) {
		return fmt.Sprintf(" (%s holds %s)", written[:i], strings.Join(sc.under(written[:i]), ", "))
	}
	// A slip of a letter or two: the key whose last part is nearest, or
	// the section (optimiser for optimizer).
	best, bestDist := "", 3
	for _, k := range sc.Keys {
		name := string(k)
		if d := levenshtein.ComputeDistance(last, name[strings.LastIndex(name, ".")+1:]); d < bestDist {
			best, bestDist = name, d
		}
		if i := strings.Index(name, "."); i > 0 && !strings.Contains(written, ".") {
			if d := levenshtein.ComputeDistance(written, name[:i]); d < bestDist {
				best, bestDist = name[:i], d
			}
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return ""
}

// Nearest is the one of names nearest to name by a slip of a letter or
// two (Levenshtein's distance below 3), "" when none is.
func Nearest(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := levenshtein.ComputeDistance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// under lists the keys in section path, by their names there.
func (sc Schema) under(path string) []string {
	var names []string
	for _, k := range sc.Keys {
		if rest, ok := strings.CutPrefix(string(k), path+"."); ok {
			names = append(names, rest)
		}
	}
	return names
}

func (sc Schema) example(prefix string) string {
	for _, k := range sc.Keys {
		if rest, ok := strings.CutPrefix(string(k), prefix); ok && prefix != "" {
			return rest + ": ..."
		}
	}
	return "key: value"
}

// Respell is err with the keys of its Errors spelled by spell (see
// Render), still wrapping err: what a reader of a file does to name a
// key as the file wrote it.
func Respell(err error, spell func(Name) string) error {
	if err == nil || len(all(err)) == 0 {
		return err
	}
	return &respelled{err: err, msg: Render(err, spell)}
}

type respelled struct {
	err error
	msg string
}

func (r *respelled) Error() string { return r.msg }
func (r *respelled) Unwrap() error { return r.err }
