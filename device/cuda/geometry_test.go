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
