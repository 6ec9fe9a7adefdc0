package data

import (
	"fmt"
	"math"
)

// Baselines are the validation cross-entropies, in nats per byte (a byte is a character
// of ASCII text), of models fitted by counting: the floor a trained character model must
// beat. Unigram and Bigram use add-one (Laplace) smoothing over all TextVocab byte values,
// counted on the training text only, so every byte has a finite loss.
type Baselines struct {
	// Uniform is ln 256: every byte equally likely.
	Uniform float64
	// Unigram predicts byte b with (count(b)+1) / (len(train)+256).
	Unigram float64
	// Bigram predicts byte b after byte a with (count(a b)+1) / (count(a .)+256), where
	// count(a .) is the training pairs that start with a.
	Bigram float64
	// Scored is the validation bytes scored: every one but the first, which has no
	// preceding byte in the validation text. They are the targets a windowed model
	// predicts, so all three losses average over the same positions.
	Scored int
}

// TextBaselines fits the unigram and bigram models on train and scores them on valid (see
// Baselines). It needs at least two bytes of each: one pair to count, one to score.
func TextBaselines(train, valid []byte) (Baselines, error) {
	if len(train) < 2 || len(valid) < 2 {
		return Baselines{}, fmt.Errorf("%w: TextBaselines: %d training and %d validation bytes; want at least 2 of each",
			ErrInvalid, len(train), len(valid))
	}
	var unigram [TextVocab]int
	bigram := make([]int, TextVocab*TextVocab) // [a*TextVocab+b]
	var starts [TextVocab]int                  // pairs that start with a
	for i, b := range train {
		unigram[b]++
		if i > 0 {
			a := train[i-1]
			bigram[int(a)*TextVocab+int(b)]++
			starts[a]++
		}
	}

	var uni, bi float64
	unigramTotal := float64(len(train) + TextVocab)
	for i := 1; i < len(valid); i++ {
		a, b := valid[i-1], valid[i]
		uni -= math.Log(float64(unigram[b]+1) / unigramTotal)
		bi -= math.Log(float64(bigram[int(a)*TextVocab+int(b)]+1) / float64(starts[a]+TextVocab))
	}
	n := len(valid) - 1
	return Baselines{Uniform: math.Log(TextVocab), Unigram: uni / float64(n), Bigram: bi / float64(n), Scored: n}, nil
}
