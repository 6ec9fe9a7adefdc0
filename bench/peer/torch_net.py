#!/usr/bin/env python3
"""torch_net.py: a tolaria layer list trained with PyTorch on the CPU.

The peer of `run_graph_bench --peer torch` for models described as layers
(docs/models.md): --layers takes the model's layer list as JSON, the same
list tolaria trains (e.g. examples/cnn.yaml's), and builds it from PyTorch
modules: linear, conv (Conv2d with a bias), maxpool, avgpool
(count_include_pad, as tolaria's), global_avgpool, batchnorm (BatchNorm2d
on images, BatchNorm1d on vectors, the same eps and momentum), relu, gelu
(its tanh form, as tolaria's), tanh, flatten, residual (the body's output
added to its input) and dropout. Everything else is torch_mlp.py's: the
optimizer (AdamW, decoupled weight decay on every parameter), global-norm
clipping, the learning-rate schedule, Fashion-MNIST standardised with one
mean and one standard deviation, the thread and BLAS set-up, and the JSON
it prints (step_seconds, and with --epoch one whole epoch).

Initialisation follows tolaria's law (nn.Arch.InitParams): every linear and
conv weight but the last is Kaiming-normal (std sqrt(2/fan_in), fan_in =
in_channels*kh*kw for a conv), the last Xavier-normal (std
sqrt(2/(fan_in+fan_out))), biases zero, batchnorm's scale 1 and shift 0.
The draws are PyTorch's, so the parameters are equal in law, not in bits.

Images are NCHW here (PyTorch's layout) where tolaria keeps NHWC, so a
flatten orders (c, h, w) here and (h, w, c) there: the same function class,
parameter count and work per step.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp  # noqa: E402  (the shared data, optimizer and timing code)

ACTIVATIONS = ("relu", "gelu", "tanh")


def parse_args(argv):
    # torch_mlp's flags, with --layers and --input instead of --hidden.
    layers, inp, rest = None, None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--layers", "--input") and i + 1 < len(argv):
            if a == "--layers":
                layers = argv[i + 1]
            else:
                inp = argv[i + 1]
            i += 2
            continue
        if a.startswith("--layers="):
            layers = a.split("=", 1)[1]
        elif a.startswith("--input="):
            inp = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    if layers is None:
        sys.exit("torch_net: --layers is required: the model's layer list as JSON, e.g. "
                 "'[{\"conv\": {\"out\": 32, \"kernel\": 3, \"padding\": 1}}, {\"relu\": {}}, {\"flatten\": {}}, "
                 "{\"linear\": {\"out\": 10}}]'")
    args = torch_mlp.parse_args(rest)
    try:
        args.layers = json.loads(layers)
    except json.JSONDecodeError as e:
        sys.exit(f"torch_net: --layers is not JSON: {e}")
    if not isinstance(args.layers, list) or not args.layers:
        sys.exit("torch_net: --layers must be a non-empty JSON list of layers")
    try:
        args.input = [int(v) for v in (inp or "1,28,28").split(",")]
    except ValueError:
        sys.exit(f"torch_net: --input wants C,H,W or F, e.g. 1,28,28, got {inp!r}")
    if len(args.input) not in (1, 3) or any(v < 1 for v in args.input):
        sys.exit(f"torch_net: --input wants C,H,W or F of positive sizes, got {args.input}")
    return args


def kind_of(layer, path):
    if not isinstance(layer, dict) or len(layer) != 1:
        sys.exit(f"torch_net: {path}: a layer is a map of one kind to its settings, got {layer!r}")
    (kind, settings), = layer.items()
    return kind, settings or {}


def build_net(torch, layers, shape, path="layers"):
    """Modules for layers applied to shape ([C,H,W] or [F]); the shape after them."""
    nn = torch.nn
    mods = []
    for i, layer in enumerate(layers):
        where = f"{path}[{i}]"
        kind, s = kind_of(layer, where)
        if kind == "linear":
            mods.append(nn.Linear(shape[0], s["out"]))
            shape = [s["out"]]
        elif kind == "conv":
            k, stride, pad = s["kernel"], s.get("stride", 1), s.get("padding", 0)
            mods.append(nn.Conv2d(shape[0], s["out"], k, stride=stride, padding=pad))
            shape = [s["out"], (shape[1] + 2 * pad - k) // stride + 1, (shape[2] + 2 * pad - k) // stride + 1]
        elif kind in ("maxpool", "avgpool"):
            k = s["kernel"]
            stride, pad = s.get("stride", k), s.get("padding", 0)
            if kind == "maxpool":
                mods.append(nn.MaxPool2d(k, stride=stride, padding=pad))
            else:
                mods.append(nn.AvgPool2d(k, stride=stride, padding=pad, count_include_pad=True))
            shape = [shape[0], (shape[1] + 2 * pad - k) // stride + 1, (shape[2] + 2 * pad - k) // stride + 1]
        elif kind == "global_avgpool":
            mods.append(nn.AdaptiveAvgPool2d(1))
            shape = [shape[0], 1, 1]
        elif kind == "batchnorm":
            eps, momentum = s.get("eps", 1e-5), s.get("momentum", 0.1)
            bn = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
            mods.append(bn(shape[0], eps=eps, momentum=momentum))
        elif kind == "relu":
            mods.append(nn.ReLU())
        elif kind == "gelu":
            mods.append(nn.GELU(approximate="tanh"))
        elif kind == "tanh":
            mods.append(nn.Tanh())
        elif kind == "flatten":
            mods.append(nn.Flatten())
            shape = [math.prod(shape)]
        elif kind == "dropout":
            mods.append(nn.Dropout(s.get("p", 0.5)))
        elif kind == "residual":
            body, out = build_net(torch, s, shape, where + ".residual")
            if out != shape:
                sys.exit(f"torch_net: {where}: the residual body turns {shape} into {out}")
            mods.append(ResidualBlock(torch, body))
        else:
            sys.exit(f"torch_net: {where}: unknown layer {kind!r}")
    return nn.Sequential(*mods), shape


def ResidualBlock(torch, body):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            return x + self.body(x)

    return Block()


def init_like_tolaria(torch, model):
    """tolaria's initialisation law: Kaiming-normal, Xavier-normal for the last weight."""
    weighted = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    with torch.no_grad():
        for i, m in enumerate(weighted):
            fan_in = m.weight[0].numel()
            fan_out = m.weight.shape[0]
            std = math.sqrt(2 / fan_in) if i < len(weighted) - 1 else math.sqrt(2 / (fan_in + fan_out))
            m.weight.normal_(0, std)
            m.bias.zero_()
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.weight.fill_(1)
                m.bias.zero_()


