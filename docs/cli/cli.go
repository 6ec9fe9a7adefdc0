// Package cli holds the long help of tolaria's commands: one plain-text
// file per command (the root's is tolaria.txt), readable here as the
// commands' reference and printed by each command's --help.
package cli

import (
	"embed"
	"strings"
)

//go:embed *.txt
var files embed.FS

// Help is the long help of command ("tolaria" for the root), without its
// final newline. A command with no file is a defect of the build: Help
// panics, and the tests that run every command's --help find it.
func Help(command string) string {
	b, err := files.ReadFile(command + ".txt")
	if err != nil {
		panic("cli: no help for command " + command + ": " + err.Error())
	}
	return strings.TrimSuffix(string(b), "\n")
}
