"""Train your own PyTorch model with a plan strategist searched: a complete script for torchrun.

    strategist export --search 12 -o plan.json              # the search's best plan
    torchrun --nproc-per-node 4 examples/train_with_plan.py --plan plan.json --steps 100 --out ckpt.pt

The three lines that matter are marked ``# <- strategist``; the rest is an ordinary training script:
a model (embedding + MLP for sync plans; a plain ``nn.Sequential`` MLP, ``--model mlp``, which
pipeline plans can cut), a dataset (a fixed random teacher's regression targets), every rank
training on its rows of each global batch (``model.rows``), an optimizer (SGD with momentum), checkpoints (saved by rank 0 every
``--ckpt-every`` steps and at the end; ``--resume`` continues from one, under this or any other
plan, because the state dict does not depend on the plan).

``--reference`` trains the same model in one process on the same global batches (``--world``
ranks' worth per step): after the same steps its parameters equal the distributed run's within
float tolerance (tests/runtime/apply/test_train_with_plan.py). ``--spec model.json`` writes the
model's ModelSpec (what a search needs: ``strategist import-model`` does the same).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, TOKENS, DIM, HIDDEN, OUT = 64, 4, 16, 32, 8
SAMPLES = 4096


class Net(nn.Module):
    """A small recommender-style model: a (sparse) embedding bag and a 3-layer MLP."""

    def __init__(self, sparse: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, sparse=sparse)
        self.fc1 = nn.Linear(2 * DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, OUT)

    def forward(self, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.cat([x, self.emb(tokens).mean(dim=1)], dim=1)
        h = torch.tanh(self.fc1(h))
        h = torch.tanh(self.fc2(h))
        return self.head(h)


def mlp() -> nn.Sequential:
    """A plain MLP on ``x`` alone: a chain of children, what a pipeline plan cuts by module name."""
    return nn.Sequential(
        nn.Linear(DIM, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, OUT),
    )


MODELS = {"net": "train-with-plan-net", "mlp": "train-with-plan-mlp"}


def build_model(seed: int = 0, kind: str = "net") -> nn.Module:
    torch.manual_seed(seed)  # every rank builds the same initial model
    return Net() if kind == "net" else mlp()


def forward(model: nn.Module, kind: str, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return model(x, tokens) if kind == "net" else model(x)


def dataset(seed: int = 1) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, DIM, generator=gen)
    tokens = torch.randint(0, VOCAB, (SAMPLES, TOKENS), generator=gen)
    teacher = Net(sparse=False)
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        y = teacher(x, tokens)
    return TensorDataset(x, tokens, y)


def model_spec(batch_size: int, kind: str = "net") -> str:
    """The model's ModelSpec as JSON (traced on the meta device, as ``strategist import-model`` does)."""
    from simulator.extract import extract_model

    x = torch.zeros(batch_size, DIM)
    inputs = (x, torch.zeros(batch_size, TOKENS, dtype=torch.long)) if kind == "net" else (x,)
    spec = extract_model(build_model(0, kind), inputs, name=MODELS[kind], batch_size=batch_size)
    return spec.model_dump_json(indent=2)


def train(args: argparse.Namespace) -> None:
    distributed = not args.reference
    kind = args.model
    if distributed:
        from runtime.apply import apply_plan, load_plan  # <- strategist

        plan = load_plan(args.plan)  # <- strategist
        kind = next(k for k, name in MODELS.items() if name == plan.model)
        model: nn.Module = apply_plan(build_model(args.seed, kind), plan, seed=args.seed)  # <- strategist
        rank = int(os.environ["RANK"])
        global_batch = (
            model.global_batch
        )  # sync: the spec's batch on every rank; hybrid, pipeline: the plan's
    else:
        model, rank = build_model(args.seed, kind), 0
        global_batch = args.global_batch or args.batch_size * args.world
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start = 0
    if args.resume:
        ckpt = torch.load(args.resume)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start = ckpt["step"]
    # Every rank reads the step's global batch and trains on its rows: an even share (sync), the
    # plan's uneven share (hybrid) or its pipeline replica's rows (pipeline); --reference all of them.
    loader = DataLoader(dataset(), batch_size=global_batch, shuffle=False, drop_last=True)
    batches = iter(loader)
    for _ in range(start):  # resume where the checkpoint left off
        next(batches)
    for step in range(start, args.steps):
        x, tokens, y = next(batches)
        if distributed:
            rows = model.rows(global_batch)
            x, tokens, y = x[rows], tokens[rows], y[rows]
        if hasattr(model, "step"):  # a pipeline plan: forward and backward run through the stages
            loss = model.step(x, y, F.mse_loss)
        else:
            loss = F.mse_loss(forward(model, kind, x, tokens), y)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if args.ckpt_every and (step + 1) % args.ckpt_every == 0:
            save(model, optimizer, step + 1, Path(f"{args.out}.step{step + 1}"), rank, distributed)
        if args.verbose and loss is not None:
            print(f"rank {rank} step {step + 1} loss {float(loss):.6f}", flush=True)
    save(model, optimizer, args.steps, Path(args.out), rank, distributed)
    if distributed:  # a tidy end: the plan's threads stop before the process group goes
        import torch.distributed as dist

        model.close()
        dist.barrier()
        dist.destroy_process_group()


def save(
    model: nn.Module, optimizer: torch.optim.Optimizer, step: int, path: Path, rank: int, distributed: bool
) -> None:
    """Every rank calls it (a pipelined model gathers its stages); rank 0 writes the file."""
    state = model.state_dict()
    optim = model.optim_state_dict(optimizer) if distributed else optimizer.state_dict()  # type: ignore[operator]
    if rank != 0:
        return
    tmp = path.with_suffix(".tmp")
    torch.save({"model": state, "optimizer": optim, "step": step}, tmp)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", type=Path, help="plan file from `strategist export`")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="checkpoint.pt")
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--resume", type=Path)
    ap.add_argument("--reference", action="store_true", help="single-process training, same global batches")
    ap.add_argument("--world", type=int, default=4, help="--reference: ranks to stand in for")
    ap.add_argument(
        "--global-batch", type=int, default=0, help="--reference: rows per step (default world x batch)"
    )
    ap.add_argument("--model", choices=sorted(MODELS), default="net", help="--reference, --spec: which model")
    ap.add_argument("--spec", type=Path, help="write the model's ModelSpec JSON here and exit")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.spec:
        args.spec.write_text(model_spec(args.batch_size, args.model) + "\n")
        return
    if not args.reference and args.plan is None:
        ap.error("--plan: required (or --reference)")
    torch.set_num_threads(1)
    train(args)


if __name__ == "__main__":
    main()
