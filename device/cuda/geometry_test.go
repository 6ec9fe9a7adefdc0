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
		{9, 32, 1023, false},    // k too short
		{64, 128, 784, false},   // an MLP's first layer at batch 64
		{64, 256, 1024, true},   // a transformer's weight gradient, batch 16 × context 64
		{50176, 32, 9, false},   // a conv's forward product
		{3136, 128, 64, false},  // a linear layer's weight gradient at batch 64
	} {
		if got := useKLanes(tt.m, tt.n, tt.k); got != tt.want {
			t.Errorf("useKLanes(%d, %d, %d) = %v, want %v", tt.m, tt.n, tt.k, got, tt.want)
		}
	}
	for _, tt := range []struct{ m, n, k, parts int }{
		{9, 32, 50176, 64},     // one tile: the most parts
		{9, 32, 200704, 64},    // at most 64 parts
		{288, 64, 12544, 7},    // 7 × 288 × 64 doubles fit the scratch
		{576, 64, 3136, 3},     // 36 tiles: the scratch bounds it at 3
		{256, 256, 1 << 20, 2}, // the scratch bounds it
		{9, 32, 2048, 8},       // 256 terms a part
		{64, 256, 1024, 4},     // 16 tiles × 4 parts
		{64, 64, 2048, 8},      // 4 tiles × 8 parts of 256 terms
		{9, 32, 300, 2},
		{9, 32, 256, 1},
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
		if d := batchNormDims(33, 1); d.gridX != 2 || d.gridY != 1 || d.blockX != tileEdge || d.threads() != kernelThreads[k] {
			t.Errorf("%s: batchNormDims(33, 1) = %+v, want 2 blocks of %d threads", k, d, kernelThreads[k])
		}
		if d := batchNormDims(33, 5); d.gridX != 2 || d.gridY != 5 || d.threads() != kernelThreads[k] {
			t.Errorf("%s: batchNormDims(33, 5) = %+v, want 2×5 blocks of %d threads", k, d, kernelThreads[k])
		}
	}
	if d := colPartsDims(33, 5); d.gridX != 2 || d.gridY != 5 || d.threads() != kernelThreads[kColParts] {
		t.Errorf("colPartsDims(33, 5) = %+v", d)
	}
}

// A column reduction over many rows is split into parts of at least
// rowSpan rows, about rowTargetBlocks blocks in all, within the scratch;
// few rows, or too many columns, keep the one-block-per-tile kernels.
func TestRowParts(t *testing.T) {
	for _, tt := range []struct{ rows, cols, sums, parts int }{
		{200704, 32, 1, 196}, // the CNN's bias at batch 256
		{200704, 32, 2, 196}, // its batch normalisation
		{50176, 64, 2, 49},   // 64 channels at batch 64
		{1 << 20, 32, 2, 256},
		{1 << 20, 256, 1, 32}, // 8 tiles: 32 parts
		{1024, 32, 2, 1},      // one span: the one-block kernels
		{1025, 32, 2, 2},
		{1 << 20, 1 << 17, 1, 1}, // a part's sums would not fit twice
		{5000, 40, 2, 5},
	} {
		got := rowParts(tt.rows, tt.cols, tt.sums)
		if got != tt.parts {
			t.Errorf("rowParts(%d, %d, %d) = %d, want %d", tt.rows, tt.cols, tt.sums, got, tt.parts)
		}
		if got > 1 && got*tt.sums*tt.cols > ScratchFloats/2 {
			t.Errorf("rowParts(%d, %d, %d) = %d parts of doubles overflow the scratch", tt.rows, tt.cols, tt.sums, got)
		}
	}
}

// tl_softmax_xent takes groups of tileRows rows, a block each up to
// xentMaxBlocks, and one block on a stream without a scratch.
func TestXentDims(t *testing.T) {
	for _, tt := range []struct {
		rows    int
		scratch bool
		blocks  int
	}{{1024, true, 128}, {2048, true, 256}, {3, true, 1}, {9, true, 2}, {1 << 20, true, xentMaxBlocks}, {2048, false, 1}} {
		d := xentDims(tt.rows, tt.scratch)
		if d.gridX != tt.blocks || d.gridY != 1 || d.threads() != kernelThreads[kSoftmaxXent] {
			t.Errorf("xentDims(%d, %v) = %+v, want %d blocks of %d threads", tt.rows, tt.scratch, d, tt.blocks, kernelThreads[kSoftmaxXent])
		}
	}
	if 3*xentMaxBlocks > ScratchFloats/2 {
		t.Error("xentMaxBlocks blocks' sums overflow the scratch")
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
	for _, k := range []kernel{kMSE, kClipGlobalNorm, kAdvanceRNG, kLossPartsSum} {
		d := oneBlock(kernelThreads[k])
		if d.gridX != 1 || d.gridY != 1 || d.threads() != kernelThreads[k] {
			t.Errorf("%s: oneBlock = %+v", k, d)
		}
	}
}
