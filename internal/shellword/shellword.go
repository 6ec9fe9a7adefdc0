// Package shellword spells the commands tolaria tells a user to run (a
// resume, a Slurm submission) so that they can be pasted into a shell
// as they are printed: a path with a space, a quote or a < in it stays
// one word.
package shellword

import "strings"

// Quote is s as one word of a POSIX shell: s itself when every character
// is a letter, a digit or one of -_./=:,+@% (none of which a shell reads
// specially inside a word) and it does not start with = (which zsh
// expands), else s in single quotes, each quote inside it closed, escaped
// and opened again. A list of what to quote would miss one (!, {}, ^, a
// character of another script); a list of what is plain cannot.
func Quote(s string) string {
	plain := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0
	if s != "" && s[0] != '=' && plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join is words quoted one by one (Quote) and joined by spaces.
func Join(words ...string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = Quote(w)
	}
	return strings.Join(out, " ")
}
