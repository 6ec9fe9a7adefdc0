package shellword

import (
	"os/exec"
	"testing"
)

// TestJoin: a word a shell would read otherwise is quoted, a quote inside
// it escaped; plain words are left as they are.
func TestJoin(t *testing.T) {
	got := Join("sbatch", "--array=0-3%2", "", "a b", "it's", "x!", "--mem=8G", "runs/<time>", "=ls")
	if want := `sbatch --array=0-3%2 '' 'a b' 'it'\''s' 'x!' --mem=8G 'runs/<time>' '=ls'`; got != want {
		t.Errorf("Join = %s, want %s", got, want)
	}
}

// TestAShellReadsEachWordBack: sh splits a joined line into the words it
// was made of, whatever they hold.
func TestAShellReadsEachWordBack(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"my run", "it's", "runs/<time>", "$HOME", "`id`", "a;b", "*", "~x", "tab\there", "new\nline", "ünï", ""}
	for _, w := range words {
		out, err := exec.Command(sh, "-c", "printf '%s' "+Quote(w)).Output()
		if err != nil || string(out) != w {
			t.Errorf("sh read %s as %q (%v), want %q", Quote(w), out, err, w)
		}
	}
}
