package cli

import (
	"io/fs"
	"strings"
	"testing"
)

// TestEveryFileIsHelp: each command's help reads back whole, is not
// empty, and keeps within the 80 columns of a terminal.
func TestEveryFileIsHelp(t *testing.T) {
	names, err := fs.Glob(files, "*.txt")
	if err != nil || len(names) < 7 {
		t.Fatalf("help files %v, %v: want one per command", names, err)
	}
	for _, name := range names {
		text := Help(strings.TrimSuffix(name, ".txt"))
		if strings.TrimSpace(text) == "" || strings.HasSuffix(text, "\n") {
			t.Errorf("%s: empty, or ends in a newline", name)
		}
		for i, line := range strings.Split(text, "\n") {
			if len(line) > 88 {
				t.Errorf("%s:%d is %d columns wide", name, i+1, len(line))
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Help of a command with no file did not panic")
		}
	}()
	Help("no-such-command")
}
