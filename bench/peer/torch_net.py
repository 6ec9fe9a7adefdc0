#!/usr/bin/env python3
"""torch_net.py: a tolaria layer list trained with PyTorch on the CPU.

The peer of `run_graph_bench --peer torch` for models described as layers
(docs/models.md): --layers takes the model's layer list as JSON, the same
list tolaria trains (e.g. examples/cnn.yaml's), and builds it from PyTorch
modules: linear, conv (Conv2d with a bias), maxpool, avgpool
(count_include_pad, as tolaria's), global_avgpool, batchnorm (BatchNorm2d
on images, BatchNorm1d on vectors, the same eps and momentum), relu, gelu
(its tanh form, as tolaria's), tanh, sigmoid, flatten, residual (the
body's output added to its input) and dropout; and the sequence layers:
embedding, positional (a learned table added to every sequence), layernorm (over a
position's features), attention (see Attention), transformer_block
(pre-norm: x + attention(layernorm(x)), then x + linear(gelu(linear(
layernorm(x))))) and lm_head (a linear layer to the embedding's
vocabulary, per position). A model that starts with embedding trains on
synthetic token windows (four batches of uniform ids, a uniform target per
position, as run_graph_bench's tolaria side) with the cross-entropy
averaged over positions. Everything else is torch_mlp.py's: the
optimizer (AdamW, decoupled weight decay on every parameter), global-norm
clipping, the learning-rate schedule, Fashion-MNIST standardised with one
mean and one standard deviation, the thread and BLAS set-up, and the JSON
it prints (step_seconds, and with --epoch one whole epoch).

Initialisation follows tolaria's law (nn.Arch.InitParams): every linear and
conv weight but the last is Kaiming-normal (std sqrt(2/fan_in), fan_in =
in_channels*kh*kw for a conv), the last Xavier-normal (std
sqrt(2/(fan_in+fan_out))), biases zero, batchnorm's and layernorm's
scale 1 and shift 0, embedding and positional tables normal with std 0.02;
the projections inside attention and the blocks are linear layers, and
lm_head, the last, is Xavier-normal.
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

ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
EMBEDDING_STD = 0.02  # nn.EmbeddingStd: embedding and positional tables


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


def build_net(torch, layers, shape, path="layers", vocab=None):
    """Modules for layers applied to shape ([C,H,W], [F], or [T] token ids then [T,D]); the shape after them."""
    nn = torch.nn
    mods = []
    vocab = vocab if vocab is not None else [0]  # the embedding's, for lm_head
    for i, layer in enumerate(layers):
        where = f"{path}[{i}]"
        kind, s = kind_of(layer, where)
        if kind == "linear":
            mods.append(nn.Linear(shape[-1], s["out"]))
            shape = shape[:-1] + [s["out"]]
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
        elif kind == "sigmoid":
            mods.append(nn.Sigmoid())
        elif kind == "flatten":
            mods.append(nn.Flatten())
            shape = [math.prod(shape)]
        elif kind == "dropout":
            mods.append(nn.Dropout(s.get("p", 0.5)))
        elif kind == "embedding":
            if path != "layers" or i != 0 or len(shape) != 1:
                sys.exit(f"torch_net: {where}: embedding reads [T] token ids and must come first")
            mods.append(nn.Embedding(s["vocab"], s["dim"]))
            vocab[0], shape = s["vocab"], [shape[0], s["dim"]]
        elif kind == "positional":
            mods.append(Positional(torch, shape))
        elif kind == "layernorm":
            mods.append(nn.LayerNorm(shape[-1], eps=s.get("eps", 1e-5)))
        elif kind == "attention":
            mods.append(Attention(torch, shape[1], s["heads"], s.get("dropout", 0)))
        elif kind == "transformer_block":
            d, p = shape[1], s.get("dropout", 0)
            drop = [nn.Dropout(p)] if p > 0 else []
            mods.append(ResidualBlock(torch, nn.Sequential(nn.LayerNorm(d), Attention(torch, d, s["heads"], p), *drop)))
            mods.append(ResidualBlock(torch, nn.Sequential(nn.LayerNorm(d), nn.Linear(d, s["mlp"]),
                                                           nn.GELU(approximate="tanh"), nn.Linear(s["mlp"], d), *drop)))
        elif kind == "lm_head":
            if not vocab[0]:
                sys.exit(f"torch_net: {where}: lm_head needs an embedding before it")
            mods.append(nn.Linear(shape[1], vocab[0]))
            shape = [shape[0], vocab[0]]
        elif kind == "residual":
            body, out = build_net(torch, s, shape, where + ".residual", vocab)
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


def Positional(torch, shape):
    """A learned vector per position, added to every sequence."""
    class Pos(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.zeros(*shape))

        def forward(self, x):
            return x + self.table

    return Pos()


def Attention(torch, d, heads, p):
    """Causal multi-head self-attention as tolaria's: one d->3d projection
    (queries, keys, values, each split into heads of d/heads features),
    softmax(q k^T / sqrt(d/heads)) over the earlier positions (PyTorch's
    fused scaled_dot_product_attention where the installed PyTorch has it,
    else the product, mask and softmax written out), heads merged, a d->d
    projection."""
    F = torch.nn.functional

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(d, 3 * d)
            self.out = torch.nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
            drop = p if self.training else 0.0
            if hasattr(F, "scaled_dot_product_attention"):
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(d // heads))
                causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                y = F.dropout(scores.masked_fill(causal, float("-inf")).softmax(-1), drop) @ v
            return self.out(y.transpose(1, 2).reshape(b, t, d))

    return Attn()


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
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.fill_(1)
                m.bias.zero_()
            elif isinstance(m, torch.nn.Embedding):
                m.weight.normal_(0, EMBEDDING_STD)
            elif hasattr(m, "table"):
                m.table.normal_(0, EMBEDDING_STD)


def install(torch, args):
    """Makes torch_mlp build this model: its timing, epoch and JSON code stay one."""
    inp = args.input

    def build(torch, a, inputs, classes):
        if math.prod(inp) != inputs:
            sys.exit(f"torch_net: --input {inp} holds {math.prod(inp)} values per example; the data has {inputs}")
        body, out = build_net(torch, a.layers, list(inp))
        want = [inputs, classes] if tokens(a.layers) else [classes]
        if out != want:
            sys.exit(f"torch_net: the model ends in {out}; the data wants {want}")
        model = torch.nn.Sequential(torch.nn.Unflatten(1, tuple(inp)), *body) if len(inp) == 3 else body
        init_like_tolaria(torch, model)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                                weight_decay=a.weight_decay)
        return model, opt

    torch_mlp.build = build


def tokens(layers):
    """The vocabulary of a model that reads token ids (starts with embedding), else 0."""
    kind, s = kind_of(layers[0], "layers[0]")
    return s["vocab"] if kind == "embedding" else 0


def token_windows(torch, args, vocab):
    """Synthetic token windows, as run_graph_bench's tolaria side trains on:
    four batches of uniform ids below vocab, a uniform target per position."""
    g = torch.Generator().manual_seed(args.seed)
    n, t = 4 * args.batch_size, args.input[0]
    x = torch.randint(0, vocab, (n, t), generator=g)
    y = torch.randint(0, vocab, (n, t), generator=g)
    return x, y


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
    vocab = tokens(args.layers)
    if vocab and args.epoch:
        sys.exit("torch_net: --epoch times Fashion-MNIST; a model of token ids is timed by steps only")
    if vocab:
        xtr, ytr = token_windows(torch, args, vocab)
        xte = yte = None
        mean, std, classes = 0.0, 1.0, vocab
    else:
        xtr, ytr, xte, yte, mean, std = torch_mlp.load_data(torch, args.data_dir)
        classes = 10
    out = {
        "peer": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "batch_size": args.batch_size, "input": args.input, "layers": args.layers,
        "model": "layers " + json.dumps(args.layers, separators=(",", ":")),
        "input_mean": mean, "input_std": std, "warmup_steps": args.warmup_steps,
        "step_seconds": torch_mlp.timed_steps(torch, args, xtr, ytr, classes),
    }
    if args.epoch:
        out["epoch"] = torch_mlp.one_epoch(torch, args, xtr, ytr, xte, yte)
    out["blas"] = torch_mlp.blas_library()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
