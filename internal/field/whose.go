package field

import (
	"bytes"
	"slices"

	"gopkg.in/yaml.v3"
)

// Whose says, of a file that Read refused with ErrOtherCommand, which
// command it is for ("tolaria rl --config") and the keys of the file's
// top that tell, by the rule of OtherCommand; "" when raw is not another
// command's file (or not a YAML mapping). A caller that knows where the
// file came from (a run directory's config.yaml) words it so.
func (sc Schema) Whose(raw []byte) (command string, keys []string) {
	var doc yaml.Node
	if yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", nil
	}
	n := doc.Content[0]
	var top []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		top = append(top, n.Content[i].Value)
	}
	known := func(k string) bool {
		return slices.Contains(sc.Keys, Name(k)) || sc.section(k) || sc.Flat[Name(k)] != ""
	}
	return whose(top, sc.Command, known)
}

// whose is OtherCommand's rule: the command whose own keys, among those
// self does not know, top holds two of (one when self knows none of
// top), and those keys.
func whose(top []string, self string, known func(string) bool) (command string, keys []string) {
	knowsSome := slices.ContainsFunc(top, known)
	for _, c := range commandKeys {
		var theirs []string
		for _, k := range top {
			if slices.Contains(c.keys, k) && !known(k) {
				theirs = append(theirs, k)
			}
		}
		if c.command != self && (len(theirs) >= 2 || len(theirs) == 1 && !knowsSome) {
			return c.command, theirs
		}
	}
	return "", nil
}
