// The C++ builds of tolaria's kernels (device/cuda/kernels, compiled here as
// C++ against runtime.h) and the block scheduler that runs them: every GPU
// thread of a block is a fiber on the calling host thread.
#include "kernels.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "runtime.h"
#include "tolaria.cu"

namespace emu {

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

// Sig turns a kernel's C++ prototype into a parameter-size list and an
// invoker that reads each argument from the driver's parameter slots.
template <class F>
struct Sig;
template <class... A>
struct Sig<void (*)(A...)> {
    static std::vector<size_t> sizes() { return {sizeof(A)...}; }
    template <void (*F)(A...), size_t... I>
    static void callWith(void *const *a, std::index_sequence<I...>) {
        F(*static_cast<A *>(a[I])...);
    }
    template <void (*F)(A...)>
    static void call(void *const *a) {
        callWith<F>(a, std::index_sequence_for<A...>{});
    }
};

#define TL_KERNEL(f) \
    KernelBuild { #f, Sig<decltype(&f)>::sizes(), &Sig<decltype(&f)>::call<&f> }

// One fiber per GPU thread of the running block.
struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr;
    int state = 0;  // 0 running or not started, 1 waiting at the barrier, 2 returned
    dim3 idx;
};

constexpr size_t kStackBytes = 64 << 10;
constexpr size_t kGuardBytes = 4096;

// Scheduler state. Launches are serialised by the driver's kernel lock, so
// one scheduler exists at a time.
void *schedSP;
Fiber *current;
const KernelBuild *currentKernel;
void *const *currentArgs;
std::vector<char *> freeStacks;

char *takeStack() {
    if (!freeStacks.empty()) {
        char *s = freeStacks.back();
        freeStacks.pop_back();
        return s;
    }
    void *p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        std::fprintf(stderr, "cuda emulator: cannot map a GPU thread's stack\n");
        std::abort();
    }
    mprotect(p, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting
    return static_cast<char *>(p) + kGuardBytes;
}

}  // namespace
}  // namespace emu

extern "C" void tl_emu_switch(void **save, void *to);
extern "C" void tl_emu_fiber_start();
extern "C" void tl_emu_fiber_main(emu::Fiber *f);

#if defined(__x86_64__)
// tl_emu_switch saves the callee-saved registers and the floating-point
// control words on the current stack, stores the stack pointer in *save and
// resumes the context whose stack pointer is to.
asm(R"(
.pushsection .text
.globl tl_emu_switch
.hidden tl_emu_switch
.type tl_emu_switch,@function
tl_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size tl_emu_switch,.-tl_emu_switch
.globl tl_emu_fiber_start
.hidden tl_emu_fiber_start
.type tl_emu_fiber_start,@function
tl_emu_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
.size tl_emu_fiber_start,.-tl_emu_fiber_start
.popsection
)");

namespace emu {
namespace {
void initFiber(Fiber *f) {
    auto top = reinterpret_cast<uintptr_t>(f->stack + kStackBytes);
    uintptr_t a = (top & ~uintptr_t(15)) - 16;
    auto *sp = reinterpret_cast<uint64_t *>(a - 64);
    sp[0] = 0x1F80 | (uint64_t(0x037F) << 32);  // default MXCSR and x87 control word
    sp[1] = 0;                                  // r15
    sp[2] = 0;                                  // r14
    sp[3] = reinterpret_cast<uint64_t>(&tl_emu_fiber_main);  // r13
    sp[4] = reinterpret_cast<uint64_t>(f);                   // r12
    sp[5] = 0;                                               // rbx
    sp[6] = 0;                                               // rbp
    sp[7] = reinterpret_cast<uint64_t>(&tl_emu_fiber_start);
    f->sp = sp;
}
}  // namespace
}  // namespace emu
#else
#error "the CUDA emulator's fibers are written for x86-64"
#endif

