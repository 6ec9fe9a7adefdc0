#!/usr/bin/env python3
"""torch_mlp_cuda.py: tolaria's benchmark workloads trained with PyTorch on one CUDA GPU.

The GPU peer of `run_graph_bench`. For each point (a preset and a batch size)
and each mode it trains the preset's model and reports the wall time per
training step:

  mlp   tolaria's default model, 784-256-128-10, GELU in its tanh form,
        cross-entropy, on Fashion-MNIST standardised as `tolaria train` does
        it (torch_mlp.load_data: one scalar mean and standard deviation).
  tiny  the tiny preset: one Linear 16->2 (no hidden layer), cross-entropy
        over 2 classes, on synthetic batches (standard normal inputs, uniform
        labels), as bench/source.go makes them.

Both use tolaria's default optimizer (nn.DefaultOptimizer): AdamW, betas
0.9/0.999, eps 1e-8, decoupled weight decay 1e-4 on every parameter,
global-norm clipping at 5, the learning rate set every step from the schedule
torch_mlp.lr_at computes (linear warm-up, cosine decay to 1% of the peak).
Parameters are initialised by torch_mlp.build (Kaiming normal for hidden
layers, Xavier normal for the output, zero biases).

The input path is tolaria's: the dataset is not resident on the GPU. Before
anything is timed, a ring of batches (--ring, 4 by default, the size of
tolaria's staging ring and its count of synthetic batches) is gathered into
pinned host tensors; every step copies its batch from the ring into static
device tensors x and y with non_blocking=True, then trains on them. The loss
sum and the correct count are accumulated on the device, as tolaria's step
does into its training statistics; nothing reads them back inside a round.

Modes:

  eager    the plain step: the batch copy, zero_grad(set_to_none=True),
           forward, loss, metric accumulation, backward,
           clip_grad_norm_(foreach=True), the learning rate written into the
           parameter group, AdamW's step (foreach, PyTorch's CUDA default).
  graphs   the whole step captured once in a torch.cuda.CUDAGraph, as
           PyTorch documents whole-network capture: a few warm-up iterations
           on a side stream, zero_grad(set_to_none=True) before capture so
           that backward allocates the gradients from the graph's private
           pool and they stay allocated across replays, then forward, loss,
           metric accumulation, backward, clipping and AdamW(capturable=True)
           inside the capture. The learning rate is a device tensor that each
           step updates with copy_ from a pinned host schedule before the
           replay, so the schedule keeps working. A step is the batch copy,
           the lr copy and one replay.
  compile  torch.compile(mode="reduce-overhead", dynamic=False) in two
           pieces, the way PyTorch documents compiling a model and compiling
           an optimizer: the model's forward, loss and metrics as one
           compiled function (its backward is compiled by AOTAutograd and
           called through loss.backward()), and clipping plus AdamW's step
           (capturable, with the lr as a device tensor so a new lr does not
           recompile) as a second one. Backward cannot sit inside one
           compiled step function without a graph break, so the step is
           split where Dynamo would split it anyway. reduce-overhead replays
           both pieces from CUDA graphs. Compilation (the first step, with
           synchronisation) is timed apart, as compile_seconds; if compiling
           fails (no C compiler, no Triton, ...) the mode records the error
           and the run goes on.

Timing: after --warmup-steps untimed steps (and, for compile, the compiling
step), each of --rounds rounds runs --steps steps with no host
synchronisation inside; torch.cuda.synchronize() comes before and after, and
the round's wall time divided by its steps is its mean step time. step_ms is
the median of the rounds' means. The host issues steps ahead of the device as
far as PyTorch's caching and the driver's queue let it, so a round's mean is
the time per step the whole pipelined loop sustains, copy included: the
quantity tolaria's run_graph_bench reports as graph_step_mean_ms (eager:
eager_step_mean_ms), the host wall time per step of its pipelined loop with
the staging copy overlapped. One difference: tolaria issues the copy on a
staging stream into one of two input buffers, so it overlaps the previous
step's kernels; here the copy runs on the compute stream into one static
input, ahead of the step's kernels and after the previous step's. For mlp at
batch 64 that copy is 200 KB, a few microseconds on the device.

The output (--output) is one JSON object, written atomically after every
point so that a run cut short leaves the points it finished:

  {"peer": "torch", "torch": ..., "cuda": ..., "device": ..., "driver": ...,
   "steps": ..., "warmup_steps": ..., "rounds": ...,
   "points": [{"preset": "mlp", "batch_size": 64,
               "model": "784-256-128-10 gelu(tanh) cross_entropy",
               "modes": {"eager": {"step_ms": ..., "rounds_ms": [...], "final_loss": ...},
                         "graphs": {...},
                         "compile": {"step_ms": ..., "rounds_ms": [...], "final_loss": ...,
                                     "compile_seconds": ...} or {"error": "..."}}}]}

final_loss is the mean training loss over the last round's steps (from the
device accumulators); a loss that is not finite is recorded as null with an
"error" beside the timings. Without PyTorch, or without CUDA for it, the
output is {"skipped": "<reason>"} and the exit status 3. Otherwise the exit
status is 0 when the eager mode of every point ran, else 1. --device cpu runs
the eager mode alone on the CPU, to check the script where there is no GPU.
With TORCH_MLP_CUDA_TRACEBACK=1 in the environment a failed mode also prints
its traceback on stderr.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp  # noqa: E402  (the CPU peer: load_data, build, lr_at)

PROG = "torch_mlp_cuda"
MODES = ("eager", "graphs", "compile")
PRESETS = ("mlp", "tiny")
SKIPPED = 3


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def parse_points(p, text):
    points = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        preset, sep, batch = item.partition(":")
        if not sep or preset not in PRESETS:
            p.error(f"--points: want preset:batch with preset mlp or tiny, e.g. mlp:64, got {item!r}")
        try:
            b = int(batch)
        except ValueError:
            p.error(f"--points: batch size of {item!r} is not an integer")
        if b < 1:
            p.error(f"--points: batch size of {item!r} must be at least 1")
        points.append((preset, b))
    if not points:
        p.error("--points: no points")
    return points


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", default="mlp:64,mlp:1024,tiny:64,tiny:1024",
                   help="comma-separated preset:batch_size (presets: mlp, tiny)")
    p.add_argument("--modes", default="eager,graphs,compile", help="comma-separated: eager, graphs, compile")
    p.add_argument("--steps", type=int, default=200, help="timed steps per round")
    p.add_argument("--warmup-steps", type=int, default=20, help="untimed steps before the first round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ring", type=int, default=4, help="pinned host batches cycled through")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--output", default="torch_mlp_cuda.json")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a smoke run of the eager mode, to check the script without a GPU")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    a.points = parse_points(p, a.points)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in a.modes:
        if m not in MODES:
            p.error(f"--modes: unknown mode {m!r}: use eager, graphs, compile")
    if not a.modes:
        p.error("--modes: no modes")
    a.modes = [m for m in MODES if m in a.modes]
    for name in ("steps", "rounds", "ring"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be at least 1, got {getattr(a, name)}")
    if a.warmup_steps < 0:
        p.error(f"--warmup-steps: must be at least 0, got {a.warmup_steps}")
    return a


def write_json(path, obj):
    """Writes obj to path atomically: a temporary file in the same directory, then os.replace."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".torch_mlp_cuda-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(e).__name__


