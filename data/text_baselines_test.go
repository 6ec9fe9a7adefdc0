package data

import (
	"errors"
	"math"
	"testing"
)

func TestTextBaselines(t *testing.T) {
	for _, tt := range []struct {
		name            string
		train, valid    string
		unigram, bigram float64
		scored          int
	}{
		// "aaaa": a is 4 of 4 bytes and 3 pairs all start with a and are aa.
		// The one scored byte (the second a of "aa"): unigram 5/260, bigram 4/259.
		{"one letter", "aaaa", "aa", math.Log(260.0 / 5), math.Log(259.0 / 4), 1},
		// "abab": a and b are 2 each; pairs ab, ba, ab. Scoring "aba" scores b after a
		// and a after b: unigram 3/260 each; bigram (2+1)/(2+256) and (1+1)/(1+256).
		{"two letters", "abab", "aba", math.Log(260.0 / 3), (math.Log(258.0/3) + math.Log(257.0/2)) / 2, 2},
		// A byte never seen in training still has a finite loss: 1/(4+256) and 1/(0+256)
		// after z, which starts no training pair.
		{"unseen", "abab", "zz", math.Log(260.0), math.Log(256.0), 1},
	} {
		b, err := TextBaselines([]byte(tt.train), []byte(tt.valid))
		if err != nil {
			t.Fatal(err)
		}
		if !near(b.Unigram, tt.unigram) || !near(b.Bigram, tt.bigram) || b.Scored != tt.scored || !near(b.Uniform, math.Log(256)) {
			t.Errorf("%s: got %+v; want unigram %.6f bigram %.6f over %d bytes", tt.name, b, tt.unigram, tt.bigram, tt.scored)
		}
	}
	for _, tt := range [][2]string{{"a", "ab"}, {"ab", "a"}, {"", ""}} {
		if _, err := TextBaselines([]byte(tt[0]), []byte(tt[1])); !errors.Is(err, ErrInvalid) {
			t.Errorf("train %q valid %q: got %v; want ErrInvalid", tt[0], tt[1], err)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }
