package cuda

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
)

// ptxSource is the kernels compiled by scripts/build-ptx.sh. It is loaded as
// one module when a device opens, before any capture can begin.
//
//go:embed kernels/tolaria.ptx
var ptxSource string

// kernel names one entry of the PTX module.
type kernel int

const (
	kGemm kernel = iota
	kBiasAct
	kActGrad
	kSoftmaxXent
	kSoftmaxXentGrad
	kMSE
	kMSEGrad
	kColSum
	kFill
	kScale
	kAxpy
	kClipGlobalNorm
	kSGDMomentum
	kAdamW
	kIm2Col
	kCol2Im
	kMaxPool
	kMaxPoolGrad
	kAvgPool
	kAvgPoolGrad
	kBatchNormTrain
	kBatchNormEval
	kBatchNormGrad
	kDropout
	kAdvanceRNG
	kMul
	kGemmKLanes
	kGemmPartsSum
	kEmbedding
	kEmbeddingGrad
	kLayerNorm
	kLayerNormGrad
	kLayerNormParamGrad
	kSplitHeads
	kMergeHeads
	kGemmBatched
	kCausalSoftmax
	kCausalSoftmaxGrad
	kSampleLast
	kShiftAppend
	kColParts
	kLossPartsSum
	numKernels
)

// kernelNames are the extern "C" entry names in kernels/*.cuh.
var kernelNames = [numKernels]string{
	kGemm:               "tl_gemm",
	kBiasAct:            "tl_bias_act",
	kActGrad:            "tl_act_grad",
	kSoftmaxXent:        "tl_softmax_xent",
	kSoftmaxXentGrad:    "tl_softmax_xent_grad",
	kMSE:                "tl_mse",
	kMSEGrad:            "tl_mse_grad",
	kColSum:             "tl_col_sum",
	kFill:               "tl_fill",
	kScale:              "tl_scale",
	kAxpy:               "tl_axpy",
	kClipGlobalNorm:     "tl_clip_global_norm",
	kSGDMomentum:        "tl_sgd_momentum",
	kAdamW:              "tl_adamw",
	kIm2Col:             "tl_im2col",
	kCol2Im:             "tl_col2im",
	kMaxPool:            "tl_max_pool",
	kMaxPoolGrad:        "tl_max_pool_grad",
	kAvgPool:            "tl_avg_pool",
	kAvgPoolGrad:        "tl_avg_pool_grad",
	kBatchNormTrain:     "tl_batchnorm_train",
	kBatchNormEval:      "tl_batchnorm_eval",
	kBatchNormGrad:      "tl_batchnorm_grad",
	kDropout:            "tl_dropout",
	kAdvanceRNG:         "tl_advance_rng",
	kMul:                "tl_mul",
	kGemmKLanes:         "tl_gemm_klanes",
	kGemmPartsSum:       "tl_gemm_parts_sum",
	kEmbedding:          "tl_embedding",
	kEmbeddingGrad:      "tl_embedding_grad",
	kLayerNorm:          "tl_layernorm",
	kLayerNormGrad:      "tl_layernorm_grad",
	kLayerNormParamGrad: "tl_layernorm_param_grad",
	kSplitHeads:         "tl_split_heads",
	kMergeHeads:         "tl_merge_heads",
	kGemmBatched:        "tl_gemm_batched",
	kCausalSoftmax:      "tl_causal_softmax",
	kCausalSoftmaxGrad:  "tl_causal_softmax_grad",
	kSampleLast:         "tl_sample_last",
	kShiftAppend:        "tl_shift_append",
	kColParts:           "tl_col_parts",
	kLossPartsSum:       "tl_loss_parts_sum",
}

func (k kernel) String() string {
	if k >= 0 && k < numKernels {
		return kernelNames[k]
	}
	return "kernel(" + strconv.Itoa(int(k)) + ")"
}

var (
	entryRE  = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	maxntdRE = regexp.MustCompile(`(?m)^\.maxntid (\d+), (\d+), (\d+)`)
)

// ptxEntries maps every kernel entry in a PTX module to its .maxntid (the
// most threads per block it was compiled for; 0 when it declares none).
func ptxEntries(ptx string) (map[string]int, error) {
	entries := map[string]int{}
	locs := entryRE.FindAllStringSubmatchIndex(ptx, -1)
	for i, loc := range locs {
		name := ptx[loc[2]:loc[3]]
		end := len(ptx)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := ptx[loc[1]:end]
		threads := 0
		if m := maxntdRE.FindStringSubmatch(body); m != nil {
			threads = 1
			for _, s := range m[1:] {
				v, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("entry %s: bad .maxntid: %v", name, err)
				}
				threads *= v
			}
		}
		entries[name] = threads
	}
	return entries, nil
}