def driver_version():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return ""


class Point:
    """One preset at one batch size: its hyper-parameters, its model's shape and its ring of host batches."""

    def __init__(self, torch, args, preset, batch, data):
        self.preset, self.batch = preset, batch
        # torch_mlp's defaults are tolaria's: lr 1e-3, AdamW betas, eps,
        # weight decay, clipping at 5, the warm-up and the cosine floor.
        self.hp = torch_mlp.parse_args([])
        self.hp.seed = args.seed
        g = torch.Generator().manual_seed(args.seed)
        if preset == "mlp":
            xtr, ytr = data
            self.hp.hidden = [256, 128]
            self.inputs, self.classes = xtr.shape[1], 10
            self.model_name = "784-256-128-10 gelu(tanh) cross_entropy"
            perm = torch.randperm(xtr.shape[0], generator=g)
            xs, ys = [], []
            for k in range(args.ring):
                idx = perm[(k * batch) % xtr.shape[0]:][:batch]
                if idx.shape[0] < batch:  # wrap around a short tail
                    idx = torch.cat([idx, perm[:batch - idx.shape[0]]])
                xs.append(xtr.index_select(0, idx))
                ys.append(ytr.index_select(0, idx))
        else:
            self.hp.hidden = []
            self.inputs, self.classes = 16, 2
            self.model_name = "16-2 cross_entropy"
            xs = [torch.randn(batch, self.inputs, generator=g) for _ in range(args.ring)]
            ys = [torch.randint(0, self.classes, (batch,), generator=g) for _ in range(args.ring)]
        pin = args.device == "cuda"
        self.host_x = [(x.contiguous().pin_memory() if pin else x.contiguous()) for x in xs]
        self.host_y = [(y.to(torch.int64).contiguous().pin_memory() if pin else y.to(torch.int64).contiguous())
                       for y in ys]


