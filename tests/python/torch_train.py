"""The same small training run on any device, and a comparison of two runs (scripts/gpu-smoke:
on a GPU behind the pool against the CPU).

    python torch_train.py train --device cpu|cuda[:N] --out RUN.json [--steps N]
    python torch_train.py compare REFERENCE.json CANDIDATE.json [--rtol R] [--atol A]

`train` fits a small MLP (dense layers, ReLU) and a small CNN (two convolutions, ReLU, max
pooling, a dense head) to synthetic data with SGD and momentum, from a fixed seed; data and
initial weights are made on the CPU, so every device starts from the same bits. It writes
each model's loss at every step and its final weights. TF32 and reduced-precision
reductions are off and cuDNN is deterministic, so a GPU differs from the CPU only by fp32
summation order.

`compare` exits 0 when, for each model, every step's loss and every final weight agree to
`atol + rtol * |reference|`, else 1 with one line per disagreement (the worst of each kind).
"""

import argparse
import json
import sys


def models(torch):
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    cnn = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )
    return {"mlp": (mlp, (32,)), "cnn": (cnn, (1, 16, 16))}


def train(args):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device(args.device)
    torch.manual_seed(1234)
    out = {"device": str(dev), "steps": args.steps, "models": {}}
    for name, (model, shape) in models(torch).items():
        g = torch.Generator().manual_seed(99)
        x = torch.randn(64, *shape, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        model = model.to(dev)
        x, y = x.to(dev), y.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses = []
        for _ in range(args.steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        weights = {k: v.detach().cpu().double().flatten().tolist() for k, v in model.state_dict().items()}
        out["models"][name] = {"losses": losses, "weights": weights}
        print(f"{name} on {dev}: loss {losses[0]:.6f} -> {losses[-1]:.6f} in {args.steps} steps", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f)


def worst(pairs, rtol, atol):
    """(excess, got, want, index) of the pair furthest past atol + rtol * |want|, or None."""
    bad = None
    for i, (want, got) in enumerate(pairs):
        excess = abs(got - want) - (atol + rtol * abs(want))
        if excess > 0 and (bad is None or excess > bad[0]):
            bad = (excess, got, want, i)
    return bad


def compare(args):
    with open(args.reference) as f:
        ref = json.load(f)
    with open(args.candidate) as f:
        cand = json.load(f)
    problems = []
    if set(ref["models"]) != set(cand["models"]):
        problems.append(f"models differ: {sorted(ref['models'])} vs {sorted(cand['models'])}")
    for name in sorted(set(ref["models"]) & set(cand["models"])):
        r, c = ref["models"][name], cand["models"][name]
        if len(r["losses"]) != len(c["losses"]):
            problems.append(f"{name}: {len(r['losses'])} steps vs {len(c['losses'])}")
            continue
        bad = worst(zip(r["losses"], c["losses"]), args.rtol, args.atol)
        if bad:
            problems.append(f"{name}: loss at step {bad[3]} is {bad[1]!r}, reference {bad[2]!r}")
        if set(r["weights"]) != set(c["weights"]):
            problems.append(f"{name}: parameters differ: {sorted(r['weights'])} vs {sorted(c['weights'])}")
            continue
        for k in sorted(r["weights"]):
            rw, cw = r["weights"][k], c["weights"][k]
            if len(rw) != len(cw):
                problems.append(f"{name}.{k}: {len(rw)} values vs {len(cw)}")
                continue
            bad = worst(zip(rw, cw), args.rtol, args.atol)
            if bad:
                problems.append(f"{name}.{k}[{bad[3]}] is {bad[1]!r}, reference {bad[2]!r}")
    for p in problems:
        print(f"MISMATCH {p}", flush=True)
    if problems:
        print(f"{args.candidate} ({cand['device']}) does not match {args.reference} ({ref['device']})")
        return 1
    n = sum(len(m["weights"]) for m in ref["models"].values())
    print(f"{args.candidate} ({cand['device']}) matches {args.reference} ({ref['device']}): losses and {n} tensors")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train both models, write losses and weights as JSON")
    t.add_argument("--device", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=20)
    c = sub.add_parser("compare", help="exit 1 unless CANDIDATE matches REFERENCE")
    c.add_argument("reference")
    c.add_argument("candidate")
    c.add_argument("--rtol", type=float, default=1e-3)
    c.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()
    if args.cmd == "train":
        train(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