def install(torch, args):
    """Makes torch_mlp build this model: its timing, epoch and JSON code stay one."""
    inp = args.input

    def build(torch, a, inputs, classes):
        if math.prod(inp) != inputs:
            sys.exit(f"torch_net: --input {inp} holds {math.prod(inp)} values per example; the data has {inputs}")
        body, out = build_net(torch, a.layers, list(inp))
        if out != [classes]:
            sys.exit(f"torch_net: the model ends in {out}; the data has {classes} classes")
        model = torch.nn.Sequential(torch.nn.Unflatten(1, tuple(inp)), *body) if len(inp) == 3 else body
        init_like_tolaria(torch, model)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                                weight_decay=a.weight_decay)
        return model, opt

    torch_mlp.build = build


def main(argv):
    args = parse_args(argv)
    torch_mlp.ensure_env(args)
    try:
        import torch
    except ImportError:
        sys.exit("torch_net: PyTorch is not importable by " + sys.executable +
                 ": install it with `apt-get install python3-torch` and run this with /usr/bin/python3")
    install(torch, args)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    xtr, ytr, xte, yte, mean, std = torch_mlp.load_data(torch, args.data_dir)
    out = {
        "peer": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "batch_size": args.batch_size, "input": args.input, "layers": args.layers,
        "model": "layers " + json.dumps(args.layers, separators=(",", ":")),
        "input_mean": mean, "input_std": std, "warmup_steps": args.warmup_steps,
        "step_seconds": torch_mlp.timed_steps(torch, args, xtr, ytr),
    }
    if args.epoch:
        out["epoch"] = torch_mlp.one_epoch(torch, args, xtr, ytr, xte, yte)
    out["blas"] = torch_mlp.blas_library()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