class Run:
    """What every mode shares: the device, the static inputs, the accumulators and the lr schedule."""

    def __init__(self, torch, args, pt, dev, total_steps):
        self.torch, self.args, self.pt, self.dev = torch, args, pt, dev
        self.total = total_steps
        torch.manual_seed(args.seed)
        model, _ = torch_mlp.build(torch, pt.hp, pt.inputs, pt.classes)
        self.model = model.to(dev)
        self.params = list(self.model.parameters())
        self.x = torch.empty_like(pt.host_x[0], device=dev)
        self.y = torch.empty_like(pt.host_y[0], device=dev)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        self.correct = torch.zeros((), dtype=torch.int64, device=dev)
        # lrs[t] is the learning rate of step t (1-based), as a Python list
        # for eager and as a pinned host tensor for the modes that copy it.
        self.lrs = [0.0] + [torch_mlp.lr_at(pt.hp, t, total_steps) for t in range(1, total_steps + 1)]
        host = torch.tensor(self.lrs, dtype=torch.float32)
        self.lr_host = host.pin_memory() if dev.type == "cuda" else host
        self.t = 0
        self.clip_foreach = clip_takes_foreach(torch)

    def adamw(self, lr, **kw):
        hp = self.pt.hp
        return self.torch.optim.AdamW(self.params, lr=lr, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                                      weight_decay=hp.weight_decay, **kw)

    def clip(self):
        if self.pt.hp.clip_norm > 0:
            kw = {"foreach": True} if self.clip_foreach and self.dev.type == "cuda" else {}
            self.torch.nn.utils.clip_grad_norm_(self.params, self.pt.hp.clip_norm, **kw)

    def stage(self):
        """Copies the next ring batch into the static inputs and advances the step counter."""
        k = self.t % len(self.pt.host_x)
        self.t += 1
        if self.t > self.total:
            raise RuntimeError(f"step {self.t} past the schedule's {self.total} steps")
        self.x.copy_(self.pt.host_x[k], non_blocking=True)
        self.y.copy_(self.pt.host_y[k], non_blocking=True)

    def accumulate(self, logits, loss):
        with self.torch.no_grad():
            self.loss_sum.add_(loss.detach() * self.pt.batch)
            self.correct.add_((logits.argmax(1) == self.y).sum())

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def measure(self, step, rec):
        """Runs the rounds of step and fills rec with step_ms, rounds_ms and final_loss."""
        args, rounds = self.args, []
        for _ in range(args.rounds):
            self.sync()
            self.loss_sum.zero_()
            self.correct.zero_()
            self.sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            self.sync()
            rounds.append((time.perf_counter() - t0) * 1000 / args.steps)
        loss = self.loss_sum.item() / (args.steps * self.pt.batch)
        acc = self.correct.item() / (args.steps * self.pt.batch)
        rec["step_ms"] = statistics.median(rounds)
        rec["rounds_ms"] = rounds
        rec["final_loss"] = loss if math.isfinite(loss) else None
        rec["final_accuracy"] = acc
        if not math.isfinite(loss):
            rec["error"] = f"final loss is not finite: {loss}"


def clip_takes_foreach(torch):
    import inspect
    try:
        return "foreach" in inspect.signature(torch.nn.utils.clip_grad_norm_).parameters
    except (TypeError, ValueError):
        return False


