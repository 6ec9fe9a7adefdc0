#!/usr/bin/env python3
"""torch_mlp.py: tolaria's default MLP trained with PyTorch on the CPU.

The peer of `run_graph_bench --peer`: the same model (784-H1-H2-10, GELU in
its tanh form, cross-entropy), the same AdamW (betas 0.9/0.999, eps 1e-8,
decoupled weight decay 1e-4 on every parameter), global-norm clipping at 5,
the same learning-rate schedule (linear warm-up, cosine decay to 1% of the
peak), the same batch, the same Fashion-MNIST files and the same input
standardisation as `tolaria train`: pixels scaled to [0, 1], then one mean
and one standard deviation computed over the whole training set (float64,
population std) applied to the training and test images alike.

It prints one JSON object on stdout:

  step_seconds   the wall time of each timed training step, in order. A step
                 is zero_grad, forward, loss (accumulating the loss sum and
                 correct count, as tolaria's step does on the device),
                 backward, clipping, the learning rate for the step and
                 AdamW's update. The batch is gathered from the in-memory
                 dataset before the clock starts: data loading is not timed.
  epoch          (with --epoch) one epoch from a fresh model, as tolaria's
                 epoch_seconds counts it: every training batch (gathering
                 included), an evaluation of the test set and a checkpoint
                 of the model and optimizer written and fsynced.

Debian's torch links OpenBLAS; its pthreads build runs its own threads beside
torch's OpenMP threads and slows down badly when they share two cores. With
--blas openmp (the default) the script re-executes itself with
LD_LIBRARY_PATH pointing at the OpenMP build (Debian package
libopenblas0-openmp), so both use one OpenMP pool. With --omp-wait-policy
passive (the default) it sets OMP_WAIT_POLICY=PASSIVE the same way: OpenMP
threads that wait sleep instead of spinning, which on a machine shared with
other work keeps a 2-thread team from stalling at every barrier (measured in
docs/cpu-results.md). Run it with Debian's /usr/bin/python3 (package
python3-torch).
"""

import argparse
import gzip
import json
import math
import os
import platform
import struct
import sys
import tempfile
import time

OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
REEXEC_MARK = "TOLARIA_PEER_BLAS_SET"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", default="256,128", help="hidden widths, e.g. 256,128")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=40, help="timed training steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before the timed ones")
    p.add_argument("--epoch", action="store_true", help="also time one whole epoch")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--clip-norm", type=float, default=5.0, help="0 turns clipping off")
    p.add_argument("--lr-warmup-steps", type=int, default=200)
    p.add_argument("--min-lr-ratio", type=float, default=0.01)
    p.add_argument("--blas", choices=["openmp", "default"], default="openmp",
                   help="openmp: run on OpenBLAS's OpenMP build (re-executes with LD_LIBRARY_PATH)")
    p.add_argument("--omp-wait-policy", choices=["passive", "active", "unset"], default="passive",
                   help="OMP_WAIT_POLICY for torch's and OpenBLAS's OpenMP threads (unset: libgomp's default)")
    a = p.parse_args(argv)
    try:
        a.hidden = [int(h) for h in a.hidden.split(",") if h.strip()]
    except ValueError:
        p.error(f"--hidden: want comma-separated positive widths such as 256,128, got {a.hidden!r}")
    if any(h < 1 for h in a.hidden):
        p.error(f"--hidden: widths must be positive, got {a.hidden}")
    for name in ("batch_size", "threads", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be at least 1, got {getattr(a, name)}")
    if a.warmup_steps < 0:
        p.error(f"--warmup-steps: must be at least 0, got {a.warmup_steps}")
    return a


def ensure_env(args):
    """Re-executes with the environment the OpenMP runtime and the loader read at start-up.

    LD_LIBRARY_PATH picks OpenBLAS's OpenMP build; OMP_WAIT_POLICY and
    OMP_NUM_THREADS are read once, when libgomp loads.
    """
    if os.environ.get(REEXEC_MARK) == "1":
        return
    env = dict(os.environ)
    if args.blas == "openmp":
        if not os.path.exists(os.path.join(OPENMP_DIR, "libopenblas.so.0")):
            sys.exit(f"torch_mlp: {OPENMP_DIR}/libopenblas.so.0 not found: install it with "
                     "`apt-get install libopenblas0-openmp`, or pass --blas default")
        env["LD_LIBRARY_PATH"] = OPENMP_DIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if args.omp_wait_policy == "unset":
        env.pop("OMP_WAIT_POLICY", None)
    else:
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    env["OMP_NUM_THREADS"] = str(args.threads)
    env[REEXEC_MARK] = "1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def read_idx(path, magic):
    """Reads a gzipped IDX file: its dimensions and its bytes."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got, = struct.unpack(">I", raw[:4])
    if got != magic:
        sys.exit(f"torch_mlp: {path}: magic {got:#x}, want {magic:#x}: not a Fashion-MNIST IDX file")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return dims, raw[4 + 4 * ndim:]


def load_split(torch, data_dir, prefix):
    paths = [os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"),
             os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")]
    for p in paths:
        if not os.path.exists(p):
            sys.exit(f"torch_mlp: {p} not found: install Fashion-MNIST with "
                     "`apt-get install dataset-fashion-mnist`, or pass --data-dir")
    (n, rows, cols), pixels = read_idx(paths[0], 0x803)
    (m,), labels = read_idx(paths[1], 0x801)
    if m != n:
        sys.exit(f"torch_mlp: {paths[0]} has {n} images but {paths[1]} {m} labels")
    x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(n, rows * cols)
    # tolaria's loader: float32(pixel) / 255, exactly.
    x = x.to(torch.float32) / 255
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64)
    return x, y


def load_data(torch, data_dir):
    """Fashion-MNIST standardised as tolaria does it (data.Normalize)."""
    xtr, ytr = load_split(torch, data_dir, "train")
    xte, yte = load_split(torch, data_dir, "t10k")
    flat = xtr.to(torch.float64).reshape(-1)
    mean = flat.mean().item()
    std = math.sqrt(((flat - mean) ** 2).mean().item())
    if std == 0 or not math.isfinite(std):
        std = 1.0
    mean32 = torch.tensor(mean, dtype=torch.float32)
    inv = torch.tensor(1 / std, dtype=torch.float32)
    return ((xtr - mean32) * inv).contiguous(), ytr, ((xte - mean32) * inv).contiguous(), yte, mean, std


def build(torch, args, inputs, classes):
    """The MLP and its AdamW, initialised as tolaria's nn.InitParams does (in law, not in bits)."""
    nn = torch.nn
    layers, width = [], inputs
    for h in args.hidden:
        layers += [nn.Linear(width, h), nn.GELU(approximate="tanh")]
        width = h
    layers.append(nn.Linear(width, classes))
    model = nn.Sequential(*layers)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for i, lin in enumerate(linears):
            fan_in, fan_out = lin.in_features, lin.out_features
            # Kaiming normal for hidden layers, Xavier normal for the output.
            std = math.sqrt(2 / fan_in) if i < len(linears) - 1 else math.sqrt(2 / (fan_in + fan_out))
            lin.weight.normal_(0, std)
            lin.bias.zero_()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                            weight_decay=args.weight_decay)
    return model, opt


