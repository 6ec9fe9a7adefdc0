package eval

import "testing"

// TestResumeCommandRepeatsWhatAShardFileMustMatch: the command an
// interrupted evaluation names to continue carries --resume and every
// setting its kept shard files are checked against, so that they are
// kept; the defaults are left out, and each word is quoted for a shell
// where it needs to be.
func TestResumeCommandRepeatsWhatAShardFileMustMatch(t *testing.T) {
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{RunDir: "runs/a", Workers: 3, Split: "test"}, "tolaria eval --resume --run-dir runs/a --workers 3"},
		{Request{RunDir: "runs/a", Workers: 1}, "tolaria eval --resume --run-dir runs/a --workers 1"},
		{Request{RunDir: "r", Workers: 2, Split: "train", Checkpoint: "r/old.tlck", DataDir: "c2", Predictions: true, TopK: 3},
			"tolaria eval --resume --run-dir r --workers 2 --split train --checkpoint r/old.tlck --data-dir c2 --predictions --top-k 3"},
		// Pasted into a shell, each path stays one word.
		{Request{RunDir: "my runs/<a>", Workers: 1, Checkpoint: "it's.tlck"},
			`tolaria eval --resume --run-dir 'my runs/<a>' --workers 1 --checkpoint 'it'\''s.tlck'`},
	} {
		if got := ResumeCommand(c.req); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.req, got, c.want)
		}
	}
}
