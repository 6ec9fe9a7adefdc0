package cuda

import (
	"math"
	"testing"
)

func TestStrideDims(t *testing.T) {
	tests := []struct {
		n    int64
		grid int
	}{
		{1, 1},
		{blockThreads, 1},
		{blockThreads + 1, 2},
		{int64(blockThreads) * maxStrideGrid * 3, maxStrideGrid},
	}
	for _, tt := range tests {
		d := strideDims(tt.n)
		if d.gridX != tt.grid || d.gridY != 1 || d.blockX != blockThreads || d.blockY != 1 {
			t.Errorf("strideDims(%d) = %+v, want grid %d of %d", tt.n, d, tt.grid, blockThreads)
		}
	}
}

func TestGemmDims(t *testing.T) {
	d, err := gemmDims(64, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := (dims{gridX: 4, gridY: 2, blockX: tileEdge, blockY: tileRows}); d != want {
		t.Errorf("gemmDims(64, 100) = %+v, want %+v", d, want)
	}
	if _, err := gemmDims(maxGridY*tileEdge+1, 1); err == nil {
		t.Error("gemmDims with too many tile rows: no error")
	}
}

// tl_gemm_batched puts each product's tile columns side by side in x and
// refuses a grid wider than a launch allows; layer normalisation's rows go
// tileRows to a block.
func TestSequenceDims(t *testing.T) {
	d, err := batchedGemmDims(3, 64, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := (dims{gridX: 12, gridY: 2, blockX: tileEdge, blockY: tileRows}); d != want {
		t.Errorf("batchedGemmDims(3, 64, 100) = %+v, want %+v", d, want)
	}
	if _, err := batchedGemmDims(math.MaxInt32/2, 1, 3*tileEdge); err == nil {
		t.Error("batchedGemmDims with more than MaxInt32 blocks in x: no error")
	}
	if _, err := batchedGemmDims(1, maxGridY*tileEdge+1, 1); err == nil {
		t.Error("batchedGemmDims with too many tile rows: no error")
	}
	if d, want := rowLaneDims(19), (dims{gridX: 3, gridY: 1, blockX: tileEdge, blockY: tileRows}); d != want {
		t.Errorf("rowLaneDims(19) = %+v, want %+v", d, want)
	}
}

// A small output over a long k goes to tl_gemm_klanes, with gemmDims's
// tiles and 32×16 threads; a large output or a short k stays on tl_gemm.
func TestKLanesChoice(t *testing.T) {
	for _, tt := range []struct {
		m, n, k int
		want    bool
	}{
		{9, 32, 50176, true},    // a first conv's weight gradient at batch 64
		{288, 64, 12544, true},  // a second conv's: 18 tiles
		{256, 256, 2048, true},  // 64 tiles, the most
		{288, 256, 4096, false}, // 72 tiles: enough blocks for tl_gemm
		{9, 32, 2047, false},    // k too short
		{50176, 32, 9, false},   // a conv's forward product
		{3136, 128, 64, false},  // a linear layer's weight gradient at batch 64
	} {
		if got := useKLanes(tt.m, tt.n, tt.k); got != tt.want {
			t.Errorf("useKLanes(%d, %d, %d) = %v, want %v", tt.m, tt.n, tt.k, got, tt.want)
		}
	}
	for _, tt := range []struct{ m, n, k, parts int }{
		{9, 32, 50176, 25},     // 2048 terms a part
		{9, 32, 200704, 64},    // at most 64 parts
		{288, 64, 12544, 7},    // 7 × 288 × 64 doubles fit the scratch
		{576, 64, 3136, 2},     // 2 parts of 1568
		{256, 256, 1 << 20, 2}, // the scratch bounds it
		{9, 32, 2048, 1},
	} {
		if got := klanesParts(tt.m, tt.n, tt.k); got != tt.parts {
			t.Errorf("klanesParts(%d, %d, %d) = %d, want %d", tt.m, tt.n, tt.k, got, tt.parts)
		}
		if got := klanesParts(tt.m, tt.n, tt.k); got*tt.m*tt.n > ScratchFloats/2 {
			t.Errorf("klanesParts(%d, %d, %d) = %d parts of doubles overflow the scratch", tt.m, tt.n, tt.k, got)
		}
	}
	d, err := klanesDims(288, 64, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := (dims{gridX: 2, gridY: 63, blockX: tileEdge, blockY: kLanes}); d != want || d.threads() != kernelThreads[kGemmKLanes] {
		t.Errorf("klanesDims(288, 64, 7) = %+v, want %+v", d, want)
	}
	if _, err := klanesDims(maxGridY*tileEdge+1, 1, 1); err == nil {
		t.Error("klanesDims with too many tile rows: no error")
	}
	if _, err := klanesDims(1000*tileEdge, 1, 66); err == nil {
		t.Error("klanesDims with too many tile rows once split: no error")
	}
}

func TestColSumDims(t *testing.T) {
	if d := colSumDims(33); d.gridX != 2 || d.threads() != kernelThreads[kColSum] {
		t.Errorf("colSumDims(33) = %+v", d)
	}
}

func TestBatchNormDims(t *testing.T) {
	for _, k := range []kernel{kBatchNormTrain, kBatchNormGrad} {
		if d := batchNormDims(33); d.gridX != 2 || d.gridY != 1 || d.blockX != tileEdge || d.threads() != kernelThreads[k] {
			t.Errorf("%s: batchNormDims(33) = %+v, want 2 blocks of %d threads", k, d, kernelThreads[k])
		}
	}
}

func TestFitInt32(t *testing.T) {
	if err := fitInt32(1, math.MaxInt32); err != nil {
		t.Errorf("fitInt32(MaxInt32) = %v", err)
	}
	if err := fitInt32(1, math.MaxInt32+1); err == nil {
		t.Error("fitInt32(MaxInt32+1) = nil")
	}
}

func TestOneBlockMatchesReductionKernels(t *testing.T) {
	for _, k := range []kernel{kSoftmaxXent, kMSE, kClipGlobalNorm, kAdvanceRNG} {
		d := oneBlock(kernelThreads[k])
		if d.gridX != 1 || d.gridY != 1 || d.threads() != kernelThreads[k] {
			t.Errorf("%s: oneBlock = %+v", k, d)
		}
	}
}
