package cuda

import (
	"fmt"
	"math"
)

// Launch geometry. The numbers match kernels/common.cuh; TestKernelGeometry
// checks them against the .maxntid of every PTX entry. The reductions assume
// exactly these block sizes, so the geometry is fixed, not tuned per device:
// the same launch on any GPU sums in the same order.
const (
	blockThreads   = 256  // TL_BLOCK
	clipThreads    = 1024 // TL_CLIP_BLOCK
	tileEdge       = 32   // TL_TILE
	tileRows       = 8    // TL_TILE_ROWS
	bnRows         = 32   // TL_BN_ROWS
	kLanes         = 16   // TL_KLANES
	maxStrideGrid  = 2048 // blocks of a grid-stride launch; more buys nothing on an H100
	maxGridY       = 65535
	maxKernelParam = 12 // the most parameters any kernel takes
)

// dims is a launch configuration.
type dims struct {
	gridX, gridY   int
	blockX, blockY int
}

func (d dims) threads() int { return d.blockX * d.blockY }

// strideDims covers n elements with a grid-stride loop of blockThreads.
func strideDims(n int64) dims {
	g := (n + blockThreads - 1) / blockThreads
	g = max(1, min(g, maxStrideGrid))
	return dims{gridX: int(g), gridY: 1, blockX: blockThreads, blockY: 1}
}

// oneBlock is a single block of the given size, for the reductions whose
// result must not depend on how many blocks run.
func oneBlock(threads int) dims { return dims{gridX: 1, gridY: 1, blockX: threads, blockY: 1} }

// gemmDims tiles an m×n output with 32×32 tiles of 32×8 threads.
func gemmDims(m, n int) (dims, error) {
	gx, gy := ceilDiv(n, tileEdge), ceilDiv(m, tileEdge)
	if gy > maxGridY {
		return dims{}, fmt.Errorf("m = %d needs %d tile rows, the grid allows %d", m, gy, maxGridY)
	}
	return dims{gridX: gx, gridY: gy, blockX: tileEdge, blockY: tileRows}, nil
}

// klanesMaxTiles and klanesMinK choose tl_gemm_klanes over tl_gemm: an
// output of at most klanesMaxTiles 32×32 tiles (too few blocks to fill a
// GPU's SMs) with k of at least klanesMinK (each thread of tl_gemm would
// walk all of it). A convolution's weight gradient at batch 64 is such a
// product: 9×32 or 288×64 outputs over k = 50176 or 12544 terms; so are a
// transformer's weight gradients (64×256 over k = batch × context = 1024).
// Below 1024 the lanes' final tree (32 rows, 6 barriers each) weighs on
// too little work: an MLP's 64×128 forward product over 784 inputs stays
// on tl_gemm.
const (
	klanesMaxTiles = 64
	klanesMinK     = 1024
)

// useKLanes reports whether an m×n×k product goes to tl_gemm_klanes. The
// choice depends on the shape alone, so a shape sums in one order always.
func useKLanes(m, n, k int) bool {
	return k >= klanesMinK && ceilDiv(m, tileEdge)*ceilDiv(n, tileEdge) <= klanesMaxTiles
}

// ScratchFloats is the float32 elements of the scratch each stream but the
// legacy one allocates when it is created (1 MiB); the memory bill counts it
// per stream (Device.StreamScratchBytes).
const ScratchFloats = 1 << 18

// StreamScratchBytes is the device memory a stream's scratch holds:
// ScratchFloats rounded up to the pool's granule, as Device.StreamScratchBytes
// reports. It depends on the build alone, so tolaria-worker info prints it
// for a coordinator to bill without a GPU.
func StreamScratchBytes() int64 {
	return (int64(ScratchFloats)*4 + poolGranule - 1) / poolGranule * poolGranule
}

// klanesSpan, klanesTargetBlocks and klanesMaxParts split a tl_gemm_klanes
// product's k into parts, each its own blocks: a part sums at least
// klanesSpan terms, the parts of all tiles are about klanesTargetBlocks
// blocks (enough to spread over an H100's 132 SMs), there are at most
// klanesMaxParts, and the parts' double sums (parts × m × n) fit a stream's
// scratch. The first conv's weight gradient at batch 64 (9×32 over 50,176
// terms, one tile) becomes 64 blocks instead of one; a transformer's 64×256
// weight gradient over k = 1024, 16 tiles, 64 blocks instead of 16.
const (
	klanesSpan         = 256
	klanesTargetBlocks = 256
	klanesMaxParts     = 64
)

// klanesParts is how many parts an m×n×k product of tl_gemm_klanes is
// split into on a stream with a scratch; a function of the shape alone.
func klanesParts(m, n, k int) int {
	tiles := ceilDiv(m, tileEdge) * ceilDiv(n, tileEdge)
	return max(1, min(ceilDiv(k, klanesSpan), ceilDiv(klanesTargetBlocks, tiles), klanesMaxParts, ScratchFloats/2/(m*n)))
}

// klanesDims is gemmDims for tl_gemm_klanes: the same tiles, each tile row
// repeated for every part, 32×kLanes threads.
func klanesDims(m, n, parts int) (dims, error) {
	g, err := gemmDims(m, n)
	if err != nil {
		return g, err
	}
	if g.gridY*parts > maxGridY {
		return dims{}, fmt.Errorf("m = %d in %d parts needs %d tile rows, the grid allows %d", m, parts, g.gridY*parts, maxGridY)
	}
	g.gridY *= parts
	g.blockY = kLanes
	return g, nil
}

// colSumDims gives each block 32 columns and 8 row lanes.
func colSumDims(cols int) dims {
	return dims{gridX: ceilDiv(cols, tileEdge), gridY: 1, blockX: tileEdge, blockY: tileRows}
}