def run_eager(torch, args, pt, dev):
    F = torch.nn.functional
    r = Run(torch, args, pt, dev, args.warmup_steps + args.rounds * args.steps)
    opt = r.adamw(r.lrs[1])  # foreach on CUDA: PyTorch's default there

    def step():
        r.stage()
        opt.zero_grad(set_to_none=True)
        logits = r.model(r.x)
        loss = F.cross_entropy(logits, r.y)
        r.accumulate(logits, loss)
        loss.backward()
        r.clip()
        lr = r.lrs[r.t]
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()

    for _ in range(args.warmup_steps):
        step()
    rec = {}
    r.measure(step, rec)
    return rec


def run_graphs(torch, args, pt, dev):
    F = torch.nn.functional
    side_warmup = 3  # PyTorch's whole-network example warms up 3 iterations on a side stream
    r = Run(torch, args, pt, dev, side_warmup + args.warmup_steps + args.rounds * args.steps)
    lr = torch.zeros((), dtype=torch.float32, device=dev)
    opt = r.adamw(lr, capturable=True, foreach=True)

    def body():
        logits = r.model(r.x)
        loss = F.cross_entropy(logits, r.y)
        r.accumulate(logits, loss)
        loss.backward()
        r.clip()
        opt.step()

    def set_lr():
        lr.copy_(r.lr_host[r.t], non_blocking=True)

    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(side_warmup):
            r.stage()
            set_lr()
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream(dev).wait_stream(s)
    torch.cuda.synchronize(dev)

    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize(dev)
    capture_s = time.perf_counter() - t0

    def step():
        r.stage()
        set_lr()
        g.replay()

    for _ in range(args.warmup_steps):
        step()
    rec = {"capture_seconds": capture_s}
    r.measure(step, rec)
    return rec