extern "C" void tl_emu_fiber_main(emu::Fiber *f) {
    emu::currentKernel->invoke(emu::currentArgs);
    f->state = 2;
    tl_emu_switch(&f->sp, emu::schedSP);
}

namespace emu {

void syncthreads() {
    Fiber *f = current;
    f->state = 1;
    tl_emu_switch(&f->sp, schedSP);
}

namespace {

void resume(Fiber *f) {
    threadIdx = f->idx;
    current = f;
    f->state = 0;
    tl_emu_switch(&schedSP, f->sp);
    if (f->state == 2) {
        freeStacks.push_back(f->stack);
        f->stack = nullptr;
    }
}

void runBlock(std::vector<Fiber> &fibers) {
    std::vector<Fiber *> waiting, next;
    for (auto &f : fibers) {
        f.stack = takeStack();
        initFiber(&f);
        resume(&f);
        if (f.state == 1) waiting.push_back(&f);
    }
    while (!waiting.empty()) {
        next.clear();
        for (Fiber *f : waiting) {
            resume(f);
            if (f->state == 1) next.push_back(f);
        }
        std::swap(waiting, next);
    }
}

}  // namespace

const std::vector<KernelBuild> &kernelBuilds() {
    static const std::vector<KernelBuild> builds = {
        TL_KERNEL(tl_gemm),         TL_KERNEL(tl_bias_act),   TL_KERNEL(tl_act_grad),
        TL_KERNEL(tl_softmax_xent), TL_KERNEL(tl_softmax_xent_grad),
        TL_KERNEL(tl_mse),          TL_KERNEL(tl_mse_grad),   TL_KERNEL(tl_col_sum),
        TL_KERNEL(tl_fill),         TL_KERNEL(tl_scale),      TL_KERNEL(tl_axpy),
        TL_KERNEL(tl_clip_global_norm), TL_KERNEL(tl_sgd_momentum), TL_KERNEL(tl_adamw),
        TL_KERNEL(tl_im2col),       TL_KERNEL(tl_col2im),     TL_KERNEL(tl_max_pool),
        TL_KERNEL(tl_max_pool_grad), TL_KERNEL(tl_avg_pool),  TL_KERNEL(tl_avg_pool_grad),
        TL_KERNEL(tl_batchnorm_train), TL_KERNEL(tl_batchnorm_eval), TL_KERNEL(tl_batchnorm_grad),
        TL_KERNEL(tl_dropout),      TL_KERNEL(tl_advance_rng), TL_KERNEL(tl_mul),
        TL_KERNEL(tl_gemm_klanes),  TL_KERNEL(tl_gemm_parts_sum),
        TL_KERNEL(tl_embedding),    TL_KERNEL(tl_embedding_grad), TL_KERNEL(tl_layernorm),
        TL_KERNEL(tl_layernorm_grad), TL_KERNEL(tl_layernorm_param_grad), TL_KERNEL(tl_split_heads),
        TL_KERNEL(tl_merge_heads),  TL_KERNEL(tl_gemm_batched), TL_KERNEL(tl_causal_softmax),
        TL_KERNEL(tl_causal_softmax_grad), TL_KERNEL(tl_sample_last), TL_KERNEL(tl_shift_append),
        TL_KERNEL(tl_col_parts),    TL_KERNEL(tl_loss_parts_sum),
    };
    return builds;
}

void runGrid(const KernelBuild &k, dim3 grid, dim3 block, void *const *args) {
    currentKernel = &k;
    currentArgs = args;
    gridDim = grid;
    blockDim = block;
    std::vector<Fiber> fibers(size_t(block.x) * block.y * block.z);
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                blockIdx = {bx, by, bz};
                size_t i = 0;
                for (unsigned tz = 0; tz < block.z; ++tz)
                    for (unsigned ty = 0; ty < block.y; ++ty)
                        for (unsigned tx = 0; tx < block.x; ++tx) fibers[i++] = Fiber{nullptr, nullptr, 0, {tx, ty, tz}};
                runBlock(fibers);
            }
}

}  // namespace emu