def lr_at(args, t, total):
    """tolaria's nn.Optimizer.LRAt: linear warm-up, then cosine decay to min_lr_ratio."""
    warm = min(args.lr_warmup_steps, total // 2)
    if warm > 0 and t <= warm:
        return args.lr * t / warm
    if total <= warm:
        return args.lr
    p = min(max((t - warm) / (total - warm), 0.0), 1.0)
    lo = args.lr * args.min_lr_ratio
    return lo + (args.lr - lo) * 0.5 * (1 + math.cos(math.pi * p))


class Trainer:
    def __init__(self, torch, args, model, opt, total_steps):
        self.torch, self.args, self.model, self.opt = torch, args, model, opt
        self.total, self.t = total_steps, 0
        self.params = list(model.parameters())
        self.loss_sum = torch.zeros((), dtype=torch.float64)
        self.correct = torch.zeros((), dtype=torch.int64)
        self.count = 0

    def step(self, x, y):
        F = self.torch.nn.functional
        self.t += 1
        self.opt.zero_grad()
        logits = self.model(x)
        if logits.dim() == 3:  # a sequence model: a label per position, the loss their mean
            logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        loss = F.cross_entropy(logits, y)
        with self.torch.no_grad():
            self.loss_sum += loss.detach() * y.shape[0]
            self.correct += (logits.argmax(1) == y).sum()
            self.count += y.shape[0]
        loss.backward()
        if self.args.clip_norm > 0:
            self.torch.nn.utils.clip_grad_norm_(self.params, self.args.clip_norm)
        lr = lr_at(self.args, self.t, self.total)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()


def timed_steps(torch, args, xtr, ytr, classes=10):
    """Warm-up steps, then the timed ones, on batches of a shuffled training set."""
    model, opt = build(torch, args, xtr.shape[1], classes)
    n = args.warmup_steps + args.steps
    tr = Trainer(torch, args, model, opt, n)
    g = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(xtr.shape[0], generator=g)
    b, per_epoch = args.batch_size, max(1, xtr.shape[0] // args.batch_size)
    times = []
    for i in range(n):
        j = (i % per_epoch) * b
        idx = perm[j:j + b]
        x, y = xtr.index_select(0, idx), ytr.index_select(0, idx)
        t0 = time.perf_counter()
        tr.step(x, y)
        dt = time.perf_counter() - t0
        if i >= args.warmup_steps:
            times.append(dt)
    return times


def evaluate(torch, model, x, y, b):
    F = torch.nn.functional
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for j in range(0, x.shape[0], b):
            logits = model(x[j:j + b])
            loss_sum += F.cross_entropy(logits, y[j:j + b], reduction="sum").item()
            correct += (logits.argmax(1) == y[j:j + b]).sum().item()
    return loss_sum / x.shape[0], correct / x.shape[0]


def one_epoch(torch, args, xtr, ytr, xte, yte):
    """One epoch as tolaria's epoch_seconds counts it: train, evaluate, checkpoint."""
    b = args.batch_size
    steps = -(-xtr.shape[0] // b)  # tolaria pads the short last batch: ceil
    model, opt = build(torch, args, xtr.shape[1], 10)
    tr = Trainer(torch, args, model, opt, steps)
    g = torch.Generator().manual_seed(args.seed + 1)
    with tempfile.TemporaryDirectory(prefix="torch_mlp-") as tmp:
        ckpt = os.path.join(tmp, "checkpoint.pt")
        t0 = time.perf_counter()
        perm = torch.randperm(xtr.shape[0], generator=g)
        for s in range(steps):
            idx = perm[s * b:(s + 1) * b]
            tr.step(xtr.index_select(0, idx), ytr.index_select(0, idx))
        t1 = time.perf_counter()
        test_loss, test_acc = evaluate(torch, model, xte, yte, b)
        t2 = time.perf_counter()
        with open(ckpt, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": steps}, f)
            f.flush()
            os.fsync(f.fileno())
        t3 = time.perf_counter()
    return {
        "seconds": t3 - t0, "train_seconds": t1 - t0, "eval_seconds": t2 - t1, "checkpoint_seconds": t3 - t2,
        "steps": steps, "samples": int(xtr.shape[0]),
        "train_loss": (tr.loss_sum / max(tr.count, 1)).item(), "train_accuracy": tr.correct.item() / max(tr.count, 1),
        "test_loss": test_loss, "test_accuracy": test_acc,
    }


def blas_library():
    """The OpenBLAS the process loaded, from its memory map."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libopenblas" in line or "libblas" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return ""


def main(argv):
    args = parse_args(argv)
    ensure_env(args)
    try:
        import torch
    except ImportError:
        sys.exit("torch_mlp: PyTorch is not importable by " + sys.executable +
                 ": install it with `apt-get install python3-torch` and run this with /usr/bin/python3")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    xtr, ytr, xte, yte, mean, std = load_data(torch, args.data_dir)
    out = {
        "peer": "torch", "version": torch.__version__, "python": platform.python_version(),
        "threads": torch.get_num_threads(), "blas": blas_library(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "batch_size": args.batch_size, "hidden": args.hidden,
        "model": "-".join(str(w) for w in [xtr.shape[1]] + args.hidden + [10]) + " gelu(tanh) cross_entropy",
        "optimizer": {"kind": "adamw", "lr": args.lr, "beta1": args.beta1, "beta2": args.beta2, "eps": args.eps,
                      "weight_decay": args.weight_decay, "clip_norm": args.clip_norm,
                      "lr_warmup_steps": args.lr_warmup_steps, "min_lr_ratio": args.min_lr_ratio},
        "input_mean": mean, "input_std": std,
        "warmup_steps": args.warmup_steps,
        "step_seconds": timed_steps(torch, args, xtr, ytr),
    }
    if args.epoch:
        out["epoch"] = one_epoch(torch, args, xtr, ytr, xte, yte)
    out["blas"] = blas_library()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