def run_compile(torch, args, pt, dev):
    F = torch.nn.functional
    import torch._dynamo
    torch._dynamo.reset()  # no cache or automatic dynamic shapes carried over from another point
    counters = None
    try:
        from torch._dynamo.utils import counters
        counters.clear()
    except Exception:  # noqa: BLE001  (private API: only for the report)
        counters = None
    # The compiling step, then at least 3 more before timing: reduce-overhead
    # records its CUDA graphs on the second or third call.
    warm = max(args.warmup_steps, 3)
    r = Run(torch, args, pt, dev, 1 + warm + args.rounds * args.steps)
    lr = torch.zeros((), dtype=torch.float32, device=dev)
    # capturable with a tensor lr: what the compiled optimizer needs to run
    # from a CUDA graph without recompiling when the lr changes.
    opt = r.adamw(lr, capturable=True, foreach=True)
    batch = pt.batch
    for t in (r.loss_sum, r.correct):
        try:
            torch._dynamo.mark_static_address(t)
        except Exception:  # noqa: BLE001  (older releases: cudagraphs may then skip, still correct)
            pass

    def forward(x, y):
        logits = r.model(x)
        loss = F.cross_entropy(logits, y)
        return loss, loss.detach() * batch, (logits.argmax(1) == y).sum()

    def update(batch_loss, batch_correct):
        r.clip()
        opt.step()
        r.loss_sum.add_(batch_loss)
        r.correct.add_(batch_correct)

    cforward = torch.compile(forward, mode="reduce-overhead", dynamic=False)
    cupdate = torch.compile(update, mode="reduce-overhead", dynamic=False)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def step():
        if mark is not None:
            mark()
        r.stage()
        lr.copy_(r.lr_host[r.t], non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss, bl, bc = cforward(r.x, r.y)
        loss.backward()
        cupdate(bl, bc)

    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize(dev)
    t1 = time.perf_counter()
    for _ in range(warm):
        step()
    torch.cuda.synchronize(dev)
    rec = {"compile_seconds": t1 - t0, "warmup_seconds": time.perf_counter() - t1}
    r.measure(step, rec)
    if counters is not None:
        try:
            rec["graph_breaks"] = sum(counters["graph_break"].values())
            skips = counters["inductor"].get("cudagraph_skips", 0)
            rec["cudagraph_skips"] = skips
        except Exception:  # noqa: BLE001
            pass
    return rec


RUNNERS = {"eager": run_eager, "graphs": run_graphs, "compile": run_compile}


def run_point(torch, args, dev, preset, batch, data):
    out = {"preset": preset, "batch_size": batch, "model": "", "modes": {}}
    try:
        pt = Point(torch, args, preset, batch, data)
    except Exception as e:  # noqa: BLE001
        for m in args.modes:
            out["modes"][m] = {"error": f"setting up the point: {first_line(e)}"}
        log(f"{preset} batch {batch}: error: {first_line(e)}")
        return out
    out["model"] = pt.model_name
    for mode in args.modes:
        if dev.type != "cuda" and mode != "eager":
            out["modes"][mode] = {"error": "needs CUDA"}
            continue
        try:
            rec = RUNNERS[mode](torch, args, pt, dev)
        except Exception as e:  # noqa: BLE001  (one mode's failure is recorded; the run goes on)
            rec = {"error": first_line(e)}
            log(f"{preset} batch {batch} {mode}: error: {first_line(e)}")
            if os.environ.get("TORCH_MLP_CUDA_TRACEBACK"):
                traceback.print_exc()
        else:
            extra = f", compile {rec['compile_seconds']:.1f} s" if "compile_seconds" in rec else ""
            log(f"{preset} batch {batch} {mode}: {rec['step_ms']:.3f} ms/step, "
                f"final loss {rec['final_loss']}{extra}" + (f" (error: {rec['error']})" if "error" in rec else ""))
        out["modes"][mode] = rec
        if dev.type == "cuda":
            try:
                torch.cuda.synchronize(dev)
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001  (a broken context: later modes will say so)
                log(f"{preset} batch {batch} {mode}: after the mode: {first_line(e)}")
    return out


def point_ok(args, p):
    modes = p["modes"]
    def ran(m):
        return m in modes and "step_ms" in modes[m] and "error" not in modes[m]
    if "eager" in args.modes:
        return ran("eager")
    return any(ran(m) for m in args.modes)


def main(argv):
    try:
        args = parse_args(argv)
    except SystemExit as e:  # argparse's usage error (2) is a failure like any other: 1
        return 1 if e.code not in (0, None) else 0
    try:
        import torch
    except Exception as e:  # noqa: BLE001  (ImportError, or a broken install)
        write_json(args.output, {"skipped": f"no PyTorch: import torch failed with {sys.executable}: {first_line(e)}"})
        log(f"skipped: PyTorch is not importable by {sys.executable}")
        return SKIPPED
    if args.device == "cuda" and not torch.cuda.is_available():
        write_json(args.output, {"skipped": "no CUDA for PyTorch: torch.cuda.is_available() is false "
                                            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"})
        log("skipped: torch.cuda.is_available() is false")
        return SKIPPED
    dev = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    header = {"peer": "torch", "torch": torch.__version__, "cuda": torch.version.cuda}
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        header["device"] = torch.cuda.get_device_name(dev)
        header["driver"] = driver_version()
    else:
        header["device"] = "cpu"
        header["driver"] = ""
    header.update({"steps": args.steps, "warmup_steps": args.warmup_steps, "rounds": args.rounds,
                   "ring": args.ring, "points": []})
    write_json(args.output, header)

    data = None
    ok = True
    for preset, batch in args.points:
        pdata = None
        if preset == "mlp":
            if data is None:
                try:
                    xtr, ytr, _, _, _, _ = torch_mlp.load_data(torch, args.data_dir)
                    data = (xtr, ytr)
                except SystemExit as e:  # torch_mlp reports missing or bad files with sys.exit
                    data = e
                    log(f"loading Fashion-MNIST: {e}")
            if isinstance(data, SystemExit):
                p = {"preset": preset, "batch_size": batch, "model": "784-256-128-10 gelu(tanh) cross_entropy",
                     "modes": {m: {"error": f"loading Fashion-MNIST: {data}"} for m in args.modes}}
                header["points"].append(p)
                write_json(args.output, header)
                ok = False
                continue
            pdata = data
        p = run_point(torch, args, dev, preset, batch, pdata)
        ok = ok and point_ok(args, p)
        header["points"].append(p)
        write_json(args.output, header)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        print(f"{PROG}: {first_line(e)}", file=sys.stderr)
        sys.exit(1)