// batchNormDims gives each block 32 columns and bnRows row lanes. With one
// part a block computes its columns' statistics and then uses them; with
// more, each of a column tile's parts blocks normalises its range of rows.
func batchNormDims(cols, parts int) dims {
	return dims{gridX: ceilDiv(cols, tileEdge), gridY: parts, blockX: tileEdge, blockY: bnRows}
}

// rowSpan and rowTargetBlocks split a column reduction over many rows
// (ColSum, batch normalisation's statistics) into parts of consecutive
// rows, each its own blocks: a part sums at least rowSpan rows, the parts
// of all column tiles are about rowTargetBlocks blocks (enough to spread
// over an H100's 132 SMs), and their double sums fit a stream's scratch.
// The CNN's bias and batch normalisation over 32 channels at batch 256
// (200,704 rows) become 196 blocks instead of one.
const (
	rowSpan         = 1024
	rowTargetBlocks = 256
)

// rowParts is how many parts a reduction over rows×cols is split into on a
// stream with a scratch, when it keeps sums (1 or 2) doubles per column and
// part; a function of the shape alone, and 1 (the one-block kernels) when
// the rows are few or the columns too many for the scratch.
func rowParts(rows, cols, sums int) int {
	tiles := ceilDiv(cols, tileEdge)
	return max(1, min(ceilDiv(rows, rowSpan), ceilDiv(rowTargetBlocks, tiles), ScratchFloats/2/(sums*cols), maxGridY))
}

// colPartsDims is tl_col_parts's grid: 32 columns and 8 row lanes a block,
// a block row per part.
func colPartsDims(cols, parts int) dims {
	return dims{gridX: ceilDiv(cols, tileEdge), gridY: parts, blockX: tileEdge, blockY: tileRows}
}

// xentMaxBlocks bounds tl_softmax_xent's grid: a block takes groups of
// tileRows rows, grid-stride, and writes three doubles of the scratch.
const xentMaxBlocks = 1024

// xentDims is tl_softmax_xent's grid over rows: a block of tileEdge lanes
// for each of tileRows rows, one block per group of rows up to
// xentMaxBlocks (one block without a scratch); a function of the shape
// alone, so the statistics sum in one order always.
func xentDims(rows int, scratch bool) dims {
	g := 1
	if scratch {
		g = max(1, min(ceilDiv(rows, tileRows), xentMaxBlocks))
	}
	return dims{gridX: g, gridY: 1, blockX: tileEdge, blockY: tileRows}
}

// rowLaneDims gives each row of a layer normalisation tileEdge lanes,
// tileRows rows a block.
func rowLaneDims(rows int) dims {
	return dims{gridX: ceilDiv(rows, tileRows), gridY: 1, blockX: tileEdge, blockY: tileRows}
}

// batchedGemmDims is gemmDims for count products in one launch: each
// product's tile columns side by side in x (tl_gemm_batched).
func batchedGemmDims(count, m, n int) (dims, error) {
	g, err := gemmDims(m, n)
	if err != nil {
		return g, err
	}
	if int64(g.gridX)*int64(count) > math.MaxInt32 {
		return dims{}, fmt.Errorf("%d products of %d tile columns need more than %d blocks in x", count, g.gridX, math.MaxInt32)
	}
	g.gridX *= count
	return g, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// kernelThreads is the block size each kernel is launched with.
var kernelThreads = [numKernels]int{
	kGemm:               tileEdge * tileRows,
	kBiasAct:            blockThreads,
	kActGrad:            blockThreads,
	kSoftmaxXent:        tileEdge * tileRows,
	kSoftmaxXentGrad:    blockThreads,
	kMSE:                blockThreads,
	kMSEGrad:            blockThreads,
	kColSum:             tileEdge * tileRows,
	kFill:               blockThreads,
	kScale:              blockThreads,
	kAxpy:               blockThreads,
	kClipGlobalNorm:     clipThreads,
	kSGDMomentum:        blockThreads,
	kAdamW:              blockThreads,
	kIm2Col:             blockThreads,
	kCol2Im:             blockThreads,
	kMaxPool:            blockThreads,
	kMaxPoolGrad:        blockThreads,
	kAvgPool:            blockThreads,
	kAvgPoolGrad:        blockThreads,
	kBatchNormTrain:     tileEdge * bnRows,
	kBatchNormEval:      blockThreads,
	kBatchNormGrad:      tileEdge * bnRows,
	kDropout:            blockThreads,
	kAdvanceRNG:         1,
	kMul:                blockThreads,
	kGemmKLanes:         tileEdge * kLanes,
	kGemmPartsSum:       blockThreads,
	kEmbedding:          blockThreads,
	kEmbeddingGrad:      blockThreads,
	kLayerNorm:          tileEdge * tileRows,
	kLayerNormGrad:      tileEdge * tileRows,
	kLayerNormParamGrad: tileEdge * bnRows,
	kSplitHeads:         blockThreads,
	kMergeHeads:         blockThreads,
	kGemmBatched:        tileEdge * tileRows,
	kCausalSoftmax:      blockThreads,
	kCausalSoftmaxGrad:  blockThreads,
	kSampleLast:         1,
	kShiftAppend:        1,
	kColParts:           tileEdge * tileRows,
	kLossPartsSum:       blockThreads,
}

// fitInt32 checks that matrix dimensions fit the kernels' int parameters.
func fitInt32(ds ...int) error {
	for _, d := range ds {
		if d > math.MaxInt32 {
			return fmt.Errorf("dimension %d exceeds the kernels' 32-bit limit", d)
		}
	}
	return nil
}
